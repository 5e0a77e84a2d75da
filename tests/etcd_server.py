"""Real etcd servers for tests: a single node or an n-node cluster on free loopback ports, data in a temp dir.

``EtcdServer.single(binary, data_dir)`` and ``EtcdServer.cluster(binary, data_dir, n=3)`` are context managers that
start the processes, wait (with a deadline) until ``/health`` answers, and always stop them. Raft timings are short
(heartbeat 50 ms, election 500 ms) so a killed leader is replaced within about a second and etcd's minimum lease TTL
is 1 s. ``single(..., args=[...])`` adds etcd flags (a small ``--quota-backend-bytes``, ``--auto-compaction-*``);
``compact``, ``defragment``, ``disarm``, ``alarms`` and ``db_size`` do what an operator does with ``etcdctl``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import ssl
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from apportion._ports import free_ports
from tests.processes import file_tail

READY_DEADLINE_S = 20.0
RAFT_ARGS = ("--heartbeat-interval", "50", "--election-timeout", "500", "--snapshot-count", "100000")


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Server TLS material; ``client_cert``/``client_key`` are set when the server demands client certificates."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path | None = None
    client_key: Path | None = None


class EtcdServer:
    """One etcd member process (restartable on the same ports and data dir)."""

    def __init__(
        self,
        binary: str,
        data_dir: Path,
        name: str,
        client_port: int,
        peer_port: int,
        initial_cluster: str,
        tls: TlsFiles | None = None,
        raft_args: Sequence[str] = RAFT_ARGS,
        *,
        host: str = "127.0.0.1",
        wrap: Sequence[str] = (),
    ) -> None:
        """``host``: the address it listens on; ``wrap``: a command prefix (``ip netns exec NS``: another host)."""
        self.binary = binary
        self.host = host
        self.wrap = tuple(wrap)
        self.data_dir = data_dir
        self.name = name
        self.client_port = client_port
        self.peer_port = peer_port
        self.initial_cluster = initial_cluster
        self.tls = tls
        self.raft_args = tuple(raft_args)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{name}.log"

    # -- addresses -----------------------------------------------------------------------------------------

    @property
    def client_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.client_port}"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def url(self) -> str:
        """The store URL of this member alone."""
        if self.tls is None:
            return f"etcd://{self.endpoint}"
        query = f"cacert={self.tls.ca}"
        if self.tls.client_cert and self.tls.client_key:
            query += f"&cert={self.tls.client_cert}&key={self.tls.client_key}"
        return f"etcds://{self.endpoint}?{query}"

    # -- life cycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError(f"{self.name} is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            *self.wrap,
            self.binary,
            "--name", self.name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.client_url,
            "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", f"http://{self.host}:{self.peer_port}",
            "--initial-advertise-peer-urls", f"http://{self.host}:{self.peer_port}",
            "--initial-cluster", self.initial_cluster,
            "--initial-cluster-state", "new",
            "--initial-cluster-token", "apportion-test",
            *self.raft_args,
        ]  # fmt: skip
        if self.tls is not None:
            args += ["--cert-file", str(self.tls.cert), "--key-file", str(self.tls.key)]
            if self.tls.client_cert:
                args += ["--client-cert-auth", "--trusted-ca-file", str(self.tls.ca)]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def kill(self) -> None:
        """SIGKILL the member (no clean shutdown) and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def freeze(self) -> None:
        """SIGSTOP: the member keeps its sockets open but answers nothing (a hung host or a long GC pause)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.thaw()
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.kill()

    def restart(self, wait: bool = True) -> None:
        self.kill()
        self.start()
        if wait:
            self.wait_ready()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _client(self) -> httpx.Client:
        verify: ssl.SSLContext | bool = True
        if self.tls is not None:
            verify = ssl.create_default_context(cafile=str(self.tls.ca))
            if self.tls.client_cert and self.tls.client_key:
                verify.load_cert_chain(str(self.tls.client_cert), str(self.tls.client_key))
        return httpx.Client(verify=verify, timeout=1.0)

    def healthy(self) -> bool:
        try:
            with self._client() as client:
                reply = client.get(self.client_url + "/health")
                return reply.status_code == 200 and json.loads(reply.text).get("health") == "true"
        except (httpx.HTTPError, ValueError):
            return False

    def wait_ready(self, deadline_s: float = READY_DEADLINE_S) -> None:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"etcd {self.name} exited with {self.process and self.process.returncode}:\n"
                                   f"{self.log_tail()}")  # fmt: skip
            if self.healthy():
                return
            time.sleep(0.05)
        raise TimeoutError(
            f"etcd {self.name} not healthy on {self.client_url} within {deadline_s}s:\n{self.log_tail()}"
        )

    def status(self) -> dict[str, str]:
        """``/v3/maintenance/status`` of this member: ``member_id`` and ``leader`` as decimal strings."""
        reply = self.call("/v3/maintenance/status")
        return {"member_id": str(reply["header"]["member_id"]), "leader": str(reply.get("leader", "0"))}

    def call(self, path: str, body: Mapping[str, Any] | None = None, timeout_s: float = 10.0) -> dict[str, Any]:
        """POST ``body`` to this member's JSON gateway (what ``etcdctl`` does over gRPC); the reply, errors included."""
        with self._client() as client:
            reply: dict[str, Any] = client.post(self.client_url + path, json=body or {}, timeout=timeout_s).json()
        return reply

    # -- maintenance (what an operator does with etcdctl) ----------------------------------------------------

    def db_size(self) -> int:
        """The size of this member's database file in bytes (``etcdctl endpoint status``: DB SIZE)."""
        return int(self.call("/v3/maintenance/status")["dbSize"])

    def alarms(self) -> list[str]:
        """The cluster's raised alarms (``etcdctl alarm list``), e.g. ``["NOSPACE"]``."""
        return [str(a.get("alarm")) for a in self.call("/v3/maintenance/alarm", {"action": "GET"}).get("alarms", [])]

    def compact(self) -> int:
        """Forget every revision before the current one (``etcdctl compact``); returns it."""
        revision = int(self.call("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
        self.call("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def defragment(self) -> None:
        """Give the space that compaction freed back to the file system (``etcdctl defrag``)."""
        self.call("/v3/maintenance/defragment", timeout_s=60.0)

    def disarm(self) -> None:
        """Clear every raised alarm (``etcdctl alarm disarm``): writes are accepted again."""
        for alarm in self.call("/v3/maintenance/alarm", {"action": "GET"}).get("alarms", []):
            self.call("/v3/maintenance/alarm", {"action": "DEACTIVATE", **alarm})

    def log_tail(self, lines: int = 20) -> str:
        return file_tail(self.log_path, lines)

    # -- factories -----------------------------------------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def single(
        cls, binary: str, data_dir: Path, *, tls: TlsFiles | None = None, args: Sequence[str] = ()
    ) -> Iterator[EtcdServer]:
        """One fresh member; stopped (and waited for) on exit. ``args``: more etcd flags (``--quota-backend-bytes``,
        ``--auto-compaction-retention``, ...)."""
        peer_port, client_port = free_ports(2)
        initial = f"node0=http://127.0.0.1:{peer_port}"
        server = cls(binary, data_dir, "node0", client_port, peer_port, initial, tls, (*RAFT_ARGS, *args))
        try:
            server.start()
            server.wait_ready()
            yield server
        finally:
            server.stop()

    @classmethod
    @contextlib.contextmanager
    def cluster(
        cls, binary: str, data_dir: Path, n: int = 3, *, raft_args: Sequence[str] = RAFT_ARGS, wrap: Sequence[str] = ()
    ) -> Iterator[EtcdCluster]:
        """``n`` fresh members forming one cluster; all stopped on exit. ``raft_args=()``: etcd's default timings
        (heartbeat 100 ms, election timeout 1 s), as a production cluster runs; ``wrap``: each member's command
        prefix (e.g. ``nice -n -10``)."""
        ports = free_ports(2 * n)
        peers, clients = ports[:n], ports[n:]
        initial = ",".join(f"node{i}=http://127.0.0.1:{port}" for i, port in enumerate(peers))
        members = [
            cls(
                binary, data_dir / f"node{i}", f"node{i}", clients[i], peers[i], initial, raft_args=raft_args, wrap=wrap
            )
            for i in range(n)
        ]
        cluster = EtcdCluster(members)
        try:
            for member in members:
                member.start()
            for member in members:
                member.wait_ready()
            yield cluster
        finally:
            for member in members:
                member.stop()


class EtcdCluster:
    """Members of one etcd cluster, with the helpers failure tests need."""

    def __init__(self, members: Sequence[EtcdServer]) -> None:
        self.members = list(members)

    @property
    def url(self) -> str:
        """The store URL naming every member (the client fails over between them)."""
        return "etcd://" + ",".join(member.endpoint for member in self.members)

    def leader(self, deadline_s: float = 10.0) -> EtcdServer:
        """The running member that is leader (polls until the live members agree on one)."""
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            for member in self.members:
                if not member.running:
                    continue
                try:
                    status = member.status()
                except (httpx.HTTPError, KeyError, ValueError):
                    continue
                if status["leader"] != "0" and status["leader"] == status["member_id"]:
                    return member
            time.sleep(0.05)
        raise TimeoutError(f"no etcd leader among running members within {deadline_s}s")

    def kill(self, member: EtcdServer) -> None:
        member.kill()

    def restart(self, member: EtcdServer) -> None:
        member.restart()
