"""Seed 4's assignor inside Kafka's own consumer groups vs kafka-python's ``StickyPartitionAssignor``, on a real
broker: the same join/leave/crash sequence (tests/kafka/assignor_group.py's ``SEQUENCE``: five kafka-python
consumers join one by one, a sixth — a child process — joins and is SIGKILLed, one leaves with ``close()``, one
joins, one leaves) over a topic of ``--partitions`` partitions, with apportion's ``KafkaPythonStickyAssignor`` —
stale claims read by seed 4's rule (``drop``, the default) and by KIP-54's (``stale_claims="yield"``) — and with
kafka-python's own, rotating the order, ``--runs`` times each (a fresh topic and group per run).

Per rebalance: the moves (a partition whose previous owner is still in the group and is not its owner now), the
fewest any balanced assignment could move (seed 4's closed form), and the time in rebalance, from the first
consumer's revoke callback to the last consumer's assignment callback (a crash's session timeout comes before the
first revoke: not counted). Every value is a median over the runs.

Without ``--bootstrap`` it starts its own single-node KRaft broker (tests/kafka_server.py's ``KafkaCluster.run``,
Kafka from Maven's cache) and stops it at the end::

    PYTHONPATH=src:. .venv/bin/python bench/kafka_assignor_bench.py --runs 3
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests.kafka.assignor_group import KINDS, SEQUENCE, Group, Step, Where, create_topic
from tests.kafka_server import KafkaCluster

NAMES = {
    "apportion": "apportion, drop",
    "apportion-yield": "apportion, yield",
    "kafka-python-sticky": "kafka-python sticky",
}


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    if bootstrap is not None:
        yield bootstrap
        return
    with tempfile.TemporaryDirectory(prefix="kafka-assignor-bench-") as base, KafkaCluster.run(Path(base)) as cluster:
        yield cluster.bootstrap


def one_run(bootstrap: str, kind: str, partitions: int) -> tuple[list[Step], list[float]]:
    """The steps of one run, and the seconds of every ``assign`` call its leaders made."""
    topic = f"assignor-bench-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions)
    group = Group(Where(bootstrap, topic, f"g-{topic}", kind), partitions)
    try:
        return [group.run(event, name) for event, name in SEQUENCE], [p.seconds for p in group.recorder.plans]
    finally:
        group.close()


def spread(values: list[int]) -> str:
    """The median, and the largest when a run went above it."""
    middle, top = statistics.median(values), max(values)
    return f"{middle:g}" if top == middle else f"{middle:g} (max {top})"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="an existing broker (default: start one)")
    parser.add_argument("--runs", type=int, default=3, help="runs per assignor (the order rotates)")
    parser.add_argument("--partitions", type=int, default=24)
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)  # kafka-python's rebalance warnings are the sequence itself
    runs: dict[str, list[list[Step]]] = {kind: [] for kind in KINDS}
    assigns: dict[str, list[float]] = {kind: [] for kind in KINDS}
    print(f"load average before: {load()}")
    started = time.monotonic()
    with broker(args.bootstrap) as bootstrap:
        for i in range(args.runs):
            for kind in KINDS[i % len(KINDS) :] + KINDS[: i % len(KINDS)]:  # each kind first once in 3 runs
                steps, seconds = one_run(bootstrap, kind, args.partitions)
                runs[kind].append(steps)
                assigns[kind] += seconds
                print(f"run {i + 1} {kind}: moves {[s.moves for s in steps]}, rebalance s "
                      f"{[round(s.rebalance_s, 2) for s in steps]}", flush=True)  # fmt: skip
    print(f"load average after: {load()} ({time.monotonic() - started:.0f} s)\n")

    print(f"| event | fewest possible | moves: {' / '.join(NAMES[k] for k in KINDS)} | "
          f"time in rebalance (s): {' / '.join(NAMES[k] for k in KINDS)} |")  # fmt: skip
    print("|---|---:|---:|---:|")
    for j, (event, name) in enumerate(SEQUENCE):
        bound = statistics.median(r[j].lower_bound for r in runs[KINDS[0]])
        moved = " / ".join(spread([r[j].moves for r in runs[k]]) for k in KINDS)
        spent = " / ".join(f"{statistics.median(r[j].rebalance_s for r in runs[k]):.2f}" for k in KINDS)
        print(f"| {event} {name} | {bound:g} | {moved} | {spent} |")
    print()
    print("| assignor | runs | changes | leader rounds per run | moves per run, median | above the fewest "
          "possible, all runs | time in rebalance, median (s) | max (s) | assign() on the leader, median (ms) "
          "| unbalanced |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind in KINDS:
        steps = [s for r in runs[kind] for s in r]
        above = sum(s.moves - s.lower_bound for s in steps)
        unbalanced = sum(max(s.sizes) - min(s.sizes) > 1 for s in steps)
        totals = statistics.median(sum(s.moves for s in r) for r in runs[kind])
        rounds = statistics.median(sum(s.rounds for s in r) for r in runs[kind])
        print(f"| {NAMES[kind]} | {len(runs[kind])} | {len(steps)} | {rounds:g} | {totals:g} | {above} | "
              f"{statistics.median(s.rebalance_s for s in steps):.2f} | "
              f"{max(s.rebalance_s for s in steps):.2f} | {statistics.median(assigns[kind]) * 1000:.1f} | "
              f"{unbalanced} |")  # fmt: skip


if __name__ == "__main__":
    main()
