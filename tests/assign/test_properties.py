"""Hypothesis: every strategy keeps its invariants (assign.check) on random requests with messy previous ownership."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apportion.assign import check, min_moves, plan, plan_to_json
from apportion.model import AssignRequest, Member, Partition, Resource

OURS = ("round_robin", "range", "sticky", "weighted", "rendezvous", "bounded_load")
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def requests(
    draw: st.DrawFn, strategy: str | None = None, equal: bool | None = None, weights: bool = False
) -> AssignRequest:
    name = strategy or draw(st.sampled_from(OURS))
    counts = draw(st.lists(st.integers(0, 12), min_size=1, max_size=3))
    resources = []
    for i, n in enumerate(counts):
        w = (
            tuple(draw(st.lists(st.integers(1, 5), min_size=n, max_size=n)))
            if weights and draw(st.booleans())
            else None
        )
        resources.append(Resource(f"r{i}", n, tuple(float(x) for x in w) if w else None))
    universe = [Partition(r.name, i) for r in resources for i in range(r.partitions)]
    ids = draw(st.lists(st.sampled_from([f"m{i}" for i in range(9)]), max_size=7, unique=True))
    same = draw(st.booleans()) if equal is None else equal
    shared = (
        None
        if draw(st.booleans())
        else frozenset(draw(st.lists(st.sampled_from([r.name for r in resources]), min_size=1)))
    )
    members = []
    for mid in ids:
        subs = (
            shared
            if same
            else (
                None if draw(st.booleans()) else frozenset(draw(st.lists(st.sampled_from([r.name for r in resources]))))
            )
        )
        owned = (
            tuple(draw(st.lists(st.sampled_from(universe), unique=True))) if universe and draw(st.booleans()) else ()
        )
        members.append(Member(mid, subs, owned, draw(st.integers(0, 2)), float(draw(st.integers(1, 4)))))
    options: dict[str, object] = {}
    if name == "weighted":
        options["tolerance"] = draw(st.sampled_from([0, 0.1, 0.2, 0.5]))
    if name == "bounded_load":
        options["load_factor"] = draw(st.sampled_from([1, 1.25, 2]))
    return AssignRequest(name, tuple(resources), tuple(members), options)


@FAST
@given(requests())
def test_every_strategy_keeps_exclusivity_subscriptions_balance_and_reports_moves(req: AssignRequest) -> None:
    assert check(req, plan(req)) == []


@FAST
@given(requests("sticky", equal=True))
def test_sticky_with_equal_subscriptions_moves_exactly_the_minimum(req: AssignRequest) -> None:
    result = plan(req)
    assert check(req, result) == []
    assert result.stats.moved == min_moves(req) == result.stats.min_moves
    assert result.stats.max - result.stats.min <= 1


@FAST
@given(requests("sticky", equal=False))
def test_sticky_with_mixed_subscriptions_is_kafka_balanced(req: AssignRequest) -> None:
    assert check(req, plan(req)) == []


@FAST
@given(requests("weighted", weights=True))
def test_weighted_keeps_every_member_within_its_band(req: AssignRequest) -> None:
    assert check(req, plan(req)) == []


@FAST
@given(requests())
def test_same_request_gives_the_same_plan_and_reversed_member_order_too(req: AssignRequest) -> None:
    first = json.dumps(plan_to_json(plan(req)))
    reversed_req = AssignRequest(req.strategy, req.resources[::-1], req.members[::-1], req.options)
    assert json.dumps(plan_to_json(plan(reversed_req))) == first


@FAST
@given(requests("sticky", equal=True), st.data())
def test_replanning_a_sticky_plan_with_the_same_members_moves_nothing(req: AssignRequest, data: st.DataObject) -> None:
    result = plan(req)
    gen = data.draw(st.integers(3, 5))
    again = AssignRequest(
        "sticky",
        req.resources,
        tuple(Member(m.id, m.subscriptions, result.assignment[m.id], gen) for m in req.members),
    )
    assert plan(again).moves == ()


@FAST
@given(st.integers(1, 4), st.integers(0, 12), st.integers(1, 7), st.booleans())
def test_sticky_from_scratch_gives_every_member_each_topic_as_its_quota_allows(
    topics: int, size: int, members: int, subscribed: bool
) -> None:
    """Seed 4's interleaved order (t0-0, t1-0, t0-1, ...): with topics of equal size, a member holding ``c``
    partitions holds floor(c / topics) or ceil(c / topics) of each topic, so one with c >= topics has all of them."""
    resources = tuple(Resource(f"t{i}", size) for i in range(topics))
    subs = frozenset(r.name for r in resources) if subscribed else None
    req = AssignRequest("sticky", resources, tuple(Member(f"m{i}", subs) for i in range(members)))
    result = plan(req)
    assert check(req, result) == []
    for parts in result.assignment.values():
        per_topic = [sum(1 for p in parts if p.resource == r.name) for r in resources]
        assert max(per_topic) - min(per_topic) <= 1, (parts, per_topic)
