"""The embedded Worker API on the memory store in real time (threads): the API the Spark pipeline uses."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from pathlib import Path

import pytest

import apportion
from apportion.errors import Fenced
from apportion.waiting import wait_for


def fresh_store() -> apportion.Store:
    return apportion.connect(f"memory://worker-{uuid.uuid4().hex}")


def test_two_workers_share_the_partitions_commit_with_their_epoch_and_leave_gracefully() -> None:
    store = fresh_store()
    group = apportion.Group(store, "orders", partitions=8, strategy="sticky", settle_s=0.1, min_interval_s=0.2)
    calls: list[tuple[str, str, list[int]]] = []
    lock = threading.Lock()

    def recorder(member: str, kind: str):  # type: ignore[no-untyped-def]
        def cb(parts: list[int]) -> None:
            with lock:
                calls.append((member, kind, parts))

        return cb

    with group.join("w1", recorder("w1", "assigned"), recorder("w1", "revoked"), recorder("w1", "lost")) as w1:
        with group.join("w2", recorder("w2", "assigned"), recorder("w2", "revoked"), recorder("w2", "lost")) as w2:
            wait_for("both workers stable", lambda: w1.wait_until_stable(0.05) and w2.wait_until_stable(0.05), 10)
            assert sorted(w1.owned() + w2.owned()) == list(range(8))
            p = w2.owned()[0]
            lease = w2.lease(p)
            assert isinstance(lease, apportion.PartitionLease) and lease.member == "w2" and lease.partition == p
            w2.commit(p, "cp-1")
            assert w1.checkpoint(p) == "cp-1"
            with pytest.raises(Fenced):
                w1.commit(p, "not mine")
        # w2 left gracefully: w1 takes over everything
        wait_for("w1 to own all 8 partitions after w2 left", lambda: w1.owned() == list(range(8)), 10)
        assert w1.checkpoint(p) == "cp-1"
    revoked_w2 = [c for c in calls if c[0] == "w2" and c[1] == "revoked"]
    assert revoked_w2 and not [c for c in calls if c[1] == "lost"]


def test_callback_error_stops_the_worker_with_that_error() -> None:
    store = fresh_store()
    group = apportion.Group(store, "g", partitions=2, settle_s=0.1, min_interval_s=0.2)

    def boom(parts: list[int]) -> None:
        raise RuntimeError("callback failed")

    worker = group.join("w1", on_assigned=boom)
    assert worker.wait(10), "the worker should stop after its callback raised"
    with pytest.raises(RuntimeError, match="callback failed"):
        worker.stop()
    assert worker.owned() == []


def test_more_members_than_partitions_do_not_hang() -> None:
    store = fresh_store()
    group = apportion.Group(store, "g", partitions=1, settle_s=0.1, min_interval_s=0.2)
    workers = [group.join(f"w{i}") for i in range(3)]
    try:
        wait_for("all 3 workers stable", lambda: all(w.wait_until_stable(0.05) for w in workers), 10)
        assert sorted(p for w in workers for p in w.owned()) == [0]
    finally:
        for w in workers:
            w.stop(10)
    assert all(w.stopped for w in workers)


def test_group_without_partitions_uses_the_stored_definition() -> None:
    store = fresh_store()
    with pytest.raises(apportion.InvalidRequest):
        apportion.Group(store, "g")
    apportion.Group(store, "g", partitions=5).join("w1").stop(10)
    assert apportion.Group(store, "g").requested.partitions == 5


def test_invalid_group_name_is_rejected() -> None:
    with pytest.raises(apportion.InvalidRequest):
        apportion.Group(fresh_store(), "bad/name", partitions=3)


def test_a_watch_that_cannot_take_sqlites_write_lock_keeps_the_worker_running(tmp_path: Path) -> None:
    """A SQLite watch's poll expires leases, so it takes the write lock when one has ended; another process holding
    that lock past the store's ``timeout`` made the poll raise StoreUnavailable in the worker's wait, outside the
    step that handles it, and the worker stopped (exit code 1 for `apportion worker`): seen at 64 members x 100,000
    partitions committing. Now the wait hands the failure to the step: traced, retried, the worker stays."""
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}?timeout=0.2"
    store = apportion.connect(url)
    group = apportion.Group(store, "g", partitions=4, settle_s=0.05, min_interval_s=0.1, ttl_s=5.0)
    failures = threading.Semaphore(0)

    def tracer(kind: object, fields: object) -> None:
        if str(getattr(kind, "value", kind)) == "store_unavailable":
            failures.release()

    with group.join("a", tracer=tracer) as worker:
        wait_for("a to own every partition", lambda: worker.owned() == [0, 1, 2, 3], 10)
        apportion.connect(url).grant(0.05)  # a lease that ends at once: the next poll must expire it (a write)
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process's writer holds the lock
        try:
            for n in range(4):  # the step's reads and the wait's polls fail, one after another
                assert failures.acquire(timeout=10), f"{n} store_unavailable traces, then none: the worker stopped?"
            assert worker.error is None
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        wait_for("a to be stable again", lambda: worker.wait_until_stable(0.05), 10)
        assert worker.owned() == [0, 1, 2, 3] and worker.error is None
