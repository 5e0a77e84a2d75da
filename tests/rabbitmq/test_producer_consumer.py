"""The producer and the consumer in one process on a real RabbitMQ node (``rabbit``) and a SQLite store: routing by
THE routing hash, the queues' declaration, revoke-before-assign inside ``on_revoked``, and a commit fenced at the
store requeuing instead of acking."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

import pika
import pytest

import apportion
from apportion.errors import BrokerUnavailable, InvalidRequest
from apportion.group import Static
from apportion.rabbitmq import Producer, QueueConsumer, queue_name
from apportion.routing import partition_for
from apportion.waiting import wait_for
from tests.rabbitmq_server import RabbitServer

pytestmark = [pytest.mark.rabbitmq, pytest.mark.xdist_group("rabbitmq")]


def drain(node: RabbitServer, name: str) -> list[bytes]:
    """Every message in queue ``name`` (basic_get, acked)."""
    connection = pika.BlockingConnection(pika.URLParameters(node.url))
    channel = connection.channel()
    found = []
    while True:
        method, _, body = channel.basic_get(name, auto_ack=True)
        if method is None:
            break
        found.append(body)
    connection.close()
    return found


def test_the_producer_routes_each_key_to_the_queue_of_its_partition_in_publish_order(
    rabbit: RabbitServer, prefix: str
) -> None:
    keys = [f"order-{i}" for i in range(40)] + list(range(20))
    with Producer(rabbit.url, prefix, 6) as producer:
        for seq in range(3):
            for key in keys:
                assert producer.publish(key, json.dumps({"key": key, "seq": seq}).encode()) == partition_for(key, 6)
    for p in range(6):
        bodies = [json.loads(b) for b in drain(rabbit, queue_name(prefix, p))]
        assert {partition_for(m["key"], 6) for m in bodies} <= {p}
        for key in {m["key"] for m in bodies}:
            assert [m["seq"] for m in bodies if m["key"] == key] == [0, 1, 2]


def test_partition_queues_are_durable_with_single_active_consumer(rabbit: RabbitServer, prefix: str) -> None:
    with Producer(rabbit.url, prefix, 2):
        pass
    rows = rabbit.ctl_json("list_queues", "name", "durable", "arguments")
    mine = {r["name"]: r for r in rows if str(r["name"]).startswith(prefix + ".")}
    assert sorted(mine) == [f"{prefix}.0", f"{prefix}.1"]
    for row in mine.values():
        assert row["durable"] is True
        assert "x-single-active-consumer" in json.dumps(row["arguments"])


def test_a_broker_that_cannot_be_reached_is_one_error(prefix: str) -> None:
    with pytest.raises(BrokerUnavailable, match=r"cannot connect to RabbitMQ at 127\.0\.0\.1:1"):
        Producer("amqp://guest:guest@127.0.0.1:1/%2F", prefix, 2)
    with pytest.raises(InvalidRequest, match="partitions"):
        Producer("amqp://guest:guest@127.0.0.1:1/%2F", prefix, 0)


class Recorder:
    """A handler that records (partition, seq) and can be held inside a message until released."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []
        self.hold = threading.Event()
        self.holding = threading.Event()
        self.release = threading.Event()

    def __call__(self, partition: Any, body: bytes) -> None:
        if self.hold.is_set():
            self.hold.clear()
            self.holding.set()
            self.release.wait(30)
        self.seen.append((int(partition), int(json.loads(body)["seq"])))


def test_on_revoked_cancels_and_acks_before_the_partition_is_released(
    rabbit: RabbitServer, prefix: str, store_url: str
) -> None:
    """Scaling 2 -> 1 takes ordinal 1's partitions away: its callback returns only after each queue was cancelled and
    its handled messages acked (RabbitMQ lists no consumer from it and nothing unacked), so ordinal 0 then consumes
    them and nothing is handled twice."""
    events: list[tuple[str, dict[str, Any]]] = []
    with Producer(rabbit.url, prefix, 4) as producer:
        for seq in range(50):
            for p in range(4):
                producer.publish(next(k for k in range(1000) if partition_for(k, 4) == p), _body(seq))
    handlers = [Recorder(), Recorder()]
    with apportion.connect(store_url) as store:
        consumers = [
            QueueConsumer(rabbit.url, prefix, handlers[i], prefetch=10, batch=5, emit=_record(events, i))
            for i in range(2)
        ]
        for c in consumers:
            c.__enter__()
        revoked_at: list[dict[str, Any]] = []

        def look(partitions: list[Any]) -> None:  # what RabbitMQ says as c1's on_revoked returns, before the release
            consumers[1].on_revoked(partitions)
            revoked_at.append(_queues(rabbit, prefix))

        try:
            workers = []
            for i, c in enumerate(consumers):
                g = apportion.Group(store, "g", partitions=4, mode=Static(2), ordinal=i, ttl_s=3)
                w = g.join(f"c{i}", c.on_assigned, look if i else c.on_revoked, c.on_lost)
                c.bind(w)
                workers.append(w)
            wait_for("200 handled", lambda: sum(len(h.seen) for h in handlers) == 200, 30)
            apportion.Group(store, "g").scale(1)
            wait_for("c0 consuming every queue", lambda: consumers[0].consuming == [0, 1, 2, 3], 30)
            assert revoked_at, "c1's on_revoked never ran"
            for p in (2, 3):
                assert revoked_at[0][queue_name(prefix, p)] == {"messages": 0, "messages_unacknowledged": 0,
                                                                 "consumers": 0}  # fmt: skip
            for w in workers:
                w.stop()
        finally:
            for c in consumers:
                c.__exit__(None, None, None)
    assert sorted(handlers[0].seen + handlers[1].seen) == sorted((p, s) for p in range(4) for s in range(50))
    assert [e for e in events if e[1] == "requeued"] == []


def test_a_commit_fenced_at_the_store_requeues_the_batch_instead_of_acking(
    rabbit: RabbitServer, prefix: str, store_url: str
) -> None:
    """The member's lease is revoked at the store while it handles a message (its local belief still holds): the
    batch's commit is fenced, the message is requeued, not acked, and handled again under the next epoch."""
    events: list[tuple[str, dict[str, Any]]] = []
    handler = Recorder()
    handler.hold.set()
    with Producer(rabbit.url, prefix, 1) as producer:
        producer.publish("k", _body(0))
    with (
        apportion.connect(store_url) as store,
        QueueConsumer(rabbit.url, prefix, handler, prefetch=5, batch=1, emit=_record(events, 0)) as consumer,
    ):
        g = apportion.Group(store, "g", partitions=1, mode=Static(1), ordinal=0, ttl_s=3)
        worker = g.join("c0", consumer.on_assigned, consumer.on_revoked, consumer.on_lost)
        consumer.bind(worker)
        wait_for("the first message in the handler", handler.holding.is_set, 30)
        lease = worker.member.store_lease
        assert lease is not None
        store.revoke(lease)  # the store's fence moves on; the member believes until it notices
        handler.release.set()
        wait_for("the message handled again", lambda: len(handler.seen) == 2, 30)
        wait_for("acked under a new epoch", lambda: any(e[1] == "acked" for e in events), 30)
        worker.stop()
    assert handler.seen == [(0, 0), (0, 0)]
    requeued = [f for _, kind, f in events if kind == "requeued"]
    assert requeued and requeued[0]["reason"] in ("fenced", "lost") and requeued[0]["epoch"] == 1
    acked = [f for _, kind, f in events if kind == "acked"]
    assert [(a["count"], a["epoch"] > 1) for a in acked] == [(1, True)]


def _body(seq: int) -> bytes:
    return json.dumps({"key": "k", "seq": seq}).encode()


def _record(events: list[Any], who: int) -> Any:
    def emit(kind: str, **fields: Any) -> None:
        events.append((who, kind, fields))

    return emit


def _queues(node: RabbitServer, prefix: str) -> dict[str, dict[str, int]]:
    return {name: row for name, row in node.queues().items() if name.startswith(prefix + ".")}


def test_the_produce_command_publishes_json_lines_by_their_key(rabbit: RabbitServer, prefix: str) -> None:
    """`apportion rabbitmq produce` routes each line by its ``key`` field; a line without one is exit 2, one line."""
    from tests.rabbitmq.harness import env

    lines = "".join(json.dumps({"key": f"k{i}", "seq": 0}) + "\n" for i in range(30))
    command = [sys.executable, "-m", "apportion.cli", "rabbitmq", "produce", "--amqp", rabbit.url, "--prefix", prefix,
               "--partitions", "3"]  # fmt: skip
    done = subprocess.run(command, input=lines, capture_output=True, text=True, timeout=60, env=env())
    assert done.returncode == 0, done.stderr
    counts = [sum(1 for i in range(30) if partition_for(f"k{i}", 3) == p) for p in range(3)]
    assert json.loads(done.stdout) == {"published": 30, "per_partition": counts}
    assert [len(drain(rabbit, queue_name(prefix, p))) for p in range(3)] == counts
    bad = subprocess.run(command, input='{"seq": 1}\n', capture_output=True, text=True, timeout=60, env=env())
    assert bad.returncode == 2
    assert bad.stderr.strip() == "apportion: error: stdin: line 1: not a JSON object with 'key'"


class JumpClock:
    """The wall clock plus an offset a test moves forward (a process frozen for that long, as its clock sees it)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def test_a_consumer_whose_belief_ended_starts_no_further_message_of_that_epoch(
    rabbit: RabbitServer, prefix: str, store_url: str
) -> None:
    """The member's clock jumps past its lease deadline inside the first message (as a process frozen there sees it
    on resuming): the messages already delivered behind it are not handled under the ended epoch but requeued
    with it, and each is handled once, in order, after the member owns the partition again."""
    events: list[tuple[int, str, dict[str, Any]]] = []
    clock = JumpClock()
    seen: list[int] = []

    def handle(partition: Any, body: bytes) -> None:
        if not seen:
            clock.offset += 30.0  # past ttl x 0.8: the belief has ended when this returns
        seen.append(int(json.loads(body)["seq"]))

    with Producer(rabbit.url, prefix, 1) as producer:
        for seq in range(5):
            producer.publish("k", _body(seq))
    with (
        apportion.connect(store_url) as store,
        QueueConsumer(
            rabbit.url, prefix, handle, prefetch=5, batch=5, ack_delay_s=5, emit=_record(events, 0)
        ) as consumer,
    ):
        g = apportion.Group(store, "g", partitions=1, mode=Static(1), ordinal=0, ttl_s=3, clock=clock)
        worker = g.join("c0", consumer.on_assigned, consumer.on_revoked, consumer.on_lost)
        consumer.bind(worker)
        wait_for("all five handled after the redelivery", lambda: len(seen) >= 6, 30)
        worker.stop()
    assert seen == [0, 0, 1, 2, 3, 4]
    requeued = [f for _, kind, f in events if kind == "requeued"]
    assert [(r["epoch"], r["reason"]) for r in requeued] == [(1, "fenced")]


@pytest.mark.parametrize("url", ["aaa", "a" * 10_000, "amqp://h:0", "amqp://h:99999", "http://h", "amqp://[::1"])
def test_a_malformed_amqp_url_is_one_line_exit_2_before_any_connection(url: str) -> None:
    """Found by the fuzz pass over every option: pika indexed the parts of ``aaa`` (an internal error)."""
    from tests.cli.run import cli

    result = cli("rabbitmq", "produce", "--partitions", "4", "--prefix", "q", "--amqp", url, stdin='{"key": "k"}\n')
    assert result.code == 2
    assert "amqp: not an AMQP URL" in result.one_error_line()


def test_a_partition_count_beyond_a_groups_is_one_line_exit_2() -> None:
    """Found by the fuzz pass: 20 digits allocated a count per queue (OverflowError, an internal error)."""
    from tests.cli.run import cli

    args = ["rabbitmq", "produce", "--amqp", "amqp://h", "--prefix", "q", "--partitions", "99999999999999999999"]
    result = cli(*args, stdin='{"key": "k"}\n')
    assert result.code == 2 and "--partitions" in result.one_error_line()
