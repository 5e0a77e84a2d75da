"""The SQLite store shared by real processes (multiprocessing, spawn): no lost update under CAS contention, crash
safety under SIGKILL mid-transaction, lease expiry of a killed process, a watcher in another process, and a fresh
file opened by ten processes at once while read-only openers poll it (no "database is locked", ever).

Real time is unavoidable here (separate processes, the wall clock); every wait has a deadline and a message.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import time
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

import pytest

from apportion.errors import NoSuchStore
from apportion.store import Get, Put, Store, connect, mod_revision_is

pytestmark = pytest.mark.slow

SPAWN = multiprocessing.get_context("spawn")
START_DEADLINE_S = 60.0  # spawning interpreters on a loaded 2-core machine can be slow
SOAK = os.environ.get("APPORTION_SOAK") == "1"
OPEN_ROUNDS = 100 if SOAK else 20  # `make soak` runs the 100 rounds the issue asks for (bench/README.md)


def wait_event(event: EventType, what: str) -> None:
    if not event.wait(START_DEADLINE_S):
        pytest.fail(f"expected {what} within {START_DEADLINE_S} s")


# -- children (module level: spawn pickles them by name) -------------------------------------------------------


def cas_increments(url: str, key: str, count: int, start: EventType, results: Any) -> None:
    with connect(url) as store:
        start.wait(START_DEADLINE_S)
        current = store.get(key)
        assert current is not None
        done = conflicts = 0
        while done < count:
            value = str(int(current.value) + 1).encode()
            result = store.txn([mod_revision_is(key, current.mod_revision)], [Put(key, value)], [Get(key)])
            if result.succeeded:
                done += 1
                current = type(current)(key, value, current.create_revision, result.revision, current.version + 1)
            else:
                conflicts += 1
                fresh = result.responses[0]
                assert isinstance(fresh, list)
                current = fresh[0]
        results.put(conflicts)


def stall_inside_big_txn(url: str, keys: int, stall_after: int, stalled: EventType) -> None:
    store = connect(url)
    writes = 0

    def trace(statement: str) -> None:  # called by sqlite3 before each statement, inside the open transaction
        nonlocal writes
        if statement.startswith("INSERT OR REPLACE INTO kv"):
            writes += 1
            if writes == stall_after:
                stalled.set()
                time.sleep(3600)  # killed here, with the transaction half written

    store._connection().set_trace_callback(trace)  # type: ignore[attr-defined]
    store.txn([], [Put(f"/big/{i:04d}", b"new" * 700) for i in range(keys)])


def hold_lease(url: str, ttl_s: float, ready: EventType) -> None:
    store = connect(url)
    lease = store.grant(ttl_s)
    store.txn([], [Put("/members/child", b"alive", lease.id), Put("/members/child/data", b"x", lease.id)])
    ready.set()
    while True:  # keep the lease alive until killed
        store.keepalive(lease)
        time.sleep(ttl_s / 5)


def watch_and_report(url: str, start: int, ready: EventType, results: Any) -> None:
    """Watch /w/ from ``start`` until the event of /w/end, then report every event seen."""
    with connect(url) as store, store.watch("/w/", start) as watch:
        ready.set()
        seen: list[tuple[str, str, bytes, int]] = []
        deadline = time.monotonic() + START_DEADLINE_S
        while not (seen and seen[-1][1] == "/w/end") and time.monotonic() < deadline:
            seen += [(e.type.value, e.kv.key, e.kv.value, e.revision) for e in watch.wait(0.5)]
        results.put(seen)


def open_fresh_and_write(directory: str, rounds: int, index: int, barrier: Any, results: Any) -> None:
    """Each round: start together with the others (barrier), open round-<r>.db, which nobody has opened before (so
    its creation, the WAL switch and the first statements race), read, write one key, close. Reports its failures."""
    failures: list[str] = []
    for r in range(rounds):
        barrier.wait(START_DEADLINE_S)
        try:
            with connect(f"sqlite:///{directory}/round-{r}.db") as store:
                store.get("/stress/0")
                store.put(f"/stress/{index}", b"1")
        except Exception as exc:
            failures.append(f"round {r}, writer {index}: {exc!r}")
        barrier.wait(START_DEADLINE_S)
    results.put(("writer", failures, rounds))


def poll_read_only(directory: str, rounds: int, writers: int, barrier: Any, results: Any) -> None:
    """Each round: open round-<r>.db read-only (as `status --json` does) again and again until every writer's key is
    there. "No store yet" is a correct answer while the file is being created; anything else is a failure."""
    failures: list[str] = []
    opens = 0
    for r in range(rounds):
        barrier.wait(START_DEADLINE_S)
        deadline = time.monotonic() + START_DEADLINE_S
        seen = 0
        while seen < writers:
            if time.monotonic() > deadline:
                failures.append(f"round {r}: saw {seen} of {writers} keys after {START_DEADLINE_S} s")
                break
            opens += 1
            try:
                with connect(f"sqlite:///{directory}/round-{r}.db", read_only=True) as store:
                    seen = len(store.range("/stress/"))
            except NoSuchStore:
                seen = 0
            except Exception as exc:
                failures.append(f"round {r}, reader: {exc!r}")
            time.sleep(0.001)
        barrier.wait(START_DEADLINE_S)
    results.put(("reader", failures, opens))


def write_mixed_changes(store: Store, first: int, last: int) -> None:
    """Puts, multi-key txns, deletes, a prefix delete and a lease revoke under /w/, with writes elsewhere between."""
    lease = store.grant(60)
    for i in range(first, last):
        store.put(f"/w/{i % 7}", str(i).encode(), lease if i % 10 == 0 else None)
        store.put("/noise", str(i).encode())
        if i % 9 == 0:
            store.txn([], [Put(f"/w/t/{i}/a", b"a"), Put(f"/w/t/{i}/b", b"b")])
        if i % 13 == 0:
            store.delete(f"/w/{(i + 3) % 7}")
    store.delete("/w/t/", prefix=True)
    store.revoke(lease)


# -- tests -----------------------------------------------------------------------------------------------------


def test_eight_processes_of_cas_increments_lose_no_update(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}?timeout=30"
    processes, increments = 8, 500
    with connect(url) as store:
        store.put("/counter", b"0")
    start = SPAWN.Event()
    results = SPAWN.Queue()
    workers = [
        SPAWN.Process(target=cas_increments, args=(url, "/counter", increments, start, results))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    start.set()
    conflicts = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0, f"a CAS worker failed (exit code {worker.exitcode})"
    with connect(url) as store:
        final = store.get("/counter")
    assert final is not None
    assert final.value == str(processes * increments).encode(), f"lost updates ({sum(conflicts)} conflicts retried)"
    assert final.version == processes * increments + 1


def test_sigkill_in_the_middle_of_a_transaction_leaves_no_trace(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}?timeout=5"
    keys = 1000
    with connect(url) as store:
        before = store.txn([], [Put(f"/big/{i:04d}", b"old") for i in range(keys)]).revision
    stalled = SPAWN.Event()
    child = SPAWN.Process(target=stall_inside_big_txn, args=(url, keys, keys // 2, stalled))
    child.start()
    try:
        wait_event(stalled, "the child to stop half-way through its transaction")
    finally:
        os.kill(child.pid or 0, signal.SIGKILL)
        child.join(30)
    assert child.exitcode == -signal.SIGKILL

    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        raw.close()
    with connect(url) as store:
        assert store.revision() == before
        values = {kv.value for kv in store.range("/big/")}
        assert values == {b"old"}, "a partial transaction survived the kill"
        assert len(store.range("/big/")) == keys
        assert store.put("/after", b"1") == before + 1  # the write lock died with the process


def test_a_killed_process_lease_expires_and_its_keys_vanish_for_the_others(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    ttl_s = 1.0
    ready = SPAWN.Event()
    child = SPAWN.Process(target=hold_lease, args=(url, ttl_s, ready))
    child.start()
    try:
        wait_event(ready, "the child to grant its lease and put its keys")
        with connect(url) as store:
            assert [kv.key for kv in store.range("/members/")] == ["/members/child", "/members/child/data"]
            watch = store.watch("/members/")
            os.kill(child.pid or 0, signal.SIGKILL)
            killed = time.monotonic()
            child.join(30)
            while store.range("/members/"):
                if time.monotonic() - killed > ttl_s + 1.0:
                    pytest.fail(f"the killed process's keys were still there {ttl_s + 1.0} s after the kill")
                time.sleep(0.02)
            events = watch.wait(1.0)
            assert sorted((e.type.value, e.kv.key) for e in events) == [
                ("delete", "/members/child"),
                ("delete", "/members/child/data"),
            ]
            watch.close()
    finally:
        if child.is_alive():
            os.kill(child.pid or 0, signal.SIGKILL)
            child.join(30)


def test_a_watcher_in_another_process_sees_every_event_in_order(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with connect(url) as store:
        start = store.revision() + 1
        write_mixed_changes(store, 0, 40)  # history the watcher catches up on
        ready = SPAWN.Event()
        results = SPAWN.Queue()
        watcher = SPAWN.Process(target=watch_and_report, args=(url, start, ready, results))
        watcher.start()
        wait_event(ready, "the watcher process to start watching")
        write_mixed_changes(store, 40, 100)  # changes made while it watches
        store.put("/w/end", b"")
        with store.watch("/w/", start) as local:
            expected = [(e.type.value, e.kv.key, e.kv.value, e.revision) for e in local.poll()]
        seen = results.get(timeout=START_DEADLINE_S)
        watcher.join(30)
    assert watcher.exitcode == 0
    assert len(expected) > 150
    assert seen == expected, "the other process saw different events or a different order"
    assert [event[3] for event in seen] == sorted(event[3] for event in seen)


def test_ten_processes_open_a_fresh_file_at_once_while_readers_poll_and_none_fails(tmp_path: Path) -> None:
    writers, readers = 10, 2
    barrier = SPAWN.Barrier(writers + readers)
    results = SPAWN.Queue()
    children = [
        SPAWN.Process(target=open_fresh_and_write, args=(str(tmp_path), OPEN_ROUNDS, i, barrier, results))
        for i in range(writers)
    ] + [
        SPAWN.Process(target=poll_read_only, args=(str(tmp_path), OPEN_ROUNDS, writers, barrier, results))
        for _ in range(readers)
    ]
    for child in children:
        child.start()
    try:
        reports = [results.get(timeout=START_DEADLINE_S + OPEN_ROUNDS * 10) for _ in children]
    finally:
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
                child.join(30)
    failures = [failure for _, found, _ in reports for failure in found]
    assert not failures, f"{len(failures)} failures in {OPEN_ROUNDS} rounds, e.g.: {failures[:5]}"
    assert all(child.exitcode == 0 for child in children)
    assert sum(n for kind, _, n in reports if kind == "reader") >= OPEN_ROUNDS * readers
    for r in range(OPEN_ROUNDS):
        with connect(f"sqlite:///{tmp_path}/round-{r}.db", read_only=True) as store:
            assert len(store.range("/stress/")) == writers
