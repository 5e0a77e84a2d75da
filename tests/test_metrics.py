"""Prometheus metrics of a worker: the MetricsTracer adapter on real workers (memory store, short real-time run)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable

import pytest
from prometheus_client import generate_latest

import apportion
from apportion.errors import Fenced
from apportion.metrics import MetricsTracer


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def value(m: MetricsTracer, name: str, **labels: str) -> float:
    got = m.registry.get_sample_value(name, {"group": "orders", **labels})
    return 0.0 if got is None else got


def test_counters_gauges_and_handoff_histogram_move_with_the_protocol() -> None:
    store = apportion.connect(f"memory://metrics-{uuid.uuid4().hex}")
    group = apportion.Group(store, "orders", partitions=6, settle_s=0.05, min_interval_s=0.1, ttl_s=1.0)
    ma, mb = MetricsTracer("orders", "a"), MetricsTracer("orders", "b")
    a = group.join("a", tracer=ma)
    wait_for(lambda: len(a.owned()) == 6 and a.wait_until_stable(0.01), 10, "a to own all 6 partitions")
    assert value(ma, "apportion_owned_partitions", member="a") == 6
    assert value(ma, "apportion_rounds_total", member="a") >= 1
    b = group.join("b", tracer=mb)
    wait_for(lambda: len(b.owned()) == 3 and len(a.owned()) == 3, 10, "a and b to own 3 partitions each")
    wait_for(lambda: value(mb, "apportion_owned_partitions", member="b") == 3, 5, "b's gauge at 3")
    assert value(ma, "apportion_owned_partitions", member="a") == 3
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
    wait_for(lambda: len(a.owned()) == 6, 10, "a to take b's partitions back")
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
        wait_for(lambda: len(w.owned()) == 2, 10, "a to own both partitions despite the tracer")
    assert calls.is_set() and w.error is None
