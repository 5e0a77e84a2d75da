"""The one way apportion starts Spark: a small local session (UI off, quiet logs, UTC, loopback only), or a session
on a shared Spark Connect server when ``master`` is an ``sc://host:port`` URL.

Used by the pipeline worker, ``apportion report``, the simulation grid, the demo, the benchmarks and the tests'
session fixture; they differ only in ``master``, ``driver_memory``, ``parallelism`` and extra ``config``.

Through Spark Connect the process holds no JVM: it is a gRPC client of the server (``apportion spark serve``), with a
session of its own (isolated by its session id: its temp views and SQL settings are its own). Only the SQL settings
(``spark.sql.*``) are per session; the JVM's (driver memory, UI, default parallelism) are the server's, so they are
not sent. Paths are resolved by the server: the input, output and state directories must be on a file system it
sees at the same path (the same machine, or a shared mount).
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from apportion.errors import InvalidRequest, SparkUnavailable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CONNECT_SCHEME = "sc"
DEFAULT_CONNECT_PORT = 15002
CONNECT_TIMEOUT_S = 5.0


# What spark-submit accepts as --master (its own check fails inside the JVM, after seconds, as a Java stack trace):
# local, local[N], local[*], local[N,F], local[*,F] (N threads, F task failures), spark://host:port[,host:port...]
# (a standalone master, or several with ZooKeeper), local-cluster[...], k8s://..., yarn.
_LOCAL = re.compile(r"local(?:\[(\d{1,4}|\*)(?:,\s*(\d{1,4}))?\])?")
_OTHER = re.compile(r"yarn|local-cluster\[[^\]]+\]|k8s://\S+")
MASTER_FORMS = "local, local[N], local[*], local[N,F], spark://host:port, k8s://..., yarn"


def validate_master(master: str) -> str:
    """``master`` if it is a Spark master (:data:`MASTER_FORMS`; N and F from 1 to 9999, every ``host:port`` of a
    ``spark://`` master parsed as a URL's, IPv6 in brackets); ``InvalidRequest`` naming it otherwise (a user mistake:
    exit 2, before any JVM starts: Spark's own check fails inside it after 8 to 20 s)."""
    local = _LOCAL.fullmatch(master)
    if local is not None:
        threads, failures = local.groups()
        if threads not in (None, "*") and int(threads) < 1:
            raise InvalidRequest("--master", f"{master!r}: local[N] runs N >= 1 threads")
        if failures is not None and int(failures) < 1:
            raise InvalidRequest("--master", f"{master!r}: local[N,F] allows F >= 1 task failures")
        return master
    if master.startswith("spark://"):
        master_addresses(master)
        return master
    if not _OTHER.fullmatch(master):
        raise InvalidRequest("--master", f"{master!r} is not a Spark master ({MASTER_FORMS})")
    return master


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` of every master of a ``spark://host:port[,host:port...]`` URL; ``InvalidRequest`` for a
    malformed one (no port, a port out of range, an unclosed IPv6 bracket, a path)."""
    addresses = []
    for address in master.removeprefix("spark://").split(","):
        try:
            parts = urlsplit(f"spark://{address}")
            port = parts.port
        except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535", a port that is not a number
            raise InvalidRequest("--master", f"{master!r}: {address!r} is not host:port ({exc})") from exc
        if not parts.hostname or port is None or port == 0 or parts.path or parts.query or parts.fragment:
            raise InvalidRequest("--master", f"{master!r}: {address!r} is not host:port (spark://host:port)")
        addresses.append((parts.hostname, port))
    return addresses


def reach_master(master: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Before a JVM starts on a ``spark://`` master: ``SparkUnavailable`` naming it when none of its masters accepts
    a TCP connection within ``timeout_s`` (Spark would retry its registration for about 80 s, then fail with
    "Cannot call methods on a stopped SparkContext"). Any other master: nothing to reach."""
    if not master.startswith("spark://"):
        return
    addresses = master_addresses(master)
    if not any(accepts(host, port, timeout_s) for host, port in addresses):
        raise SparkUnavailable(f"no Spark master answers at {master} (tried each for {timeout_s:g} s)")


def is_connect_url(master: str) -> bool:
    """Whether ``master`` names a Spark Connect server (``sc://host:port``) rather than a Spark master."""
    return master.startswith(f"{CONNECT_SCHEME}://")


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no ``sparkContext``, no RDDs, no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def connect_address(url: str) -> tuple[str, int]:
    """``sc://host[:port][/;params]`` → ``(host, port)``; raises ``InvalidRequest`` for anything else (an unclosed
    IPv6 bracket, ``sc://[::1:15002``, too: urllib's ValueError was an internal error)."""
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_CONNECT_PORT
    except ValueError as exc:
        raise InvalidRequest("--spark", f"expected sc://host:port, got {url!r} ({exc})") from exc
    if parts.scheme != CONNECT_SCHEME or not parts.hostname:
        raise InvalidRequest("--spark", f"expected sc://host:port, got {url!r}")
    return parts.hostname, port


def spark_session(
    master: str = "local[1]",
    driver_memory: str = "1g",
    app_name: str = "apportion-pipeline",
    *,
    parallelism: int = 1,
    config: Mapping[str, str] | None = None,
) -> SparkSession:
    """A small Spark session for one process (``getOrCreate``: an existing session of the process is reused).
    ``master`` is a Spark master (``local[N]``, ``spark://...``) or the ``sc://host:port`` URL of a Spark Connect
    server. ``parallelism`` sets the shuffle partitions and the default parallelism (1 for a pipeline worker's
    ``local[1]``); ``config`` adds or overrides Spark settings."""
    if is_connect_url(master):
        return connect_session(master, parallelism=parallelism, config=config)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.default.parallelism": str(parallelism),
        "spark.driver.memory": driver_memory,
        "spark.driver.bindAddress": "127.0.0.1",
        **ENGINE_SETTINGS,
        **SESSION_SETTINGS,
        "spark.sql.shuffle.partitions": str(parallelism),
        **(config or {}),
    }
    reach_master(validate_master(master))
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


SESSION_SETTINGS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pythonUDF.columnarInput.enabled": "false",
}
"""The SQL settings every session gets, local or through Connect. Columnar input to Arrow Python UDFs is off:
pyspark 4.2.0's columnar runner writes the UDF command in the protocol's old layout (SPARK-58241, fixed after 4.2.0)
and its Python worker waits forever for bytes that never come — a transform with a Python UDF over the log's Parquet
hung its batch (found in CI). Raise it with pyspark once a version with the fix and its Kafka connector are served."""

PYTHON_WORKER_IDLE_S = 120
ENGINE_SETTINGS = {
    "spark.python.daemon.killWorkerOnFlushFailure": "true",
    "spark.python.worker.idleTimeoutSeconds": str(PYTHON_WORKER_IDLE_S),
    "spark.python.worker.killOnIdleTimeout": "true",
}
"""What every JVM apportion starts gets (an own JVM's session, ``apportion spark serve``): a Python worker that goes
silent for 120 s is killed and its task fails, rather than the job waiting for it forever (a protocol mismatch such
as SPARK-58241's, see ``SESSION_SETTINGS``, or a flush failure: ``killWorkerOnFlushFailure``); the batch fails and
the batch loop retries it. No Arrow batch of the pipeline's routing or transform keeps a worker silent that long."""


def connect_session(
    url: str, *, parallelism: int = 1, config: Mapping[str, str] | None = None, timeout_s: float = CONNECT_TIMEOUT_S
) -> SparkSession:
    """A session of this process on the Spark Connect server at ``url`` (``getOrCreate``). The server must accept a
    TCP connection within ``timeout_s`` (else ``SparkUnavailable``: pyspark's own retries would wait a minute or more).
    Only ``spark.sql.*`` settings of ``config`` apply (the others belong to the server's JVM)."""
    host, port = connect_address(url)
    if not accepts(host, port, timeout_s):
        raise SparkUnavailable(
            f"no Spark Connect server at {host}:{port} (start one with: apportion spark serve --port {port})"
        )
    from pyspark.sql import SparkSession

    settings = {
        **SESSION_SETTINGS,
        "spark.sql.shuffle.partitions": str(parallelism),
        **{k: v for k, v in (config or {}).items() if k.startswith("spark.sql.")},
    }
    builder = SparkSession.builder.remote(url)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def accepts(host: str, port: int, timeout_s: float) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout_s``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def default_parallelism(spark: Any) -> int:
    """The default parallelism of ``spark``'s engine: ``sparkContext.defaultParallelism`` locally; through Connect
    (no ``sparkContext``) the number of partitions of ``spark.range`` (which takes the server's default)."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    from pyspark.sql import functions as F

    return max(1, int(spark.range(4096).select(F.spark_partition_id().alias("p")).distinct().count()))


__all__ = [
    "accepts",
    "connect_address",
    "connect_session",
    "default_parallelism",
    "is_connect",
    "is_connect_url",
    "master_addresses",
    "reach_master",
    "spark_session",
    "validate_master",
]
