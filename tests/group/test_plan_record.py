"""``round/<R>/plan`` as a typed record: what closers stored before ``PlanRecord`` existed reads back and writes out
byte for byte (old stores keep working), and what a reader relies on is checked."""

from __future__ import annotations

import pytest

from apportion.errors import CorruptRecord
from apportion.group import GroupConfig
from apportion.group._keys import PlanRecord
from apportion.group._round_plan import close_plan
from apportion.group.internals import decode, encode
from apportion.store import KeyValue

# Records as the closer wrote them before PlanRecord: captured from that code's runs of tests/group's harness (a
# one-resource sticky plan, a kept plan with standby replicas, a probing plan with learners, standby and ready
# replicas, a plan of named resources with subscriptions), and one with violations in the form that code wrote them.
WRITTEN = [
    b'{"assignment":{"a":[0,1,2,3],"b":[4,5,6,7],"c":[8,9,10,11]},"closed_at":1000.5099999999995,"closer":"b",'
    b'"deferred":0,"kept":false,"min_moves":0,"moves":0,"participants":["a","b","c"],"partitions":12,'
    b'"resource_revision":1,"round":3,"strategy":"sticky"}',
    b'{"assignment":{"m0":[0,3,6,9],"m1":[1,4,7,10],"m2":[2,5,8,11]},"closed_at":1030.5199999999722,"closer":"m2",'
    b'"deferred":0,"kept":true,"min_moves":0,"moves":0,"participants":["m0","m1","m2"],"partitions":12,'
    b'"resource_revision":1,"round":13,"standby":{"m0":[1,2,7,8],"m1":[0,5,6,11],"m2":[3,4,9,10]},'
    b'"strategy":"high_availability"}',
    b'{"assignment":{"m0":[0,3,6,9],"m1":[1,4,7,10],"m2":[2,5,8,11],"m3":[]},"closed_at":1035.5799999999676,'
    b'"closer":"m0","deferred":3,"kept":false,"learners":{"m3":[0,1]},"min_moves":3,"moves":0,'
    b'"participants":["m0","m1","m2","m3"],"partitions":12,"probe_after_s":5.0,'
    b'"ready":{"m0":[1,2,7,8],"m1":[0,5,6,11],"m2":[3,4,9,10]},"resource_revision":1,"round":19,'
    b'"standby":{"m0":[1,2,7,8],"m1":[0,5,6,11],"m2":[3,4,9,10]},"strategy":"high_availability"}',
    b'{"assignment":{"a":["orders-0","orders-1","orders-2","orders-5"],"b":["orders-3","payments-0","payments-1",'
    b'"payments-3"],"c":["orders-4","payments-2","refunds-0","refunds-1"]},"closed_at":1000.5099999999995,'
    b'"closer":"b","deferred":0,"kept":false,"min_moves":0,"moves":0,"participants":["a","b","c"],"partitions":12,'
    b'"resource_revision":1,"round":3,"strategy":"sticky","subscriptions":{"a":["orders"],"b":["orders","payments"]}}',
    b'{"assignment":{"a":[0,1]},"closed_at":5.0,"closer":"a","deferred":0,"kept":false,"min_moves":0,"moves":0,'
    b'"participants":["a"],"partitions":2,"resource_revision":3,"round":7,"strategy":"sticky",'
    b'"violations":["unbalanced"]}',
]


@pytest.mark.parametrize("raw", WRITTEN)
def test_a_stored_plan_reads_back_and_writes_out_byte_for_byte(raw: bytes) -> None:
    record = PlanRecord.from_json(decode(raw, "/k"), "/k")
    assert encode(record.to_json()) == raw


def test_the_fields_of_a_stored_plan_are_its_json_keys() -> None:
    record = PlanRecord.from_json(decode(WRITTEN[2]))
    assert record.round == 19 and record.participants == ("m0", "m1", "m2", "m3") and record.kept is False
    assert record.assignment["m1"] == [1, 4, 7, 10] and record.learners == {"m3": [0, 1]}
    assert record.probe_after_s == 5.0 and record.ready["m2"] == [3, 4, 9, 10] and record.violations == ()
    assert PlanRecord.from_json(decode(WRITTEN[3])).subscriptions == {"a": ["orders"], "b": ["orders", "payments"]}


def test_a_hand_written_plan_takes_defaults_for_what_it_leaves_out() -> None:
    record = PlanRecord.from_json({"participants": ["w9"]})
    assert record.participants == ("w9",) and record.assignment == {} and record.round == 0
    assert record.strategy is None and record.probe_after_s is None and record.standby == {}


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({}, "'participants' must be a list"),
        ({"participants": [1]}, "'participants' must be a list of member ids"),
        ({"participants": [], "assignment": {"w1": [[1]]}}, "'assignment' must map member ids"),
        ({"participants": [], "learners": []}, "'learners' must map member ids"),
        ({"participants": [], "round": "x"}, "'round' must be an integer"),
        ({"participants": [], "probe_after_s": "soon"}, "'probe_after_s' must be a number"),
    ],
)
def test_a_plan_that_is_not_one_is_a_corrupt_record_naming_its_key(value: dict[str, object], words: str) -> None:
    with pytest.raises(CorruptRecord, match=words) as caught:
        PlanRecord.from_json(value, "/apportion/g/round/5/plan")
    assert caught.value.key == "/apportion/g/round/5/plan"


def _records(*mids: str) -> dict[str, KeyValue]:
    """Participation records of round 9 (nothing owned), created in the order given."""
    return {
        mid: KeyValue(f"/apportion/g/round/9/{mid}", encode({"owned": [], "capacity": 1.0}), 10 + i, 10 + i, 1)
        for i, mid in enumerate(mids)
    }


CONFIG = GroupConfig(partitions=4, strategy="round_robin")
CLOSING = {"group": "g", "rnd": 9, "closer": "a", "closed_at": 5.0, "resource_revision": 3}


def test_close_plan_plans_the_cut_as_a_pure_function_of_its_inputs() -> None:
    plan = close_plan(_records("b", "a"), None, CONFIG, **CLOSING)  # type: ignore[arg-type]
    assert plan is not None and plan.participants == ("a", "b") and plan.kept is False
    assert plan.assignment == {"b": [0, 2], "a": [1, 3]}  # round_robin deals in join order: b joined first
    assert encode(plan.to_json()) == encode(
        {"assignment": {"a": [1, 3], "b": [0, 2]}, "closed_at": 5.0, "closer": "a", "deferred": 0, "kept": False,
         "min_moves": 0, "moves": 0, "participants": ["a", "b"], "partitions": 4, "resource_revision": 3, "round": 9,
         "strategy": "round_robin"}
    )  # fmt: skip
    assert close_plan(_records("b", "a"), None, CONFIG, **CLOSING) == plan  # type: ignore[arg-type]


def test_close_plan_keeps_the_previous_assignment_when_nobody_joined_or_left() -> None:
    previous = PlanRecord.from_json(decode(WRITTEN[4]))  # a's plan of round 7, definition revision 3
    kept = close_plan(_records("a"), previous, CONFIG, **CLOSING)  # type: ignore[arg-type]
    assert kept is not None and kept.kept is True and kept.assignment == {"a": [0, 1]} and kept.round == 9
    replanned = close_plan(_records("a", "b"), previous, CONFIG, **CLOSING)  # type: ignore[arg-type]
    assert replanned is not None and replanned.kept is False


def test_close_plan_keeps_what_the_checker_finds_wrong_and_leaves_corrupt_records_out_of_the_cut() -> None:
    records = {**_records("a", "b"), "c": KeyValue("/apportion/g/round/9/c", b"garbage", 12, 12, 1)}
    plan = close_plan(records, None, CONFIG, **CLOSING, checker=lambda request, plan: ["unbalanced"])  # type: ignore[arg-type]
    assert plan is not None and plan.participants == ("a", "b") and plan.violations == ("unbalanced",)
    assert close_plan({"c": records["c"]}, None, CONFIG, **CLOSING) is None  # type: ignore[arg-type]


def test_close_plan_counts_the_partitions_of_a_member_that_left_the_cut_as_moves_and_in_the_bound() -> None:
    """Issue 45.5: b held 2 and 3 in the previous plan and is not in this cut (it left or crashed); the strategy
    sees them unowned (a placement, 0 moves), but they change hands: 2 moves, and no plan could make fewer."""
    previous = PlanRecord.from_json(
        {"participants": ["a", "b"], "assignment": {"a": [0, 1], "b": [2, 3]}, "resource_revision": 3, "round": 7}
    )
    records = {"a": KeyValue("/apportion/g/round/9/a", encode({"owned": [0, 1]}), 10, 10, 1)}
    sticky = GroupConfig(partitions=4, strategy="sticky")
    plan = close_plan(records, previous, sticky, **CLOSING)  # type: ignore[arg-type]
    assert plan is not None and plan.assignment == {"a": [0, 1, 2, 3]}
    assert (plan.moves, plan.min_moves) == (2, 2)
