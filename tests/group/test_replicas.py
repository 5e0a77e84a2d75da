"""Standby and learner replicas in the rounds protocol (seed 2 on seed 0), on the memory store in virtual time."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from apportion.errors import InvalidRequest
from apportion.group import Coordinator, GroupConfig
from tests.group.harness import Harness

HA = GroupConfig(
    partitions=12,
    strategy="high_availability",
    settle_s=0.5,
    min_interval_s=1.0,
    heartbeat_s=30.0,
    ttl_s=3.0,
    stateful=True,
    options={"max_warmup_replicas": 2, "acceptable_recovery_lag": 10, "probing_rebalance_interval_s": 5.0},
)


class Replicas:
    """What one member's pipeline would know: the replicas it was given and how far behind each one is."""

    def __init__(self) -> None:
        self.standby: list[int] = []
        self.learners: list[int] = []
        self.lag: dict[int, int] = {}
        self.calls = 0

    def on_replicas(self, standby: list[int], learners: list[int]) -> None:
        self.calls += 1
        self.standby, self.learners = standby, learners
        for p in standby + learners:
            self.lag.setdefault(p, 1_000)  # a fresh replica starts far behind

    def lags(self) -> dict[int, int]:
        return {p: self.lag[p] for p in self.standby + self.learners}

    def catch_up(self) -> None:
        for p in self.lag:
            self.lag[p] = 0


def ha_group(members: int) -> tuple[Harness, dict[str, Replicas]]:
    h = Harness(HA)
    replicas = {}
    for i in range(members):
        r = replicas[f"m{i}"] = Replicas()
        h.add(f"m{i}", replica_lags=r.lags, on_replicas=r.on_replicas)
    return h, replicas


def test_a_newcomer_first_warms_learners_and_gets_actives_only_once_they_are_ready() -> None:
    h, replicas = ha_group(3)
    h.run(3)
    before = h.owners()
    assert sorted(before) == list(range(12)) and {len(v) for v in h.assignment().values()} == {4}

    r = replicas["m3"] = Replicas()
    h.add("m3", replica_lags=r.lags, on_replicas=r.on_replicas)
    h.run(3)
    # the newcomer learns (at most max_warmup_replicas) and owns nothing yet: no active moved to a cold member
    assert len(r.learners) == 2 and h.assignment().get("m3", []) == []
    assert h.owners() == before
    # probing rounds (every probing_rebalance_interval_s) while the learners lag do not move anything
    first = h.members["m0"].round
    h.run(6)
    assert h.members["m0"].round > first, "a probing round should have run"
    assert h.owners() == before and len(r.learners) == 2

    # learners catch up: each probing round moves the actives whose learners are ready, two at a time
    rounds_needed = math.ceil(3 / 2)
    for _ in range(rounds_needed + 1):
        r.catch_up()
        h.run(6)
    counts = {m: len(parts) for m, parts in h.assignment().items()}
    assert counts == {"m0": 3, "m1": 3, "m2": 3, "m3": 3}
    assert r.learners == [] and sorted(h.owners()) == list(range(12))
    # every move into m3 went to a partition m3 had learned: m3 never got an active it had not warmed up
    got = [parts for kind, mid, parts, _ in h.log.calls if kind == "assigned" and mid == "m3"]
    assert sum(len(parts) for parts in got) == 3


def test_standbys_are_kept_on_other_members_and_reported_with_their_lag() -> None:
    config = replace(HA, options={"num_standby_replicas": 1, "max_warmup_replicas": 2})
    h = Harness(config)
    replicas = {}
    for i in range(3):
        r = replicas[f"m{i}"] = Replicas()
        h.add(f"m{i}", replica_lags=r.lags, on_replicas=r.on_replicas)
    h.run(3)
    owners = h.owners()
    standby_of = {p: m for m, r in replicas.items() for p in r.standby}
    assert sorted(standby_of) == list(range(12))  # one standby per stateful partition
    assert all(standby_of[p] != owners[p] for p in range(12))  # never on the active's member

    # the standby holder of a crashed member's partitions is ready: it takes them over
    for r in replicas.values():
        r.catch_up()
    victim = "m0"
    lost = [p for p, m in owners.items() if m == victim]
    h.frozen.add(victim)
    h.members.pop(victim)
    h.run(8)
    after = h.owners()
    assert sorted(after) == list(range(12)) and victim not in after.values()
    assert all(after[p] == standby_of[p] for p in lost)


def test_replicas_are_refused_outside_the_rounds_mode() -> None:
    from apportion.store import MemoryStore
    from apportion.worker import Group

    with MemoryStore("memory://replicas-modes") as store:
        group = Group(store, "g", 4, mode=Coordinator())
        with pytest.raises(InvalidRequest, match="rounds mode"):
            group.join("w", replica_lags=dict)


def test_stateful_must_be_a_boolean() -> None:
    with pytest.raises(InvalidRequest, match="stateful"):
        GroupConfig(partitions=3, stateful="yes")  # type: ignore[arg-type]


def test_status_shows_learners_and_standbys_with_their_reported_lag() -> None:
    from rich.console import Console

    from apportion.cli._status import render
    from apportion.group import group_status

    config = replace(HA, options={**HA.options, "num_standby_replicas": 1})
    h = Harness(config)
    replicas = {}
    for i in range(4):
        r = replicas[f"m{i}"] = Replicas()
        h.add(f"m{i}", replica_lags=r.lags, on_replicas=r.on_replicas)
        if i == 2:
            h.run(3)
    h.run(7)  # the newcomer m3 gets learners, then a probing round records their lags
    status = group_status(h.store, "g")
    learning = {p: info.learners for p, info in status.partitions.items() if info.learners}
    assert learning and all(holders == {"m3": 1_000} for holders in learning.values()), learning
    standby = {p: info.standby for p, info in status.partitions.items()}
    assert all(len(holders) == 1 for holders in standby.values())  # one standby per partition, lag reported
    console = Console(record=True, width=200)
    console.print(render("g", status))
    text = console.export_text()
    assert "learners (lag)" in text and "m3 (1,000)" in text
