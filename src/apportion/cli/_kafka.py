"""`apportion kafka produce|consume` — Kafka topics read by a group whose members own their partitions (the kafka
extra).

``produce`` reads JSON lines on stdin and sends each, keyed by one of its fields, to the partition Kafka's own
producers choose for that key (murmur2); ``consume`` runs one member of a group whose resources are the topics and
which reads exactly the partitions it owns, from the offsets its store recorded
(:func:`apportion.kafka.run_consumer`), printing each change and, by default, each record as one JSON line.
"""

from __future__ import annotations

import json
import logging
import sys

import click

from apportion import events
from apportion.cli._app import app
from apportion.cli._common import option, seconds
from apportion.cli._kafka_options import KafkaTopics, kafka_options
from apportion.cli._member import MemberArgs, member_options
from apportion.errors import InvalidRequest

_CONNECT_HELP = "How long to wait for the broker before giving up (s)."


@app.group()
def kafka() -> None:
    """Kafka topics as a group's resources: a producer keyed as Kafka's own, consumers that own their partitions."""


@kafka.command()
@kafka_options(require=True, topics_help="The topic to send to.")
@click.option("--key", "key_field", default="key", show_default=True, help="The field of each JSON line to key by.")
@option("--connect-timeout", "connect_timeout_s", env=True, type=seconds(positive=True, maximum=3600.0), default=10.0,
        show_default=True, help=_CONNECT_HELP)  # fmt: skip
def produce(kafka: KafkaTopics | None, key_field: str, connect_timeout_s: float) -> None:
    """Send each JSON line of stdin (its bytes, unchanged, as the value) with the key line[KEY] (a string as its
    UTF-8 bytes, an integer as its digits) to the partition Kafka's default partitioner gives that key, then wait
    until the broker has acknowledged all; prints one summary line (records per partition) at the end."""
    from apportion.kafka import Producer

    assert kafka is not None  # require=True: kafka_topics refused a missing --kafka
    if len(kafka.topics) != 1:
        raise InvalidRequest("topic", f"give one --topic to send to, got {len(kafka.topics)}")
    topic = kafka.topics[0]
    with Producer(kafka.within(connect_timeout_s).config, topic) as producer:
        counts = [0] * producer.partitions
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
            counts[producer.send(key, line)] += 1
    click.echo(json.dumps({"produced": sum(counts), "topic": topic, "per_partition": counts}))


@kafka.command()
@kafka_options(require=True, topics_help="A topic to consume (repeat for several): the group's resources.")
@member_options(partitions=False, id_help="This consumer's id")
@option(
    "--handler", env=True, default=None,
    help="MODULE:FUNCTION called as function(partition, key, value) per record, partition as 'topic-3', key and "
    "value as bytes or None (default: print it as a JSON line).",
)  # fmt: skip
@option("--start", env=True, type=click.Choice(["earliest", "latest"]), default="earliest", show_default=True,
        help="Where a partition with no checkpoint in the store starts (recorded at its first commit).")  # fmt: skip
@option("--batch", env=True, type=click.IntRange(1, 100_000), default=100, show_default=True,
        help="Records per partition per fenced commit (the bound on the duplicates after a crash).")  # fmt: skip
@option("--commit-delay", "commit_delay_s", env=True, type=seconds(0.0, maximum=60.0), default=0.1,
        show_default=True, help="Commit a smaller batch this long (s) after its first record.")  # fmt: skip
def consume(
    kafka: KafkaTopics | None,
    member: MemberArgs,
    handler: str | None,
    start: str,
    batch: int,
    commit_delay_s: float,
) -> None:
    """Consume the partitions of the topics this member owns until SIGINT/SIGTERM (a graceful leave: what was
    handled is committed before each partition is released). Each partition starts at the offset the group's store
    recorded (fenced by the owner's epoch); offsets are committed after the handler returns, by one fenced commit
    per batch, then also to Kafka under the group's name for Kafka's tools (the store's offsets win). The member's
    options are `apportion worker`'s (mode, capacity, rack, --metrics-port and its probes, --replicas-from
    kubernetes, --config, ...), each also from APPORTION_*; --connect-timeout bounds the wait for the broker too."""
    from apportion.kafka import load_handler, run_consumer

    assert kafka is not None  # require=True: kafka_topics refused a missing --kafka
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")
    handle = load_handler(handler)
    member.requested("checked:1")  # the settings checked now (exit 2), before the store or the broker is asked
    follower = member.replicas_follower()
    run_consumer(
        member.store_url,
        member.group_name,
        member.id,
        member.requested,
        kafka=kafka.within(member.connect_timeout_s).config,
        topics=kafka.topics,
        handle=handle,
        emit=events.emit,
        start=start,
        batch=batch,
        commit_delay_s=commit_delay_s,
        options=member.join_options(),
        on_started=None if follower is None else follower.start,
        **member.process(),
    )
