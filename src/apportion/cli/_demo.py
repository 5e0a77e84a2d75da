"""`apportion demo`: the main job on embedded defaults (see apportion.demo for the scenario)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import click
from rich.console import Console

from apportion.cli._app import app
from apportion.cli._common import seconds
from apportion.demo import SOURCES, DemoConfig, kafka_config, run_demo, summary_json
from apportion.spark.engine import connect_address

MARKER = ".apportion-demo"  # in every directory a demo writes: what --clean checks before it deletes one


@app.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Working directory (default: a fresh demo-output/run-<time>).",
)
@click.option("--clean", is_flag=True, help="Delete the working directory first if it exists.")
@click.option("--records", type=int, default=1_000_000, help="Records to produce.")
@click.option("--partitions", type=int, default=32, help="Partitions of the resource.")
@click.option("--workers", type=int, default=3, help="Initial pipeline workers (one more joins later).")
@click.option("--batch-records", type=int, default=20_000, help="Max records per partition per micro-batch.")
@click.option(
    "--stream-seconds",
    type=seconds(),
    default=60.0,
    help="Pace of the second half of the input: spread over this many seconds, until the zombie step appends the "
    "rest at once.",
)
@click.option("--no-report", is_flag=True, help="Skip the Spark analytics report.")
@click.option(
    "--engine",
    type=click.Choice(["shared", "per-worker"]),
    default="shared",
    show_default=True,
    help="shared: one Spark Connect server for every worker; per-worker: a local[1] JVM each (to compare).",
)
@click.option(
    "--spark",
    "spark_url",
    metavar="sc://HOST:PORT",
    default=None,
    help="A running Spark Connect server (apportion spark serve) for every worker and the report, instead of one "
    "the demo starts and stops (shared engine only).",
)
@click.option(
    "--source",
    type=click.Choice(SOURCES),
    default="log",
    show_default=True,
    help="log: apportion's Parquet log (embedded, nothing to run); kafka: a Kafka topic on a local KRaft broker the "
    "demo starts and stops (needs Java 17+ and Maven: the broker comes from Maven Central), or on --bootstrap.",
)
@click.option(
    "--bootstrap",
    metavar="HOST:PORT",
    default=None,
    help="With --source kafka: a running Kafka broker to use instead of one the demo starts (nothing is started).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON at the end.")
def demo(
    directory: Path | None,
    clean: bool,
    records: int,
    partitions: int,
    workers: int,
    batch_records: int,
    stream_seconds: float,
    no_report: bool,
    engine: str,
    spark_url: str | None,
    source: str,
    bootstrap: str | None,
    as_json: bool,
) -> None:
    """Run the main job: produce records, run Spark pipeline workers through churn and faults, verify exactly-once.

    Exits 1 when any check fails. With --source kafka the same scenario and checks run on a Kafka topic (but the
    state checks: the pipeline on Kafka is not stateful).
    """
    if bootstrap is not None:  # before anything is written
        if source != "kafka":
            raise click.UsageError("--bootstrap is the Kafka demo's broker: it goes with --source kafka")
        kafka_config(bootstrap)  # HOST:PORT that answers, or one line saying what is wrong
    if spark_url is not None:
        if engine != "shared":
            raise click.UsageError("--spark is the shared engine's server: it does not go with --engine per-worker")
        connect_address(spark_url)  # sc://host:port, or one line saying what was expected
    if directory is None:
        directory = Path("demo-output") / time.strftime("run-%Y%m%d-%H%M%S")
    if clean and directory.exists():
        if any(directory.iterdir()) and not (directory / MARKER).is_file():
            # --clean deletes a demo's own directory, never one it cannot tell is: a mistyped --dir (a home, /etc)
            # must not be wiped (a fuzz pass running as root gave it ../../../../etc with --clean)
            raise click.UsageError(
                f"{directory} was not written by apportion demo (it has no {MARKER}): --clean deletes only a demo's "
                "own directory; remove it yourself or choose another --dir"
            )
        shutil.rmtree(directory)
    if directory.exists() and any(directory.iterdir()):
        raise click.UsageError(f"{directory} is not empty: pass --clean or another --dir")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text("written by apportion demo: `apportion demo --clean` may delete this directory\n")
    config = DemoConfig(
        directory=directory.resolve(),
        records=records,
        partitions=partitions,
        workers=workers,
        batch_records=batch_records,
        stream_s=stream_seconds,
        report=not no_report,
        shared_spark=engine == "shared",
        spark_url=spark_url,
        source=source,
        bootstrap=bootstrap,
    )
    result = run_demo(config, Console())
    if as_json:
        click.echo(json.dumps(summary_json(result)))
    if not result.ok:
        raise SystemExit(1)
