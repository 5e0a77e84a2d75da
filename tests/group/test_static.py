"""StaticMember in virtual time: the range formula, single active consumer per ordinal, scaling (the replica count
as one live value of the group), a crashed ordinal, bad input."""

from __future__ import annotations

from dataclasses import replace

import pytest

from apportion.assign import range_block
from apportion.errors import InvalidRequest
from apportion.group import Static, StaticMember, group_status, set_replicas, stored_replicas
from apportion.group._mode import MAX_REPLICAS
from apportion.group.internals import ordinal_from_hostname
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


@pytest.mark.parametrize(
    ("ordinal", "replicas"), [(-1, 3), (0, 0), (True, 3), (0, 2.5), (10**20, 3), (0, 10**20), (MAX_REPLICAS, None)]
)
def test_bad_ordinal_or_replicas_is_an_invalid_request(ordinal: int, replicas: int) -> None:
    h = ModeHarness()
    with pytest.raises(InvalidRequest):
        StaticMember(h.store, "g", "x", replace(h.config, mode=Static(replicas)), ordinal=ordinal, clock=h.clock)


def test_a_static_member_needs_a_static_definition() -> None:
    h = ModeHarness()
    with pytest.raises(InvalidRequest, match="a static member needs Static"):
        StaticMember(h.store, "g", "x", h.config, ordinal=0, clock=h.clock)


def test_ordinal_comes_from_a_statefulset_host_name() -> None:
    assert ordinal_from_hostname("consumer-3") == 3
    assert ordinal_from_hostname("my-app-12") == 12
    for bad in ("consumer", "consumer-", "-3", "consumer-x"):
        with pytest.raises(InvalidRequest, match="hostname"):
            ordinal_from_hostname(bad)
    for huge in ("consumer-1000000", "consumer-" + "9" * 5000):  # no 5,000-digit int is even made
        with pytest.raises(InvalidRequest, match="ordinal: must be at most 999,999"):
            ordinal_from_hostname(huge)


def three_ordinals() -> ModeHarness:
    """c-0, c-1, c-2 (ordinals 0..2, --replicas 3) holding their range blocks of 12."""
    h = ModeHarness()
    for o in range(3):
        h.add_static(f"c-{o}", o, 3)
    h.run(0.5)
    return h


def blocks(replicas: int, ordinals: range | list[int] | None = None) -> dict[str, list[int]]:
    return {f"c-{o}": list(range_block(o, replicas, 12)) for o in ordinals or range(replicas)}


def test_a_new_pod_whose_ordinal_is_at_the_count_raises_it_instead_of_failing() -> None:
    """kubectl scale 3 -> 4: the pod template still says --replicas 3, the new pod c-3 is the evidence."""
    h = three_ordinals()
    h.add_static("c-3", 3, 3)
    for _ in range(50):
        h.run(0.02)
        h.owners()  # asserts that no partition is believed by two members at once
    assert stored_replicas(h.store, "g") == 4
    assert h.assignment() == blocks(4)
    assert not [c for c in h.log.calls if c[0] == "lost"]


def test_the_stored_count_is_the_truth_a_restarted_pod_s_replicas_option_does_not_undo_a_scale() -> None:
    h = three_ordinals()
    set_replicas(h.store, "g", 2)  # apportion scale --replicas 2
    h.run(0.5)
    h.members.pop("c-2").leave()  # kubectl terminates the highest ordinal
    h.members.pop("c-0").leave()  # a rolling restart of c-0, with the old template (--replicas 3)
    h.add_static("c-0", 0, 3)
    h.run(0.5)
    assert stored_replicas(h.store, "g") == 2
    assert h.assignment() == blocks(2)


def test_scaling_down_revokes_the_leaving_ordinal_before_the_remaining_ones_claim() -> None:
    h = three_ordinals()
    h.log.calls.clear()
    set_replicas(h.store, "g", 2)  # c-2 still runs: kubectl has not terminated it yet
    for _ in range(50):
        h.run(0.02)
        h.owners()
    assert h.assignment() == {**blocks(2), "c-2": []}
    revoked = {p: t for kind, mid, parts, t in h.log.calls if kind == "revoked" and mid == "c-2" for p in parts}
    assert sorted(revoked) == list(range_block(2, 3, 12))
    for kind, _mid, parts, t in h.log.calls:
        if kind == "assigned":
            assert all(t >= revoked[p] for p in parts if p in revoked), "a claim before the leaving ordinal's revoke"
    assert not [c for c in h.log.calls if c[0] == "lost"]
    h.frozen.add("c-2")  # c-2 holds nothing; a lapse and a new registration must not raise the count back
    h.run(3.5)  # its lease expires; it registers again once it runs
    h.frozen.discard("c-2")
    h.run(0.5)
    assert stored_replicas(h.store, "g") == 2 and h.assignment() == {**blocks(2), "c-2": []}


def test_a_crashed_ordinal_keeps_its_partitions_unowned_and_status_says_it_waits_for_it() -> None:
    h = three_ordinals()
    h.crash("c-2")
    h.run(3.5)  # its lease expires
    block = list(range_block(2, 3, 12))
    assert h.assignment() == blocks(3, [0, 1]), "a StatefulSet keeps an ordinal's partitions for its pod"
    parts = group_status(h.store, "g").partitions
    assert {int(p) for p, info in parts.items() if info.waiting_for == 2} == set(block)
    assert all(info.waiting_for is None for p, info in parts.items() if int(p) not in block)
    h.add_static("c-2", 2, 3)  # the pod returns
    h.run(0.5)
    assert h.assignment() == blocks(3)
    assert all(info.waiting_for is None for info in group_status(h.store, "g").partitions.values())


def test_a_crashed_ordinal_s_partitions_go_to_the_others_when_the_count_drops() -> None:
    h = three_ordinals()
    h.crash("c-2")
    set_replicas(h.store, "g", 2)
    for _ in range(200):
        h.run(0.02)
        h.owners()
    assert h.assignment() == blocks(2)  # claimed once c-2's lease expired: compare-absent, never two owners
