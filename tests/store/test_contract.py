"""The ONE conformance suite of the store contract: every test runs unchanged on every backend (memory, sqlite, etcd).

Rules that keep it backend-agnostic: revisions are compared relative to ``store.revision()`` read at the start (etcd
starts at 1, the others at 0); no clock injection (etcd keeps its own time), so the lease-expiry test uses a short
real TTL and polls with a deadline; no transaction writes the same key twice (etcd refuses it).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from apportion.errors import Compacted, InvalidRequest, LeaseNotFound
from apportion.store import (
    Compare,
    Delete,
    Event,
    EventType,
    Get,
    KeyValue,
    Put,
    Store,
    Watch,
    absent,
    connect,
    exists,
    mod_revision_is,
    value_is,
)

DEADLINE_S = 5.0


def collect(watch: Watch, count: int, deadline_s: float = DEADLINE_S) -> list[Event]:
    """Wait until ``count`` events arrived (fail with what was seen otherwise), then check that no more follow."""
    events: list[Event] = []
    deadline = time.monotonic() + deadline_s
    while len(events) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"expected {count} watch events within {deadline_s} s, got {len(events)}: {events}")
        events += watch.wait(min(remaining, 0.5))
    assert len(events) == count, f"expected exactly {count} events, got {events}"
    return events


def summary(events: list[Event]) -> list[tuple[str, str, bytes, int]]:
    return [(e.type.value, e.kv.key, e.kv.value, e.revision) for e in events]


# -- keys, values, revisions -----------------------------------------------------------------------------------


def test_missing_key_reads_as_none_and_empty_range(store: Store) -> None:
    assert store.get("/nothing/here") is None
    assert store.range("/nothing/") == []


def test_put_sets_create_and_mod_revision_and_counts_versions(store: Store) -> None:
    base = store.revision()
    first = store.put("/kv/a", b"1")
    assert first == base + 1 == store.revision()
    assert store.get("/kv/a") == KeyValue("/kv/a", b"1", first, first, 1)
    second = store.put("/kv/a", b"2")
    assert second == first + 1
    assert store.get("/kv/a") == KeyValue("/kv/a", b"2", first, second, 2)


def test_put_after_delete_starts_a_new_life_of_the_key(store: Store) -> None:
    store.put("/kv/a", b"1")
    store.delete("/kv/a")
    revision = store.put("/kv/a", b"2")
    assert store.get("/kv/a") == KeyValue("/kv/a", b"2", revision, revision, 1)


def test_range_returns_the_prefix_sorted_and_honours_limit(store: Store) -> None:
    for key in ["/r/b", "/r/a/2", "/r/a/1", "/rx", "/q"]:
        store.put(key, key.encode())
    assert [kv.key for kv in store.range("/r/")] == ["/r/a/1", "/r/a/2", "/r/b"]
    assert [kv.key for kv in store.range("/r/a/")] == ["/r/a/1", "/r/a/2"]
    assert [kv.key for kv in store.range("/r/", limit=2)] == ["/r/a/1", "/r/a/2"]
    assert [kv.value for kv in store.range("/r/b")] == [b"/r/b"]
    assert len(store.range("/")) == 5


def test_delete_reports_how_many_keys_it_removed(store: Store) -> None:
    for key in ["/d/a", "/d/b/1", "/d/b/2", "/dx"]:
        store.put(key, b"")
    base = store.revision()
    assert store.delete("/d/a") == 1
    assert store.delete("/d/a") == 0
    assert store.delete("/d/b/", prefix=True) == 2
    assert store.revision() == base + 2  # a delete of nothing writes nothing
    assert [kv.key for kv in store.range("/")] == ["/dx"]


def test_values_are_arbitrary_bytes(store: Store) -> None:
    value = bytes(range(256)) * 4
    store.put("/bin", value)
    stored = store.get("/bin")
    assert stored is not None and stored.value == value
    store.put("/empty", b"")
    empty = store.get("/empty")
    assert empty is not None and empty.value == b""


# -- transactions ----------------------------------------------------------------------------------------------


def test_txn_runs_success_branch_when_every_compare_holds(store: Store) -> None:
    revision = store.put("/t/a", b"1")
    result = store.txn(
        [value_is("/t/a", b"1"), mod_revision_is("/t/a", revision), exists("/t/a"), absent("/t/b")],
        [Put("/t/b", b"2"), Get("/t/", prefix=True)],
        [Put("/t/c", b"3")],
    )
    assert result.succeeded
    assert result.revision == revision + 1 == store.revision()
    assert result.responses[0] is None
    listed = result.responses[1]
    assert isinstance(listed, list)
    assert [(kv.key, kv.value) for kv in listed] == [("/t/a", b"1"), ("/t/b", b"2")]
    assert store.get("/t/c") is None


def test_txn_runs_failure_branch_when_a_compare_fails(store: Store) -> None:
    revision = store.put("/t/a", b"1")
    result = store.txn(
        [value_is("/t/a", b"1"), mod_revision_is("/t/a", revision + 7)],
        [Put("/t/b", b"2")],
        [Get("/t/a"), Delete("/t/zzz")],
    )
    assert not result.succeeded
    assert result.responses[0] == [store.get("/t/a")]
    assert result.responses[1] == 0
    assert result.revision == revision == store.revision()  # nothing written, no new revision
    assert store.get("/t/b") is None


@pytest.mark.parametrize(
    ("compare", "holds"),
    [
        (Compare("/c/k", "value", "==", b"v"), True),
        (Compare("/c/k", "value", "!=", b"v"), False),
        (Compare("/c/k", "value", ">", b"a"), True),
        (Compare("/c/k", "value", "<", b"a"), False),
        (Compare("/c/k", "version", "==", 2), True),
        (Compare("/c/k", "version", ">", 2), False),
        (Compare("/c/k", "create_revision", ">", 0), True),
        (Compare("/c/missing", "create_revision", "==", 0), True),
        (Compare("/c/missing", "mod_revision", "==", 0), True),
        (Compare("/c/missing", "version", "==", 0), True),
        (Compare("/c/missing", "value", "==", b""), False),  # etcd: a value compare on a missing key fails
        (Compare("/c/missing", "value", "!=", b"x"), False),
    ],
)
def test_compare_targets_and_operators(store: Store, compare: Compare, holds: bool) -> None:
    store.put("/c/k", b"u")
    store.put("/c/k", b"v")
    assert store.txn([compare], [Get("/c/k")], []).succeeded is holds


def test_compare_on_revisions_relative_to_the_write(store: Store) -> None:
    created = store.put("/c/k", b"1")
    modified = store.put("/c/k", b"2")
    assert store.txn([Compare("/c/k", "create_revision", "==", created)], []).succeeded
    assert store.txn([Compare("/c/k", "mod_revision", "==", modified)], []).succeeded
    assert store.txn([Compare("/c/k", "mod_revision", "<", modified + 1)], []).succeeded
    assert not store.txn([Compare("/c/k", "mod_revision", "<", modified)], []).succeeded


def test_all_writes_of_a_txn_share_one_new_revision(store: Store) -> None:
    store.put("/t/old", b"x")
    base = store.revision()
    result = store.txn([], [Put("/t/a", b"1"), Put("/t/b", b"2"), Delete("/t/old")])
    assert result.succeeded and result.revision == base + 1
    a, b = store.get("/t/a"), store.get("/t/b")
    assert a is not None and b is not None
    assert a.mod_revision == b.mod_revision == base + 1


def test_put_of_a_missing_lease_fails_and_writes_nothing(store: Store) -> None:
    lease = store.grant(30)
    store.revoke(lease)
    base = store.revision()
    with pytest.raises(LeaseNotFound):
        store.txn([], [Put("/t/a", b"1"), Put("/t/b", b"2", lease.id)])
    assert store.get("/t/a") is None
    assert store.revision() == base


def test_cas_races_between_threads_lose_no_update(store: Store) -> None:
    threads, increments = 4, 25
    key = "/race/counter"
    store.put(key, b"0")
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def increment() -> None:
        try:
            start.wait()
            current = store.get(key)
            assert current is not None
            done = 0
            while done < increments:
                result = store.txn(
                    [mod_revision_is(key, current.mod_revision)],
                    [Put(key, str(int(current.value) + 1).encode())],
                    [Get(key)],
                )
                if result.succeeded:
                    done += 1
                    current = KeyValue(key, str(int(current.value) + 1).encode(), 0, result.revision, 0)
                else:
                    fresh = result.responses[0]
                    assert isinstance(fresh, list)
                    current = fresh[0]
        except BaseException as exc:  # reported below, in the test thread
            errors.append(exc)

    workers = [threading.Thread(target=increment) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert not errors, errors
    final = store.get(key)
    assert final is not None and final.value == str(threads * increments).encode()
    assert final.version == threads * increments + 1


# -- leases ----------------------------------------------------------------------------------------------------


def test_lease_grant_keepalive_and_time_to_live(store: Store) -> None:
    lease = store.grant(30)
    assert lease.id != 0
    assert lease.ttl_s >= 30
    assert 0 < store.time_to_live(lease) <= lease.ttl_s
    assert store.keepalive(lease) == lease.ttl_s
    assert store.keepalive(lease.id) == lease.ttl_s
    other = store.grant(30)
    assert other.id != lease.id


def test_revoke_deletes_the_lease_keys_with_delete_events(store: Store) -> None:
    lease = store.grant(30)
    store.put("/l/a", b"1", lease)
    store.put("/l/b", b"2", lease.id)
    store.put("/l/c", b"3")
    stored = store.get("/l/a")
    assert stored is not None and stored.lease == lease.id
    with store.watch("/l/", store.revision() + 1) as watch:
        store.revoke(lease)
        events = collect(watch, 2)
    assert {(e.type, e.kv.key, e.kv.value) for e in events} == {
        (EventType.DELETE, "/l/a", b""),
        (EventType.DELETE, "/l/b", b""),
    }
    assert [kv.key for kv in store.range("/l/")] == ["/l/c"]
    with pytest.raises(LeaseNotFound):
        store.time_to_live(lease)
    with pytest.raises(LeaseNotFound):
        store.keepalive(lease)
    store.revoke(lease)  # revoking a lease that is gone is not an error


def test_put_without_lease_detaches_the_key_from_its_lease(store: Store) -> None:
    lease = store.grant(30)
    store.put("/l/a", b"1", lease)
    store.put("/l/a", b"2")
    store.revoke(lease)
    kept = store.get("/l/a")
    assert kept is not None and kept.value == b"2" and kept.lease == 0


def test_unknown_lease_raises_lease_not_found(store: Store) -> None:
    lease = store.grant(30)
    store.revoke(lease)
    with pytest.raises(LeaseNotFound):
        store.put("/l/a", b"1", lease)
    with pytest.raises(LeaseNotFound):
        store.keepalive(lease)
    with pytest.raises(LeaseNotFound):
        store.time_to_live(lease)


def test_expired_lease_deletes_its_keys_and_emits_delete_events(store: Store) -> None:
    kept = store.grant(30)
    lease = store.grant(1)
    store.put("/x/a", b"1", lease)
    store.put("/x/b", b"2", lease)
    store.put("/x/kept", b"3", kept)
    with store.watch("/x/", store.revision() + 1) as watch:
        events = collect(watch, 2, deadline_s=lease.ttl_s + 4)
    assert sorted((e.type, e.kv.key) for e in events) == [(EventType.DELETE, "/x/a"), (EventType.DELETE, "/x/b")]
    assert [kv.key for kv in store.range("/x/")] == ["/x/kept"]
    with pytest.raises(LeaseNotFound):
        store.keepalive(lease)
    assert store.time_to_live(kept) > 0


# -- watches ---------------------------------------------------------------------------------------------------


def test_watch_yields_puts_and_deletes_in_revision_order(store: Store) -> None:
    with store.watch("/w/") as watch:
        r1 = store.put("/w/a", b"1")
        r2 = store.txn([], [Put("/w/b", b"2"), Put("/w/c", b"3")]).revision
        store.put("/other", b"x")
        r3 = store.put("/w/a", b"4")
        store.delete("/w/b")
        r4 = store.revision()
        events = collect(watch, 5)
    assert summary(events) == [
        ("put", "/w/a", b"1", r1),
        ("put", "/w/b", b"2", r2),
        ("put", "/w/c", b"3", r2),
        ("put", "/w/a", b"4", r3),
        ("delete", "/w/b", b"", r4),
    ]
    assert events[3].kv.version == 2 and events[3].kv.create_revision == r1
    assert watch.poll() == []  # closed


def test_watch_without_start_sees_only_later_changes(store: Store) -> None:
    store.put("/w/before", b"1")
    with store.watch("/w/") as watch:
        assert watch.poll() == []
        revision = store.put("/w/after", b"2")
        assert summary(collect(watch, 1)) == [("put", "/w/after", b"2", revision)]


def test_watch_of_one_key_ignores_keys_sharing_its_prefix(store: Store) -> None:
    with store.watch("/w/a", prefix=False) as watch:
        store.put("/w/ab", b"1")
        store.put("/w/a/b", b"2")
        revision = store.put("/w/a", b"3")
        assert summary(collect(watch, 1)) == [("put", "/w/a", b"3", revision)]


def test_watch_of_deletes_only_skips_puts_from_now_and_from_a_revision(store: Store) -> None:
    base = store.revision()
    with store.watch("/d/", deletes_only=True) as watch:
        lease = store.grant(60)
        store.put("/d/a", b"1")
        store.put("/d/b", b"2", lease.id)
        store.delete("/d/a")
        first = store.revision()
        store.put("/d/a", b"3")
        store.revoke(lease)  # the lease's record goes: a delete, as a claim's owner record going at its lease's end
        second = store.revision()
        store.put("/d/c", b"4")
        events = collect(watch, 2)
        assert watch.poll() == []
    assert summary(events) == [("delete", "/d/a", b"", first), ("delete", "/d/b", b"", second)]
    with store.watch("/d/", base + 1, deletes_only=True) as resumed:
        assert summary(collect(resumed, 2)) == summary(events)


def test_watch_resumes_from_any_revision_without_gaps(store: Store) -> None:
    base = store.revision()
    store.put("/w/a", b"1")
    store.put("/w/b", b"2")
    store.txn([], [Put("/w/a", b"3"), Delete("/w/b")])
    store.put("/elsewhere", b"x")
    store.delete("/w/", prefix=True)
    store.put("/w/c", b"4")
    end = store.revision()
    with store.watch("/w/", base + 1) as watch:
        everything = summary(collect(watch, 6))
    assert [revision for *_, revision in everything] == sorted(revision for *_, revision in everything)
    for start in range(base + 1, end + 2):
        expected = [event for event in everything if event[3] >= start]
        with store.watch("/w/", start) as watch:
            assert summary(collect(watch, len(expected))) == expected, f"resumed from {start}"


def test_two_connections_see_each_other_writes_and_events(store_url: str) -> None:
    with connect(store_url) as first, connect(store_url) as second:
        with second.watch("/shared/", first.revision() + 1) as watch:
            revision = first.put("/shared/a", b"1")
            assert summary(collect(watch, 1)) == [("put", "/shared/a", b"1", revision)]
        stored = second.get("/shared/a")
        assert stored is not None and stored.mod_revision == revision


def test_compaction_makes_older_watches_raise_compacted(store: Store) -> None:
    store.put("/k/a", b"1")
    middle = store.put("/k/a", b"2")
    last = store.put("/k/a", b"3")
    store.compact(middle)
    with pytest.raises(Compacted):
        store.watch("/k/", middle)
    with store.watch("/k/", middle + 1) as watch:
        assert summary(collect(watch, 1)) == [("put", "/k/a", b"3", last)]
    stored = store.get("/k/a")  # compaction forgets history, not the current state
    assert stored is not None and stored.value == b"3" and stored.version == 3


def test_compaction_to_a_future_revision_is_rejected(store: Store) -> None:
    with pytest.raises(InvalidRequest):
        store.compact(store.revision() + 100)


# -- bad input -------------------------------------------------------------------------------------------------

BAD_KEYS = ["", "a/b", "/a//b", "/a/../b", "/a/./b", "/a b", "/caf\u00e9", "/a/\n", "/a/"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys_are_invalid_requests(store: Store, key: str) -> None:
    with pytest.raises(InvalidRequest):
        store.put(key, b"x")
    with pytest.raises(InvalidRequest):
        store.get(key)
    with pytest.raises(InvalidRequest):
        store.txn([value_is(key, b"x")], [])
    with pytest.raises(InvalidRequest):
        store.watch(key, prefix=False)


@pytest.mark.parametrize("prefix", ["", "/a//", "/../", "x/"])
def test_bad_prefixes_are_invalid_requests(store: Store, prefix: str) -> None:
    with pytest.raises(InvalidRequest):
        store.range(prefix)
    with pytest.raises(InvalidRequest):
        store.delete(prefix, prefix=True)
    with pytest.raises(InvalidRequest):
        store.watch(prefix)


def test_bad_arguments_are_invalid_requests(store: Store) -> None:
    with pytest.raises(InvalidRequest):
        store.put("/a", "text, not bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        store.range("/a/", limit=-1)
    with pytest.raises(InvalidRequest):
        store.grant(0)
    with pytest.raises(InvalidRequest):
        store.grant(-5)
    with pytest.raises(InvalidRequest):
        store.compact("1")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "compare",
    [
        Compare("/a", "value", "==", 1),  # a value compare needs bytes
        Compare("/a", "mod_revision", "==", b"1"),  # a revision compare needs an int
        Compare("/a", "version", ">", True),
        Compare("/a", "lease", "==", 0),  # type: ignore[arg-type]
        Compare("/a", "value", "<=", b"1"),  # type: ignore[arg-type]
    ],
)
def test_malformed_compares_are_invalid_requests_on_every_backend(store: Store, compare: Compare) -> None:
    """The memory and SQLite backends once evaluated these (an int against a value: never equal; an unknown target
    as the version; an unknown operator as '>') where etcd refused them: the contract is one."""
    store.put("/a", b"1")
    with pytest.raises(InvalidRequest, match="compare"):
        store.txn([compare], [Put("/b", b"x")])
    assert store.get("/b") is None


@pytest.mark.parametrize(
    "url",
    [
        "",
        "no-scheme",
        "ftp://somewhere",
        "sqlite://",
        "sqlite:///",
        "sqlite:///no-such-directory-xyz/store.db",
        "sqlite:///store.db?bogus=1",
        "sqlite:///store.db?timeout=-1",
        "sqlite:///store.db?synchronous=sometimes",
    ],
)
def test_bad_urls_are_invalid_requests(url: str) -> None:
    with pytest.raises(InvalidRequest):
        connect(url)


def test_a_file_that_is_not_a_store_is_an_invalid_request(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"this is not an SQLite database, just some text that is long enough" * 100)
    with pytest.raises(InvalidRequest):
        connect(f"sqlite:///{path}")
