"""Fixtures for the etcd failure tests: a 3-node cluster, TLS material, worker processes stopped after each test,
the etcd binary (never skipped in CI)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.etcd.processes import WorkerProcess
from tests.etcd_server import EtcdCluster, EtcdServer, TlsFiles

pytestmark = pytest.mark.etcd


@pytest.fixture
def etcd_cluster(etcd_bin: str, tmp_path: Path) -> Iterator[EtcdCluster]:
    """A fresh 3-member cluster on loopback; every member stopped after the test."""
    with EtcdServer.cluster(etcd_bin, tmp_path / "cluster", n=3) as cluster:
        yield cluster


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    """The ``apportion worker`` processes a test starts (append them): killed if still running after it."""
    started: list[WorkerProcess] = []
    yield started
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
        w.proc.wait(10)


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=30)


@pytest.fixture
def tls_files(tmp_path: Path) -> TlsFiles:
    """A throw-away CA, a server certificate for 127.0.0.1 and a client certificate, made with the openssl CLI."""
    d = tmp_path / "tls"
    d.mkdir()
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", d / "ca.key", "-out", d / "ca.pem", "-days", "2", "-subj", "/CN=test-ca")
    for name, extensions in (
        # clientAuth too: etcd's built-in JSON gateway dials its own gRPC port with the server certificate.
        ("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        (d / f"{name}.ext").write_text(extensions + "\n")
        _openssl("req", "-new", *ec, "-keyout", d / f"{name}.key", "-out", d / f"{name}.csr", "-subj", f"/CN={name}")
        _openssl(
            "x509", "-req", "-in", d / f"{name}.csr", "-CA", d / "ca.pem", "-CAkey", d / "ca.key",
            "-CAcreateserial", "-out", d / f"{name}.pem", "-days", "2", "-extfile", d / f"{name}.ext",
        )  # fmt: skip
    return TlsFiles(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key")
