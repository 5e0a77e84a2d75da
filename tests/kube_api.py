"""A pod's view of the Kubernetes API for the tests of ``--replicas-from kubernetes`` (``tests/test_kube.py``, and a
RabbitMQ consumer fleet scaled with `kubectl scale` alone: ``tests/rabbitmq/test_kubectl_scale.py``): a local HTTPS
server answering the API's StatefulSet path, the service account's directory, and the environment a pod has. No
cluster runs in these tests."""

from __future__ import annotations

import contextlib
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TOKEN = "service-account-token-of-consumer"

# `apportion ...` as a pod runs it, with the service account directory pointed at the test's (the only change):
# python -c POD_COMMAND <service-account-dir> <apportion's arguments>
POD_COMMAND = """
import sys
import apportion.kube
apportion.kube.SERVICE_ACCOUNT_DIR = sys.argv.pop(1)
from apportion.cli import run
run()
"""


@dataclass
class FakeApiServer:
    """The Kubernetes API's ``GET /apis/apps/v1/namespaces/<ns>/statefulsets/<name>``: ``replicas`` per
    (namespace, name), ``forbidden`` ones answer 403, the rest 404; ``requests`` records (path, Authorization)."""

    port: int = 0
    replicas: dict[tuple[str, str], int] = field(default_factory=dict)
    forbidden: set[tuple[str, str]] = field(default_factory=set)
    requests: list[tuple[str, str | None]] = field(default_factory=list)

    def answer(self, path: str) -> tuple[int, dict[str, object]]:
        parts = path.strip("/").split("/")
        if len(parts) != 7 or parts[:4] != ["apis", "apps", "v1", "namespaces"] or parts[5] != "statefulsets":
            return 404, status(404, "NotFound", f"no route {path}")
        key = (parts[4], parts[6])
        if key in self.forbidden:
            return 403, status(403, "Forbidden", f'statefulsets.apps "{key[1]}" is forbidden')
        if key not in self.replicas:
            return 404, status(404, "NotFound", f'statefulsets.apps "{key[1]}" not found')
        return 200, {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": key[1], "namespace": key[0]},
            "spec": {
                "replicas": self.replicas[key],
                "serviceName": key[1],
                "selector": {"matchLabels": {"app": key[1]}},
                "template": {"metadata": {"labels": {"app": key[1]}}, "spec": {"containers": []}},
            },
        }


def status(code: int, reason: str, message: str) -> dict[str, object]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }


@contextlib.contextmanager
def fake_api(tmp_path: Path) -> Iterator[tuple[FakeApiServer, Path, dict[str, str]]]:
    """(server, service-account directory, environment): a pod's view of an API server on 127.0.0.1 over TLS."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    key, cert = tmp_path / "server.key", account / "ca.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    (account / "token").write_text(TOKEN)
    (account / "namespace").write_text("shop\n")
    fake = FakeApiServer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fake.requests.append((self.path, self.headers.get("Authorization")))
            code, body = fake.answer(self.path.split("?", 1)[0])
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    fake.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(fake.port)}
    try:
        yield fake, account, env
    finally:
        server.shutdown()
        server.server_close()
