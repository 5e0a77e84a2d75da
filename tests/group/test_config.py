"""GroupConfig is the one source of a group's timing defaults, and the one reader of a group's definition by name."""

from __future__ import annotations

import dataclasses

import pytest

from apportion import Group, InvalidRequest
from apportion.errors import CorruptRecord
from apportion.group import GroupConfig, Keys, encode
from apportion.sim import SimConfig
from apportion.store import MemoryStore, Put, renew_interval_s
from apportion.store._etcd import EtcdStore

TIMINGS = ("settle_s", "min_interval_s", "heartbeat_s", "ttl_s")


def test_group_and_simulator_take_their_timing_defaults_from_group_config() -> None:
    config = GroupConfig(partitions=4)
    group = Group(MemoryStore(), "g", 4)
    sim = SimConfig()
    for name in TIMINGS:
        assert getattr(group.config, name) == getattr(config, name) == getattr(GroupConfig, f"DEFAULT_{name.upper()}")
        assert getattr(sim, name) == getattr(config, name)
    assert group.config.strategy == sim.strategy == GroupConfig.DEFAULT_STRATEGY


def test_load_reads_the_stored_definition_by_group_name() -> None:
    store = MemoryStore()
    store.txn([], [Put(Keys("g").resource, encode(GroupConfig(partitions=6, settle_s=0.25).to_json()))])
    loaded = GroupConfig.load(store, "g")
    assert loaded == GroupConfig.find(store, "g")
    assert (loaded.partitions, loaded.settle_s) == (6, 0.25)


def test_an_unknown_group_is_none_for_find_and_invalid_for_load() -> None:
    store = MemoryStore()
    assert GroupConfig.find(store, "nope") is None
    with pytest.raises(InvalidRequest, match="group 'nope' has no resource definition"):
        GroupConfig.load(store, "nope")


def test_a_corrupt_definition_is_corrupt_record_naming_the_key() -> None:
    store = MemoryStore()
    key = Keys("g").resource
    store.txn([], [Put(key, b"not json")])
    with pytest.raises(CorruptRecord, match=key):
        GroupConfig.load(store, "g")


def test_keepalive_cadence_is_a_quarter_ttl_and_etcd_caps_it() -> None:
    assert renew_interval_s(3.0) == MemoryStore().renew_every_s(3.0) == 0.75
    etcd = object.__new__(EtcdStore)  # renew_every_s reads no connection state
    assert etcd.renew_every_s(8.0) == EtcdStore.RENEW_EVERY_S
    assert etcd.renew_every_s(1.0) == renew_interval_s(1.0)


def test_defaults_are_class_constants_not_fields() -> None:
    assert {f.name for f in dataclasses.fields(GroupConfig)}.isdisjoint(n for n in vars(GroupConfig) if "DEFAULT" in n)
