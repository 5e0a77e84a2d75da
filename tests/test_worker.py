"""The embedded Worker API on the memory store in real time (threads): the API the Spark pipeline uses."""

from __future__ import annotations

import threading
import uuid

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
