"""GroupConfig is the one source of a group's timing defaults, and the one reader of a group's definition by name."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from apportion import Group, InvalidRequest
from apportion.errors import CorruptRecord
from apportion.group import Coordinator, GroupConfig, Mode, Rounds, Static
from apportion.group._mode import MAX_REPLICAS
from apportion.group.internals import Keys, encode
from apportion.sim import SimConfig
from apportion.store import MemoryStore, Put, renew_interval_s
from apportion.store._etcd import EtcdStore

TIMINGS = ("settle_s", "min_interval_s", "heartbeat_s", "ttl_s")


def test_group_and_simulator_take_their_timing_defaults_from_group_config() -> None:
    config = GroupConfig(partitions=4)
    group = Group(MemoryStore(), "g", 4)
    sim = SimConfig()
    for name in TIMINGS:
        default = getattr(GroupConfig, f"DEFAULT_{name.upper()}")
        assert getattr(group.requested, name) == getattr(config, name) == default
        assert getattr(sim, name) == getattr(config, name)
    assert group.requested.strategy == sim.strategy == GroupConfig.DEFAULT_STRATEGY


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


# -- the mode: a value stored with the definition ----------------------------------------------------------------


@pytest.mark.parametrize(
    "mode",
    [
        Rounds(), Coordinator(), Coordinator(min_members=2, rebalance="manual", max_in_flight=1),
        Coordinator(first_settle_s=2.5), Static(), Static(3),
    ],
)  # fmt: skip
def test_the_mode_is_stored_with_the_definition_and_read_back_whole(mode: Mode) -> None:
    config = GroupConfig(partitions=4, strategy=GroupConfig.default_strategy(mode), mode=mode)
    assert config.to_json()["mode"]["name"] == mode.name
    assert GroupConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Coordinator(min_members=0), "min_members: must be an integer >= 1"),
        (lambda: Coordinator(rebalance="sometimes"), "rebalance: 'sometimes' is not one of automatic, manual"),
        (lambda: Coordinator(max_in_flight=True), "max_in_flight: must be an integer >= 1"),
        (lambda: Coordinator(first_settle_s=0), "first_settle_s: must be a positive number of seconds"),
        (lambda: Coordinator(first_settle_s=float("nan")), "first_settle_s: must be a positive number of seconds"),
        (lambda: Static(0), "replicas: must be an integer >= 1"),
        (lambda: Static(MAX_REPLICAS + 1), "replicas: must be at most 1,000,000"),
        (lambda: GroupConfig(partitions=4, mode="static"), "mode: must be Rounds(), Coordinator(...) or Static(...)"),
    ],
)
def test_a_mode_is_validated_on_construction(make: Any, message: str) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(message)):
        make()


def test_each_modes_defaults_are_written_once() -> None:
    assert Coordinator() == Coordinator(
        Coordinator.DEFAULT_MIN_MEMBERS, Coordinator.DEFAULT_REBALANCE, Coordinator.DEFAULT_MAX_IN_FLIGHT
    )
    assert SimConfig().max_in_flight == Coordinator.DEFAULT_MAX_IN_FLIGHT
    # the first table's settle (issue 45.2): 10 s, RST with a declared minimum, the option when given
    assert Coordinator().first_table_settle_s(0.5) == Coordinator.DEFAULT_FIRST_SETTLE_S == 10.0
    assert Coordinator(min_members=3).first_table_settle_s(0.5) == 0.5
    assert Coordinator(min_members=3, first_settle_s=4.0).first_table_settle_s(0.5) == 4.0
    assert GroupConfig.default_strategy(Coordinator()) == "round_robin" == GroupConfig.default_strategy("coordinator")
    assert GroupConfig(partitions=1).mode == Rounds()


def test_a_definition_stored_before_modes_were_reads_as_not_recorded_not_as_rounds() -> None:
    """A static or coordinator group created by an older version has no mode either: reading it as rounds would
    refuse its own members after an upgrade (``_config``'s docstring)."""
    old = {"partitions": 4, "strategy": "sticky", "settle_s": 0.5, "min_interval_s": 1.0, "heartbeat_s": 30.0,
           "ttl_s": 3.0, "options": {}, "stateful": False}  # fmt: skip
    config = GroupConfig.from_json(old)
    assert config.mode is None and config.mode_name is None
    assert config.to_json() == old  # written back as it was
    GroupConfig(partitions=4, mode=Static()).check_join(config, "g")  # any mode may join it (and records its own)


@pytest.mark.parametrize(
    "mode",
    [{"name": "paxos"}, "rounds", {"name": "coordinator", "max_in_flight": 0}, {"name": "static", "replicas": -1}],
)
def test_a_corrupt_stored_mode_is_corrupt_record_naming_the_key(mode: object) -> None:
    record = {**GroupConfig(partitions=4).to_json(), "mode": mode}
    with pytest.raises(CorruptRecord, match="/apportion/g/resource"):
        GroupConfig.from_json(record, "/apportion/g/resource")


def test_requested_and_effective_differ_as_the_docstring_says() -> None:
    """Another mode: refused even with update; other partitions: refused without update; anything else (timings,
    strategy, the mode's settings): the stored definition is the effective one."""
    stored = GroupConfig(partitions=4, mode=Coordinator(max_in_flight=8))
    with pytest.raises(InvalidRequest, match="group 'g' is a coordinator group; this worker asked for --mode rounds"):
        GroupConfig(partitions=4).check_join(stored, "g", update=True)
    with pytest.raises(InvalidRequest, match="group 'g' has 4 partitions; this worker asked for 8 partitions"):
        GroupConfig(partitions=8, mode=Coordinator()).check_join(stored, "g")
    GroupConfig(partitions=8, mode=Coordinator()).check_join(stored, "g", update=True)
    GroupConfig(partitions=8, mode=Coordinator()).check_join(stored, "g", partitions=False)  # read, not given
    GroupConfig(partitions=4, ttl_s=9.0, strategy="range", mode=Coordinator()).check_join(stored, "g")


def test_a_worker_follows_the_effective_ttl_not_the_requested_one() -> None:
    """The keepalive's interval comes from the stored definition's ttl (the lease's), not from what was asked."""
    store = MemoryStore()
    store.put(Keys("g").resource, encode(GroupConfig(partitions=2, ttl_s=8.0).to_json()))
    group = Group(store, "g", 2, ttl_s=2.0)
    assert group.requested.ttl_s == 2.0
    with group.join("w1") as worker:
        assert worker.wait_until_stable(10)
        assert worker.effective.ttl_s == 8.0 and worker.member.store_lease is not None
        assert worker.member.store_lease.ttl_s == 8.0
