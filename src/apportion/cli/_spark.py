"""`apportion spark serve` — a Spark Connect server that pipeline workers, `report` and `simulate --grid` share.

Thin: ``apportion.spark.ConnectServer`` starts it (127.0.0.1 only, UI off, quiet logs), checks that it accepts
a session, and stops it (its whole process group) on SIGTERM/SIGINT. Workers then run with ``--spark sc://...``.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from apportion.cli._app import app
from apportion.cli._common import seconds
from apportion.errors import SparkUnavailable
from apportion.spark import DEFAULT_CONNECT_PORT


@app.group()
def spark() -> None:
    """Spark shared by apportion's processes."""


@spark.command()
@click.option(
    "--master", default="local[2]", show_default=True, help="Spark master of the server: local[N], spark://..."
)
@click.option("--port", type=int, default=DEFAULT_CONNECT_PORT, show_default=True, help="gRPC port on 127.0.0.1.")
@click.option("--driver-memory", default="1g", show_default=True, help="The server's driver memory.")
@click.option(
    "--log", "log_path", type=click.Path(dir_okay=False), default=None, help="Server log (default: a temp file)."
)
@click.option(
    "--start-timeout",
    "start_timeout_s",
    type=seconds(positive=True),
    default=300.0,
    help="Max wait for the server (s).",
)
@click.option(
    "--kafka-connector",
    is_flag=True,
    help="Put Spark's Kafka connector on the server's classpath (for `pipeline run --kafka` through this server).",
)
@click.option(
    "--kafka-jars",
    envvar="APPORTION_KAFKA_JARS",
    show_envvar=True,
    default=None,
    help="With --kafka-connector: its jars, comma-separated (scripts/ensure-spark-kafka.sh; default: Spark resolves "
    "its package from Maven Central).",
)
def serve(
    master: str,
    port: int,
    driver_memory: str,
    log_path: str | None,
    start_timeout_s: float,
    kafka_connector: bool,
    kafka_jars: str | None,
) -> None:
    """Run a Spark Connect server until SIGTERM/SIGINT; workers use it with --spark sc://127.0.0.1:PORT."""
    from apportion.spark import ConnectServer
    from apportion.spark.engine import kafka_connector_config

    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    config = kafka_connector_config(kafka_jars) if kafka_connector else None
    server = ConnectServer(
        master, port, driver_memory=driver_memory, log_path=log_path, start_timeout_s=start_timeout_s, config=config
    )
    # until the server is ready, a signal interrupts the start (apportion.cli._signals: the wait for the JVM ends at
    # once and the JVM's process group is stopped on the way out, exit 128 + signal); once it is ready, a signal is
    # the normal end: the loop below stops it (exit 0)
    with server:
        server.check_session()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _stop)
        click.echo(
            f"Spark Connect server ready at {server.url} (master {master}, pid {server.pid}, log {server.log_path})"
        )
        while not stop.wait(0.5):
            if not server.running():
                raise SparkUnavailable(f"the Spark Connect server exited: {server.last_log_line()}")
    click.echo("Spark Connect server stopped", err=True)
