"""`apportion worker` at start-up (issue 14 item 7), in this process: a member whose first steps meet an unreachable
store logs ``waiting for store`` with the reason and fails with one line after --connect-timeout; the option is
validated. Real processes and a real etcd: tests/etcd/test_worker_waits_for_store.py."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest

from apportion.errors import StoreUnavailable
from apportion.runner import StartUp
from apportion.store import MemoryStore
from apportion.store._types import Lease
from apportion.worker import Worker
from tests.cli.run import cli


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan"])
def test_connect_timeout_must_be_a_finite_positive_number(value: str) -> None:
    result = cli("worker", "--store", "memory://ct", "--group", "g", "--id", "w", "--partitions", "2",
                 "--connect-timeout", value)  # fmt: skip
    assert result.code == 2
    line = result.one_error_line()
    assert "'--connect-timeout'" in line
    assert "not in the range 0.0<x<=86400.0" in line or "not a finite number" in line


def test_a_member_that_cannot_register_logs_why_and_exits_1_after_the_connect_timeout(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The store answers reads (connect() and the group's definition work) but refuses the lease: the failure
    happens in the member's first step, which retries it by itself; the start-up still ends after 1 s."""

    def refuse(self: MemoryStore, ttl_s: float) -> Lease:
        raise StoreUnavailable("injected: no lease for you")

    monkeypatch.setattr(MemoryStore, "grant", refuse)
    url = f"memory://startup-{uuid.uuid4().hex}"
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="apportion.worker"):
        result = cli("worker", "--store", url, "--group", "g", "--id", "w", "--partitions", "2",
                     "--connect-timeout", "1")  # fmt: skip
    elapsed = time.monotonic() - started
    assert result.code == 1, result.stderr
    line = result.one_error_line()
    assert f"cannot reach the store {url} within 1 s (--connect-timeout): injected: no lease for you" in line
    assert elapsed < 5, f"took {elapsed:.1f} s"
    waiting = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting for store")]
    assert waiting and all(m == f"waiting for store {url}: injected: no lease for you" for m in waiting), waiting
    assert len(waiting) <= 6, f"backoff: {len(waiting)} lines in 1 s"


def test_a_store_that_answers_after_a_while_is_waited_for(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Reads fail for 0.5 s (the worker's first request), then the store answers: the worker registers and runs
    (here it is stopped once registered, as SIGTERM would) and exits 0."""
    up_at = time.monotonic() + 0.5
    real_revision = MemoryStore.revision

    def revision(self: MemoryStore) -> int:
        if time.monotonic() < up_at:
            raise StoreUnavailable("injected: not yet")
        return real_revision(self)

    monkeypatch.setattr(MemoryStore, "revision", revision)
    real_watch = StartUp.watch

    def stop_once_registered(self: StartUp, worker: Worker) -> None:
        real_watch(self, worker)

        def stop() -> None:
            if self._registered.wait(30):
                worker.stop(0)  # what SIGTERM does: leave gracefully

        threading.Thread(target=stop, daemon=True).start()

    monkeypatch.setattr(StartUp, "watch", stop_once_registered)
    url = f"memory://later-{uuid.uuid4().hex}"
    with caplog.at_level(logging.INFO, logger="apportion.worker"):
        result = cli("worker", "--store", url, "--group", "g", "--id", "w", "--partitions", "2",
                     "--connect-timeout", "10")  # fmt: skip
    assert result.code == 0, result.stderr
    messages = [r.getMessage() for r in caplog.records]
    assert f"waiting for store {url}: injected: not yet" in messages
    assert any(m.startswith(f"worker w registered with {url}") for m in messages), messages
