"""What the Kafka consumer tests share: topics, records, Kafka's view of a group's offsets, and for the process tests
a fleet of `apportion kafka consume` processes, a producer thread and the independent checks of a run.

The checks (:meth:`Run.check`), over the consumers' event lines, the handler's lines and the store's history:

- **at least once**: every produced ``(key, seq)`` (acknowledged by the broker) has a ``processed`` line;
- **per-key order**: the *first* processing of each key's records is in ``seq`` order (0, 1, 2, ... with no gap),
  by the system-wide monotonic clock; anything else is a second handling of a record handled before (a duplicate);
- **duplicates bounded**: at most ``batch`` per partition tenure that did not end in a graceful release (a kill -9,
  a lost or fenced partition, a belief that ended): only the handled-but-uncommitted records of such a tenure are
  read again by the next owner, and a partition never has more than ``batch`` of them;
- **one consumer per partition at a time**: per partition, the handling spans of the tenures (from ``consuming`` to
  its ``released``, or to the start of its last handled record when the tenure was dropped or killed) never overlap
  between two tenures, their epochs increase with time, and every ``processed`` line lies inside a tenure of its
  process for that partition;
- **no offset committed by a fenced member**: in the store's history, every ``commit`` of a partition carries the
  epoch (and member) of the partition's latest ``claim`` before it, and checkpoints never go back.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from apportion import group as groups
from apportion.fleet import Fleet, WorkerProcess
from apportion.kafka._client import KafkaConfig, topic_partitions
from apportion.kafka._producer import Producer
from apportion.store import connect
from apportion.waiting import wait_for
from tests.kafka_server import KafkaCluster

ROOT = Path(__file__).resolve().parents[2]
GROUP = "orders"
TTL_S = 2.0
BATCH = 10
HANDLE_S = 0.002  # the handler's "work" per record


def create_topic(kafka: KafkaCluster, name: str, partitions: int, replication: int = 1) -> None:
    """Create ``name`` and wait until the broker's metadata lists all its partitions."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
    topic = NewTopic(name, partitions, replication_factor=replication)
    for future in admin.create_topics([topic], operation_timeout=30).values():
        future.result(60)
    config = KafkaConfig(kafka.bootstrap)
    wait_for(f"topic {name} with {partitions} partitions", lambda: _count(config, name) == partitions, 30)


def _count(config: KafkaConfig, name: str) -> int | None:
    with contextlib.suppress(Exception):
        return topic_partitions(config, [name])[name]
    return None


def body(key: str, seq: int, **more: Any) -> bytes:
    return json.dumps({"key": key, "seq": seq, **more}).encode()


def produce(kafka: KafkaCluster, topic: str, records: list[tuple[str, bytes]]) -> list[int]:
    """Send ``(key, value)`` records with apportion's producer and wait for the broker; each one's partition."""
    with Producer(KafkaConfig(kafka.bootstrap), topic) as producer:
        return [producer.send(key, value) for key, value in records]


def group_offsets(kafka: KafkaCluster, group: str, topic: str) -> dict[int, int]:
    """Partition of ``topic`` -> the offset Kafka's ``__consumer_offsets`` holds for ``group`` (what
    kafka-consumer-groups --describe shows)."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
    request = [ConsumerGroupTopicPartitions(group)]
    result = next(iter(admin.list_consumer_group_offsets(request).values())).result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.topic == topic and tp.offset >= 0}


def set_group_offsets(kafka: KafkaCluster, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Move Kafka's committed offsets of ``group`` (as a zombie's late commit, or an operator's reset, would)."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
    parts = [TopicPartition(topic, p, o) for p, o in offsets.items()]
    request = [ConsumerGroupTopicPartitions(group, parts)]
    next(iter(admin.alter_consumer_group_offsets(request).values())).result(30)


def end_offsets(kafka: KafkaCluster, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "end-reader", "log_level": 0})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        consumer.close()


# -- the process tests -----------------------------------------------------------------------------------------


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "APPORTION_TEST_HANDLE_S": f"{HANDLE_S:g}"}


def consume_args(kafka: KafkaCluster, topic: str, store_url: str) -> list[str]:
    """`apportion kafka consume` (rounds mode) with the test handler, without ``--id``."""
    return [
        sys.executable, "-m", "apportion.cli", "kafka", "consume", "--kafka", kafka.bootstrap, "--topic", topic,
        "--store", store_url, "--group", GROUP, "--ttl", f"{TTL_S:g}", "--settle", "0.3", "--min-interval", "0.6",
        "--heartbeat", "4", "--handler", "tests.kafka.handler:record", "--batch", str(BATCH), "--commit-delay", "0.3",
        "--connect-timeout", "20",
    ]  # fmt: skip


class Publisher(threading.Thread):
    """Sends ``{"key": "k<i>", "seq": n}`` for ``keys`` keys in turn, at most ``rate`` a second, until stopped;
    ``sent`` counts per key (seq 0..count-1 were sent; :meth:`finish` waits until the broker acknowledged all)."""

    def __init__(self, kafka: KafkaCluster, topic: str, keys: int = 48, rate: float = 300.0) -> None:
        super().__init__(name="publisher", daemon=True)
        self.producer = Producer(KafkaConfig(kafka.bootstrap), topic)
        self.keys = keys
        self.interval = 1.0 / rate
        self.sent: Counter[str] = Counter()
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            i = 0
            next_at = time.monotonic()
            while not self._stop_event.is_set():
                key = f"k{i % self.keys}"
                self.producer.send(key, body(key, self.sent[key]))
                self.sent[key] += 1
                i += 1
                next_at += self.interval
                self._stop_event.wait(max(0.0, next_at - time.monotonic()))  # pacing, not synchronisation
            self.producer.flush()
        except BaseException as exc:
            self.error = exc

    def total(self) -> int:
        return sum(self.sent.values())

    def finish(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(90)
        assert self.error is None, f"the publisher failed: {self.error!r}"


@dataclass
class Run:
    """One process test's consumers and publisher (use :func:`run`)."""

    kafka: KafkaCluster
    topic: str
    partitions: int
    store_url: str
    fleet: Fleet
    publisher: Publisher
    killed: dict[int, float] = field(default_factory=dict)  # process id -> the wall time of its kill -9

    def kill(self, worker: WorkerProcess) -> None:
        worker.kill()
        self.killed[worker.proc.pid] = time.time()

    def consuming(self, ignore: Collection[str] = ()) -> dict[str, set[str]]:
        """Partition -> the live consumers (but ``ignore``'s) whose event lines say they read it now."""
        found: dict[str, set[str]] = defaultdict(set)
        for worker in self.fleet.workers.values():
            if not worker.alive() or worker.id in ignore:
                continue
            now: set[str] = set()
            for e in worker.own_events():
                if e["event"] == "consuming":
                    now.add(e["partition"])
                elif e["event"] in ("released", "dropped"):
                    now.discard(e["partition"])
            for p in now:
                found[p].add(worker.id)
        return found

    def wait_consumed(
        self, what: str, counts: dict[str, int], timeout_s: float = 60.0, ignore: Collection[str] = ()
    ) -> None:
        """Until every partition is read by exactly one live consumer (but ``ignore``'s: a frozen one's lines are
        out of date), consumer ``id`` reading ``counts[id]``."""

        def done() -> bool:
            now = self.consuming(ignore)
            if any(len(now.get(f"{self.topic}-{p}", ())) != 1 for p in range(self.partitions)):
                return False
            return Counter(w for ws in now.values() for w in ws) == Counter(counts)

        wait_for(what, done, timeout_s, poll_s=0.1, context=lambda: f"consuming: {dict(self.consuming())}")

    def processed(self) -> list[dict[str, Any]]:
        """Every ``processed`` line of every consumer process, each with its ``worker`` and ``pid``, by ``mono``."""
        lines = [
            {**e, "worker": w.id, "pid": w.proc.pid}
            for w in self.fleet.started
            for e in w.own_events()
            if e["event"] == "processed"
        ]
        return sorted(lines, key=lambda e: int(e["mono"]))

    def count_processed(self) -> int:
        return sum(log.count("processed") for log in self.fleet.logs.values())

    def wait_processed_more(self, count: int, timeout_s: float = 60.0) -> None:
        target = self.count_processed() + count
        wait_for(f"{count} more processed records", lambda: self.count_processed() >= target, timeout_s, poll_s=0.1)

    def finish(self, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Stop producing (every record acknowledged), wait until every record was processed (``timeout_s`` without
        progress); the processed lines."""
        self.publisher.finish()
        sent = {(k, s) for k, n in self.publisher.sent.items() for s in range(n)}

        def missing() -> set[tuple[str, int]]:
            return sent - {(e["key"], int(e["seq"])) for e in self.processed()}

        wait_for(
            f"all {len(sent)} records processed",
            lambda: not missing(),
            timeout_s,
            poll_s=0.2,
            progress=self.count_processed,
            context=lambda: f"{len(missing())} missing, e.g. {sorted(missing())[:5]}; consuming {self.consuming()}",
        )
        return self.processed()

    # -- the checks ------------------------------------------------------------------------------------------

    def check(self, processed: list[dict[str, Any]]) -> dict[str, int]:
        """Every check of the module docstring; returns what was counted."""
        tenures = self._tenures(processed)
        first_seen: dict[str, int] = {}
        duplicates = 0
        out_of_order = []
        for e in processed:
            key, seq = e["key"], int(e["seq"])
            top = first_seen.get(key, -1)
            if seq > top:
                if seq != top + 1:
                    out_of_order.append(f"{key}: seq {seq} first processed after {top} (by {e['worker']})")
                first_seen[key] = seq
            else:
                duplicates += 1
        assert not out_of_order, "first processings out of order:\n" + "\n".join(out_of_order[:10])
        ungraceful = sum(1 for t in tenures if not t.graceful)
        bound = BATCH * ungraceful
        assert duplicates <= bound, f"{duplicates} duplicates, at most {bound} ({ungraceful} ungraceful tenures)"
        problems = self._overlaps(tenures, processed) + self._stale_commits()
        assert not problems, "the fence:\n" + "\n".join(problems[:10])
        return {"processed": len(processed), "duplicates": duplicates, "bound": bound, "tenures": len(tenures),
                "ungraceful": ungraceful}  # fmt: skip

    def _tenures(self, processed: list[dict[str, Any]]) -> list[Tenure]:
        """Every (process, partition, epoch) consumption, from the consumers' own lines and the kills."""
        found: list[Tenure] = []
        for w in self.fleet.started:
            pid = w.proc.pid
            open_now: dict[str, Tenure] = {}
            for e in w.own_events():
                if e["event"] == "consuming":
                    open_now[e["partition"]] = Tenure(e["partition"], w.id, pid, int(e["epoch"]), float(e["time"]))
                elif e["event"] in ("released", "dropped") and e["partition"] in open_now:
                    t = open_now.pop(e["partition"])
                    t.end = float(e["time"])
                    t.graceful = e["event"] == "released" and not e["uncommitted"]
                    found.append(t)
            for t in open_now.values():  # killed (or still running: finish stops nothing)
                t.end = self.killed.get(pid, float("inf"))
                t.graceful = pid not in self.killed
                found.append(t)
        by_tenure = defaultdict(list)
        for e in processed:
            for t in found:
                if t.pid == e["pid"] and t.partition == e["partition"] and t.start - 0.001 <= e["start"] <= t.end:
                    by_tenure[id(t)].append(e)
                    break
        for t in found:
            t.handled = by_tenure.get(id(t), [])
        return found

    def _overlaps(self, tenures: list[Tenure], processed: list[dict[str, Any]]) -> list[str]:
        problems = []
        placed = {id(e) for t in tenures for e in t.handled}
        problems += [
            f"{e['worker']} processed {e['key']}/{e['seq']} of {e['partition']} at {e['start']:.3f}, not reading it"
            for e in processed
            if id(e) not in placed
        ]
        by_partition = defaultdict(list)
        for t in tenures:
            by_partition[t.partition].append(t)
        for p, spans in by_partition.items():
            spans.sort(key=lambda t: t.start)
            for a, b in itertools.pairwise(spans):
                if b.start < a.busy_until() and a.pid != b.pid:
                    problems.append(f"{p}: {a.worker} (epoch {a.epoch}) busy until {a.busy_until():.3f}, "
                                    f"{b.worker} (epoch {b.epoch}) from {b.start:.3f}")  # fmt: skip
                if b.epoch <= a.epoch:
                    problems.append(f"{p}: epoch {b.epoch} of {b.worker} after epoch {a.epoch} of {a.worker}")
        return problems

    def _stale_commits(self) -> list[str]:
        """The store's own record: each commit by the latest claimer of the partition, with its epoch."""
        problems = []
        claimed: dict[str, tuple[int, str]] = {}
        with connect(self.store_url) as store:
            for e in groups.history(store, GROUP):
                if e.get("type") == "claim":
                    claimed[e["partition"]] = (int(e["epoch"]), str(e["member"]))
                elif e.get("type") in ("release", "lost", "fenced") and "partition" in e:
                    if claimed.get(e["partition"]) == (int(e.get("epoch", -1)), str(e["member"])):
                        del claimed[e["partition"]]  # that claim's commits end here (not a later owner's)
                elif e.get("type") == "commit":
                    holder = claimed.get(e["partition"])
                    if holder != (int(e["epoch"]), str(e["member"])):
                        problems.append(f"{e['partition']}: commit by {e['member']} epoch {e['epoch']} at revision "
                                        f"{e['revision']} while {holder} held it")  # fmt: skip
        return problems


@dataclass(eq=False)
class Tenure:
    """One process's consumption of one partition under one epoch."""

    partition: str
    worker: str
    pid: int
    epoch: int
    start: float
    end: float = float("inf")
    graceful: bool = True
    handled: list[dict[str, Any]] = field(default_factory=list)

    def busy_until(self) -> float:
        """Until when this tenure may have handled a record: its release (graceful), else the start of its last
        handled record (a killed, lost or fenced tenure reads nothing after it; its end is when it noticed)."""
        if self.graceful:
            return self.end
        return max((float(e["start"]) for e in self.handled), default=self.start)


@contextlib.contextmanager
def run(kafka: KafkaCluster, topic: str, partitions: int, store_url: str, logs: Path) -> Iterator[Run]:
    """A fleet of consumers (none started) and a publisher (not started); all stopped after."""
    fleet = Fleet(logs, consume_args(kafka, topic, store_url), env=env())
    publisher = Publisher(kafka, topic)
    with fleet:
        try:
            yield Run(kafka, topic, partitions, store_url, fleet, publisher)
        finally:
            with contextlib.suppress(AssertionError):
                publisher.finish()
