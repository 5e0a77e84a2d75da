"""Moves of ``sticky`` with mixed subscriptions against kafka-python's StickyPartitionAssignor (issue 18 item 6).

Run: .venv/bin/python bench/mixed_sticky_bench.py [--cases 1000] [--seed 0] [--show 3] [--members 6] [--partitions 8]

Each case is a random group (seeded): 2-4 topics of 1-8 partitions (``--partitions``), a previous generation of 2-6
members (``--members``; above 6, groups of more than 8 members, where ``sticky``'s searches differ) that owned
the partitions with a skew (random weights, squared), some of them departed (each with probability 0.3), 0-2 new
members, and every current member subscribing to a random non-empty subset of the topics (so some previous owners
no longer subscribe to what they own: subscriptions changed). Cases where every current member subscribes to the same
topics are redrawn: this is about the general path. Both assignors get the same previous ownership (all current
owners in one generation); moves are counted by one definition: a partition whose previous owner is a current member
and whose new owner is another member. Both plans are checked for Kafka's balance (no member could take a partition
it subscribes to from a member holding at least two more). Prints the tally and the first cases where sticky moved
more than kafka-python.
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass

from kafka.coordinator.assignors.sticky.sticky_assignor import (
    StickyAssignmentExecutor,
    StickyAssignorMemberMetadataV1,
)
from kafka.structs import TopicPartition

from apportion.assign import plan
from apportion.model import AssignRequest, Member, Partition, Resource


@dataclass(frozen=True)
class Case:
    topics: dict[str, int]
    subscriptions: dict[str, tuple[str, ...]]  # current members
    previous: dict[Partition, str]  # previous owner of each partition (current or departed member)

    def owned(self, member: str) -> tuple[Partition, ...]:
        return tuple(sorted(p for p, m in self.previous.items() if m == member))


def random_case(rng: random.Random, members: int = 6, partitions: int = 8) -> Case:
    while True:
        topics = {f"t{i}": rng.randint(1, partitions) for i in range(rng.randint(2, 4))}
        before = [f"c{i}" for i in range(rng.randint(2, members))]
        weights = [rng.random() ** 2 + 0.01 for _ in before]
        previous = {Partition(t, i): rng.choices(before, weights)[0] for t, n in topics.items() for i in range(n)}
        current = [m for m in before if rng.random() >= 0.3] + [f"n{i}" for i in range(rng.randint(0, 2))]
        if not current:
            continue
        names = sorted(topics)
        subscriptions = {m: tuple(sorted(rng.sample(names, rng.randint(1, len(names))))) for m in current}
        if len(set(subscriptions.values())) > 1:
            return Case(topics, subscriptions, previous)


def request_of(case: Case) -> AssignRequest:
    """The case as ``sticky``'s request: every current member with its subscriptions and previous partitions."""
    members = tuple(
        Member(m, frozenset(subs), owned=case.owned(m), generation=1) for m, subs in case.subscriptions.items()
    )
    return AssignRequest("sticky", tuple(Resource(t, n) for t, n in case.topics.items()), members)


def apportion_plan(case: Case) -> dict[Partition, str]:
    return plan(request_of(case)).owner_of()


class _Cluster:
    """The two calls StickyAssignmentExecutor makes on kafka-python's ClusterMetadata."""

    def __init__(self, topics: dict[str, int]) -> None:
        self._topics = topics

    def topics(self) -> set[str]:
        return set(self._topics)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self._topics.get(topic)
        return None if n is None else set(range(n))


def kafka_plan(case: Case) -> dict[Partition, str]:
    members = {
        m: StickyAssignorMemberMetadataV1(
            subscription=list(subs),
            partitions=[TopicPartition(p.resource, p.index) for p in case.owned(m)],
            generation=1,
        )
        for m, subs in case.subscriptions.items()
    }
    executor = StickyAssignmentExecutor(_Cluster(case.topics), members)
    executor.perform_initial_assignment()
    executor.balance()
    return {Partition(t, i): m for m in members for t, indices in executor.get_final_assignment(m) for i in indices}


def moves(case: Case, owner: dict[Partition, str]) -> int:
    """Partitions whose previous owner is still here and that now belong to someone else."""
    return sum(1 for p, m in case.previous.items() if m in case.subscriptions and owner.get(p) != m)


def kafka_balanced(case: Case, owner: dict[Partition, str]) -> bool:
    """No member could take a partition it subscribes to from a member holding at least two more."""
    load = {m: 0 for m in case.subscriptions}
    for m in owner.values():
        load[m] += 1
    for p, j in owner.items():
        for i, subs in case.subscriptions.items():
            if p.resource in subs and load[j] >= load[i] + 2:
                return False
    return True


def describe(case: Case, ours: dict[Partition, str], theirs: dict[Partition, str]) -> str:
    lines = [f"topics {case.topics}"]
    for m, subs in sorted(case.subscriptions.items()):
        mine = sorted(str(p) for p, o in ours.items() if o == m)
        kafka = sorted(str(p) for p, o in theirs.items() if o == m)
        lines.append(f"  {m} subs {list(subs)} owned {[str(p) for p in case.owned(m)]}")
        lines.append(f"     sticky {mine}\n     kafka  {kafka}")
    departed = sorted({m for m in case.previous.values() if m not in case.subscriptions})
    lines.append(f"  departed {departed}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", type=int, default=3, help="print this many cases where sticky moved more")
    parser.add_argument("--members", type=int, default=6, help="largest previous generation (at least 2)")
    parser.add_argument("--partitions", type=int, default=8, help="largest topic")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    fewer = same = more = 0
    unbalanced = {"sticky": 0, "kafka-python": 0}
    worse: list[str] = []
    spent = {"sticky": 0.0, "kafka-python": 0.0}
    for k in range(args.cases):
        case = random_case(rng, args.members, args.partitions)
        t = time.perf_counter()
        ours = apportion_plan(case)
        spent["sticky"] += time.perf_counter() - t
        t = time.perf_counter()
        theirs = kafka_plan(case)
        spent["kafka-python"] += time.perf_counter() - t
        unbalanced["sticky"] += not kafka_balanced(case, ours)
        unbalanced["kafka-python"] += not kafka_balanced(case, theirs)
        a, b = moves(case, ours), moves(case, theirs)
        fewer += a < b
        same += a == b
        more += a > b
        if a > b and len(worse) < args.show:
            worse.append(f"case {k}: sticky {a} moves, kafka-python {b}\n{describe(case, ours, theirs)}")
    sizes = f" --members {args.members} --partitions {args.partitions}"
    print(f"command: .venv/bin/python bench/mixed_sticky_bench.py --cases {args.cases} --seed {args.seed}{sizes}")
    print()
    print(
        "| cases | sticky fewer moves | as many | more | unbalanced: sticky / kafka-python "
        "| time: sticky / kafka-python |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {args.cases} | {fewer} | {same} | {more} | {unbalanced['sticky']} / {unbalanced['kafka-python']} "
        f"| {spent['sticky']:.2f} s / {spent['kafka-python']:.2f} s |"
    )
    for text in worse:
        print()
        print(text)


if __name__ == "__main__":
    main()
