"""The producer and the consumer in one process on the real single-node broker (``kafka``) and a SQLite store: every
record handled once and in each key's order by three members, a restart that starts at the store's checkpoint (not
at Kafka's), Kafka's group offsets written for its tools, revoke-before-assign inside ``on_revoked``, a commit fenced
at the store dropping the partition, a belief that ended starting no further record, a handler that raises."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from typing import Any

import pytest

import apportion
from apportion import group as groups
from apportion.errors import ApportionError, BrokerUnavailable, InvalidRequest, TopicUnavailable
from apportion.group import Rounds, Static
from apportion.kafka._client import KafkaConfig
from apportion.kafka._consumer import TopicConsumer
from apportion.kafka._producer import Producer
from apportion.kafka._run import run_consumer
from apportion.waiting import wait_for
from tests.kafka.harness import body, create_topic, end_offsets, group_offsets, produce, set_group_offsets
from tests.kafka_server import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("kafka")]


class Recorder:
    """A handler that records (partition, key, seq) and can be held inside a record until released."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()
        self.hold = threading.Event()
        self.holding = threading.Event()
        self.release = threading.Event()

    def __call__(self, partition: Any, key: bytes | None, value: bytes | None) -> None:
        if self.hold.is_set():
            self.hold.clear()
            self.holding.set()
            self.release.wait(30)
        message = json.loads(value or b"{}")
        with self.lock:
            self.seen.append((str(partition), message["key"], int(message["seq"])))

    def count(self) -> int:
        with self.lock:
            return len(self.seen)


def _record(events: list[Any], who: str) -> Any:
    def emit(kind: str, **fields: Any) -> None:
        events.append((who, kind, fields, time.time()))

    return emit


def _keyed(keys: int, per_key: int, start: int = 0) -> list[tuple[str, bytes]]:
    return [(f"k{i}", body(f"k{i}", seq)) for seq in range(start, start + per_key) for i in range(keys)]


def test_three_members_handle_every_record_once_in_each_keys_order_and_kafka_shows_the_offsets(
    kafka: KafkaCluster, topic: str, store_url: str
) -> None:
    """Members join one after another while records arrive: every hand-over is a revoke (final fenced commit,
    unassign) before the assign, so each of 1,200 records is handled exactly once and each key's in order; the
    store's checkpoints are the partitions' ends, and Kafka's ``__consumer_offsets`` holds the same for the group
    (``list_consumer_group_offsets``, what kafka-consumer-groups --describe shows)."""
    create_topic(kafka, topic, 6)
    produce(kafka, topic, _keyed(30, 20))
    handler = Recorder()
    events: list[Any] = []
    config = KafkaConfig(kafka.bootstrap)
    with apportion.connect(store_url) as store:
        consumers = [TopicConsumer(config, "g", [topic], handler, batch=10, emit=_record(events, f"c{i}"))
                     for i in range(3)]  # fmt: skip
        workers = []
        try:
            for i, c in enumerate(consumers):
                c.__enter__()
                g = apportion.Group(store, "g", resources={topic: 6}, ttl_s=3, settle_s=0.2, min_interval_s=0.4)
                w = g.join(f"c{i}", c.on_assigned, c.on_revoked, c.on_lost)
                c.bind(w)
                workers.append(w)
                wait_for(f"c{i} reading", lambda c=c: c.consuming, 30)
                if i == 0:
                    produce(kafka, topic, _keyed(30, 20, start=20))
            wait_for("every member reading two partitions", lambda: [len(c.consuming) for c in consumers] == [2] * 3,
                     30)  # fmt: skip
            wait_for("1,200 handled", lambda: handler.count() >= 1200, 60)
            ends = end_offsets(kafka, topic, 6)
            wait_for(
                "the store's checkpoints at the ends",
                lambda: {p: workers[0].checkpoint(f"{topic}-{p}") for p in range(6)} == {
                    p: str(e) for p, e in ends.items()},
                30,
            )  # fmt: skip
            wait_for("Kafka's group offsets at the ends", lambda: group_offsets(kafka, "g", topic) == ends, 30)
            stopping = time.time()
            for w in workers:
                w.stop()
        finally:
            for c in consumers:
                c.__exit__(None, None, None)
    seen = handler.seen
    assert len(seen) == 1200 and len(set(seen)) == 1200
    per_key: dict[str, list[int]] = defaultdict(list)
    for _, key, seq in seen:
        per_key[key].append(seq)
    assert all(seqs == list(range(40)) for seqs in per_key.values())
    assert not [e for e in events if e[1] in ("dropped", "fenced")]
    handed_over = [e for e in events if e[1] == "released" and e[3] < stopping]
    assert handed_over, "no partition was handed over while the members joined"
    for who, _, fields, at in [e for e in events if e[1] == "released"]:  # revoke-before-assign
        sooner = [e for e in events if e[1] == "consuming" and e[2]["partition"] == fields["partition"]
                  and e[2]["epoch"] > fields["epoch"] and e[3] < at]  # fmt: skip
        assert not sooner, f"{fields['partition']} read under a later epoch before {who} released it: {sooner}"


def test_a_restarted_member_starts_at_the_stores_checkpoint_not_at_kafkas(
    kafka: KafkaCluster, topic: str, store_url: str
) -> None:
    """After a graceful stop at offset 50, Kafka's offset of the group is moved back to 0 (what a zombie's late,
    unfenced commit would do): the next member starts at the store's 50 and handles each later record once."""
    create_topic(kafka, topic, 1)
    produce(kafka, topic, [("k", body("k", s)) for s in range(50)])
    config = KafkaConfig(kafka.bootstrap)
    handler = Recorder()
    events: list[Any] = []
    with apportion.connect(store_url) as store:
        g = apportion.Group(store, "g", resources={topic: 1}, ttl_s=3)
        with TopicConsumer(config, "g", [topic], handler, batch=7, emit=_record(events, "a")) as consumer:
            worker = g.join("a", consumer.on_assigned, consumer.on_revoked, consumer.on_lost)
            consumer.bind(worker)
            wait_for("50 handled", lambda: handler.count() == 50, 30)
            worker.stop()
        assert groups.committed(store, "g") == {f"{topic}-0": "50"}
        wait_for("Kafka's offset at 50", lambda: group_offsets(kafka, "g", topic) == {0: 50}, 30)
        set_group_offsets(kafka, "g", topic, {0: 0})
        assert group_offsets(kafka, "g", topic) == {0: 0}
        produce(kafka, topic, [("k", body("k", s)) for s in range(50, 80)])
        with TopicConsumer(config, "g", [topic], handler, batch=7, emit=_record(events, "b")) as consumer:
            worker = apportion.Group(store, "g").join("b", consumer.on_assigned, consumer.on_revoked, consumer.on_lost)
            consumer.bind(worker)
            wait_for("80 handled", lambda: handler.count() >= 80, 30)
            wait_for(
                "Kafka's offset moved forward by the store's", lambda: group_offsets(kafka, "g", topic) == {0: 80}, 30
            )
            worker.stop()
    assert [s for _, _, s in handler.seen] == list(range(80))
    starts = [(who, f["offset"]) for who, kind, f, _ in events if kind == "consuming"]
    assert starts == [("a", "earliest"), ("b", 50)]


def test_a_commit_fenced_at_the_store_drops_the_partition_and_the_next_epoch_handles_it_again(
    kafka: KafkaCluster, topic: str, store_url: str
) -> None:
    """The member's lease is revoked at the store while it handles a record (its local belief still holds): the
    batch's commit is fenced, the partition is unassigned with nothing committed, and the record is handled again
    under the next epoch, whose commit the store takes. The store's history holds no commit of epoch 1."""
    create_topic(kafka, topic, 1)
    produce(kafka, topic, [("k", body("k", 0))])
    handler = Recorder()
    handler.hold.set()
    events: list[Any] = []
    with (
        apportion.connect(store_url) as store,
        TopicConsumer(KafkaConfig(kafka.bootstrap), "g", [topic], handler, batch=1, emit=_record(events, "a")) as c,
    ):
        g = apportion.Group(store, "g", resources={topic: 1}, mode=Static(1), ordinal=0, ttl_s=3)
        worker = g.join("c0", c.on_assigned, c.on_revoked, c.on_lost)
        c.bind(worker)
        wait_for("the first record in the handler", handler.holding.is_set, 30)
        lease = worker.member.store_lease
        assert lease is not None
        store.revoke(lease)  # the store's fence moves on; the member believes until it notices
        handler.release.set()
        wait_for("the record handled again", lambda: handler.count() == 2, 30)
        wait_for("committed under a new epoch", lambda: any(e[1] == "committed" for e in events), 30)
        worker.stop()
        history = [e for e in groups.history(store, "g") if e.get("type") == "commit"]
    assert handler.seen == [(f"{topic}-0", "k", 0)] * 2
    fenced = [f for _, kind, f, _ in events if kind == "fenced"]
    assert [(f["epoch"], f["count"]) for f in fenced] == [(1, 1)]
    dropped = [f for _, kind, f, _ in events if kind == "dropped"]
    assert dropped and dropped[0]["reason"] in ("fenced", "lost") and dropped[0]["epoch"] == 1
    committed = [f for _, kind, f, _ in events if kind == "committed"]
    assert [(f["count"], f["checkpoint"], f["epoch"] > 1) for f in committed] == [(1, 1, True)]
    assert history and all(e["epoch"] > 1 for e in history)


class JumpClock:
    """The wall clock plus an offset a test moves forward (a process frozen for that long, as its clock sees it)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def test_a_member_whose_belief_ended_starts_no_further_record_of_that_epoch(
    kafka: KafkaCluster, topic: str, store_url: str
) -> None:
    """The member's clock jumps past its lease deadline inside the first record (as a process frozen there sees it on
    resuming): the records fetched behind it are not handled under the ended epoch; the partition is dropped and,
    owned again, read from the store's checkpoint: each record handled once more at most, in order."""
    create_topic(kafka, topic, 1)
    produce(kafka, topic, [("k", body("k", s)) for s in range(5)])
    events: list[Any] = []
    clock = JumpClock()
    seen: list[int] = []

    def handle(partition: Any, key: bytes | None, value: bytes | None) -> None:
        if not seen:
            clock.offset += 30.0  # past ttl x 0.8: the belief has ended when this returns
        seen.append(int(json.loads(value or b"{}")["seq"]))

    with (
        apportion.connect(store_url) as store,
        TopicConsumer(KafkaConfig(kafka.bootstrap), "g", [topic], handle, batch=5, commit_delay_s=5,
                      emit=_record(events, "a")) as consumer,
    ):  # fmt: skip
        g = apportion.Group(store, "g", resources={topic: 1}, mode=Static(1), ordinal=0, ttl_s=3, clock=clock)
        worker = g.join("c0", consumer.on_assigned, consumer.on_revoked, consumer.on_lost)
        consumer.bind(worker)
        wait_for("all five handled after the drop", lambda: len(seen) >= 6, 30)
        worker.stop()
    assert seen == [0, 0, 1, 2, 3, 4]
    dropped = [f for _, kind, f, _ in events if kind == "dropped"]
    assert [(d["epoch"], d["reason"], d["uncommitted"]) for d in dropped][:1] in ([(1, "expired", 1)], [(1, "lost", 1)])


def test_a_handler_that_raises_ends_the_consumer_and_its_record_is_the_next_owners_first(
    kafka: KafkaCluster, topic: str, store_url: str
) -> None:
    """Record 5 of 10 fails: ``run_consumer`` ends with one line naming the partition and offset; what was handled
    before it is committed (checkpoint 5), the partition is released, and the next member starts at record 5."""
    create_topic(kafka, topic, 1)
    records = [("k", body("k", s, fail=s == 5)) for s in range(10)]
    produce(kafka, topic, records)
    seen: list[int] = []

    def fragile(partition: Any, key: bytes | None, value: bytes | None) -> None:
        message = json.loads(value or b"{}")
        if message["fail"]:
            raise ValueError("bad record")
        seen.append(message["seq"])

    config = KafkaConfig(kafka.bootstrap, connect_timeout_s=10)
    with pytest.raises(ApportionError) as raised:
        run_consumer(store_url, "g", "a", Rounds(), kafka=config, topics=[topic], handle=fragile, batch=3,
                     emit=lambda *a, **k: None)  # fmt: skip
    assert str(raised.value) == f"the handler failed on {topic}-0 at offset 5: ValueError: bad record"
    assert seen == [0, 1, 2, 3, 4]
    with apportion.connect(store_url) as store:
        assert groups.committed(store, "g") == {f"{topic}-0": "5"}
        assert groups.owners(store, "g").get(f"{topic}-0") is None  # released, not left to expire


def test_start_latest_skips_what_was_there_and_records_where_it_began(
    kafka: KafkaCluster, topic: str, store_url: str
) -> None:
    """``start="latest"``: a partition with no checkpoint begins at its end as the member finds it, and that offset
    is committed, so the next owner starts there too (not at a later end)."""
    create_topic(kafka, topic, 1)
    produce(kafka, topic, [("k", body("k", s)) for s in range(20)])
    handler = Recorder()
    events: list[Any] = []
    config = KafkaConfig(kafka.bootstrap)
    with apportion.connect(store_url) as store:
        g = apportion.Group(store, "g", resources={topic: 1}, ttl_s=3)
        with TopicConsumer(config, "g", [topic], handler, start="latest", emit=_record(events, "a")) as consumer:
            worker = g.join("a", consumer.on_assigned, consumer.on_revoked, consumer.on_lost)
            consumer.bind(worker)
            wait_for("the start recorded", lambda: worker.checkpoint(f"{topic}-0") == "20", 30)
            worker.stop()
        produce(kafka, topic, [("k", body("k", s)) for s in range(20, 25)])
        with TopicConsumer(config, "g", [topic], handler, start="latest", emit=_record(events, "b")) as consumer:
            worker = g.join("b", consumer.on_assigned, consumer.on_revoked, consumer.on_lost)
            consumer.bind(worker)
            wait_for("the five later records", lambda: handler.count() == 5, 30)
            worker.stop()
    assert [s for _, _, s in handler.seen] == [20, 21, 22, 23, 24]
    assert [(who, f["offset"]) for who, kind, f, _ in events if kind == "consuming"] == [("a", 20), ("b", 20)]


def test_the_producer_refuses_an_unreachable_broker_and_an_unknown_topic_in_one_line(
    kafka: KafkaCluster, topic: str
) -> None:
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable, match=r"cannot reach Kafka at 127\.0\.0\.1:1 within 2 s"):
        Producer(KafkaConfig("127.0.0.1:1", connect_timeout_s=2), topic)
    assert time.monotonic() - started < 10
    with pytest.raises(TopicUnavailable, match=f"topic '{topic}' does not exist"):
        Producer(KafkaConfig(kafka.bootstrap), topic)
    with pytest.raises(InvalidRequest, match="kafka-option"):
        Producer(KafkaConfig(kafka.bootstrap, options={"no.such.setting": "1"}), topic, partitions=1)
