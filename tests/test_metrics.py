"""Prometheus metrics of a worker: the MetricsTracer adapter on real workers (memory store, short real-time run), and
the Kubernetes probes /healthz and /readyz on the same port, asked with a real HTTP client."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client import generate_latest

import apportion
from apportion.errors import Fenced, StoreUnavailable
from apportion.fleet import Fleet, worker_args
from apportion.group import Static
from apportion.metrics import MetricsTracer
from apportion.store import MemoryStore
from apportion.waiting import wait_for


def value(m: MetricsTracer, name: str, **labels: str) -> float:
    got = m.registry.get_sample_value(name, {"group": "orders", **labels})
    return 0.0 if got is None else got


def test_counters_gauges_and_handoff_histogram_move_with_the_protocol() -> None:
    store = apportion.connect(f"memory://metrics-{uuid.uuid4().hex}")
    group = apportion.Group(store, "orders", partitions=6, settle_s=0.05, min_interval_s=0.1, ttl_s=1.0)
    ma, mb = MetricsTracer("orders", "a"), MetricsTracer("orders", "b")
    a = group.join("a", tracer=ma)
    wait_for("a to own all 6 partitions", lambda: len(a.owned()) == 6 and a.wait_until_stable(0.01), 10)
    # The gauge follows the trace event, which the stepping thread emits just after the owned set changes.
    wait_for("a's gauge at 6", lambda: value(ma, "apportion_owned_partitions", member="a") == 6, 5)
    assert value(ma, "apportion_rounds_total", member="a") >= 1
    b = group.join("b", tracer=mb)
    wait_for("a and b to own 3 partitions each", lambda: len(b.owned()) == 3 and len(a.owned()) == 3, 10)
    wait_for("b's gauge at 3", lambda: value(mb, "apportion_owned_partitions", member="b") == 3, 5)
    wait_for("a's gauge at 3", lambda: value(ma, "apportion_owned_partitions", member="a") == 3, 5)
    assert value(ma, "apportion_rebalances_total", member="a") >= 2  # first fill, then giving 3 away
    assert value(ma, "apportion_handoff_seconds_count", member="a", phase="release") == 3
    assert value(mb, "apportion_handoff_seconds_count", member="b", phase="claim") == 3

    p = b.owned()[0]
    epoch = b.lease(p).epoch
    b.commit(p, "offset-1")
    b.commit(p, "offset-2", epoch=epoch)
    with pytest.raises(Fenced):
        b.commit(p, "stale", epoch=epoch - 1)
    assert value(mb, "apportion_commits_total", member="b") == 2
    assert value(mb, "apportion_fenced_commits_total", member="b") == 1

    b.stop()
    wait_for("a to take b's partitions back", lambda: len(a.owned()) == 6, 10)
    a.stop()
    assert value(mb, "apportion_owned_partitions", member="b") == 0
    assert value(ma, "apportion_owned_partitions", member="a") == 0
    assert value(mb, "apportion_lost_total", member="b") == 0  # graceful leave: revoked, not lost
    scraped = generate_latest(ma.registry).decode()
    for name in (
        "apportion_owned_partitions",
        "apportion_rebalances_total",
        "apportion_rounds_total",
        "apportion_commits_total",
        "apportion_fenced_commits_total",
        "apportion_lost_total",
        "apportion_handoff_seconds_bucket",
    ):
        assert name in scraped, f"{name} missing from the scrape"


def test_lost_partitions_are_counted_and_leave_the_gauge() -> None:
    m = MetricsTracer("orders", "a")
    m("assigned", {"partitions": [0, 1, 2], "epochs": [1, 1, 1]})
    m("lost", {"partitions": [1, 2], "reason": "lease deadline passed"})
    m("lost", {"partitions": [], "reason": "lease deadline passed"})
    assert value(m, "apportion_owned_partitions", member="a") == 1
    assert value(m, "apportion_lost_total", member="a") == 2


def test_serve_exposes_the_registry_over_http() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = MetricsTracer("orders", "a")
    m("commit", {"partition": 0, "epoch": 1})
    m.serve(port, addr="127.0.0.1")
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'apportion_commits_total{group="orders",member="a"} 1.0' in body


def test_a_failing_tracer_does_not_stop_the_worker() -> None:
    store = apportion.connect(f"memory://metrics-{uuid.uuid4().hex}")
    group = apportion.Group(store, "orders", partitions=2, settle_s=0.05, min_interval_s=0.1)
    calls = threading.Event()

    def broken(kind: str, fields: object) -> None:
        calls.set()
        raise RuntimeError("observer bug")

    with group.join("a", tracer=broken) as w:
        wait_for("a to own both partitions despite the tracer", lambda: len(w.owned()) == 2, 10)
    assert calls.is_set() and w.error is None


def listening_address(port: int) -> str:
    """The local address of the TCP socket listening on ``port`` (from /proc/net/tcp and tcp6), e.g. '127.0.0.1'."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            for line in fh.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.rsplit(":", 1)
                if int(hex_port, 16) == port and state == "0A":  # LISTEN
                    if len(address) == 8:
                        return socket.inet_ntop(socket.AF_INET, bytes.fromhex(address)[::-1])
                    words = [bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, 32, 8)]
                    return socket.inet_ntop(socket.AF_INET6, b"".join(words))
    raise AssertionError(f"nothing listens on port {port}")


def test_serve_binds_the_loopback_by_default_and_port_0_returns_the_port_bound() -> None:
    m = MetricsTracer("orders", "a")
    port = m.serve(0)
    assert port > 0
    assert listening_address(port) == "127.0.0.1"
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "apportion_owned_partitions" in body


def test_worker_metrics_port_0_logs_the_port_it_bound_on_the_loopback_and_serves_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    log = tmp_path / "worker.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "apportion.cli", "worker", "--store", url, "--group", "g", "--id", "w",
             "--partitions", "2", "--metrics-port", "0"],
            stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        found: list[str] = []

        def logged_port() -> bool:
            found[:] = re.findall(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", log.read_text())
            return bool(found)

        wait_for(f"the worker to log its metrics address; its log:\n{log.read_text()}", logged_port, 60)
        port = int(found[0])
        assert port != 0
        assert listening_address(port) == "127.0.0.1"
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'apportion_owned_partitions{group="g",member="w"}' in body
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()


class DownableStore(MemoryStore):
    """A memory store whose ``revision()`` (the liveness probe's request) fails while ``down`` is set."""

    down = False

    def revision(self) -> int:
        if self.down:
            raise StoreUnavailable("connection refused")
        return super().revision()


def probe(port: int, path: str) -> tuple[int, str]:
    """``GET path`` with a real HTTP client: (status, body)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()


def test_healthz_and_readyz_answer_as_kubernetes_expects() -> None:
    store = DownableStore(f"memory://probes-{uuid.uuid4().hex}")
    group = apportion.Group(store, "orders", partitions=4, ttl_s=1.0, mode=Static(), ordinal=0)
    m = MetricsTracer("orders", "a")
    port = m.serve(0)
    assert probe(port, "/healthz") == (503, "starting")  # before the worker runs
    a = group.join("a", tracer=m)
    m.set_probes(live=a.liveness, ready=a.readiness)
    wait_for("a to be ready", lambda: probe(port, "/readyz") == (200, "ok"), 10)
    assert probe(port, "/healthz") == (200, "ok")
    assert "apportion_owned_partitions" in probe(port, "/metrics")[1]  # the same port

    mb = MetricsTracer("orders", "b")
    port_b = mb.serve(0)
    b = group.join("b", tracer=mb)  # the same ordinal (a rolling update): b waits for a's partitions
    mb.set_probes(live=b.liveness, ready=b.readiness)
    wait_for("b to register", lambda: b.member.store_lease is not None, 10)
    assert probe(port_b, "/healthz") == (200, "ok")
    status, body = probe(port_b, "/readyz")
    assert status == 503 and "assignment not claimed yet (4 partitions waiting)" in body

    store.down = True
    status, body = probe(port, "/healthz")
    assert status == 503 and body == "store unreachable: connection refused"
    store.down = False
    a.stop()
    wait_for("b to take over and be ready", lambda: probe(port_b, "/readyz") == (200, "ok"), 10)
    assert probe(port, "/healthz") == (503, "the worker has stopped")
    b.stop()


def test_readyz_waits_for_on_assigned_to_return() -> None:
    """A worker that has claimed its partitions is not ready while on_assigned still runs (a pipeline restoring its
    state there serves nothing yet): /readyz says so, and turns ready once the callback returns."""
    store = MemoryStore(f"memory://ready-{uuid.uuid4().hex}")
    group = apportion.Group(store, "orders", partitions=2, ttl_s=1.0, mode=Static(), ordinal=0)
    entered, release = threading.Event(), threading.Event()

    def on_assigned(partitions: object) -> None:
        entered.set()
        assert release.wait(30), "the test never released on_assigned"

    worker = group.join("a", on_assigned=on_assigned)
    try:
        assert entered.wait(10), "on_assigned was never called"
        assert worker.member.stable()  # claimed ...
        assert worker.readiness() == "assignment claimed, its callbacks still running"  # ... but not ready
        release.set()
        wait_for("a to be ready", lambda: worker.readiness() is None, 10)
    finally:
        release.set()
        worker.stop()


def test_a_worker_process_serves_the_probes_on_its_metrics_port(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    args = worker_args(url, "g", "--partitions", "2", "--mode", "static", "--ordinal", "0", "--metrics-port", "0")
    with Fleet(tmp_path / "logs", args) as fleet:
        ports: dict[str, int] = {}

        def port_of(wid: str) -> bool:
            found = re.findall(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", fleet.log(wid).text())
            ports.update({wid: int(found[0])} if found else {})
            return wid in ports

        fleet.start("a")
        wait_for("a to log its metrics port", lambda: port_of("a"), 60, alive=lambda: fleet.check(["a"]))
        wait_for("a to be ready", lambda: probe(ports["a"], "/readyz") == (200, "ok"), 30)
        assert probe(ports["a"], "/healthz") == (200, "ok")
        fleet.start("b")  # the same ordinal: registered and live, not ready while a holds the partitions
        wait_for("b to log its metrics port", lambda: port_of("b"), 60, alive=lambda: fleet.check(["b"]))
        wait_for("b to register", lambda: "waiting" in probe(ports["b"], "/readyz")[1], 30)
        assert probe(ports["b"], "/healthz") == (200, "ok")
        assert fleet.stop_all(30) == {"a": 0, "b": 0}
