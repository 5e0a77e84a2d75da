"""StaticMember in virtual time: the range formula, single active consumer per ordinal, scaling, bad input."""

from __future__ import annotations

import pytest

from apportion.assign import range_block
from apportion.errors import InvalidRequest
from apportion.group import StaticMember, ordinal_from_hostname, set_replicas
from tests.group.modes_harness import ModeHarness


def test_three_ordinals_own_their_range_blocks_without_any_round() -> None:
    h = ModeHarness()
    for o in range(3):
        h.add_static(f"c-{o}", o, 3)
    h.run(0.5)
    assert h.assignment() == {f"c-{o}": list(range_block(o, 3, 12)) for o in range(3)}
    assert all(m.stable() for m in h.members.values())
    assert h.store.get("/apportion/g/current") is None  # no coordination round


def test_sizes_differ_by_at_most_one_for_uneven_counts() -> None:
    h = ModeHarness()
    for o in range(5):
        h.add_static(f"c-{o}", o, 5)
    h.run(0.5)
    sizes = sorted(len(p) for p in h.assignment().values())
    assert sizes == [2, 2, 2, 3, 3]
    assert sorted(h.owners()) == list(range(12))


def test_duplicate_ordinal_waits_and_takes_over_when_the_first_lease_expires() -> None:
    h = ModeHarness()
    h.add_static("old-0", 0, 2)
    h.add_static("c-1", 1, 2)
    h.run(0.5)
    h.add_static("new-0", 0, 2)
    h.run(2.0)
    assert h.assignment()["new-0"] == []  # the second one waits: never both process
    assert h.assignment()["old-0"] == list(range_block(0, 2, 12))
    h.crash("old-0")
    h.run(3.5)  # ttl 3 s: the store expires old-0's lease, new-0 claims
    assert h.assignment()["new-0"] == list(range_block(0, 2, 12))
    assert set(h.owners()) == set(range(12))


def test_scaling_releases_before_others_claim_and_no_partition_has_two_owners() -> None:
    h = ModeHarness()
    for o in range(3):
        h.add_static(f"c-{o}", o, 3)
    h.run(0.5)
    for o in (3, 4):
        h.add_static(f"c-{o}", o, 5)  # a newer configuration publishes replicas=5
    for _ in range(50):
        h.run(0.02)
        h.owners()  # asserts that no partition is believed by two members at once
    assert h.assignment() == {f"c-{o}": list(range_block(o, 5, 12)) for o in range(5)}
    for o in (2, 3, 4):
        h.members[f"c-{o}"].leave()
        del h.members[f"c-{o}"]
    set_replicas(h.store, "g", 2)
    h.run(0.5)
    assert h.assignment() == {f"c-{o}": list(range_block(o, 2, 12)) for o in range(2)}
    assert not [c for c in h.log.calls if c[0] == "lost"]


def test_an_ordinal_beyond_the_stored_replica_count_owns_nothing() -> None:
    h = ModeHarness()
    h.add_static("c-0", 0, 1)
    h.run(0.3)
    h.add_static("c-1", 1, 2)
    h.run(0.3)
    set_replicas(h.store, "g", 1)
    h.run(0.3)
    assert h.assignment() == {"c-0": list(range(12)), "c-1": []}


@pytest.mark.parametrize(("ordinal", "replicas"), [(3, 3), (-1, 3), (0, 0)])
def test_bad_ordinal_or_replicas_is_an_invalid_request(ordinal: int, replicas: int) -> None:
    h = ModeHarness()
    with pytest.raises(InvalidRequest):
        StaticMember(h.store, "g", "x", h.config, ordinal=ordinal, replicas=replicas, clock=h.clock)


def test_ordinal_comes_from_a_statefulset_host_name() -> None:
    assert ordinal_from_hostname("consumer-3") == 3
    assert ordinal_from_hostname("my-app-12") == 12
    for bad in ("consumer", "consumer-", "-3", "consumer-x"):
        with pytest.raises(InvalidRequest, match="hostname"):
            ordinal_from_hostname(bad)
