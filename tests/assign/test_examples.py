"""Worked examples of the seeds and scenarios of Kafka's AbstractStickyAssignorTest (facts, re-stated)."""

from __future__ import annotations

import pytest

from apportion.assign import STRATEGY_NAMES, min_moves, plan, range_block, stable_hash
from apportion.errors import InvalidRequest
from apportion.model import Member, Move, Partition, Resource

from .helpers import names, parts, planned, previous, request


def test_sticky_reproduces_kafka_12464_worked_example() -> None:
    members = [
        Member("C0", owned=parts("t1-0 t1-1 t1-2 t1-3 t1-4")),
        Member("C1", owned=parts("t1-5 t1-6 t1-7 t1-8 t1-9")),
        Member("C2"),
    ]
    result = planned(request("sticky", {"t1": 10}, members))
    assert names(result, "C0") == ["t1-0", "t1-1", "t1-2", "t1-3"]
    assert names(result, "C1") == ["t1-5", "t1-6", "t1-7"]
    assert names(result, "C2") == ["t1-4", "t1-8", "t1-9"]
    assert result.moves == (
        Move(Partition("t1", 4), "C0", "C2"),
        Move(Partition("t1", 8), "C1", "C2"),
        Move(Partition("t1", 9), "C1", "C2"),
    )
    assert result.stats.moved == result.stats.min_moves == 3


def test_sticky_deals_free_partitions_interleaved_across_topics_as_the_seed() -> None:
    """Seed 4 sorts the unassigned partitions t0-0, t1-0, t0-1, t1-1, ... "for data parallelism"."""
    result = planned(request("sticky", {"t0": 3, "t1": 3}, [Member("C0"), Member("C1")]))
    assert names(result, "C0") == ["t0-0", "t0-1", "t1-0"]
    assert names(result, "C1") == ["t0-2", "t1-1", "t1-2"]


def test_sticky_general_path_spreads_each_topic_over_its_subscribers() -> None:
    members = [Member("C0"), Member("C1", frozenset({"t0", "t1"}))]
    result = planned(request("sticky", {"t0": 3, "t1": 3, "t2": 1}, members))
    for member in ("C0", "C1"):
        assert {p.resource for p in result.assignment[member]} >= {"t0", "t1"}


def test_weighted_gives_exact_shares_of_seed_2() -> None:
    members = [Member(m, capacity=c) for m, c in zip("abcd", (5, 10, 10, 15), strict=True)]
    result = planned(request("weighted", {"tasks": 80}, members))
    assert [len(result.assignment[m]) for m in "abcd"] == [10, 20, 20, 30]


def test_weighted_keeps_an_assignment_within_tolerance_of_seed_2() -> None:
    counts = (12, 18, 23, 27)
    start = 0
    members = []
    for m, c, n in zip("abcd", (5, 10, 10, 15), counts, strict=True):
        members.append(
            Member(m, capacity=c, owned=tuple(Partition("tasks", i) for i in range(start, start + n)), generation=1)
        )
        start += n
    result = planned(request("weighted", {"tasks": 80}, members, tolerance=0.2))
    assert [len(result.assignment[m]) for m in "abcd"] == list(counts)
    assert result.moves == () and result.stats.min_moves == 0


def test_weighted_with_zero_tolerance_rebalances_that_assignment_with_least_moves() -> None:
    counts = (12, 18, 23, 27)
    start = 0
    members = []
    for m, c, n in zip("abcd", (5, 10, 10, 15), counts, strict=True):
        members.append(
            Member(m, capacity=c, owned=tuple(Partition("tasks", i) for i in range(start, start + n)), generation=1)
        )
        start += n
    result = planned(request("weighted", {"tasks": 80}, members))
    assert [len(result.assignment[m]) for m in "abcd"] == [10, 20, 20, 30]
    assert result.stats.moved == 5  # a gives 2, c gives 3; b takes 2, d takes 3


def test_weighted_balances_per_partition_weights() -> None:
    req = request("weighted", {}, [Member("a"), Member("b", capacity=3)])
    req = type(req)("weighted", (Resource("t", 8, weights=(4, 1, 1, 1, 1, 1, 1, 2)),), req.members)
    result = planned(req)
    load = {m: sum(req.resources[0].weight(p.index) for p in ps) for m, ps in result.assignment.items()}
    assert load == {"a": 3, "b": 9}


def test_weighted_keeps_a_big_member_inside_its_band_when_partitions_are_heavy() -> None:
    """Found by hypothesis: three partitions of weight 3, capacities 1, 1, 1, 4. The big member's relative load stays
    the lowest while it takes all three (9 > its band's top 9 x 4/7 + 3); it must take two and leave one."""
    members = [Member("m0"), Member("m1"), Member("m2"), Member("m3", capacity=4)]
    req = request("weighted", {}, members, tolerance=0)
    req = type(req)("weighted", (Resource("t", 3, weights=(3, 3, 3)),), req.members, req.options)
    result = planned(req)
    assert len(result.assignment["m3"]) == 2


def test_range_blocks_differ_by_at_most_one_unlike_the_seed() -> None:
    assert [list(range_block(k, 3, 10)) for k in range(3)] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    result = planned(request("range", {"q": 10}, [Member("pod-0"), Member("pod-1"), Member("pod-2")]))
    assert names(result, "pod-2") == ["q-7", "q-8", "q-9"]


def test_round_robin_is_seed_1_partition_table() -> None:
    result = planned(request("round_robin", {"p": 7}, [Member("n1"), Member("n2"), Member("n3")]))
    assert names(result, "n1") == ["p-0", "p-3", "p-6"]
    assert names(result, "n2") == ["p-1", "p-4"]


def test_round_robin_deals_in_join_order_when_every_member_has_a_join_revision() -> None:
    """Seed 0: the lowest versionstamp is participant 1 (n3 joined first, n1 last)."""
    joined = [Member("n1", join_revision=30), Member("n2", join_revision=20), Member("n3", join_revision=10)]
    result = planned(request("round_robin", {"p": 7}, joined))
    assert names(result, "n3") == ["p-0", "p-3", "p-6"]
    assert names(result, "n2") == ["p-1", "p-4"]
    assert names(result, "n1") == ["p-2", "p-5"]


def test_round_robin_refuses_join_revisions_for_some_members_only() -> None:
    with pytest.raises(InvalidRequest, match=r"members\.n2\.join_revision"):
        plan(request("round_robin", {"p": 3}, [Member("n1", join_revision=1), Member("n2")]))


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_zero_members_give_an_empty_assignment(strategy: str) -> None:
    result = planned(request(strategy, {"t": 5}, []))
    assert dict(result.assignment) == {} and result.moves == ()


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_more_members_than_partitions_leaves_some_without(strategy: str) -> None:
    result = planned(request(strategy, {"t": 2}, [Member(f"m{i}") for i in range(5)]))
    assert sorted(len(ps) for ps in result.assignment.values()) == [0, 0, 0, 1, 1]


def test_stable_hash_is_blake2b_64_big_endian() -> None:
    assert stable_hash("") == 0x1271CF25_1D06_A8C4 or stable_hash("") == int.from_bytes(
        __import__("hashlib").blake2b(b"", digest_size=8).digest(), "big"
    )
    assert stable_hash("m1\0t-3") == int.from_bytes(
        __import__("hashlib").blake2b(b"m1\0t-3", digest_size=8).digest(), "big"
    )


def test_unknown_strategy_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest, match="strategy"):
        plan(request("nope", {"t": 1}, []))


# --- Kafka AbstractStickyAssignorTest scenarios ------------------------------------------------------------------


def test_one_member_without_resources_gets_nothing() -> None:
    result = planned(request("sticky", {"t": 0}, [Member("c", subscriptions=frozenset())]))
    assert result.assignment["c"] == ()


def test_one_member_gets_every_partition_of_its_resources() -> None:
    result = planned(request("sticky", {"t1": 1, "t2": 2}, [Member("c")]))
    assert names(result, "c") == ["t1-0", "t2-0", "t2-1"]


def test_owned_partitions_of_unsubscribed_or_unknown_resources_are_ignored() -> None:
    owned = parts("topic-0 topic-1 other-0 other-1")
    result = planned(request("sticky", {"topic": 2}, [Member("c", owned=owned, generation=1)]))
    assert names(result, "c") == ["topic-0", "topic-1"] and result.stats.moved == 0


def test_two_members_one_partition_one_gets_it() -> None:
    result = planned(request("sticky", {"t": 1}, [Member("c1"), Member("c2")]))
    assert sorted(len(p) for p in result.assignment.values()) == [0, 1]


def test_mixed_subscriptions_match_kafka() -> None:
    members = [Member("c1", frozenset({"t1"})), Member("c2", frozenset({"t1", "t2"})), Member("c3", frozenset({"t1"}))]
    result = planned(request("sticky", {"t1": 3, "t2": 2}, members))
    assert names(result, "c1") == ["t1-0", "t1-2"]
    assert names(result, "c2") == ["t2-0", "t2-1"]
    assert names(result, "c3") == ["t1-1"]


def test_member_owning_min_quota_expected_max_quota_moves_nothing() -> None:
    members = [
        Member("c1", owned=parts("t1-0 t2-1"), generation=1),
        Member("c2", owned=parts("t1-1 t2-2"), generation=1),
    ]
    result = planned(request("sticky", {"t1": 2, "t2": 3}, members))
    assert result.stats.moved == 0 and [m.source for m in result.moves] == [None]


def test_more_members_at_max_quota_than_allowed_moves_one() -> None:
    members = [
        Member("c1", owned=parts("t1-0 t2-0"), generation=1),
        Member("c2", owned=parts("t1-1 t2-1"), generation=1),
        Member("c3", generation=1),
    ]
    result = planned(request("sticky", {"t1": 2, "t2": 2}, members))
    assert result.stats.moved == 1 and len(result.assignment["c3"]) == 1


def test_joining_then_leaving_member_moves_only_what_it_must() -> None:
    first = planned(request("sticky", {"t": 3}, [Member("c1")]))
    joined = planned(request("sticky", {"t": 3}, [*previous(first), Member("c2")]))
    assert joined.stats.moved == 1
    left = planned(request("sticky", {"t": 3}, [m for m in previous(joined, 2) if m.id == "c2"]))
    assert set(joined.assignment["c2"]) <= set(left.assignment["c2"]) and left.stats.moved == 0


def test_conflicting_claims_in_one_generation_go_to_the_smallest_id() -> None:
    members = [Member("c2", owned=parts("t-0 t-1"), generation=1), Member("c1", owned=parts("t-0"), generation=1)]
    result = planned(request("sticky", {"t": 3}, members))
    assert names(result, "c1")[0] == "t-0"
    assert [(str(m.partition), m.source) for m in result.moves if m.source] == []


def test_owned_partitions_of_a_stale_generation_are_dropped() -> None:
    members = [Member("c1", owned=parts("t-0 t-1"), generation=2), Member("c2", owned=parts("t-0 t-2"), generation=1)]
    result = planned(request("sticky", {"t": 4}, members))
    assert names(result, "c1") == ["t-0", "t-1"]
    assert all(m.source is None for m in result.moves)  # c2's claims do not count: nothing moved from it


def test_partitions_go_to_the_owner_of_the_highest_generation() -> None:
    members = [
        Member("c1", owned=parts("t-0 t-1 t-2"), generation=1),
        Member("c2", owned=parts("t-0 t-1 t-2"), generation=2),
        Member("c3", owned=parts("t-3 t-4 t-5"), generation=2),
    ]
    result = planned(request("sticky", {"t": 6}, members))
    assert names(result, "c2") == ["t-0", "t-1"] or len(result.assignment["c2"]) == 2
    assert set(result.assignment["c2"]) <= set(parts("t-0 t-1 t-2"))
    assert set(result.assignment["c3"]) <= set(parts("t-3 t-4 t-5"))


def test_member_no_longer_subscribed_must_give_its_partitions_away() -> None:
    members = [
        Member("c1", frozenset({"a"}), owned=parts("b-0 b-1"), generation=1),
        Member("c2", frozenset({"a", "b"})),
    ]
    assert min_moves(request("sticky", {"a": 2, "b": 2}, members)) == 2
    result = planned(request("sticky", {"a": 2, "b": 2}, members))
    assert names(result, "c2")[-2:] == ["b-0", "b-1"] and result.stats.moved == 2


@pytest.mark.parametrize(("partitions", "members"), [(10, 3), (100, 7), (64, 8), (1000, 9)])
def test_one_join_moves_floor_or_ceil_of_p_over_n_plus_one(partitions: int, members: int) -> None:
    start = planned(request("sticky", {"t": partitions}, [Member(f"m{i}") for i in range(members)]))
    joined = planned(request("sticky", {"t": partitions}, [*previous(start), Member("new")]))
    q, r = divmod(partitions, members + 1)
    assert joined.stats.moved in (q, q + 1) and joined.stats.moved == min_moves(
        request("sticky", {"t": partitions}, [*previous(start), Member("new")])
    )
    assert joined.stats.moved == len(joined.assignment["new"])
    del r


def test_one_leave_moves_only_the_leavers_partitions() -> None:
    start = planned(request("sticky", {"t": 100}, [Member(f"m{i}") for i in range(7)]))
    rest = [m for m in previous(start) if m.id != "m3"]
    after = planned(request("sticky", {"t": 100}, rest))
    assert after.stats.moved == 0
    assert {m.partition for m in after.moves} == set(start.assignment["m3"])


def test_mixed_subscriptions_keep_a_partition_where_kafkas_balance_allows_an_uneven_load() -> None:
    """c3 keeps t1-0: one of c1, c2 (t1 only) may stay empty while t1's holders hold one each, and c0 (t0 only)
    takes two (kafka-python's plan moves nothing either; an even spread of one each moves t1-0)."""
    members = [
        Member("c0", frozenset({"t0"}), parts("t0-1"), 1),
        Member("c1", frozenset({"t1"}), (), 1),
        Member("c2", frozenset({"t1"}), (), 1),
        Member("c3", frozenset({"t0", "t1"}), parts("t1-0"), 1),
        Member("n0", frozenset({"t0"})),
        Member("n1", frozenset({"t0", "t1"})),
    ]
    result = planned(request("sticky", {"t0": 4, "t1": 2}, members))
    assert result.stats.moved == 0 and names(result, "c3") == ["t1-0"]


def test_mixed_subscriptions_give_up_the_partition_only_one_member_can_take_to_keep_the_others() -> None:
    """c3 held six; keeping three of t0 and giving its t1-0 to c0 moves three (kafka-python's plan), where an
    even spread of two each would move four."""
    members = [
        Member("c0", frozenset({"t0", "t1"}), parts("t0-1"), 1),
        Member("c1", frozenset({"t0"})),
        Member("c3", frozenset({"t0", "t1"}), parts("t0-2 t0-3 t0-5 t0-6 t0-7 t1-0"), 1),
        Member("n0", frozenset({"t1"})),
        Member("n1", frozenset({"t0"})),
    ]
    result = planned(request("sticky", {"t0": 8, "t1": 2}, members))
    assert result.stats.moved == 3 and len(result.assignment["c3"]) == 3
