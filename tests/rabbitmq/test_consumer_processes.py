"""Seed 3 end to end on a real RabbitMQ: `apportion rabbitmq consume` processes in static mode (three pods of a
StatefulSet, 12 partition queues, a SQLite store) while a producer publishes keyed messages, under kill -9, SIGSTOP,
`apportion scale` down and up, and a pod started with a stale replica count. Every run is checked by
``tests/rabbitmq/harness.py``: every message processed at least once, each key's messages first processed in order,
duplicates bounded by the prefetch, never two consumers on one queue (RabbitMQ's own consumer list, sampled), and
the fence (consumption intervals per partition never overlap; epochs increase)."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from apportion import group
from apportion.store import connect
from apportion.waiting import wait_for
from tests.rabbitmq.harness import PREFETCH, TTL_S, Run, run, scale
from tests.rabbitmq_server import RabbitServer

pytestmark = [pytest.mark.slow, pytest.mark.rabbitmq, pytest.mark.xdist_group("rabbitmq")]

RANGES = {"c0": [0, 1, 2, 3], "c1": [4, 5, 6, 7], "c2": [8, 9, 10, 11]}  # 12 partitions over 3 ordinals


def start_three(r: Run) -> None:
    for ordinal in range(3):
        r.start(ordinal, 3)
    r.wait_consumed("each pod consuming its range", by=RANGES)


def test_kill_9_of_a_consumer_loses_no_message_and_keeps_each_keys_order(
    rabbit: RabbitServer, prefix: str, store_url: str, tmp_path: Path
) -> None:
    """The killed pod's unacked messages are requeued by RabbitMQ and redelivered, in order, to the pod that the
    StatefulSet starts again under its ordinal; the duplicates are at most the prefetch of each of its queues."""
    with run(rabbit, prefix, store_url, tmp_path / "logs") as r:
        start_three(r)
        r.publisher.start()
        r.wait_processed_more(300)
        r.kill(r.fleet["c1"])
        r.wait_processed_more(150)  # the others go on meanwhile
        r.start(1, 3)  # the StatefulSet's restart, same ordinal
        r.wait_consumed("the restarted pod consuming its range again", by=RANGES)
        r.wait_processed_more(300)
        counts = r.check(r.finish(), max_duplicates=PREFETCH * len(RANGES["c1"]))
        assert r.fleet["c1"].log.count("processed") > 0
    print(counts)


def test_a_frozen_consumer_requeues_what_it_held_and_starts_no_message_after_its_belief_ended(
    rabbit: RabbitServer, prefix: str, store_url: str, tmp_path: Path
) -> None:
    """SIGSTOP past the ttl: the pod's owner records lapse (its range waits for it, as a StatefulSet keeps an
    ordinal's identity); resumed, it handles no message of the old epoch (at most the one it was frozen in), requeues
    everything unacked, registers again and consumes its range under new epochs."""
    with run(rabbit, prefix, store_url, tmp_path / "logs") as r:
        start_three(r)
        r.publisher.start()
        r.wait_processed_more(300)
        frozen = r.fleet["c2"]
        frozen.signal(signal.SIGSTOP)
        wait_for("c2 frozen", frozen.stopped, 10)
        with connect(store_url) as store:
            wait_for(
                "c2's owner records to lapse",
                lambda: all(group.owners(store, "orders").get(p) is None for p in RANGES["c2"]),
                TTL_S * 5,
            )
        resumed = time.time()
        frozen.signal(signal.SIGCONT)
        wait_for("c2 to requeue what it held", lambda: len(requeued(r)) >= len(RANGES["c2"]), 30)
        r.wait_consumed("c2 consuming its range again", by=RANGES)
        r.wait_processed_more(300)
        counts = r.check(r.finish(), max_duplicates=PREFETCH * len(RANGES["c2"]))
        end_of_old = max(float(e["time"]) for e in requeued(r))
        late = [
            e for e in r.processed() if e["worker"] == "c2" and resumed <= float(e["time"]) <= end_of_old
        ]  # handled after the resume, before the old epoch's queues were dropped
        assert len(late) <= 1, f"c2 handled {len(late)} messages after its belief ended: {late}"
        assert all(e["reason"] in ("fenced", "lost") for e in requeued(r))
    print(counts)


def requeued(r: Run) -> list[dict[str, object]]:
    return [e for e in r.fleet["c2"].own_events() if e["event"] == "requeued"]


def test_scale_down_and_up_hand_each_queue_over_after_it_was_cancelled_with_no_duplicate(
    rabbit: RabbitServer, prefix: str, store_url: str, tmp_path: Path
) -> None:
    """`apportion scale --replicas 2` before the pod goes: c2 cancels each queue and acks what it handled before
    the partition is released, c0 and c1 consume them; then the StatefulSet is scaled up with kubectl alone (the
    pod template still says --replicas 2): the new c2 raises the count to 3 and its range comes back. Only planned
    handoffs: not one message is processed twice."""
    with run(rabbit, prefix, store_url, tmp_path / "logs") as r:
        start_three(r)
        r.publisher.start()
        r.wait_processed_more(300)
        scale(store_url, 2)
        r.wait_consumed("c0 and c1 consuming every queue", by={"c0": range(6), "c1": range(6, 12)})
        r.wait_processed_more(200)
        leaving = r.fleet["c2"]
        leaving.signal(signal.SIGTERM)  # kubectl scale --replicas 2
        assert leaving.proc.wait(30) == 0, leaving.tail()
        r.start(2, 2)  # kubectl scale --replicas 3: the pod template still says 2
        r.wait_consumed("c2 consuming its range again", by=RANGES)
        r.wait_processed_more(300)
        counts = r.check(r.finish(), max_duplicates=0)
        cancelled = [e for w in r.fleet.started for e in w.own_events() if e["event"] == "cancelled"]
        assert len(cancelled) >= 8  # c2's 4 on the way down, c0's and c1's 2 each on the way up
        assert not [e for w in r.fleet.started for e in w.own_events() if e["event"] == "requeued"]
    print(counts)


def test_rounds_mode_joins_and_a_graceful_leave_hand_each_queue_over_with_no_duplicate(
    rabbit: RabbitServer, prefix: str, store_url: str, tmp_path: Path
) -> None:
    """The same consumer in rounds mode (seed 0): two members join a running one, then one leaves with SIGTERM;
    each move is a planned handoff (cancel and ack inside on_revoked, then the release), so nothing is handled
    twice and no queue ever has two consumers."""
    with run(rabbit, prefix, store_url, tmp_path / "logs", mode="rounds") as r:
        r.fleet.start("c0")
        r.wait_consumed("c0 consuming every queue", each=12)
        r.publisher.start()
        r.wait_processed_more(200)
        r.fleet.start("c1")
        r.fleet.start("c2")
        r.wait_consumed("three consumers, four queues each", each=4)
        r.wait_processed_more(200)
        leaving = r.fleet["c1"]
        leaving.signal(signal.SIGTERM)
        assert leaving.proc.wait(30) == 0, leaving.tail()
        r.wait_consumed("two consumers, six queues each", each=6)
        r.wait_processed_more(200)
        counts = r.check(r.finish(), max_duplicates=0)
        assert not [e for w in r.fleet.started for e in w.own_events() if e["event"] == "requeued"]
    print(counts)


@pytest.mark.soak
def test_soak_random_faults_keep_every_message_and_each_keys_order(
    rabbit: RabbitServer, prefix: str, store_url: str, tmp_path: Path
) -> None:
    """Three minutes of random faults on three pods (kill -9 and restart, SIGSTOP past the ttl, scale down and up
    with a stale pod template), the same checks over the whole run."""
    rng = random.Random(3)
    faults = 0
    with run(rabbit, prefix, store_url, tmp_path / "logs") as r:
        start_three(r)
        r.publisher.start()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            r.wait_processed_more(200)
            victim = f"c{rng.randrange(3)}"
            fault = rng.choice(["kill", "stop", "scale"])
            if fault == "kill":
                r.kill(r.fleet[victim])
                r.start(int(victim[1]), 3)
            elif fault == "stop":
                r.fleet[victim].signal(signal.SIGSTOP)
                wait_for(f"{victim} frozen", r.fleet[victim].stopped, 10)
                with connect(store_url) as store:
                    wait_for(f"{victim}'s owner records to lapse", lambda v=victim: not _owns(store, v), TTL_S * 5)
                r.fleet[victim].signal(signal.SIGCONT)
            else:
                scale(store_url, 2)
                r.wait_consumed("two pods consuming every queue", by={"c0": range(6), "c1": range(6, 12)})
                r.fleet["c2"].signal(signal.SIGTERM)
                assert r.fleet["c2"].proc.wait(30) == 0
                r.start(2, 2)
            r.wait_consumed(f"every queue consumed after {fault} of {victim}", by=RANGES)
            faults += 1
        counts = r.check(r.finish(), max_duplicates=PREFETCH * 4 * faults)
    print(faults, counts)


def _owns(store: object, worker_id: str) -> bool:
    owners = group.owners(store, "orders")  # type: ignore[arg-type]
    return any(owner is not None and owner == worker_id for owner in owners.values())
