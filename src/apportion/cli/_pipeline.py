"""`apportion pipeline produce|run|verify` — the Spark data pipeline from the command line.

- ``produce``: append K seeded random keyed records to a resource of the partitioned log (progress bar on stderr).
- ``run``: one worker of the group with its own Spark session, processing the partitions it owns in fenced
  micro-batches (``apportion.spark._pipeline``); several processes form the group. SIGTERM/SIGINT leave gracefully.
  Every assignment, batch, write, commit and fenced event is one JSON line on stderr.
  With ``--state-dir`` the group is stateful (seed 2): per-key running aggregates per partition in local stores
  backed by a fenced changelog, standby/learner replicas restored between batches (``apportion.spark._stateful``);
  use ``--strategy high_availability`` and ``--option KEY=VALUE`` for its options.
- ``verify``: the committed output vs the input (counts, checksums, duplicates, missing, per-key order) and, when
  the resource has a changelog, the state rebuilt from it vs a one-pass reference; exit 1 on any failure; ``--json``
  prints the report as JSON on stdout.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType

import click

from apportion.cli._app import app
from apportion.cli._common import group_option, store_option, timing_options
from apportion.cli._options import parse_options
from apportion.errors import InvalidRequest
from apportion.store import connect


def writable_dir(path: str, option: str) -> None:
    """Create ``path`` if needed and prove it takes a file (a read-only mount or /proc fails here, before Spark)."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".apportion-probe-"):
            pass
    except OSError as exc:
        raise InvalidRequest(option, f"cannot write to {path}: {exc.strerror or exc}") from exc


def readable_dir(path: str, option: str) -> None:
    """``path`` must be an existing directory this user can list."""
    try:
        os.listdir(path)
    except OSError as exc:
        raise InvalidRequest(option, f"cannot read directory {path}: {exc.strerror or exc}") from exc


def configure_logging() -> None:
    """A worker's stderr: its JSON event lines (``apportion.*`` at INFO) and warnings. Everything else stays below
    WARNING: py4j logs every connection it closes at INFO (hundreds of lines per worker) and, when a SIGTERM to the
    process group stops the JVM under a batch or ``spark.stop()``, the broken connection with a traceback — some of
    it through the root logger (``logging.info``); the pipeline reports the aborted batch itself."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
    logging.getLogger("apportion").setLevel(logging.INFO)
    logging.getLogger("apportion.worker").setLevel(logging.WARNING)  # the pipeline logs assignments itself
    logging.getLogger("py4j").setLevel(logging.WARNING)


@app.group()
def pipeline() -> None:
    """The Spark data pipeline over the partitioned log: produce, run workers, verify."""


@pipeline.command()
@click.option("--input", "input_dir", required=True, type=click.Path(file_okay=False), help="Partitioned log root.")
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
    writable_dir(input_dir, "input")
    log = PartitionedLog(input_dir)
    log.create(resource, partitions)
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


@pipeline.command()
@store_option()
@group_option()
@click.option("--id", "worker_id", required=True, help="This worker's id (unique in the group).")
@click.option("--input", "input_dir", required=True, type=click.Path(file_okay=False), help="Partitioned log root.")
@click.option("--output", "output_dir", required=True, type=click.Path(file_okay=False), help="Output directory.")
@click.option("--resource", default=None, help="Log resource to process (default: the group name).")
@click.option("--partitions", type=int, default=None, help="Partition count (default: the log's).")
@click.option("--strategy", default="sticky", help="Assignment strategy when creating the group.")
@click.option("--batch-records", type=int, default=10_000, help="Max records per partition per micro-batch.")
@click.option("--transform", "transform_spec", default=None, help="module:function replacing the default transform.")
@click.option("--master", default="local[1]", help="Spark master of this worker's session.")
@click.option("--driver-memory", default="1g", help="Spark driver memory.")
@timing_options()
@click.option(
    "--revoke-timeout",
    "revoke_timeout_s",
    type=float,
    default=30.0,
    help="Max wait of a revocation for "
    "the batch in flight (s); beyond it the lease lapses and every partition is lost.",
)
@click.option("--idle", "idle_s", type=float, default=0.2, help="Poll interval when there is no new input (s).")
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Stateful: keep per-key aggregates per partition under DIR/<id>/ (restored from the changelog).",
)
@click.option("--restore-batch", type=int, default=50_000, help="Changelog records replayed per replica step.")
@click.option(
    "--restore-rate", type=float, default=0.0, help="Max changelog records restored per second (0: unlimited)."
)
@click.option(
    "--option",
    "strategy_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="A strategy option when creating the group (JSON value), e.g. max_warmup_replicas=2; repeatable.",
)
@click.option(
    "--exit-when-idle", "exit_idle_s", type=float, default=0.0, help="Leave after N s without work (0: never)."
)
@click.option("--pause-before-commit", "pause_s", type=float, default=0.0, hidden=True, help="Fault injection (s).")
@click.option("--pause-batches", type=int, default=1, hidden=True, help="How many batches pause before commit.")
def run(
    store_url: str,
    group_name: str,
    worker_id: str,
    input_dir: str,
    output_dir: str,
    resource: str | None,
    partitions: int | None,
    strategy: str,
    batch_records: int,
    transform_spec: str | None,
    master: str,
    driver_memory: str,
    settle_s: float,
    min_interval_s: float,
    heartbeat_s: float,
    ttl_s: float | None,
    revoke_timeout_s: float,
    idle_s: float,
    state_dir: str | None,
    restore_batch: int,
    restore_rate: float,
    strategy_options: tuple[str, ...],
    exit_idle_s: float,
    pause_s: float,
    pause_batches: int,
) -> None:
    """Run one pipeline worker until SIGTERM/SIGINT (graceful leave) or --exit-when-idle."""
    from apportion.log import PartitionedLog
    from apportion.spark._pipeline import (
        Pipeline,
        emit_log,
        joined,
        load_transform,
        spark_session,
        transform,
        warm_up,
    )
    from apportion.spark._stateful import StatefulPartitions
    from apportion.worker import Group

    configure_logging()
    resource = resource or group_name
    readable_dir(input_dir, "input")
    writable_dir(output_dir, "output")
    if state_dir is not None:
        writable_dir(state_dir, "state-dir")
    log = PartitionedLog(input_dir)
    n = log.partitions(resource)
    if partitions is not None and partitions != n:
        raise InvalidRequest("partitions", f"the log resource {resource!r} has {n} partitions, not {partitions}")
    function = load_transform(transform_spec) if transform_spec else transform
    options = parse_options(strategy_options)
    state = None
    if state_dir is not None:  # validated before Spark starts
        state = StatefulPartitions(
            log, resource, Path(state_dir) / worker_id, emit=emit_log, worker_id=worker_id,
            restore_batch=restore_batch, restore_rate=restore_rate,
        )  # fmt: skip
    stop = threading.Event()
    with connect(store_url) as store:
        group = Group(
            store,
            group_name,
            n,
            strategy,
            settle_s=settle_s,
            min_interval_s=min_interval_s,
            heartbeat_s=heartbeat_s,
            ttl_s=ttl_s,
            options=options,
            stateful=state_dir is not None,
        )
        if group.config.partitions != n:
            raise InvalidRequest("group", f"{group_name!r} has {group.config.partitions} partitions, the log has {n}")
        spark = spark_session(master, driver_memory, f"apportion-pipeline-{worker_id}")

        def _leave(signum: int, frame: FrameType | None) -> None:
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):  # after Spark, which installs its own SIGINT handler
            signal.signal(sig, _leave)
        processor = Pipeline(
            spark,
            log,
            output_dir,
            resource,
            batch_records=batch_records,
            transform=function,
            worker_id=worker_id,
            pause_before_commit_s=pause_s,
            pause_batches=pause_batches,
            state=state,
        )
        emit = processor.emit
        warm_s = warm_up(spark, function)
        emit("started", worker=worker_id, group=group_name, resource=resource, partitions=n, warm_up_s=round(warm_s, 2))
        try:
            with joined(group, worker_id, processor, revoke_timeout_s=revoke_timeout_s):
                processor.run(stop, idle_s=idle_s, exit_after_idle_s=exit_idle_s)
        finally:
            emit("stopped", worker=worker_id, batches=processor.batches, records=processor.records)
            if processor.state is not None:
                processor.state.close()
            with contextlib.suppress(Exception):  # the JVM may already be gone (signal to the process group)
                spark.stop()


@pipeline.command()
@store_option()
@group_option()
@click.option("--input", "input_dir", required=True, type=click.Path(file_okay=False), help="Partitioned log root.")
@click.option("--output", "output_dir", required=True, type=click.Path(file_okay=False), help="Output directory.")
@click.option("--resource", default=None, help="Log resource (default: the group name).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def verify(
    store_url: str, group_name: str, input_dir: str, output_dir: str, resource: str | None, as_json: bool
) -> int:
    """Check the committed output against the input: exit 0 when every record is there exactly once, in order."""
    from rich.console import Console
    from rich.table import Table

    from apportion.log import PartitionedLog
    from apportion.spark._output import verify as verify_output
    from apportion.spark._stateful import verify_state
    from apportion.state import changelog_resource

    readable_dir(input_dir, "input")
    if os.path.lexists(output_dir):  # absent: nothing was committed yet, which verify reports as missing records
        readable_dir(output_dir, "output")
    log = PartitionedLog(input_dir)
    resource = resource or group_name
    with connect(store_url) as store:
        report = verify_output(store, group_name, log, resource, output_dir)
        state = (
            verify_state(store, group_name, log, resource) if changelog_resource(resource) in log.resources() else None
        )
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
