"""Issue 45.4: the queue of a partition is a name template (``--queue-name '{prefix}-P{partition}'``), so seed 3's
producers, which publish to ``OrderEvents-P<x>``, and apportion's consumers share queues; the default stays
``<prefix>.<p>``. On a real RabbitMQ node (``rabbit``) and a SQLite store."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pika
import pytest

import apportion
from apportion.errors import InvalidRequest
from apportion.group import Static
from apportion.rabbitmq import DEFAULT_QUEUE_NAME, QueueConsumer, queue_name
from apportion.rabbitmq._queues import validate_queue_name
from apportion.routing import partition_for
from apportion.waiting import wait_for
from tests.cli.run import cli
from tests.rabbitmq.harness import env
from tests.rabbitmq_server import RabbitServer

SEED = "{prefix}-P{partition}"  # seed 3's OrderEvents-P<x>


def test_the_default_name_is_unchanged_and_a_template_names_the_seeds_queues() -> None:
    assert queue_name("orders", 7) == "orders.7" == queue_name("orders", 7, DEFAULT_QUEUE_NAME)
    assert queue_name("OrderEvents", 2, SEED) == "OrderEvents-P2"
    assert queue_name("x", 3, "{{literal}}-{partition}") == "{literal}-3"


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ("{prefix}", "needs {partition} exactly once"),
        ("{prefix}-{partition}-{partition}", "needs {partition} exactly once"),
        ("{prefix}{prefix}{partition}", "{prefix} at most once"),
        ("{queue}-{partition}", "unknown field {queue}"),
        ("{prefix}-{partition:03d}", "no conversion or format spec"),
        ("{prefix}-{partition!r}", "no conversion or format spec"),
        ("{prefix-{partition}", "is not a template"),
        ("q" * 250 + "{partition}", "at most 255 bytes"),
    ],
)
def test_a_template_that_cannot_name_one_queue_per_partition_is_refused_naming_the_option(
    template: str, words: str
) -> None:
    with pytest.raises(InvalidRequest, match="queue-name") as caught:
        validate_queue_name(template, "orders")
    assert words in str(caught.value)
    result = cli("rabbitmq", "produce", "--amqp", "amqp://h", "--prefix", "q", "--partitions", "2",
                 "--queue-name", template, stdin='{"key": "k"}\n')  # fmt: skip
    assert result.code == 2 and "queue-name" in result.one_error_line()  # before any connection


pytestmark = [pytest.mark.rabbitmq, pytest.mark.xdist_group("rabbitmq")]


def seed_publish(node: RabbitServer, prefix: str, partitions: int, keys: list[str]) -> None:
    """Seed 3's producer: hash, modulo, ``BasicPublish`` to ``<PartitionQueuePrefix>-P<partition>``; here with
    apportion's hash, the queue name being what is shared."""
    connection = pika.BlockingConnection(pika.URLParameters(node.url))
    channel = connection.channel()
    channel.confirm_delivery()
    for key in keys:
        body = json.dumps({"key": key}).encode()
        channel.basic_publish("", f"{prefix}-P{partition_for(key, partitions)}", body, mandatory=True)
    connection.close()


def test_the_seeds_producer_and_apportions_produce_command_share_queues_with_a_templated_consumer(
    rabbit: RabbitServer, prefix: str, store_url: str
) -> None:
    """A consumer of ``{prefix}-P{partition}`` subscribes to the seed's queues; a message the seed's producer
    publishes there and one `apportion rabbitmq produce --queue-name` publishes are both handled, and no queue of
    the default name exists."""
    handled: list[tuple[int, str]] = []

    def handle(partition: Any, body: bytes) -> None:
        handled.append((int(partition), json.loads(body)["key"]))

    with (
        apportion.connect(store_url) as store,
        QueueConsumer(rabbit.url, prefix, handle, batch=1, queue_template=SEED) as consumer,
    ):
        worker = apportion.Group(store, "g", partitions=3, mode=Static(1), ordinal=0).join(
            "c0", consumer.on_assigned, consumer.on_revoked, consumer.on_lost
        )
        consumer.bind(worker)
        wait_for("the consumer on the seed's three queues", lambda: consumer.consuming == [0, 1, 2], 30)
        seed_keys = [f"seed-{i}" for i in range(12)]
        seed_publish(rabbit, prefix, 3, seed_keys)
        lines = "".join(json.dumps({"key": f"cli-{i}"}) + "\n" for i in range(12))
        produced = subprocess.run(
            [sys.executable, "-m", "apportion.cli", "rabbitmq", "produce", "--amqp", rabbit.url, "--prefix", prefix,
             "--partitions", "3", "--queue-name", SEED],
            input=lines, capture_output=True, text=True, timeout=60, env=env(),
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        wait_for("all 24 messages handled", lambda: len(handled) == 24, 30)
        worker.stop()
    expected = {(partition_for(k, 3), k) for k in [*seed_keys, *(f"cli-{i}" for i in range(12))]}
    assert sorted(handled) == sorted(expected)
    assert [exists(rabbit, f"{prefix}-P{p}") for p in range(3)] == [True] * 3
    assert [exists(rabbit, queue_name(prefix, p)) for p in range(3)] == [False] * 3, "a default-named queue"


def exists(node: RabbitServer, name: str) -> bool:
    """Whether queue ``name`` exists (a passive declare over AMQP: rabbitmqctl takes seconds)."""
    connection = pika.BlockingConnection(pika.URLParameters(node.url))
    try:
        connection.channel().queue_declare(name, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code == 404, exc
        return False
    finally:
        connection.close()
