"""`apportion rabbitmq produce|consume` — seed 3's partition queues on RabbitMQ (the rabbitmq extra).

``produce`` reads JSON lines on stdin and publishes each to the queue of its key's partition; ``consume`` runs one
member of a group that consumes the queues of the partitions it owns (:func:`apportion.rabbitmq.run_consumer`),
printing each change and, by default, each message as one JSON line.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable

import click

from apportion import events
from apportion.cli._app import app
from apportion.cli._common import FC, option, seconds
from apportion.cli._member import MemberArgs, member_options
from apportion.errors import InvalidRequest
from apportion.model import MAX_PARTITIONS

_AMQP_HELP = "RabbitMQ URL, amqp://user:password@host:port/vhost (%2F: the default vhost)."


def _amqp_option() -> Callable[[FC], FC]:
    return option("--amqp", "amqp_url", env=True, required=True, help=_AMQP_HELP)


def _prefix_option() -> Callable[[FC], FC]:
    return option("--prefix", env=True, required=True, help="Queue prefix: partition p is the queue <prefix>.<p>.")


def _queue_name_option() -> Callable[[FC], FC]:
    """``--queue-name TEMPLATE``: the queue of partition p (producer and consumers must agree); None: the default
    of ``apportion.rabbitmq`` (``DEFAULT_QUEUE_NAME``, read when the command runs: pika is imported only then)."""
    return option(
        "--queue-name", "queue_template", env=True, default=None,
        help="The queue of a partition, from {prefix} and {partition} (default {prefix}.{partition}); "
        "'{prefix}-P{partition}' is seed 3's OrderEvents-P<p>.",
    )  # fmt: skip


def quiet_pika() -> None:
    """pika logs every connection attempt, and a failed one with a traceback: its errors reach the user as one
    ``BrokerUnavailable`` line (``apportion.rabbitmq._queues.broker_errors``), so they are not logged again."""
    logging.getLogger("pika").setLevel(logging.CRITICAL)


@app.group()
def rabbitmq() -> None:
    """Seed 3 on RabbitMQ: a producer that routes keys into <prefix>.<p> queues, consumers that own them."""


@rabbitmq.command()
@_amqp_option()
@_prefix_option()
@_queue_name_option()
@click.option(
    "--partitions", type=click.IntRange(1, MAX_PARTITIONS), required=True, help="Partition (queue) count."
)  # bounded as a group's: a count per queue is allocated up front
@click.option("--key", "key_field", default="key", show_default=True, help="The field of each JSON line to route by.")
def produce(amqp_url: str, prefix: str, queue_template: str | None, partitions: int, key_field: str) -> None:
    """Publish each JSON line of stdin (its bytes, unchanged) to the queue of partition_for(line[KEY], partitions)
    (<prefix>.<p>, or --queue-name's), waiting for the broker's confirm; prints one summary line (messages per
    partition) at the end."""
    from apportion.rabbitmq import DEFAULT_QUEUE_NAME, Producer

    quiet_pika()
    counts = [0] * partitions
    with Producer(amqp_url, prefix, partitions, queue_template=queue_template or DEFAULT_QUEUE_NAME) as producer:
        for number, raw in enumerate(sys.stdin.buffer, start=1):
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            try:
                key = json.loads(line)[key_field]
            except (ValueError, TypeError, KeyError) as exc:
                raise InvalidRequest("stdin", f"line {number}: not a JSON object with {key_field!r}") from exc
            if isinstance(key, bool) or not isinstance(key, str | int):
                raise InvalidRequest("stdin", f"line {number}: {key_field!r} must be a string or an integer")
            counts[producer.publish(key, line)] += 1
    click.echo(json.dumps({"published": sum(counts), "per_partition": counts}))


@rabbitmq.command()
@_amqp_option()
@_prefix_option()
@_queue_name_option()
@member_options(id_help="This consumer's id")
@option(
    "--handler", env=True, default=None,
    help="MODULE:FUNCTION called as function(partition, body) per message (default: print it as a JSON line).",
)  # fmt: skip
@option("--prefetch", env=True, type=click.IntRange(1, 65535), default=200, show_default=True,
        help="Unacked messages per queue (the bound on the duplicates after a crash).")  # fmt: skip
@option("--batch", env=True, type=click.IntRange(min=1), default=100, show_default=True,
        help="Messages per fenced commit and ack (at most --prefetch).")  # fmt: skip
@option("--ack-delay", "ack_delay_s", env=True, type=seconds(0.0, maximum=60.0), default=0.1, show_default=True,
        help="Ack a smaller batch this long (s) after its first message.")  # fmt: skip
def consume(
    amqp_url: str,
    prefix: str,
    queue_template: str | None,
    member: MemberArgs,
    handler: str | None,
    prefetch: int,
    batch: int,
    ack_delay_s: float,
) -> None:
    """Consume the queues of the partitions this member owns until SIGINT/SIGTERM (a graceful leave: each queue is
    cancelled, and what was handled acked, before its partition is released). Messages are acked after the handler
    returns, by one fenced commit per batch; where the epoch no longer matches they are requeued instead. The member's
    options are `apportion worker`'s (mode, capacity, rack, --metrics-port and its probes, --replicas-from
    kubernetes, --config, ...), each also from APPORTION_*."""
    from apportion.rabbitmq import DEFAULT_QUEUE_NAME, load_handler, run_consumer

    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")
    quiet_pika()
    follower = member.replicas_follower()
    run_consumer(
        member.store_url,
        member.group_name,
        member.id,
        member.requested(),
        amqp_url=amqp_url,
        prefix=prefix,
        handle=load_handler(handler),
        emit=events.emit,
        prefetch=prefetch,
        batch=batch,
        ack_delay_s=ack_delay_s,
        queue_template=queue_template or DEFAULT_QUEUE_NAME,
        options=member.join_options(),
        on_started=None if follower is None else follower.start,
        **member.process(),
    )
