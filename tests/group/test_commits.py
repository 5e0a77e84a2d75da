"""Fenced commits of many partitions at once (``commit_many``) and the commit records outside the watched prefix.

The backend tests run a member in real time on every backend (memory, SQLite, a real etcd), stepped by the test
itself (no worker thread: what the member does between two calls is exactly what the test makes it do). Another
member taking a partition is written as its claim writes it (``epoch/p`` bumped, ``owner/p`` bound to its lease).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apportion.clock import SYSTEM_CLOCK
from apportion.errors import Fenced, InvalidRequest, StoreUnavailable
from apportion.group import GroupConfig, RoundsMember, committed, group_status, history
from apportion.group._commits import CHUNK_BYTES, CHUNK_PARTITIONS, chunked
from apportion.group._keys import owner_value
from apportion.group.internals import Keys, encode
from apportion.store import Event, MemoryStore, Op, Put, Store, TxnResult, connect
from apportion.store._types import Compare
from apportion.waiting import wait_for
from tests.group.harness import FAST, Harness
from tests.store.conftest import BACKENDS, fresh_store_url

GROUP = "g"
KEYS = Keys(GROUP)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with connect(fresh_store_url(request.param, tmp_path, request)) as opened:
        yield opened


class Lost:
    """An ``on_lost`` that remembers what it was given."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def __call__(self, parts: list[int]) -> None:
        self.calls.append(list(parts))


def started(store: Store, member_id: str, partitions: int, **options: object) -> RoundsMember:
    """A member in real time that owns every partition of the group (the only member stepped)."""
    config = GroupConfig(partitions=partitions, settle_s=0.05, min_interval_s=0.1, ttl_s=30.0)
    member = RoundsMember(store, GROUP, member_id, config, clock=SYSTEM_CLOCK, **options)  # type: ignore[arg-type]

    def owns_all() -> bool:
        member.step()
        return len(member.owned()) == partitions

    wait_for(f"{member_id} to own all {partitions} partitions", owns_all, 60, poll_s=0.01)
    member.keepalive(SYSTEM_CLOCK.now())
    return member


def take(store: Store, partitions: Sequence[int], epochs: dict[int, int], member_id: str = "b") -> None:
    """What another member's claim after ours writes: the epoch bumped, the owner record its own."""
    lease = store.grant(60.0)
    ops: list[Op] = []
    for p in partitions:
        ops += [
            Put(KEYS.epoch(p), str(epochs[p] + 1).encode()),
            Put(KEYS.owner(p), owner_value(member_id, epochs[p] + 1), lease.id),
        ]
    store.txn([], ops)


def commit_event_keys(store: Store) -> list[str]:
    return [kv.key for kv in store.range(KEYS.events) if b'"type":"commit"' in kv.value]


# -- every backend ------------------------------------------------------------------------------------------------


def test_commit_many_commits_every_partition_in_one_transaction_and_one_history_event(store: Store) -> None:
    a = started(store, "a", 8)
    epochs = {p: a.lease(p).epoch for p in range(8)}
    result = a.commit_many({p: f"cp-{p}" for p in range(8)})
    assert result.ok and set(result.committed) == set(range(8))
    assert len(set(result.committed.values())) == 1, "one chunk, one revision"
    assert [a.checkpoint(p) for p in range(8)] == [f"cp-{p}" for p in range(8)]
    assert committed(store, GROUP) == {p: f"cp-{p}" for p in range(8)}
    assert len(commit_event_keys(store)) == 1, "one history event per transaction"
    rows = [e for e in history(store, GROUP) if e["type"] == "commit"]  # expanded: one row per partition
    assert [(e["partition"], e["epoch"]) for e in rows] == sorted(epochs.items())
    assert {e["revision"] for e in rows} == set(result.committed.values())


def test_more_partitions_than_one_etcd_transaction_takes_are_committed_in_chunks(store: Store) -> None:
    """300 partitions with 14 kB checkpoints: more ops than etcd's --max-txn-ops (128) and more bytes than its
    --max-request-bytes (1.5 MiB) in one transaction; every chunk is one transaction that fits both."""
    a = started(store, "a", 300)
    checkpoints = {p: f"{p:04d}" + "x" * 14_000 for p in range(300)}
    result = a.commit_many(checkpoints)
    assert result.ok, (result.fenced, result.failed)
    revisions = sorted(set(result.committed.values()))
    assert len(revisions) >= 4  # 4.2 MB over chunks of at most 1 MiB
    by_revision = [[p for p, r in result.committed.items() if r == revision] for revision in revisions]
    assert all(len(parts) <= CHUNK_PARTITIONS for parts in by_revision)
    assert sorted(p for parts in by_revision for p in parts) == list(range(300))
    assert committed(store, GROUP) == checkpoints
    assert len(commit_event_keys(store)) == len(revisions)


def test_commit_many_fences_exactly_the_partitions_another_member_took_and_commits_the_rest(store: Store) -> None:
    lost = Lost()
    a = started(store, "a", 8, on_lost=lost)
    epochs = {p: a.lease(p).epoch for p in range(8)}
    taken = [2, 5]
    take(store, taken, epochs)
    result = a.commit_many({p: f"cp-{p}" for p in range(8)}, epochs=epochs)
    assert dict(result.fenced) == {2: epochs[2], 5: epochs[5]} and not result.failed
    assert set(result.committed) == set(range(8)) - set(taken)
    assert len(set(result.committed.values())) == 1, "the rest again in one transaction"
    assert [a.checkpoint(p) for p in taken] == [None, None]
    assert committed(store, GROUP) == {p: f"cp-{p}" for p in range(8) if p not in taken}
    assert isinstance(result.error(2), Fenced) and result.error(0) is None
    assert a.owned() == [p for p in range(8) if p not in taken]  # the belief in them ended at once
    a.step()
    assert lost.calls == [taken]  # on_lost from the stepping thread, as for a fenced commit
    fenced_events = [e for e in history(store, GROUP) if e["type"] == "fenced"]
    assert [(e["partition"], e["epoch"]) for e in fenced_events] == [(2, epochs[2]), (5, epochs[5])]


def test_a_zombies_commit_many_after_losing_its_lease_commits_nothing(store: Store) -> None:
    a = started(store, "a", 6)
    epochs = {p: a.lease(p).epoch for p in range(6)}
    lease = a.store_lease
    assert lease is not None
    store.revoke(lease)  # a is frozen: its lease ends in the store, it still believes (no step, no keepalive)
    b = started(store, "b", 6)
    assert b.commit_many({p: "b" for p in range(6)}).ok
    before = store.revision()
    result = a.commit_many({p: "zombie" for p in range(6)}, epochs=epochs)
    assert not result.committed and dict(result.fenced) == epochs
    assert committed(store, GROUP) == dict.fromkeys(range(6), "b")
    assert [e for e in history(store, GROUP) if e["type"] == "commit" and e["member"] == "a"] == []
    assert store.revision() == before + 1  # one txn that failed (no write), then only the "fenced" event


def test_a_members_watch_receives_no_commit(store: Store) -> None:
    """Commits live outside the group's prefix: every member watches that prefix, and none is woken by a commit."""
    a = started(store, "a", 4)
    events: list[Event] = []
    with store.watch(KEYS.prefix) as watch:
        a.commit_many({p: "one" for p in range(4)})
        a.commit(0, "two")
        store.put(KEYS.prefix + "probe", b"{}")  # then a change under the prefix, which the watch must see
        deadline = time.monotonic() + 20
        while not events and time.monotonic() < deadline:
            events += watch.wait(0.2)
    assert [e.kv.key for e in events] == [KEYS.prefix + "probe"]
    assert a.checkpoint(0) == "two"


def test_legacy_commit_records_are_read_until_a_commit_supersedes_them(store: Store) -> None:
    """A store written by the layout before (``/apportion/<group>/commit/<p>``): checkpoint(), status and
    committed() see its checkpoints; a commit writes the new record only, and the one written last wins."""
    for p in range(4):
        store.put(KEYS.legacy_commit(p), encode({"checkpoint": f"old-{p}", "epoch": 1, "member": "w0"}))
    a = started(store, "a", 4)
    assert [a.checkpoint(p) for p in range(4)] == ["old-0", "old-1", "old-2", "old-3"]
    assert group_status(store, GROUP).partitions["1"].checkpoint == "old-1"
    a.commit_many({0: "new-0", 1: "new-1"})
    assert store.get(KEYS.legacy_commit(0)) is not None  # left in place, superseded
    assert committed(store, GROUP) == {0: "new-0", 1: "new-1", 2: "old-2", 3: "old-3"}
    status = group_status(store, GROUP).partitions
    assert [status[str(p)].checkpoint for p in range(4)] == ["new-0", "new-1", "old-2", "old-3"]
    store.put(KEYS.legacy_commit(1), encode({"checkpoint": "later", "epoch": 1, "member": "w0"}))  # written last
    assert a.checkpoint(1) == "later" and committed(store, GROUP)[1] == "later"
    assert a.checkpoint(0) == "new-0"


# -- the memory store -----------------------------------------------------------------------------------------------


def _owner_of_everything() -> tuple[Harness, RoundsMember]:
    h = Harness()
    a = h.add("a")
    h.run(2.0)
    assert a.owned() == list(range(FAST.partitions))
    return h, a


def _lost(h: Harness) -> list[int]:
    return [p for kind, _, parts, _ in h.log.calls if kind == "lost" for p in parts]


@pytest.mark.parametrize(
    ("checkpoints", "epochs", "field"),
    [
        ({0: 7}, None, "checkpoint"),
        ({99: "x"}, None, "partition"),
        ({"3": "x"}, None, "partition"),
        ({True: "x"}, None, "partition"),
        ({0: "x"}, {1: 1}, "epochs"),
        ({0: "x"}, {0: True}, "epochs"),
        ({0: "x"}, {0: "1"}, "epochs"),
    ],
    ids=["checkpoint-not-str", "unknown", "str-id", "bool-id", "epoch-without-checkpoint", "bool-epoch", "str-epoch"],
)
def test_bad_input_is_invalid_request_and_writes_nothing(
    checkpoints: dict[object, object], epochs: dict[object, object] | None, field: str
) -> None:
    h, a = _owner_of_everything()
    before = h.store.revision()
    with pytest.raises(InvalidRequest, match=field):
        a.commit_many(checkpoints, epochs=epochs)  # type: ignore[arg-type]
    assert h.store.revision() == before and a.owned() == list(range(FAST.partitions))


def test_a_partition_not_owned_is_fenced_without_a_store_call_and_commit_still_raises() -> None:
    h = Harness()
    a, b = h.add("a"), h.add("b")
    h.run(3.0)
    mine, theirs = a.owned()[0], b.owned()[0]
    before = h.store.revision()
    result = a.commit_many({mine: "x", theirs: "y"})
    assert dict(result.fenced) == {theirs: None} and set(result.committed) == {mine}
    with pytest.raises(Fenced, match="not owned"):
        a.commit(theirs, "y")
    with pytest.raises(Fenced, match="no longer the owner's"):
        a.commit(mine, "z", epoch=a.lease(mine).epoch - 1)  # a stale epoch: refused here
    assert h.store.revision() == before + 1 and a.owned()  # the one commit; a stale epoch ends no belief


class FailingCommits(MemoryStore):
    """A memory store whose commit transactions fail (StoreUnavailable) after ``ok`` of them succeeded."""

    ok = 1_000_000

    def txn(self, compares: Sequence[Compare], on_success: Sequence[Op], on_failure: Sequence[Op] = ()) -> TxnResult:
        if any(isinstance(op, Put) and op.key.startswith(KEYS.commits) for op in on_success):
            if self.ok <= 0:
                raise StoreUnavailable("etcd unreachable: connection timed out")
            self.ok -= 1
        return super().txn(compares, on_success, on_failure)


def test_a_store_that_stops_answering_mid_batch_leaves_the_rest_failed_and_commit_raises() -> None:
    h = Harness()
    h.store = FailingCommits(h.store.url + "-failing", clock=h.clock)
    a = h.add("a")
    h.run(2.0)
    a.max_commit_partitions = 4
    h.store.ok = 1  # type: ignore[attr-defined]
    result = a.commit_many({p: "x" for p in range(12)})
    assert set(result.committed) == {0, 1, 2, 3}  # the first chunk
    assert set(result.failed) == set(range(4, 12)) and not result.fenced  # the rest not even sent
    assert "unreachable" in result.failed[4] and isinstance(result.error(4), StoreUnavailable)
    with pytest.raises(StoreUnavailable, match="unreachable"):
        a.commit(5, "y")
    assert a.owned() == list(range(12))  # no answer is no fence


FATES = st.sampled_from(["ours", "taken", "stale"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fates=st.lists(FATES, min_size=FAST.partitions, max_size=FAST.partitions), chunk=st.integers(1, 6))
def test_commit_many_commits_exactly_what_is_still_ours_whatever_the_mix(fates: list[str], chunk: int) -> None:
    """Each partition is committed iff its owner record is still (a, epoch); the others are fenced with the epoch
    given, the ones another member took end a's belief (on_lost), and nothing else is written."""
    h, a = _owner_of_everything()
    a.max_commit_partitions = chunk
    epochs = {p: a.lease(p).epoch for p in range(FAST.partitions)}
    taken = [p for p, fate in enumerate(fates) if fate == "taken"]
    if taken:
        take(h.store, taken, epochs)
    given_epochs = {p: epochs[p] - 1 if fate == "stale" else epochs[p] for p, fate in enumerate(fates)}
    result = a.commit_many({p: f"c{p}" for p in range(FAST.partitions)}, epochs=given_epochs)
    ours = {p for p, fate in enumerate(fates) if fate == "ours"}
    assert set(result.committed) == ours and not result.failed
    assert dict(result.fenced) == {p: given_epochs[p] for p in range(FAST.partitions) if p not in ours}
    assert committed(h.store, GROUP) == {p: f"c{p}" for p in ours}
    for sent in chunked(list(range(FAST.partitions)), [1] * FAST.partitions, count=chunk):  # one txn per chunk
        assert len({result.committed[p] for p in sent if p in ours}) <= 1
    h.run(0.05)
    assert _lost(h) == taken  # a stale epoch given ends no belief
    assert set(a.owned()) == set(range(FAST.partitions)) - set(taken)


def test_chunks_hold_at_most_the_partitions_and_bytes_of_one_transaction() -> None:
    assert chunked(list("abcdefg"), [1] * 7, count=3) == [["a", "b", "c"], ["d", "e", "f"], ["g"]]
    assert chunked(list("abcd"), [40, 40, 40, 10], count=10, budget=100) == [["a", "b"], ["c", "d"]]
    assert chunked(list("abc"), [10, 500, 10], count=10, budget=100) == [["a"], ["b"], ["c"]]  # alone when too big
    assert chunked([], [], count=3) == []
    assert CHUNK_PARTITIONS + 1 <= 128 and CHUNK_BYTES * 3 // 2 <= 1572864  # etcd's defaults, with margin


def test_commit_records_live_under_the_commit_root_not_the_group_prefix() -> None:
    h, a = _owner_of_everything()
    a.commit_many({p: "x" for p in range(FAST.partitions)})
    assert not [kv.key for kv in h.store.range(KEYS.prefix) if "commit" in kv.key]
    assert KEYS.commits == "/apportion/.commit/g/" and KEYS.commit(3) == "/apportion/.commit/g/3"
    assert sorted(kv.key for kv in h.store.range(KEYS.commits)) == sorted(KEYS.commit(p) for p in range(12))
