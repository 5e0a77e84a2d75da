"""The group's history: retention by time (not a per-member count), pruning by any member, disabled with 0."""

from __future__ import annotations

import json

import pytest

from apportion.errors import InvalidRequest
from apportion.group import EVENT_TYPES, HistoryType, RoundsMember, history, history_expired_before
from apportion.group._history import BUCKET_S, HISTORY_FORMAT, Recorder, prune
from apportion.group.internals import Keys
from apportion.store import MemoryStore
from tests.group.harness import Harness


def _settled(h: Harness, *ids: str, **options: object) -> list[RoundsMember]:
    members = [h.add(mid, **options) for mid in ids]
    h.run(4.0)
    assert all(m.owned() for m in members), h.assignment()
    return members


def _event_keys(store: MemoryStore, group: str) -> list[str]:
    return [kv.key for kv in store.range(Keys(group).events)]


def test_events_beyond_the_former_per_member_count_are_kept_within_the_retention() -> None:
    h = Harness()
    (a,) = _settled(h, "a")  # default retention: one hour
    p = a.owned()[0]
    revisions = []
    for i in range(1500):  # more than the 1,000 events per member the history used to keep
        revisions.append(a.commit(p, str(i)))
        h.run(0.02)
    commits = [(e["revision"], e["partition"]) for e in history(h.store, h.group) if e["type"] == "commit"]
    assert commits == [(revision, p) for revision in revisions]
    assert history(h.store, h.group)[0]["type"] == "registered"  # the whole run, from its first event
    assert history_expired_before(h.store, h.group) is None


def test_events_older_than_the_retention_are_removed_also_those_of_departed_members() -> None:
    h = Harness()
    a, gone = _settled(h, "a", "gone", history_retention_s=600.0)
    gone.leave()
    del h.members["gone"]
    start = h.clock.now()
    early = a.commit(a.owned()[0], "early")
    h.run(700.0, tick=0.5)  # a steps (and prunes) all along; heartbeat rounds keep recording
    now = h.clock.now()
    late = a.commit(a.owned()[0], "late")
    h.run(1.0)
    events = history(h.store, h.group)
    assert min(e["time"] for e in events) >= now - 600.0 - 2 * BUCKET_S
    assert "gone" not in {e["member"] for e in events}  # pruned by a: nobody else is left to do it
    commits = {e["revision"] for e in events if e["type"] == "commit"}
    assert late in commits and early not in commits
    expired = history_expired_before(h.store, h.group)
    assert expired is not None and start < expired <= now - 600.0


def test_the_history_lives_outside_the_watched_group_prefix() -> None:
    h = Harness()
    _settled(h, "a")
    assert _event_keys(h.store, h.group)
    assert not [kv.key for kv in h.store.range(Keys(h.group).prefix) if "events" in kv.key]


def test_zero_retention_records_nothing() -> None:
    h = Harness()
    (a,) = _settled(h, "a", history_retention_s=0.0)
    a.commit(a.owned()[0], "x")
    assert history(h.store, h.group) == []
    assert _event_keys(h.store, h.group) == []


def test_a_negative_retention_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="history_retention_s"):
        Recorder(Keys("g"), "a", -1.0)


def test_the_expiry_mark_only_grows_whoever_prunes_later() -> None:
    store = MemoryStore("memory://history-mark")
    keys = Keys("g")
    recorder = Recorder(keys, "a", 60.0)
    for t in (0.0, 60.0, 120.0, 180.0):
        store.txn([], recorder.put("commit", t))
    assert prune(store, keys, 150.0) == 2  # buckets [0, 60) and [60, 120) ended before 150
    assert history_expired_before(store, "g") == 120.0
    assert prune(store, keys, 100.0) == 0  # a pruner with an older cutoff changes nothing
    assert history_expired_before(store, "g") == 120.0
    assert [e["time"] for e in history(store, "g")] == [120.0, 180.0]


def test_history_types_are_the_stored_words_and_record_the_same_bytes() -> None:
    """``HistoryType`` types the stored ``type`` without changing a byte (histories in users' stores stay readable)."""
    words = (
        "registered", "left", "round_opened", "round_joined", "round_closed", "claim", "release", "commit", "fenced",
        "lost", "migrated",
    )  # fmt: skip
    assert HISTORY_FORMAT == 1
    assert tuple(t.value for t in HistoryType) == words and words == EVENT_TYPES
    for kind in HistoryType:
        typed = Recorder(Keys("g"), "a", 60.0).put(kind, 12.5, partitions=["orders-1"], epochs=[3])
        plain = Recorder(Keys("g"), "a", 60.0).put(kind.value, 12.5, partitions=["orders-1"], epochs=[3])
        assert [(p.key, p.value) for p in typed] == [(p.key, p.value) for p in plain]
        assert json.loads(typed[0].value)["type"] == kind.value
