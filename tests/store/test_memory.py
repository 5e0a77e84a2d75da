"""Memory-only behaviour: virtual-clock leases and the bounded history (whole revisions are forgotten)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.clock import VirtualClock
from apportion.errors import Compacted, LeaseNotFound
from apportion.store import Delete, EventType, MemoryStore, Put

_SEGMENTS = st.sampled_from(["a", "ab", "b", "b1", "c"])
_KEYS = st.lists(_SEGMENTS, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))
_PREFIXES = st.one_of(st.just("/"), _KEYS, _KEYS.map(lambda key: key + "/"), _KEYS.map(lambda key: key[:-1] or "/"))


def test_lease_expiry_follows_the_virtual_clock() -> None:
    clock = VirtualClock()
    store = MemoryStore(clock=clock)
    lease = store.grant(5)
    store.put("/m/a", b"", lease)
    clock.advance(4.9)
    assert store.time_to_live(lease) == pytest.approx(0.1)
    store.keepalive(lease)
    clock.advance(4.9)
    assert store.get("/m/a") is not None
    clock.advance(0.2)
    with store.watch("/m/", 1) as watch:
        assert [(e.type, e.kv.key) for e in watch.poll()] == [(EventType.PUT, "/m/a"), (EventType.DELETE, "/m/a")]
    with pytest.raises(LeaseNotFound):
        store.keepalive(lease)


def test_bounded_history_forgets_whole_revisions_and_reports_compacted() -> None:
    store = MemoryStore(history=4)
    store.put("/h/a", b"1")  # revision 1
    store.txn([], [Put("/h/a", b"2"), Put("/h/b", b"2"), Put("/h/c", b"2")])  # revision 2: three events
    store.put("/h/a", b"3")  # revision 3: 5 events > 4, revision 1 is forgotten
    with pytest.raises(Compacted):
        store.watch("/h/", 1)
    with store.watch("/h/", 2) as watch:
        assert [(e.kv.key, e.revision) for e in watch.poll()] == [("/h/a", 2), ("/h/b", 2), ("/h/c", 2), ("/h/a", 3)]
    store.put("/h/a", b"4")  # revision 4: dropping one event of revision 2 forgets all of revision 2
    with pytest.raises(Compacted):
        store.watch("/h/", 2)
    with store.watch("/h/", 3) as watch:
        assert [(e.kv.key, e.revision) for e in watch.poll()] == [("/h/a", 3), ("/h/a", 4)]


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["put", "delete", "delete_prefix", "range"]), st.one_of(_KEYS, _PREFIXES)),
        max_size=40,
    )
)
def test_ranges_and_prefix_deletes_match_a_sorted_scan_of_every_key(steps: list[tuple[str, str]]) -> None:
    """The per-directory key index answers every prefix (at, inside and across directory boundaries) as a sorted
    scan of all keys would, after any mix of new keys, deletes and prefix deletes."""
    store = MemoryStore()
    model: set[str] = set()
    for action, key in steps:
        if action == "put" and not key.endswith("/") and key != "/":
            store.put(key, b"v")
            model.add(key)
        elif action == "delete" and not key.endswith("/") and key != "/":
            store.txn([], [Delete(key)])
            model.discard(key)
        elif action == "delete_prefix":
            store.txn([], [Delete(key, prefix=True)])
            model = {k for k in model if not k.startswith(key)}
        prefix = key if action == "range" else "/"
        assert [kv.key for kv in store.range(prefix)] == sorted(k for k in model if k.startswith(prefix))
        assert [kv.key for kv in store.range(prefix, limit=2)] == sorted(k for k in model if k.startswith(prefix))[:2]
