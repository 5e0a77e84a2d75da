"""apportion.aio: the asyncio face over the sync worker, on real stores (memory, a SQLite file, etcd), in real time.

Every wait is on an event (a callback's, the worker's ``changes()``, ``wait_until_stable``) with a time limit; each
test runs its coroutine with ``asyncio.run`` (no pytest-asyncio in the dev dependencies)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

import apportion
from apportion.aio import AsyncWorker, Change, ChangeKind
from apportion.errors import Fenced

T = TypeVar("T")
FAST: dict[str, Any] = {"settle_s": 0.1, "min_interval_s": 0.2}
LIMIT_S = 15.0  # the most any wait of these tests may take before it fails


@pytest.fixture(params=["memory", "sqlite", pytest.param("etcd", marks=pytest.mark.etcd)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "etcd":
        url: str = request.getfixturevalue("etcd_url")
        return url
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'apportion.db'}"
    return f"memory://aio-{uuid.uuid4().hex}"


def run(main: Callable[[], Awaitable[T]]) -> T:
    async def limited() -> T:
        return await asyncio.wait_for(main(), 60)

    return asyncio.run(limited())


async def settled(*workers: AsyncWorker) -> None:
    """Wait until every worker is stable at the same time (a later one's join may unsettle an earlier one)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LIMIT_S
    while True:
        for w in workers:
            assert await w.wait_until_stable(deadline - loop.time()), f"{w.id} not stable in {LIMIT_S} s"
        if all(w.worker.member.stable() for w in workers):
            return


async def holding(worker: AsyncWorker, wanted: set[Any]) -> list[Change]:
    """Follow ``worker.changes()`` until it holds exactly ``wanted``; the changes seen."""
    seen: list[Change] = []

    async def follow() -> None:
        held: set[Any] = set()
        async for change in worker.changes():
            seen.append(change)
            parts = set(change.partitions)
            held = held | parts if change.kind is ChangeKind.ASSIGNED else held - parts
            if held == wanted:
                return
        raise AssertionError(f"{worker.id} stopped holding {held}")

    try:
        await asyncio.wait_for(follow(), LIMIT_S)
    except TimeoutError:
        raise AssertionError(f"{worker.id} did not come to hold {sorted(wanted)}: changes {seen}") from None
    return seen


def test_two_async_workers_share_the_partitions_balanced_and_commit_fenced(store_url: str) -> None:
    async def main() -> None:
        with apportion.connect(store_url) as store:
            group = apportion.Group(store, "orders", partitions=8, **FAST)
            async with AsyncWorker(group, "w1") as w1, AsyncWorker(group, "w2") as w2:
                await settled(w1, w2)
                assert sorted(w1.owned + w2.owned) == list(range(8))
                assert len(w1.owned) == len(w2.owned) == 4
                p = w2.owned[0]
                lease = w2.lease(p)
                assert (lease.member, lease.partition) == ("w2", p)
                revision = await w2.commit(p, "cp-1", epoch=lease.epoch)
                assert revision > 0 and await w1.checkpoint(p) == "cp-1"
                with pytest.raises(Fenced):
                    await w1.commit(p, "not mine")
                result = await w1.commit_many({q: "batch" for q in [*w1.owned, p]})
                assert set(result.committed) == set(w1.owned) and list(result.fenced) == [p]
            assert w1.stopped and w2.stopped

    run(main)


def test_commit_after_the_lease_is_gone_is_fenced_and_reported_lost(tmp_path: Path) -> None:
    async def main() -> None:
        lost = asyncio.Event()
        lost_parts: list[int] = []

        async def on_lost(parts: list[int]) -> None:
            lost_parts.extend(parts)
            lost.set()

        with apportion.connect(f"sqlite:///{tmp_path / 'a.db'}") as store:
            group = apportion.Group(store, "g", partitions=4, **FAST)
            async with AsyncWorker(group, "w1", on_lost=on_lost) as w1:
                await settled(w1)
                lease = w1.lease(2)
                store_lease = w1.worker.member.store_lease
                assert store_lease is not None
                await asyncio.to_thread(store.revoke, store_lease)  # as if w1 froze past its lease: records gone
                with pytest.raises(Fenced):
                    await w1.commit(2, "too late", epoch=lease.epoch)
                await asyncio.wait_for(lost.wait(), LIMIT_S)
                assert 2 in lost_parts
                assert await w1.checkpoint(2) is None  # nothing was written

    run(main)


def test_a_revocation_overrunning_revoke_timeout_lets_the_lease_lapse_as_the_sync_worker_does(tmp_path: Path) -> None:
    """The sync worker's behaviour (``test_slow_revocation_beyond_its_deadline_leads_to_on_lost`` in
    tests/group/test_rounds.py): the callback is not cancelled; renewal stops, the lease lapses, the other member
    takes every partition, and when the callback returns its partitions are reported lost."""

    async def main() -> None:
        revoking, gate, lost = asyncio.Event(), asyncio.Event(), asyncio.Event()
        finished: list[list[int]] = []
        lost_parts: list[int] = []

        async def slow_revoke(parts: list[int]) -> None:
            revoking.set()
            await gate.wait()  # far beyond revoke_timeout_s: until the test has seen the lapse
            finished.append(parts)

        async def on_lost(parts: list[int]) -> None:
            lost_parts.extend(parts)
            lost.set()

        with apportion.connect(f"sqlite:///{tmp_path / 'a.db'}") as store:
            group = apportion.Group(store, "g", partitions=4, ttl_s=1.0, **FAST)
            async with AsyncWorker(group, "a", on_revoked=slow_revoke, on_lost=on_lost, revoke_timeout_s=0.2) as a:
                await settled(a)
                epochs = {p: a.lease(p).epoch for p in a.owned}
                async with AsyncWorker(group, "b") as b:
                    await asyncio.wait_for(revoking.wait(), LIMIT_S)
                    await holding(b, {0, 1, 2, 3})  # a's lease lapsed while its callback still ran
                    assert a.owned == [] and not finished and not lost.is_set()
                    with pytest.raises(Fenced):
                        await a.commit(0, "zombie", epoch=epochs[0])
                    gate.set()
                    await asyncio.wait_for(lost.wait(), LIMIT_S)
                    assert finished, "the slow callback ran to its end (not cancelled)"
                    assert set(lost_parts) <= set(epochs) and lost_parts
                    await settled(a, b)  # a registered again and the group is balanced again

    run(main)


def test_cancelling_the_task_of_an_async_with_leaves_gracefully(store_url: str) -> None:
    async def main() -> None:
        revoked: list[int] = []
        lost: list[int] = []
        joined: asyncio.Future[AsyncWorker] = asyncio.get_running_loop().create_future()

        async def on_revoked(parts: list[int]) -> None:
            await asyncio.sleep(0)  # a real coroutine: awaited on the loop during the leave
            revoked.extend(parts)

        async def serve() -> None:
            async with AsyncWorker(group, "w1", on_revoked=on_revoked, on_lost=lost.extend) as w1:
                joined.set_result(w1)
                await asyncio.Event().wait()  # serve until cancelled

        with apportion.connect(store_url) as store:
            group = apportion.Group(store, "g", partitions=6, **FAST)
            async with AsyncWorker(group, "w2") as w2:
                task = asyncio.create_task(serve())
                w1 = await asyncio.wait_for(joined, LIMIT_S)
                await settled(w1, w2)
                held = set(w1.owned)
                assert held
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert w1.stopped and w1.error is None
                assert set(revoked) == held and lost == []  # given back, not lost
                await holding(w2, set(range(6)))

    run(main)


def test_changes_yield_what_is_held_then_assigned_and_revoked_with_epochs() -> None:
    async def main() -> None:
        with apportion.connect(f"memory://aio-{uuid.uuid4().hex}") as store:
            group = apportion.Group(store, "g", partitions=4, **FAST)
            async with AsyncWorker(group, "w1") as w1:
                seen = await holding(w1, {0, 1, 2, 3})
                assert seen[0].kind is ChangeKind.ASSIGNED
                epochs = {p: w1.lease(p).epoch for p in w1.owned}
                changes = w1.changes()
                first = await anext(changes)  # a new subscriber starts with what is held
                assert first == Change(ChangeKind.ASSIGNED, (0, 1, 2, 3), tuple(epochs[p] for p in range(4)))
                async with AsyncWorker(group, "w2") as w2:
                    revoked = await asyncio.wait_for(anext(changes), LIMIT_S)
                    assert revoked.kind is ChangeKind.REVOKED and len(revoked.partitions) == 2
                    assert revoked.leases == {p: epochs[p] for p in revoked.partitions}
                    await holding(w2, set(revoked.partitions))
                await changes.aclose()
            assert [c async for c in w1.changes()] == []  # a stopped worker has no more changes

    run(main)


def test_a_callback_error_stops_the_worker_and_leaves_the_async_with_block() -> None:
    async def main() -> None:
        async def boom(parts: list[int]) -> None:
            raise RuntimeError("callback failed")

        with apportion.connect(f"memory://aio-{uuid.uuid4().hex}") as store:
            group = apportion.Group(store, "g", partitions=2, **FAST)
            with pytest.raises(RuntimeError, match="callback failed"):
                async with AsyncWorker(group, "w1", on_assigned=boom) as w1:
                    assert await w1.wait(LIMIT_S), "the worker should stop after its callback raised"
                    assert not await w1.wait_until_stable(0.1)
            assert w1.owned == []

    run(main)


def test_stop_inside_a_callback_asks_for_the_leave_without_waiting_for_itself() -> None:
    async def main() -> None:
        workers: list[AsyncWorker] = []

        async def leave_at_once(parts: list[int]) -> None:
            await workers[0].stop()  # would deadlock if it waited for the worker thread (it waits for this)

        with apportion.connect(f"memory://aio-{uuid.uuid4().hex}") as store:
            group = apportion.Group(store, "g", partitions=2, **FAST)
            w1 = AsyncWorker(group, "w1", on_assigned=leave_at_once)
            workers.append(w1)
            async with w1:
                assert await w1.wait(LIMIT_S)
            assert w1.error is None and w1.owned == []

    run(main)


def test_a_loop_that_ends_under_a_callback_fails_the_worker_and_frees_its_partitions() -> None:
    """``asyncio.run`` ended without ``stop()`` while a callback was pending: the worker thread does not hang on it;
    the worker fails (as after a callback error) and revokes its lease, so its partitions are free at once."""
    url = f"memory://aio-{uuid.uuid4().hex}"
    with apportion.connect(url) as store:
        group = apportion.Group(store, "g", partitions=2, **FAST)
        workers: list[AsyncWorker] = []

        async def main() -> None:
            called = asyncio.Event()

            async def forever(parts: list[int]) -> None:
                called.set()
                await asyncio.Event().wait()

            w1 = await AsyncWorker(group, "w1", on_assigned=forever).start()
            workers.append(w1)
            await asyncio.wait_for(called.wait(), LIMIT_S)  # then return without stopping it

        run(main)
        assert workers[0].worker.wait(LIMIT_S), "the worker thread hangs on a callback of a loop that has ended"
        assert workers[0].error is not None
        assert set(apportion.group.owners(store, "g").values()) == {None}


def test_a_second_cancellation_during_the_leave_still_waits_for_the_graceful_leave() -> None:
    async def main() -> None:
        revoking, gate = asyncio.Event(), asyncio.Event()
        revoked: list[int] = []
        joined: asyncio.Future[AsyncWorker] = asyncio.get_running_loop().create_future()

        async def on_revoked(parts: list[int]) -> None:
            revoking.set()
            await gate.wait()
            revoked.extend(parts)

        async def serve() -> None:
            async with AsyncWorker(group, "w1", on_revoked=on_revoked) as w1:
                joined.set_result(w1)
                await asyncio.Event().wait()

        with apportion.connect(f"memory://aio-{uuid.uuid4().hex}") as store:
            group = apportion.Group(store, "g", partitions=4, **FAST)
            async with AsyncWorker(group, "w2") as w2:
                task = asyncio.create_task(serve())
                w1 = await asyncio.wait_for(joined, LIMIT_S)
                await settled(w1, w2)
                held = set(w1.owned)
                task.cancel()
                await asyncio.wait_for(revoking.wait(), LIMIT_S)
                task.cancel()  # again, while the leave waits for on_revoked
                gate.set()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert w1.stopped and set(revoked) == held
                await holding(w2, set(range(4)))

    run(main)
