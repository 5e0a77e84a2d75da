"""Seed 4's assignor inside Kafka's own consumer groups, on a real KRaft broker: five kafka-python consumers in this
process (one assignor instance each), a sixth in a child process that crashes (SIGKILL: it stops heartbeating
without leaving), leaves with ``close()`` and a later join; then aiokafka consumers. After every rebalance: every
partition owned exactly once, the sizes within one of each other, and exactly as many partitions moved as the
fewest any balanced assignment could move (seed 4's closed form, computed by the harness from what the consumers
held: tests/kafka/assignor_group.py); and every plan the leader made says the same.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kafka.assignor_group import SEQUENCE, Group, Step, Where, create_topic
from tests.kafka_server import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("kafka")]

PARTITIONS = 24


@pytest.fixture
def group(kafka: KafkaCluster, topic: str, request: pytest.FixtureRequest) -> Iterator[Group]:
    create_topic(kafka.bootstrap, topic, PARTITIONS)
    running = Group(Where(kafka.bootstrap, topic, f"g-{topic}", request.param), PARTITIONS)
    yield running
    running.close()


def assert_step(step: Step) -> None:
    """Balanced, and as few moves as possible — up to the claims the leader did not count for their generation:
    between two settled states a member may miss a round (its SyncGroup came after the next rebalance began), and
    then claims an older generation in the next one (the leader reports how many partitions that cost)."""
    assert max(step.sizes) - min(step.sizes) <= 1, f"{step.event}: unbalanced {step.sizes}"
    assert step.lower_bound <= step.moves <= step.lower_bound + step.stale, (
        f"{step.event}: {step.moves} moves, the fewest possible {step.lower_bound}, stale claims {step.stale}"
    )


def assert_plans(group: Group) -> None:
    """Every round, as its leader saw it: exactly the fewest moves for the claims it counted, sizes within one."""
    plans = group.recorder.plans
    assert plans, "the leader reported no plan"
    assert all(p.moved == p.min_moves and p.spread is not None and p.spread <= 1 for p in plans), plans


@pytest.mark.parametrize(
    "group", ["apportion", pytest.param("apportion-yield", marks=pytest.mark.soak)], indirect=True
)  # "yield" in make soak: test_assignor_core checks its rule on every input without a broker
def test_kafka_python_consumers_through_joins_leaves_and_a_crash_move_only_the_lower_bound(group: Group) -> None:
    """Both rules for stale claims: seed 4's (a member of an older generation counts none of its claims) and KIP-54's
    (only the partitions a newer claim names)."""
    steps = [group.run(event, name) for event, name in SEQUENCE]
    for step in steps:
        assert_step(step)
    assert [s.lower_bound for s in steps] == [0, 12, 8, 6, 4, 4, 0, 0, 4, 0]  # 24 over 1, 2, ...: P // N each join
    crash = next(s for s in steps if s.event == "crash p5")
    assert crash.settle_s >= 5.0, "noticed by the session timeout, not by a LeaveGroup"
    generations = [s.generation for s in steps]
    assert generations == sorted(set(generations)), "every step a newer generation"
    assert_plans(group)


@pytest.mark.parametrize("group", ["aiokafka"], indirect=True)
def test_aiokafka_consumers_through_joins_and_leaves_move_only_the_lower_bound(group: Group) -> None:
    """aiokafka never tells an assignor the group's generation: the members claim the one the leader stamps."""
    steps = [group.join(f"a{i}") for i in range(5)]
    steps += [group.leave("a1"), group.join("a5"), group.leave("a0")]
    for step in steps:
        assert_step(step)
    assert [s.lower_bound for s in steps] == [0, 12, 8, 6, 4, 0, 4, 0]
    assert_plans(group)
