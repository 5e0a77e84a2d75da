"""messages/s of the apportion consumer (`apportion.rabbitmq.QueueConsumer`: a static member, acks fenced by one
SQLite commit per batch) vs a plain pika consumer on the same queues, on a private RabbitMQ node (issue 30 item 1).

Both consume ``--partitions`` queues ``<prefix>.<p>`` (durable, single active consumer), one channel per queue with
the same prefetch, and hand each message to the same handler (it decodes the JSON body); the plain consumer acks
each message after the handler (``basic_ack``) or, as a second baseline, every 100 messages of a queue
(``multiple``: apportion's ack pattern without its commit); the apportion one acks per batch after the fenced
commit. Each run refills the queues (``--messages``, published without confirms: the fill is not measured) and
times the first handled message to the last ack; the consumers alternate ``--runs`` times, each column a median.

    PYTHONPATH=src:. .venv/bin/python bench/rabbitmq_bench.py --messages 40000 --partitions 8 --runs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pika
from tests.rabbitmq_server import RabbitServer, rabbitmq_binary

import apportion
from apportion.group import Static
from apportion.rabbitmq import DEFAULT_BATCH, DEFAULT_PREFETCH, QueueConsumer, declare_queue, queue_name
from apportion.routing import partition_for


class Handler:
    """The handler both consumers call: decode the body, count; remembers the first call's time."""

    def __init__(self) -> None:
        self.count = 0
        self.first = 0.0

    def __call__(self, partition: Any, body: bytes) -> None:
        json.loads(body)
        if not self.count:
            self.first = time.perf_counter()
        self.count += 1


def fill(url: str, prefix: str, partitions: int, messages: int) -> None:
    """Publish ``messages`` keyed messages (no confirms: setup) and wait until the broker holds them all."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    for p in range(partitions):
        declare_queue(channel, queue_name(prefix, p))
    for i in range(messages):
        key = f"order-{i % 1000}"
        body = json.dumps({"key": key, "seq": i // 1000}).encode()
        channel.basic_publish("", queue_name(prefix, partition_for(key, partitions)), body)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        held = sum(channel.queue_declare(queue_name(prefix, p), passive=True).method.message_count
                   for p in range(partitions))  # fmt: skip
        if held >= messages:
            break
        connection.process_data_events(time_limit=0.05)
    connection.close()


def queues_empty(channel: Any, prefix: str, partitions: int) -> bool:
    return all(channel.queue_declare(queue_name(prefix, p), passive=True).method.message_count == 0
               for p in range(partitions))  # fmt: skip


def plain(url: str, prefix: str, partitions: int, messages: int, prefetch: int, ack_every: int = 1) -> float:
    """A plain pika consumer: basic_consume every queue, handle, basic_ack each message (``ack_every`` > 1: every
    that many messages of a queue, ``multiple``, and what is left at the end). Messages/s."""
    handler = Handler()
    connection = pika.BlockingConnection(pika.URLParameters(url))
    last = 0.0
    unacked: dict[int, tuple[Any, int, int]] = {}  # queue -> (channel, messages not acked, last delivery tag)
    for p in range(partitions):
        channel = connection.channel()
        channel.basic_qos(prefetch_count=prefetch)

        def on_message(ch: Any, method: Any, properties: Any, body: bytes, p: int = p) -> None:
            nonlocal last
            handler(p, body)
            count = unacked.get(p, (ch, 0, 0))[1] + 1
            if count >= ack_every:
                ch.basic_ack(delivery_tag=method.delivery_tag, multiple=ack_every > 1)
                count = 0
                last = time.perf_counter()
            unacked[p] = (ch, count, method.delivery_tag)

        channel.basic_consume(queue_name(prefix, p), on_message)
    while handler.count < messages:
        connection.process_data_events(time_limit=0.05)
    for ch, count, tag in unacked.values():
        if count:
            ch.basic_ack(delivery_tag=tag, multiple=True)
            last = time.perf_counter()
    connection.close()
    return messages / (last - handler.first)


def apportioned(url: str, prefix: str, partitions: int, messages: int, prefetch: int, store_url: str) -> float:
    """The apportion consumer: one static member owning every partition; done when the last batch is acked."""
    handler = Handler()
    acked = 0
    last = 0.0
    done = threading.Event()

    def emit(event: str, **fields: Any) -> None:
        nonlocal acked, last
        if event == "acked":
            acked += int(fields["count"])
            last = time.perf_counter()
            if acked >= messages:
                done.set()

    with apportion.connect(store_url) as store:
        group = apportion.Group(store, "bench", partitions=partitions, mode=Static(1), ordinal=0)
        consumer = QueueConsumer(url, prefix, handler, prefetch=prefetch, batch=DEFAULT_BATCH, emit=emit)
        with consumer:
            worker = group.join("c0", consumer.on_assigned, consumer.on_revoked, consumer.on_lost)
            consumer.bind(worker)
            if not done.wait(600):
                raise TimeoutError(f"acked {acked} of {messages} within 600 s")
            worker.stop()
    return messages / (last - handler.first)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=40000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prefetch", type=int, default=DEFAULT_PREFETCH)
    args = parser.parse_args()
    server = rabbitmq_binary()
    if server is None:
        print("rabbitmq-server is not installed (apt-get install -y rabbitmq-server)", file=sys.stderr)
        return 1
    rates: dict[str, list[float]] = {"plain": [], "plain-batch": [], "apportion": []}
    with tempfile.TemporaryDirectory() as tmp, RabbitServer.run(server, Path(tmp) / "rabbitmq") as node:
        for run in range(args.runs):
            for kind in rates:
                prefix = f"bench-{kind}-{run}"
                fill(node.url, prefix, args.partitions, args.messages)
                if kind.startswith("plain"):
                    every = DEFAULT_BATCH if kind == "plain-batch" else 1
                    rate = plain(node.url, prefix, args.partitions, args.messages, args.prefetch, every)
                else:
                    store_url = f"sqlite:///{Path(tmp) / f'{prefix}.db'}"
                    rate = apportioned(node.url, prefix, args.partitions, args.messages, args.prefetch, store_url)
                rates[kind].append(rate)
                print(f"run {run + 1} {kind}: {rate:,.0f} messages/s", flush=True)
    med = {kind: statistics.median(values) for kind, values in rates.items()}
    print(f"\ncommand: PYTHONPATH=src:. {sys.executable} bench/rabbitmq_bench.py --messages {args.messages} "
          f"--partitions {args.partitions} --runs {args.runs} --prefetch {args.prefetch}")  # fmt: skip
    print(f"python {sys.version.split()[0]}, pika {pika.__version__}, median of {args.runs} alternating runs\n")
    print("| consumer | messages/s | vs plain |")
    print("|---|---:|---:|")
    print(f"| plain pika (ack each message) | {med['plain']:,.0f} | 1.00x |")
    print(f"| plain pika (ack per {DEFAULT_BATCH} messages, multiple) | {med['plain-batch']:,.0f} | "
          f"{med['plain-batch'] / med['plain']:.2f}x |")  # fmt: skip
    print(f"| apportion (fenced commit + ack per batch of {DEFAULT_BATCH}) | {med['apportion']:,.0f} | "
          f"{med['apportion'] / med['plain']:.2f}x |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
