"""`apportion pipeline produce|run|verify` — the Spark data pipeline from the command line.

- ``produce``: append K seeded random keyed records to a resource of the partitioned log (progress bar on stderr).
- ``run``: one worker of the group (``--mode rounds|coordinator|static`` with the mode's options, as `apportion
  worker`) with its own Spark session (``--master``, default local[1]) or a session on a
  shared Spark Connect server (``--spark sc://host:port``, ``apportion spark serve``: no JVM in the worker),
  processing the partitions it owns in fenced micro-batches (``apportion.spark.run_pipeline_worker`` of one
  ``PipelineRequest``); several processes form the group. The member's options are the shared set's
  (``_member.member_options``: who the member is and the definition it requests), each also from APPORTION_*.
  SIGTERM/SIGINT leave gracefully. ``--kafka B --topic T`` instead of ``--input``: the group's resources are the
  topics and each batch reads the owned partitions' offset ranges with Spark's Kafka source (its connector from
  ``--kafka-jars``/``APPORTION_KAFKA_JARS``; ``apportion.spark.pipeline._kafka``).
  Every assignment, batch, write, commit and fenced event is one JSON line on stderr.
  With ``--state-dir`` the group is stateful, in every mode: per-key running aggregates per partition in local
  stores backed by a fenced changelog (``apportion.spark.pipeline._stateful``), restored by each new owner
  before its first batch; in rounds mode standby/learner replicas are restored between batches (seed 2: use ``--strategy
  high_availability`` and ``--option KEY=VALUE`` for its options), in coordinator mode a migration is acked (ONLINE)
  only once the new owner has restored (seed 1), in static mode a pod restores its block on claim.
- ``verify``: the committed output vs the input, the log or (``--kafka B --topic T``) the topic's records now
  (counts, checksums, duplicates, missing, per-key order) and, when the resource has a changelog, the state rebuilt
  from it vs a one-pass reference; exit 1 on any failure; ``--json`` prints the report as JSON on stdout.
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys

import click

from apportion.cli._app import app
from apportion.cli._common import (
    Number,
    directory_url,
    group_option,
    seconds,
    spark_master,
    spark_options,
    store_option,
)
from apportion.cli._kafka_options import KafkaTopics, kafka_options
from apportion.cli._member import MemberArgs, member_options
from apportion.cli._options import parse_options, resource_names
from apportion.errors import InvalidRequest
from apportion.spark import (
    PipelineRequest,
    PipelineSettings,
    RequestedGroup,
    readable_dir,
    run_pipeline_worker,
    writable_dir,
)
from apportion.store import connect


def configure_logging() -> None:
    """A worker's stderr: its JSON event lines (``apportion.*`` at INFO) and warnings. Everything else stays below
    WARNING: py4j logs every connection it closes at INFO (hundreds of lines per worker) and, when a SIGTERM to the
    process group stops the JVM under a batch or ``spark.stop()``, the broken connection with a traceback — some of
    it through the root logger (``logging.info``); the pipeline reports the aborted batch itself."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
    logging.getLogger("apportion").setLevel(logging.INFO)
    logging.getLogger("apportion.worker").setLevel(logging.WARNING)  # the pipeline logs assignments itself
    logging.getLogger("py4j").setLevel(logging.WARNING)


MAX_SEGMENTS = 100_000  # Parquet segments one `pipeline produce` may write (each batch writes at least one)


input_option = click.option(
    "--input", "input_dir", required=True, callback=directory_url, help="Partitioned log root (path or file:// URL)."
)
source_option = click.option(
    "--input",
    "input_dir",
    default=None,
    callback=directory_url,
    help="Partitioned log root (path or file:// URL); or --kafka and --topic.",
)
kafka_jars_option = click.option(
    "--kafka-jars",
    envvar="APPORTION_KAFKA_JARS",
    show_envvar=True,
    default=None,
    help="Spark's Kafka connector jars, comma-separated (scripts/ensure-spark-kafka.sh prints the file listing them; "
    "default: Spark resolves its package from Maven Central at the JVM's start).",
)


def source_of(input_dir: str | None, kafka: KafkaTopics | None) -> str:
    """``--input`` or ``--kafka``, exactly one: the log root ("" with --kafka)."""
    if (input_dir is None) == (kafka is None):
        raise InvalidRequest("input", "give --input DIR (the partitioned log) or --kafka BOOTSTRAP --topic T, not both")
    return input_dir or ""


output_option = click.option(
    "--output", "output_dir", required=True, callback=directory_url, help="Output directory (path or file:// URL)."
)


@app.group()
def pipeline() -> None:
    """The Spark data pipeline over the partitioned log: produce, run workers, verify."""


@pipeline.command()
@input_option
@click.option("--resource", required=True, help="Resource (topic) name in the log.")
@click.option("--partitions", type=int, required=True, help="Partition count (creates the resource if absent).")
@click.option("--records", type=int, required=True, help="How many records to append.")
@click.option("--keys", "key_count", type=int, default=1000, help="Number of distinct keys.")
@click.option("--seed", type=int, default=0, help="RNG seed (same seed, same records).")
@click.option("--batch-records", type=int, default=10_000, help="Records per appended segment (per partition).")
def produce(
    input_dir: str, resource: str, partitions: int, records: int, key_count: int, seed: int, batch_records: int
) -> None:
    """Append RECORDS keyed records (key-<n>, value v-<i>-<random>) through the Producer; prints a JSON summary."""
    from rich.progress import Progress

    from apportion.log import PartitionedLog, Producer, synthetic_records

    if records < 0:
        raise InvalidRequest("records", f"must be >= 0, got {records}")
    if key_count < 1:
        raise InvalidRequest("keys", f"must be >= 1, got {key_count}")
    if batch_records >= 1 and -(-records // batch_records) > MAX_SEGMENTS:
        # each batch is at least one Parquet segment: a million tiny files is a typo, not a log (and takes hours)
        raise InvalidRequest(
            "records",
            f"{records:,} records in batches of {batch_records:,} would write over {MAX_SEGMENTS:,} segments: "
            "raise --batch-records or produce in several runs",
        )
    writable_dir(input_dir, "input")
    log = PartitionedLog(input_dir)
    log.create(resource, partitions)
    log.check(resource)  # a partition the appends would refuse: refused before any is appended to
    rng = random.Random(seed)
    chunk = 10_000
    with Producer(log, resource, batch_records=batch_records) as producer, Progress(transient=True) as progress:
        bar = progress.add_task(f"producing {resource}", total=records)
        for first in range(0, records, chunk):
            n = min(chunk, records - first)
            producer.send_many(synthetic_records(rng, key_count, first, n))
            progress.advance(bar, n)
    ends = {p: log.end_offset(resource, p) for p in range(log.partitions(resource))}
    click.echo(json.dumps({"resource": resource, "appended": records, "end_offsets": ends}))


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


@pipeline.command()
@member_options(partitions_help="Partition count (default: the log's).", id_help="This worker's id", process=False)
@source_option
@kafka_options(topics_help="A Kafka topic the pipeline reads (repeat for several): the group's resources.")
@kafka_jars_option
@output_option
@click.option("--resource", default=None, help="Log resource to process (default: the group name).")
@click.option(
    "--resources",
    default=None,
    help="Several log resources instead of --resource (NAME,...): the group is over them, partition ids "
    "<resource>-<index>.",
)
@click.option("--subscribe", "subscriptions", default=None, help="With --resources: those this worker processes.")
@click.option(
    "--batch-records",
    type=int,
    default=None,
    help="Records per partition per micro-batch, fixed (default: 10,000 at first, then chosen by --batch-seconds).",
)
@click.option(
    "--batch-seconds",
    type=seconds(),
    default=None,
    help="Target time of one micro-batch (s): the size grows while batches take less and shrinks when they take "
    "more (default 10, at most a third of --revoke-timeout, without --batch-records; below --revoke-timeout: a "
    "revocation waits for the batch in flight).",
)
@click.option("--transform", "transform_spec", default=None, help="module:function replacing the default transform.")
@spark_options("local[1]")
@click.option("--driver-memory", default="1g", help="Spark driver memory.")
@click.option(
    "--revoke-timeout",
    "revoke_timeout_s",
    type=seconds(positive=True),
    default=30.0,
    help="Max wait of a revocation for "
    "the batch in flight (s); beyond it the lease lapses and every partition is lost.",
)
@click.option("--idle", "idle_s", type=seconds(), default=0.2, help="Poll interval when there is no new input (s).")
@click.option(
    "--state-dir",
    callback=directory_url,
    default=None,
    help="Stateful: keep per-key aggregates per partition under DIR/<id>/ (restored from the changelog).",
)
@click.option("--restore-batch", type=int, default=50_000, help="Changelog records replayed per replica step.")
@click.option(
    "--restore-rate", type=Number(min=0), default=0.0, help="Max changelog records restored per second (0: unlimited)."
)
@click.option(
    "--option",
    "strategy_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="A strategy option when creating the group (JSON value), e.g. max_warmup_replicas=2; repeatable.",
)
@click.option(
    "--exit-when-idle", "exit_idle_s", type=seconds(), default=0.0, help="Leave after N s without work (0: never)."
)
@click.option(
    "--slow-commit",
    "slow_commit_s",
    type=seconds(),
    default=0.0,
    help="A fault drill: hold every batch's written output this long (s) before its commit, the window in which a "
    "frozen worker becomes a zombie whose late commit is fenced (apportion demo freezes one so); 0: none.",
)
def run(
    member: MemberArgs,
    input_dir: str | None,
    kafka: KafkaTopics | None,
    kafka_jars: str | None,
    output_dir: str,
    resource: str | None,
    resources: str | None,
    subscriptions: str | None,
    batch_records: int | None,
    batch_seconds: float | None,
    transform_spec: str | None,
    master: str | None,
    spark_url: str | None,
    driver_memory: str,
    revoke_timeout_s: float,
    idle_s: float,
    state_dir: str | None,
    restore_batch: int,
    restore_rate: float,
    strategy_options: tuple[str, ...],
    exit_idle_s: float,
    slow_commit_s: float,
) -> None:
    """Run one pipeline worker until SIGTERM/SIGINT (graceful leave) or --exit-when-idle; --mode picks the group
    protocol as for `apportion worker`. The input is the partitioned log (--input) or Kafka topics (--kafka,
    --topic: Spark's executors read each owned partition's offsets with Spark's Kafka source). The member's options
    (--store to the mode's) are `apportion worker`'s, each also from APPORTION_*."""
    configure_logging()
    log_root = source_of(input_dir, kafka)
    if kafka is not None and resources is not None:
        raise InvalidRequest("resources", "with --kafka the resources are the --topic topics")
    settings = PipelineSettings(
        log_root,
        output_dir,
        resource=resource,
        resources=list(kafka.topics) if kafka is not None else None if resources is None else _names(resources),
        subscriptions=None if subscriptions is None else resource_names(subscriptions, "subscribe"),
        batch_records=batch_records,
        batch_seconds=batch_seconds,
        transform=transform_spec or None,
        master=spark_master(master, spark_url, "local[1]"),
        driver_memory=driver_memory,
        revoke_timeout_s=revoke_timeout_s,
        idle_s=idle_s,
        exit_idle_s=exit_idle_s,
        state_dir=state_dir,
        restore_batch=restore_batch,
        restore_rate=restore_rate,
        slow_commit_s=slow_commit_s,
        kafka=None if kafka is None else kafka.config,
        kafka_jars=kafka_jars,
    )
    requested = RequestedGroup(
        member.mode.mode, partitions=member.partitions, strategy=member.strategy,
        options=parse_options(strategy_options), settle_s=member.settle_s, min_interval_s=member.min_interval_s,
        heartbeat_s=member.heartbeat_s, ttl_s=member.ttl_s,
    )  # fmt: skip
    request = PipelineRequest(member.store_url, member.group_name, member.id, settings, requested, member.mode.ordinal)
    run_pipeline_worker(request)


@pipeline.command()
@store_option()
@group_option()
@source_option
@kafka_options(topics_help="The Kafka topic the pipeline read (instead of --input and --resource).")
@output_option
@click.option("--resource", default=None, help="Log resource (default: the group name).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def verify(
    store_url: str,
    group_name: str,
    input_dir: str | None,
    kafka: KafkaTopics | None,
    output_dir: str,
    resource: str | None,
    as_json: bool,
) -> int:
    """Check the committed output against the input (the log, or a Kafka topic's records now): exit 0 when every
    record is there exactly once, in order."""
    from rich.console import Console
    from rich.table import Table

    from apportion.log import PartitionedLog
    from apportion.spark import verify as verify_output
    from apportion.spark import verify_kafka, verify_state
    from apportion.spark.state import changelog_resource

    root = source_of(input_dir, kafka)
    if os.path.lexists(output_dir):  # absent: nothing was committed yet, which verify reports as missing records
        readable_dir(output_dir, "output")
    state = None
    if kafka is not None:
        if resource is not None or len(kafka.topics) != 1:
            raise InvalidRequest("topic", "verify checks one --topic (the topic is the resource: no --resource)")
        with connect(store_url) as store:
            report = verify_kafka(store, group_name, kafka.config, kafka.topics[0], output_dir)
    else:
        readable_dir(root, "input")
        log = PartitionedLog(root)
        resource = resource or group_name
        with connect(store_url) as store:
            report = verify_output(store, group_name, log, resource, output_dir)
            if changelog_resource(resource) in log.resources():
                state = verify_state(store, group_name, log, resource)
    data = report.to_json()
    ok = report.ok and (state is None or state.ok)
    if state is not None:
        data.update({f"state_{k}": v for k, v in state.to_json().items()})
    if as_json:
        click.echo(json.dumps(data))
    else:
        table = Table(title=f"pipeline output of group {group_name}: {'OK' if ok else 'FAILED'}")
        table.add_column("check")
        table.add_column("value", justify="right")
        for name, value in data.items():
            table.add_row(name, str(value))
        Console().print(table)
    if not report.ok:
        print("apportion: error: the committed output does not equal the input", file=sys.stderr)
        return 1
    if state is not None and not state.ok:
        print("apportion: error: the state rebuilt from the changelog does not equal the reference", file=sys.stderr)
        return 1
    return 0


__all__ = ["pipeline"]
