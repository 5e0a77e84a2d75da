"""The scale verdict (``bench/scale_probe.py``): owned by live members, within floor/ceil of each one's share, and
applied — a claim its owner has not applied is not owned."""

from __future__ import annotations

from bench.scale_probe import judge, quotas

EQUAL = {"a": 1.0, "b": 1.0}


def test_an_evenly_owned_and_applied_group_is_converged() -> None:
    owners = {0: "a", 1: "a", 2: "b"}
    verdict = judge(owners, range(3), EQUAL, {"a": {0, 1}, "b": {2}})
    assert verdict.ok and verdict.all_owned, verdict.summary()


def test_a_claimed_partition_its_owner_has_not_applied_is_not_owned() -> None:
    verdict = judge({0: "a", 1: "a", 2: "b"}, range(3), EQUAL, {"a": {0}, "b": {2}})
    assert not verdict.ok and verdict.all_owned and verdict.unapplied == 1 and verdict.laggards == ["a"]
    assert "1 claimed not applied (a 1)" in verdict.summary()


def test_a_partition_applied_by_a_member_the_store_does_not_name_is_a_stray() -> None:
    verdict = judge({0: "a", 1: "a", 2: "b"}, range(3), EQUAL, {"a": {0, 1}, "b": {2, 1}})
    assert not verdict.ok and verdict.stray == 1


def test_unowned_and_dead_owners_partitions_are_not_owned() -> None:
    verdict = judge({0: "a", 1: "dead"}, range(4), EQUAL, {"a": {0}, "b": set()})
    assert (verdict.unowned, verdict.foreign, verdict.all_owned, verdict.ok) == (2, 1, False, False)


def test_a_member_outside_floor_ceil_of_its_share_is_unbalanced() -> None:
    owners = {p: "a" for p in range(3)} | {3: "b"}
    verdict = judge(owners, range(4), EQUAL, {"a": {0, 1, 2}, "b": {3}})
    assert not verdict.ok and verdict.outside_quota == ["a", "b"]
    assert "0 claimed not applied" in verdict.summary()


def test_quotas_are_floor_and_ceil_of_the_capacity_share() -> None:
    assert quotas(10, {"a": 1.0, "b": 1.0, "c": 1.0}) == {"a": (3, 4), "b": (3, 4), "c": (3, 4)}
    assert quotas(9, {"a": 2.0, "b": 1.0}) == {"a": (6, 6), "b": (3, 3)}


def test_a_record_that_outlives_its_owners_registration_is_lapsing_not_owned() -> None:
    verdict = judge({0: "a", 1: "a"}, range(3), EQUAL, {"a": {0, 1}, "b": set()}, lapsing={2: "b"})
    assert (verdict.lapsing, verdict.all_owned, verdict.ok) == (1, False, False)
    assert "1 lapsing" in verdict.summary()
