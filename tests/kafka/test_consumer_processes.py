"""`apportion kafka consume` end to end: three consumer processes (rounds mode, a SQLite store) on a real KRaft broker
while a producer thread sends keyed records, under every fault in turn — kill -9 of a consumer, a new consumer
joining, SIGSTOP past the ttl then SIGCONT, a graceful leave (SIGTERM) — and, on a 3-broker cluster (``kafka3``;
replication factor 3, ``make soak``), a broker killed and restarted. ``make test`` runs the consumers' faults on the
session's one broker (the 3 brokers' start and the broker's kill cost it ~45 s of its 15 minutes); the broker kill
is the soak case, as the Kafka issue allows. The run is checked by
``tests/kafka/harness.py``: every record processed at least once, each key's records first processed in order,
duplicates at most ``batch`` per partition tenure that did not end gracefully, never two consumers handling one
partition at once (the handler's own timestamps against the consumers' tenures), and no commit in the store's
history by anyone but the partition's current claimer."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from apportion import group as groups
from apportion.fleet import Fleet
from apportion.kafka._partitioner import partition_for_key
from apportion.store import connect
from apportion.waiting import wait_for
from tests.kafka.harness import (
    BATCH,
    GROUP,
    TTL_S,
    body,
    consume_args,
    create_topic,
    end_offsets,
    env,
    group_offsets,
    produce,
    run,
)
from tests.kafka_server import KafkaCluster

pytestmark = [pytest.mark.slow, pytest.mark.kafka, pytest.mark.xdist_group("kafka")]

FOUR = {"c0": 4, "c1": 4, "c2": 4}


@pytest.mark.parametrize("brokers", [1, pytest.param(3, marks=pytest.mark.soak)])
def test_consumers_under_kill_join_freeze_leave_and_a_broker_kill_lose_nothing_and_keep_each_keys_order(
    brokers: int, topic: str, store_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cluster: KafkaCluster = request.getfixturevalue("kafka" if brokers == 1 else "kafka3")
    create_topic(cluster, topic, 12, replication=brokers)
    started = time.monotonic()
    timeline: list[tuple[str, float]] = []
    with run(cluster, topic, 12, store_url, tmp_path / "logs") as r:
        for ordinal in range(3):
            r.fleet.start(f"c{ordinal}")
        r.wait_consumed("three consumers reading four partitions each", FOUR)
        r.publisher.start()
        r.wait_processed_more(300)

        # kill -9: c1's partitions go to c0 and c2 once its lease lapses; they read from the store's checkpoints
        r.kill(r.fleet["c1"])
        timeline.append(("kill -9 c1", time.monotonic() - started))
        r.wait_consumed("c0 and c2 reading c1's partitions too", {"c0": 6, "c2": 6})
        r.wait_processed_more(300)

        # a join: a new c1 process; each hand-over is a revoke (final commit) before the assign
        r.fleet.start("c1")
        timeline.append(("join c1", time.monotonic() - started))
        r.wait_consumed("c1 back with four partitions", FOUR)
        r.wait_processed_more(300)

        # SIGSTOP past the ttl: the others take c2's partitions; resumed, c2 handles nothing of its old epochs
        frozen = r.fleet["c2"]
        frozen.signal(signal.SIGSTOP)
        wait_for("c2 frozen", frozen.stopped, 10)
        timeline.append(("SIGSTOP c2", time.monotonic() - started))
        with connect(store_url) as store:
            wait_for("c2's owner records to lapse",
                     lambda: "c2" not in groups.owners(store, GROUP).values(), TTL_S * 5)  # fmt: skip
        r.wait_consumed("c0 and c1 reading everything", {"c0": 6, "c1": 6}, ignore={"c2"})
        r.wait_processed_more(300)
        resumed = time.time()
        frozen.signal(signal.SIGCONT)
        timeline.append(("SIGCONT c2", time.monotonic() - started))
        r.wait_consumed("c2 back with four partitions", FOUR)
        r.wait_processed_more(300)

        # a graceful leave: SIGTERM, every partition committed and released before the others read it
        leaving = r.fleet["c0"]
        leaving.signal(signal.SIGTERM)
        assert leaving.proc.wait(30) == 0, leaving.tail()
        timeline.append(("SIGTERM c0", time.monotonic() - started))
        r.wait_consumed("c1 and c2 reading six each", {"c1": 6, "c2": 6})
        r.wait_processed_more(300)

        if brokers == 3:  # a broker killed (SIGKILL) and restarted: leaders move, producer and consumers carry on
            cluster.kill(2)
            timeline.append(("kill -9 broker 2", time.monotonic() - started))
            r.wait_processed_more(300)
            cluster.restart(2)
            timeline.append(("broker 2 back", time.monotonic() - started))
            r.wait_processed_more(300)

        processed = r.finish()
        for consumer in ("c1", "c2"):
            r.fleet[consumer].signal(signal.SIGTERM)
        for consumer in ("c1", "c2"):
            assert r.fleet[consumer].proc.wait(30) == 0, r.fleet[consumer].tail()
        counts = r.check(processed)

        # c2 resumed: not one record handled under an epoch of before the freeze
        old = {e["partition"]: int(e["epoch"]) for e in frozen.own_events() if e["event"] == "consuming"
               and float(e["time"]) < resumed}  # fmt: skip
        drops = [e for e in frozen.own_events() if e["event"] == "dropped" and float(e["time"]) >= resumed]
        assert {e["partition"] for e in drops} >= {p for p in old if _held_at_freeze(frozen, p, resumed)}
        assert all(e["reason"] in ("lost", "expired", "fenced") for e in drops)
        dropped_at: dict[str, float] = {}
        for d in drops:  # the first drop of each partition after the resume: its old epoch's end
            dropped_at.setdefault(d["partition"], float(d["time"]))
        late = [e for e in processed if e["pid"] == frozen.proc.pid
                and resumed <= e["start"] <= dropped_at.get(e["partition"], 0.0)]  # fmt: skip
        assert not late, f"c2 handled records under an ended epoch after it resumed: {late[:3]}"
        # the faults that were not graceful are the only source of duplicates: kill -9 and the freeze
        assert counts["ungraceful"] >= 8 and counts["duplicates"] <= BATCH * counts["ungraceful"]

        # Kafka's own view of the group (kafka-consumer-groups --describe) ends where the store does
        ends = {p: end for p, end in end_offsets(cluster, topic, 12).items() if end}  # a partition with no key: none
        with connect(store_url) as store:
            assert groups.committed(store, GROUP) == {f"{topic}-{p}": str(e) for p, e in ends.items()}
        wait_for("Kafka's group offsets at the ends", lambda: group_offsets(cluster, GROUP, topic) == ends, 30)
    took = time.monotonic() - started
    print(counts, f"{took:.0f} s", timeline)


def _held_at_freeze(worker: object, partition: str, resumed: float) -> bool:
    """Whether ``worker``'s lines say it read ``partition`` when it was frozen (consuming, not released since)."""
    held = False
    for e in worker.own_events():  # type: ignore[attr-defined]
        if float(e["time"]) >= resumed:
            break
        if e.get("partition") == partition and e["event"] == "consuming":
            held = True
        elif e.get("partition") == partition and e["event"] in ("released", "dropped"):
            held = False
    return held


HEARTBEAT_S = 2.0


def test_a_grown_topic_is_read_within_a_heartbeat_and_a_deleted_one_ends_the_consumer_with_one_line(
    kafka: KafkaCluster, topic: str, store_url: str, tmp_path: Path
) -> None:
    """The topic grows from 2 to 4 partitions on the broker (Kafka's admin API, as kafka-topics --alter): within one
    heartbeat the consumer reads the new partitions too; then the topic is deleted: the consumer releases every
    partition as in a graceful leave (nothing dropped) and exits 1 with one line."""
    create_topic(kafka, topic, 2)
    args = [*consume_args(kafka, topic, store_url), "--heartbeat", f"{HEARTBEAT_S:g}"]
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
    with Fleet(tmp_path / "logs", args, env=env()) as fleet:
        a = fleet.start("a")

        def reading() -> set[str]:
            now: set[str] = set()
            for e in a.own_events():
                if e["event"] == "consuming":
                    now.add(e["partition"])
                elif e["event"] in ("released", "dropped"):
                    now.discard(e["partition"])
            return now

        wait_for("a reading both partitions", lambda: reading() == {f"{topic}-0", f"{topic}-1"}, 60,
                 alive=lambda: fleet.check(["a"]))  # fmt: skip
        for future in admin.create_partitions([NewPartitions(topic, 4)]).values():
            future.result(30)
        grown = time.monotonic()
        wait_for("a reading the new partitions", lambda: len(reading()) == 4, 3 * HEARTBEAT_S + 10)
        assert time.monotonic() - grown <= HEARTBEAT_S + 5  # polled at half the heartbeat; a round; a busy machine
        keys = {partition_for_key(f"k{i}", 4): f"k{i}" for i in range(40)}
        produce(kafka, topic, [(keys[p], body(keys[p], 0)) for p in (2, 3)])
        wait_for("the new partitions' records processed", lambda: {e["partition"] for e in a.of("processed")} >= {
            f"{topic}-2", f"{topic}-3"}, 30)  # fmt: skip
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            future.result(60)
        wait_for("the consumer to exit", lambda: not a.alive(), 30)
        assert a.proc.returncode == 1
        assert {e["partition"] for e in a.of("released")} == {f"{topic}-{p}" for p in range(4)}
        assert not a.of("dropped") and not a.of("lost")
        errors = [line for line in a.log.text().splitlines() if line.startswith("apportion: error:")]
        assert errors == [f"apportion: error: topic {topic!r} does not exist on Kafka at {kafka.bootstrap}"]
        assert "Traceback" not in a.log.text()
