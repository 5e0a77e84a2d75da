"""SQLite-only behaviour: virtual-clock lease expiry shared by connections, WAL/schema/durability settings, lock
timeouts, history trimming, and a differential check against the memory backend (the reference semantics)."""

from __future__ import annotations

import sqlite3
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.clock import VirtualClock
from apportion.errors import Compacted, LeaseNotFound, NoSuchStore, StoreReplaced, StoreUnavailable
from apportion.store import (
    Compare,
    Delete,
    EventType,
    Get,
    MemoryStore,
    Op,
    Put,
    Store,
    connect,
)
from apportion.store._sqlite import SCHEMA_VERSION, SqliteStore, open_sqlite


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def test_lease_expires_on_the_shared_clock_whoever_touches_the_store(url: str) -> None:
    clock = VirtualClock(1000.0)
    with connect(url, clock=clock) as granter, connect(url, clock=clock) as other:
        lease = granter.grant(10)
        granter.put("/m/a", b"1", lease)
        granter.put("/m/b", b"2", lease)
        base = granter.revision()
        clock.advance(9.5)
        assert other.get("/m/a") is not None
        assert other.time_to_live(lease) == pytest.approx(0.5)
        assert other.keepalive(lease) == 10  # pushed to now + 10
        clock.advance(9.5)
        assert granter.get("/m/a") is not None
        clock.advance(0.6)
        assert other.range("/m/") == []  # a read removes the expired lease and its keys
        assert other.revision() == base + 1  # one revision for the lease's deletes
        with granter.watch("/m/", base + 1) as watch:
            assert [(e.type, e.kv.key, e.revision) for e in watch.poll()] == [
                (EventType.DELETE, "/m/a", base + 1),
                (EventType.DELETE, "/m/b", base + 1),
            ]
        with pytest.raises(LeaseNotFound):
            granter.keepalive(lease)


def test_expired_leases_go_in_lease_order_one_revision_each_like_memory(url: str) -> None:
    for store in (connect(url, clock=VirtualClock()), MemoryStore(clock=VirtualClock())):
        with store:
            leases = [store.grant(ttl) for ttl in (3, 1, 2)]
            empty = store.grant(1)  # a lease without keys expires without a revision
            store.put("/e/a", b"", leases[0])
            store.put("/e/b", b"", leases[1])
            store.put("/e/c", b"", leases[2])
            base = store.revision()
            assert isinstance(store.clock, VirtualClock)
            store.clock.advance(5)
            assert store.revision() == base + 3
            with store.watch("/e/", base + 1) as watch:
                events = [(e.kv.key, e.revision) for e in watch.poll()]
            assert events == [("/e/a", base + 1), ("/e/b", base + 2), ("/e/c", base + 3)]  # lease ids in grant order
            with pytest.raises(LeaseNotFound):
                store.time_to_live(empty)


def test_a_backward_clock_jump_makes_leases_live_longer(url: str) -> None:
    clock = VirtualClock(500.0)
    with connect(url, clock=clock) as store:
        lease = store.grant(2)
        store.put("/j/a", b"", lease)
        clock.set(400.0)
        clock.advance(50)
        assert store.time_to_live(lease) == pytest.approx(52)
        clock.set(1000.0)  # forwards past the expiry: gone at once
        assert store.get("/j/a") is None


def test_watch_wait_expires_leases_while_waiting(url: str) -> None:
    with connect(url, clock=VirtualClock()) as store:
        lease = store.grant(1)
        store.put("/w/a", b"", lease)
        with store.watch("/w/") as watch:
            assert watch.poll() == []
            assert isinstance(store.clock, VirtualClock)
            store.clock.advance(2)
            assert [(e.type, e.kv.key) for e in watch.wait(1.0)] == [(EventType.DELETE, "/w/a")]


def test_file_uses_wal_schema_version_and_chosen_synchronous_level(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with open_sqlite(f"sqlite:///{path}") as store:
        conn = store._connection()
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        store.put("/a", b"1")
    with open_sqlite(f"sqlite:///{path}?synchronous=full") as store:
        assert store._connection().execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    finally:
        raw.close()


def test_a_store_written_by_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    open_sqlite(f"sqlite:///{path}").close()
    raw = sqlite3.connect(path)
    raw.execute("UPDATE schema_version SET version = 99")
    raw.commit()
    raw.close()
    with pytest.raises(Exception, match="schema version 99") as caught:
        open_sqlite(f"sqlite:///{path}")
    assert caught.type.__name__ == "InvalidRequest"


def test_a_held_write_lock_raises_store_unavailable_after_the_timeout(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with open_sqlite(f"sqlite:///{path}?timeout=0.2") as store:
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as caught:
                store.put("/a", b"1")
            assert time.monotonic() - started < 2.0
            assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
            assert store.get("/a") is None  # readers are not blocked by the writer
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        store.put("/a", b"1")


def test_opening_waits_while_another_process_is_switching_a_fresh_file_to_wal(tmp_path: Path) -> None:
    """SQLite answers ``PRAGMA journal_mode=WAL`` with SQLITE_BUSY at once, without the busy handler, while another
    connection holds the write lock of a rollback-journal file (what a second opener of a fresh file meets while the
    first one switches it): the open retries until the lock is gone instead of failing."""
    path = tmp_path / "fresh.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE other (x)")
    release = threading.Timer(0.3, holder.execute, ("COMMIT",))
    release.start()
    try:
        started = time.monotonic()
        with open_sqlite(f"sqlite:///{path}?timeout=5") as store:
            assert time.monotonic() - started >= 0.2  # it waited for the holder...
            store.put("/a", b"1")  # ...and then opened a working store
            assert store.get("/a") is not None
    finally:
        release.join()
        holder.close()


def test_a_read_only_open_of_a_file_being_created_is_no_such_store(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    sqlite3.connect(path).close()  # what a writer has made when it opened the file but not yet created the schema
    with pytest.raises(NoSuchStore, match="empty"):
        connect(f"sqlite:///{path}", read_only=True)
    sqlite3.connect(path).execute("CREATE TABLE other (x)").connection.close()
    with pytest.raises(Exception, match="not an apportion store"):
        connect(f"sqlite:///{path}", read_only=True)


def test_a_read_only_store_whose_file_is_replaced_or_deleted_says_so_instead_of_reading_the_old_one(
    tmp_path: Path,
) -> None:
    """A connection keeps reading a deleted or replaced file (nobody writes it any more): reads and watch polls of a
    read-only store raise StoreReplaced as soon as the path names another file, or none; a new open reads the new."""
    path, other = tmp_path / "store.db", tmp_path / "other.db"
    for where, value in ((path, b"old"), (other, b"new")):
        with connect(f"sqlite:///{where}") as writer:
            writer.put("/k", value)
    url = f"sqlite:///{path}"
    with connect(url, read_only=True) as reader:
        watch = reader.watch("/", reader.revision() + 1)
        assert reader.get("/k").value == b"old" and watch.poll() == []  # type: ignore[union-attr]
        other.replace(path)  # mv other.db store.db
        with pytest.raises(StoreReplaced, match=f"store replaced: {path} is another file"):
            reader.get("/k")
        with pytest.raises(StoreReplaced, match="store replaced"):
            watch.poll()
    with connect(url, read_only=True) as reader:
        assert reader.get("/k").value == b"new"  # type: ignore[union-attr]
        path.unlink()
        with pytest.raises(StoreReplaced, match=f"store file missing: {path} was deleted or moved"):
            reader.revision()


def test_history_is_trimmed_and_a_watch_left_behind_raises_compacted(tmp_path: Path) -> None:
    with open_sqlite(f"sqlite:///{tmp_path / 's.db'}?history=16") as store:
        late = store.watch("/h/", 1)
        for i in range(40):
            store.put(f"/h/{i % 3}", b"x")
        with pytest.raises(Compacted):
            store.watch("/h/", 1)
        with pytest.raises(Compacted):
            late.poll()
        recent = store.revision() - 10
        with store.watch("/h/", recent) as watch:
            assert [e.revision for e in watch.poll()] == list(range(recent, store.revision() + 1))
        idle = store.watch("/other/")  # a watch with nothing to see keeps up as long as it polls
        for _ in range(40):
            store.put("/h/0", b"y")
            assert idle.poll() == []


def test_history_is_bounded_in_events_not_only_revisions(tmp_path: Path) -> None:
    """A commit transaction of 120 partitions is one revision and 120 events: the history keeps about ``history``
    events (plus 1/16 slack and one check's worth of writes), not ``history`` revisions of them (issue 27)."""
    path = tmp_path / "s.db"
    with open_sqlite(f"sqlite:///{path}?history=64") as store:
        for n in range(30):
            store.txn([], [Put(f"/c/{p}", f"{n}".encode()) for p in range(40)])
        kept = sqlite3.connect(path).execute("SELECT count(*) FROM events").fetchone()[0]
        assert kept <= 64 + 4 + 16 * 40, f"{kept} events kept"
        with pytest.raises(Compacted):
            store.watch("/c/", store.revision() - 25)
        with store.watch("/c/", store.revision()) as watch:  # the newest revision's events are all still there
            assert len(watch.poll()) == 40


def test_a_closed_store_is_unavailable(url: str) -> None:
    store = connect(url)
    store.close()
    with pytest.raises(StoreUnavailable):
        store.get("/a")


def test_each_thread_gets_its_own_connection(url: str) -> None:
    import threading

    with open_sqlite(url) as store:
        seen: list[sqlite3.Connection] = []
        thread = threading.Thread(target=lambda: seen.append(store._connection()))
        thread.start()
        thread.join()
        assert seen[0] is not store._connection()


# -- differential check against the memory backend -------------------------------------------------------------

KEYS = ["/d/a", "/d/b", "/d/b/x", "/d/c"]
keys = st.sampled_from(KEYS)
ops: st.SearchStrategy[Op] = st.one_of(
    st.builds(Put, keys, st.sampled_from([b"", b"1", b"2", b"zz"])),
    st.builds(Get, keys),
    st.builds(Get, st.sampled_from(["/d/", "/d/b"]), st.just(True)),
    st.builds(Delete, keys),
    st.builds(Delete, st.sampled_from(["/d/", "/d/b"]), st.just(True)),
)
compares = st.builds(
    Compare,
    keys,
    st.sampled_from(["version", "mod_revision", "create_revision"]),
    st.sampled_from(["==", "!=", "<", ">"]),
    st.integers(0, 6),
) | st.builds(Compare, keys, st.just("value"), st.sampled_from(["==", "!=", "<", ">"]), st.sampled_from([b"", b"1"]))
txns = st.tuples(st.lists(compares, max_size=2), st.lists(ops, max_size=4), st.lists(ops, max_size=3))


@settings(max_examples=40, deadline=None)
@given(st.lists(txns, min_size=1, max_size=12))
def test_sqlite_gives_the_same_answers_and_events_as_memory(
    script: list[tuple[list[Compare], list[Op], list[Op]]],
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        sqlite_store: Store
        with open_sqlite(f"sqlite:///{directory}/d.db") as sqlite_store, MemoryStore() as memory_store:
            for compare_list, success, failure in script:
                expected = memory_store.txn(compare_list, success, failure)
                assert sqlite_store.txn(compare_list, success, failure) == expected
            assert sqlite_store.range("/") == memory_store.range("/")
            with sqlite_store.watch("/", 1) as left, memory_store.watch("/", 1) as right:
                assert left.poll() == right.poll()


def test_sqlite_store_is_the_sqlite_class(url: str) -> None:
    with connect(url) as store:
        assert isinstance(store, SqliteStore)


def test_a_write_waits_for_the_lock_no_longer_than_the_callers_time_limit(tmp_path: Path) -> None:
    """A writer stopped mid-transaction holds SQLite's write lock: a member's call gives up at its belief deadline
    (the time limit), not after the 5 s busy timeout."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with open_sqlite(url) as store:
        store.put("/k", b"v")
        holder = sqlite3.connect(str(tmp_path / "s.db"), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match="write lock"), store.time_limit(0.3):
                store.put("/k", b"w")
            waited = time.monotonic() - started
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert 0.25 <= waited < 2.0, waited
        store.put("/k", b"w")  # the limit is gone: the default busy timeout again, and the lock is free
        kv = store.get("/k")
        assert kv is not None and kv.value == b"w"
