"""Where a group keeps its owner and epoch records (``apportion.group._keys``, "Ownership records"): layout 2 beside
the watched prefix for every new group, layout 1 under it for a group created before, kept as it was."""

from __future__ import annotations

from dataclasses import replace

import pytest

import apportion
from apportion.errors import CorruptRecord, NewerFormat
from apportion.group import GroupConfig, explain, group_status
from apportion.group._keys import LAYOUT
from apportion.group.internals import LEGACY_LAYOUT, Keys, decode, encode
from apportion.store import EventType
from apportion.store._types import KeyValue
from tests.group.harness import FAST, Harness


def test_a_new_group_claims_beside_the_prefix_and_members_watch_no_claim() -> None:
    h = Harness()
    keys = Keys("g")
    with h.store.watch(keys.prefix) as prefix_watch, h.store.watch(keys.owners, deletes_only=True) as freed:
        for mid in ("a", "b", "c"):
            h.add(mid)
        h.run(3.0)
        assert sorted(h.owners()) == list(range(12))
        seen = prefix_watch.poll()
        assert not [e for e in seen if "/owner/" in e.kv.key or "/epoch/" in e.kv.key]  # no claim reached it
        assert len(seen) < 60  # registrations, rounds and plans only (12 partitions claimed: 24 records elsewhere)
        assert freed.poll() == []  # nothing released yet: a waiting member's watch stayed silent through the claims
        h.frozen.add("c")  # c stops renewing: its lease ends, its owner records go
        h.run(6.0)
        deleted = freed.poll()
    assert deleted and all(e.type is EventType.DELETE and e.kv.key.startswith(keys.owners) for e in deleted)
    assert GroupConfig.from_record(h.store.get(keys.resource)).layout == LAYOUT  # type: ignore[arg-type]
    assert len(h.store.range(keys.owners)) == 12 and h.store.range(Keys("g", LEGACY_LAYOUT).owners) == []


def test_a_group_created_before_layouts_keeps_claiming_under_its_prefix_and_reads_the_same() -> None:
    h = Harness()
    legacy = Keys("g", LEGACY_LAYOUT)
    h.store.put(legacy.resource, encode(FAST.to_json()))  # the form every earlier version wrote
    h.store.put(legacy.epoch(3), b"7")  # an epoch handed out before the upgrade: the next claim of 3 is above it
    for mid in ("a", "b"):
        h.add(mid)
    h.run(3.0)
    assert sorted(h.owners()) == list(range(12))
    assert len(h.store.range(legacy.owners)) == 12 and h.store.range(Keys("g").ownership) == []
    status = group_status(h.store, "g")
    assert {info.owner for info in status.partitions.values()} == {"a", "b"}
    assert status.partitions["3"].epoch == 8
    with apportion.Router(h.store, "g", follow=False) as router:
        routes = [router.route(f"key-{i}") for i in range(50)]
    assert all(route.owner in ("a", "b") and route.epoch is not None for route in routes)
    assert explain(h.store, "g", 3).epoch == 8


def test_an_update_keeps_the_layout_the_group_was_created_with() -> None:
    h = Harness()
    legacy = Keys("g", LEGACY_LAYOUT)
    h.store.put(legacy.resource, encode(FAST.to_json()))
    h.add("a", config=replace(FAST, partitions=16), update=True)
    h.run(3.0)
    stored = GroupConfig.from_record(h.store.get(legacy.resource))  # type: ignore[arg-type]
    assert (stored.partitions, stored.layout) == (16, LEGACY_LAYOUT)
    assert len(h.store.range(legacy.owners)) == 16


def test_an_earlier_version_refuses_a_layout_2_group_rather_than_claim_where_nobody_looks() -> None:
    record = GroupConfig(partitions=4).record()
    kv = KeyValue("/apportion/g/resource", record, 1, 1, 1, 0)
    with pytest.raises(CorruptRecord, match="no 'partitions'"):
        GroupConfig.from_json(decode(record))  # what every earlier version's reading of the definition does
    assert GroupConfig.from_record(kv).layout == LAYOUT
    newer = KeyValue(kv.key, encode({"layout": 3, "definition": GroupConfig(partitions=4).to_json()}), 1, 1, 1, 0)
    with pytest.raises(NewerFormat, match="format 3, written by a newer apportion"):
        GroupConfig.from_record(newer)
