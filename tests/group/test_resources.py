"""Groups over several named resources with per-member subscriptions (issue 20), rounds mode, in virtual time."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apportion.assign import check
from apportion.errors import InvalidRequest
from apportion.group import CoordinatorMember, GroupConfig, committed, group_status, set_subscriptions
from apportion.group._config import parse_resources
from apportion.group._keys import PartitionId, PlanRecord, pid_order, sorted_pids
from apportion.group._round_plan import read_plan
from apportion.group._static import static_block
from apportion.group._table import plan_table
from apportion.group.internals import Keys
from apportion.model import AssignRequest, Member, Move, Partition, Plan, PlanStats, Resource
from apportion.store import connect
from apportion.worker import Group
from tests.group.harness import FAST, Harness
from tests.group.modes_harness import ModeHarness

THREE = GroupConfig(
    resources=parse_resources("orders:6,payments:4,refunds:2"),
    settle_s=0.5,
    min_interval_s=1.0,
    heartbeat_s=30.0,
    ttl_s=3.0,
)
ALL = THREE.partition_ids()


def _resource(pid: PartitionId) -> str:
    assert isinstance(pid, str)
    return Partition.parse(pid).resource


def _held_within_subscriptions(h: Harness, subs: Mapping[str, Sequence[str] | None]) -> None:
    for mid, parts in h.assignment().items():
        allowed = subs.get(mid)
        if allowed is not None:
            assert {_resource(p) for p in parts} <= set(allowed), f"{mid} holds {parts}, subscribes to {allowed}"


def _all_owned_within_subscriptions_and_balanced(h: Harness, subs: Mapping[str, Sequence[str] | None]) -> None:
    assert sorted(h.owners(), key=str) == sorted(ALL, key=str)
    _held_within_subscriptions(h, subs)
    assert _balanced_by_kafka(h, subs) == []


def _latest_plan(h: Harness) -> PlanRecord:
    keys = Keys(h.group)
    latest = h.store.get(keys.latest)
    assert latest is not None
    kv = h.store.get(keys.plan(json.loads(latest.value)["round"]))
    assert kv is not None
    return read_plan(kv, h.store)


def _balanced_by_kafka(h: Harness, subs: Mapping[str, Sequence[str] | None]) -> list[str]:
    """assign.check's verdict on the members' holdings as a sticky plan (Kafka's mixed-subscription balance)."""
    members = tuple(
        Member(mid, subscriptions=None if subs.get(mid) is None else frozenset(subs[mid] or ())) for mid in sorted(subs)
    )
    assignment = {mid: tuple(sorted(Partition.parse(str(p)) for p in parts)) for mid, parts in h.assignment().items()}
    counts = [len(v) for v in assignment.values()]
    stats = PlanStats(len(ALL), len(members), min(counts), max(counts), 0, 0)
    request = AssignRequest("sticky", THREE.resources_of(h.group), members)
    placed = tuple(sorted(Move(p, None, mid) for mid, parts in assignment.items() for p in parts))  # no previous owners
    return check(request, Plan("sticky", assignment, placed, stats))


def test_definition_of_named_resources_round_trips_and_one_resource_definitions_are_stored_as_before() -> None:
    assert THREE.partitions == 12 and THREE.named
    stored = THREE.to_json()
    assert stored["resources"][0] == {"name": "orders", "partitions": 6} and "partitions" not in stored
    assert GroupConfig.from_json(stored) == THREE
    assert FAST.to_json()["partitions"] == 12 and "resources" not in FAST.to_json()
    assert FAST.partition_ids() == list(range(12))
    assert THREE.partition_ids()[:2] == ["orders-0", "orders-1"]
    weighted = GroupConfig(resources=(Resource("a", 2, (1.0, 3.0)),))
    assert GroupConfig.from_json(weighted.to_json()).resources[0].weights == (1.0, 3.0)


@pytest.mark.parametrize(
    ("resources", "reason"),
    [
        ("orders:0", "partitions must be an integer >= 1"),
        ("orders:2,orders:3", "twice"),
        ("bad name:2", "characters"),
        ("orders", "<name>:<partitions>"),
        ((Resource("a", 2, (1.0,)),), "1 weights for 2 partitions"),
    ],
)
def test_a_bad_resource_list_is_refused_with_its_reason(resources: object, reason: str) -> None:
    with pytest.raises(InvalidRequest, match=reason):
        GroupConfig(resources=parse_resources(resources))


def test_subscriptions_must_name_resources_of_the_group() -> None:
    with pytest.raises(InvalidRequest, match="not a resource of the group"):
        THREE.subscriptions(["orders", "nope"])
    with pytest.raises(InvalidRequest, match="one-resource group"):
        FAST.subscriptions(["g"])
    assert THREE.subscriptions(None) is None


def test_a_group_cannot_switch_between_one_resource_and_named_resources() -> None:
    with pytest.raises(InvalidRequest, match="cannot become"):
        THREE.check_update(FAST)
    with connect("memory://switch") as store:
        Group(store, "g", partitions=4).join("w1").stop()
        with pytest.raises(InvalidRequest, match="cannot become"):
            Group(store, "g", resources={"orders": 4}, update=True)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "a-b", "orders", "x1"]), st.integers(0, 120)), max_size=30),
    st.randoms(use_true_random=False),
)
def test_named_partition_ids_sort_by_resource_then_index_as_an_int(
    ids: list[tuple[str, int]], rnd: random.Random
) -> None:
    pids = [f"{name}-{i}" for name, i in ids]
    rnd.shuffle(pids)
    ordered = sorted_pids(pids)
    assert [Partition.parse(p) for p in ordered] == sorted(Partition.parse(p) for p in pids)
    assert sorted_pids([10, 2, 0]) == [0, 2, 10] and pid_order("10") == pid_order(10)


def test_callbacks_owned_status_and_commits_list_named_ids_in_index_order_not_text_order() -> None:
    """``orders-10`` sorted as text comes before ``orders-2``: every list of ids a named group gives is in
    (resource, index) order, the order of ``GroupConfig.partition_ids``."""
    config = GroupConfig(resources=parse_resources("orders:12,payments:3"), settle_s=0.5, min_interval_s=1.0)
    h = Harness(config)
    member = h.add("a")
    h.run(2.5)
    everything = config.partition_ids()
    assert member.owned() == everything
    assert [parts for kind, _, parts, _ in h.log.calls if kind == "assigned"] == [everything]
    for p in everything:
        member.commit(p, f"c{p}")
    snapshot = group_status(h.store, "g")
    assert list(snapshot.partitions) == [str(p) for p in everything]
    assert snapshot.members["a"].partitions == tuple(str(p) for p in everything)
    assert list(committed(h.store, "g")) == everything
    member.leave()
    assert [parts for kind, _, parts, _ in h.log.calls if kind == "revoked"] == [everything]


def test_members_with_equal_subscriptions_share_every_resource_with_owner_keys_per_resource() -> None:
    h = Harness(THREE)
    for mid in ("a", "b", "c"):
        h.add(mid)
    h.run(2.5)
    assert all(m.stable() for m in h.members.values())
    assert sorted(h.owners(), key=str) == sorted(ALL, key=str)
    assert sorted(len(p) for p in h.assignment().values()) == [4, 4, 4]
    assert h.store.get("/apportion/.own/g/owner/payments-3") is not None
    assert h.store.get("/apportion/.own/g/owner/3") is None


def test_mixed_subscriptions_never_give_an_unsubscribed_partition_and_are_balanced_by_kafkas_definition() -> None:
    h = Harness(THREE)
    subs: dict[str, Sequence[str] | None] = {"a": ["orders"], "b": ["orders", "payments"], "c": None}
    for mid, s in subs.items():
        h.add(mid, subscriptions=s)
    h.run(2.5)
    _all_owned_within_subscriptions_and_balanced(h, subs)
    plan = _latest_plan(h)
    assert plan.subscriptions == {"a": ["orders"], "b": ["orders", "payments"]}
    assert plan.violations == ()


def test_a_subscription_change_revokes_at_once_then_moves_as_few_partitions_as_a_new_round_needs() -> None:
    h = Harness(THREE)
    subs: dict[str, Sequence[str] | None] = {"a": None, "b": None, "c": None}
    for mid in subs:
        h.add(mid)
    h.run(2.5)
    before = h.assignment()
    plan_before = _latest_plan(h).round
    h.log.calls.clear()
    h.members["a"].subscribe(["refunds"])
    subs["a"] = ["refunds"]
    h.run(0.05)
    revoked_now = {p for kind, mid, parts, _ in h.log.calls if kind == "revoked" and mid == "a" for p in parts}
    assert revoked_now == {p for p in before["a"] if _resource(p) != "refunds"}
    _held_within_subscriptions(h, subs)
    h.run(3.0)
    assert _latest_plan(h).round != plan_before, "a subscription change opens a new round"
    after = h.assignment()
    _all_owned_within_subscriptions_and_balanced(h, subs)
    kept_by_a = [p for p in before["a"] if _resource(p) == "refunds"]
    assert set(kept_by_a) <= set(after["a"]), "a keeps the refunds partitions it held"
    # a revoked (and released) its orders and payments: placements, not moves; balance then needs exactly one move,
    # the other refunds partition to a (Kafka's definition: a could take it from a member holding 2+ more)
    assert _latest_plan(h).moves == 1
    others = {p for mid in ("b", "c") for p in before[mid]}
    taken = {p for mid in ("b", "c") for p in after[mid] if p not in before[mid]}
    assert taken <= set(before["a"]), "b and c only take what a gave up"
    assert len(others - {p for mid in ("b", "c") for p in after[mid]}) == 1


def test_a_member_subscribed_to_a_resource_alone_takes_all_of_it_when_nobody_else_does() -> None:
    h = Harness(THREE)
    h.add("a", subscriptions=["orders", "payments"])
    h.add("b", subscriptions=["refunds"])
    h.run(2.5)
    assert sorted(h.assignment()["b"]) == ["refunds-0", "refunds-1"]


def test_a_resource_added_to_the_definition_is_a_definition_change_and_gets_owners() -> None:
    h = Harness(THREE)
    h.add("a")
    h.add("b")
    h.run(2.5)
    bigger = GroupConfig(resources=parse_resources("orders:6,payments:4,refunds:2,audits:2"))
    h.store.put(Keys("g").resource, json.dumps(bigger.to_json()).encode())
    h.run(3.0)
    assert "audits-1" in h.owners() and len(h.owners()) == 14


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from([None, ("orders",), ("payments",), ("orders", "refunds"), ("refunds",)]), min_size=1, max_size=4
    ),
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from([None, ("orders",), ("payments", "refunds")])), max_size=3),
)
def test_nobody_ever_holds_a_partition_it_does_not_subscribe_to(
    initial: list[tuple[str, ...] | None], changes: list[tuple[int, tuple[str, ...] | None]]
) -> None:
    h = Harness(THREE)
    subs: dict[str, Sequence[str] | None] = {}
    for i, s in enumerate(initial):
        subs[f"m{i}"] = s
        h.add(f"m{i}", subscriptions=s)
    for _ in range(25):
        h.run(0.1)
        _held_within_subscriptions(h, subs)
    for who, s in changes:
        mid = f"m{who % len(initial)}"
        h.members[mid].subscribe(s)
        subs[mid] = s
        for _ in range(30):
            h.run(0.1)
            _held_within_subscriptions(h, subs)
    assert _latest_plan(h).violations == ()
    covered = {r for s in subs.values() for r in (s or THREE.resource_names())}
    wanted = [p for p in ALL if _resource(p) in covered]
    assert sorted(h.owners(), key=str) == sorted(wanted, key=str)
    assert _balanced_by_kafka(h, subs) == []


def test_static_ordinals_take_the_range_formula_of_every_resource() -> None:
    h = ModeHarness(THREE)
    for ordinal in range(2):
        h.add_static(f"s{ordinal}", ordinal, 2)
    h.run(2.0)
    assert sorted(h.assignment()["s0"], key=str) == sorted(
        ["orders-0", "orders-1", "orders-2", "payments-0", "payments-1", "refunds-0"], key=str
    )
    assert sorted(h.owners(), key=str) == sorted(ALL, key=str)
    assert static_block(THREE, 1, 2) == ["orders-3", "orders-4", "orders-5", "payments-2", "payments-3", "refunds-1"]


def test_the_coordinator_plans_mixed_subscriptions_and_replans_when_an_operator_changes_them() -> None:
    h = ModeHarness(GroupConfig(resources=THREE.resources, strategy="sticky", settle_s=0.5, min_interval_s=1.0))
    subs: dict[str, Sequence[str] | None] = {"a": ["orders"], "b": ["payments", "refunds"], "c": None}
    for mid, s in subs.items():
        h.add_coordinated(mid, subscriptions=s)
    h.run(3.0)
    _all_owned_within_subscriptions_and_balanced(h, subs)
    assert isinstance(h.members["c"], CoordinatorMember)
    set_subscriptions(h.store, "g", "c", ["refunds"])  # the operator's record (`apportion subscribe`)
    subs["c"] = ["refunds"]
    for _ in range(30):
        h.run(0.1)
        _held_within_subscriptions(h, subs)
    assert sorted(h.owners(), key=str) == sorted(ALL, key=str)
    assert _balanced_by_kafka(h, subs) == []


def test_the_coordinators_plan_check_reports_a_plan_that_breaks_its_strategys_balance() -> None:
    def lopsided(request: AssignRequest) -> Plan:
        parts = tuple(p for r in request.resources for p in r.all_partitions())
        placed = tuple(Move(p, None, "a") for p in parts)
        stats = PlanStats(len(parts), 2, 0, len(parts), 0, 0)
        return Plan(request.strategy, {"a": parts, "b": ()}, placed, stats)

    planned = plan_table("g", THREE, ["a", "b"], {}, full=True, planner=lopsided, checker=check)
    assert planned.violations and "unbalanced" in " ".join(planned.violations)
    assert plan_table("g", THREE, ["a", "b"], {}, full=True, checker=check).violations == ()
