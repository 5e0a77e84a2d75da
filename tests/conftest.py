"""Shared fixtures. `etcd_url` gives a fresh, empty real etcd server (see tests/etcd_server.py); `connect_server` the
run's one Spark Connect server (here rather than in tests/spark/conftest.py, which says how it is shared: the
pipeline's rolling upgrade in tests/upgrade/ uses it too)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

IN_CI = os.environ.get("CI") == "true"

TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The JVMs of the tests live seconds to minutes on 2 cores: the client compiler only and one GC thread (the Kafka
broker fixture's flags). Every Spark JVM a test starts gets them through the launcher's own variables (drivers:
local sessions, Connect servers, the pipeline workers' own JVMs; the standalone cluster's daemons); executors through
``spark.executor.extraJavaOptions`` (tests/spark/test_cluster.py). Behaviour is the same; the CPU is not: the Spark
analytics tests took 184 CPU-s with the JVM's defaults and 107 with these (cgroup cpuacct, two alternating runs each,
08:00 UTC, machine busy with other tests). ``make bench`` keeps the defaults: a benchmark measures what users run."""
_JVM_VARIABLES = ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS")
if os.environ.get("APPORTION_TEST_JVM_OPTIONS") is None and not any(v in os.environ for v in _JVM_VARIABLES):
    os.environ["APPORTION_TEST_JVM_OPTIONS"] = "1"  # ours to set (a user's own settings are left alone)


def jvm_options() -> str:
    """TEST_JVM_OPTIONS plus the Spark class archive's flags once tests/jvm_archive.py has written it (its dump runs
    beside the first tests), and put into the launcher's variables when they are ours: called before each test and
    by the fixtures that start JVMs, so that every JVM started after the archive exists maps it."""
    from tests import jvm_archive

    options = f"{TEST_JVM_OPTIONS} {jvm_archive.options()}".strip()
    if os.environ.get("APPORTION_TEST_JVM_OPTIONS") == "1":
        for variable in _JVM_VARIABLES:
            os.environ[variable] = options
    return options


jvm_options()


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controlling process (or a run without xdist): once per run
        from tests import jvm_archive

        jvm_archive.start_dump(TEST_JVM_OPTIONS)


@pytest.fixture(autouse=True)
def _jvm_archive_options() -> None:
    jvm_options()


def etcd_binary() -> str | None:
    return shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)


@pytest.fixture
def etcd_bin() -> str:
    """The etcd server binary; a clear skip on a developer machine without it, a failure in CI."""
    binary = etcd_binary()
    if binary is None:
        if IN_CI:
            pytest.fail("etcd is not installed: run scripts/ensure-test-tools.sh (apt-get install -y etcd-server)")
        pytest.skip("etcd is not installed (apt-get install -y etcd-server); CI installs it and runs these tests")
    return binary


@pytest.fixture
def etcd_url(etcd_bin: str, tmp_path: Path) -> Iterator[str]:
    """A fresh single-node etcd on free loopback ports; stopped after the test. Never skipped in CI."""
    from tests.etcd_server import EtcdServer  # written with the etcd backend

    with EtcdServer.single(etcd_bin, tmp_path / "etcd") as server:
        yield server.url


def postgres_bin() -> Path | None:
    from tests.postgres_server import postgres_bin_dir

    return postgres_bin_dir()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    """One PostgreSQL server for the whole session (tests/postgres_server.py); a clear skip without PostgreSQL or
    psycopg on a developer machine, a failure in CI."""
    bin_dir = postgres_bin()
    missing = "PostgreSQL is not installed (apt-get install -y postgresql)" if bin_dir is None else None
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing = "psycopg is not installed (pip install 'apportion[postgres]')"
    if missing is not None or bin_dir is None:
        if IN_CI:
            pytest.fail(f"{missing}: run scripts/ensure-test-tools.sh and make's install")
        pytest.skip(f"{missing}; CI installs it and runs these tests")
    from tests.postgres_server import PostgresServer

    with PostgresServer.start_new(bin_dir) as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: object) -> Iterator[str]:
    """A fresh database on the session's PostgreSQL server (``CREATE DATABASE``: tens of ms), as a store URL; dropped
    after the test (each is a copy of template0's ~7 MB)."""
    import uuid

    from tests.postgres_server import PostgresServer

    assert isinstance(postgres_server, PostgresServer)
    name = postgres_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    yield postgres_server.url(name)
    if postgres_server.running:
        postgres_server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def require_java() -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        if IN_CI:
            pytest.fail("Java 17+ is not installed: Spark tests cannot run (see scripts/check-java.sh)")
        pytest.skip("Java 17+ is not installed")


@functools.cache
def spark_kafka_jars() -> str | None:
    """The jars of Spark's Kafka connector for the installed pyspark, comma-separated (scripts/ensure-spark-kafka.sh:
    Maven resolves them once into ~/.m2); None when Maven cannot (the Kafka pipeline tests skip; CI fails instead)."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "ensure-spark-kafka.sh"
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        if IN_CI:
            raise RuntimeError(f"{script} failed: {done.stderr.strip()}")
        return None
    return Path(done.stdout.strip().splitlines()[-1]).read_text().strip() or None


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark Connect server (``apportion spark serve``'s ``ConnectServer``, local[2]) on a free port, with one
    session already served (warm) and Spark's Kafka connector on its classpath (``--kafka-connector``: the pipeline on
    Kafka's thin workers share it); its process group is stopped at the end of the run, whatever happened."""
    require_java()
    pytest.importorskip("grpc", reason="Spark Connect needs the spark extra's grpcio")
    from apportion.spark.engine import kafka_connector_config
    from apportion.spark.engine._serve import ConnectServer

    jars = spark_kafka_jars()
    config = None if jars is None else kafka_connector_config(jars)
    jvm_options()  # the class archive, if written by now (tests/jvm_archive.py)
    server = ConnectServer(
        "local[2]", port=0, log_path=tmp_path_factory.mktemp("connect") / "server.log", config=config
    )
    try:
        server.start()
        server.check_session()
        yield server
    finally:
        server.stop()


_TIMELINE = os.environ.get("APPORTION_TEST_TIMELINE")  # a directory: each xdist worker's test starts and ends


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _timeline_line("start", nodeid)


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    _timeline_line("end", nodeid)


def _timeline_line(what: str, nodeid: str) -> None:
    """With ``APPORTION_TEST_TIMELINE=<dir>``, one line per test start and end in ``<dir>/<xdist worker>.tsv`` (wall
    clock, and the CPU seconds of this process and its reaped children): how ``make test``'s two workers spent the
    run, e.g. which group ran last (scripts/test-timeline.py)."""
    if not _TIMELINE:
        return
    import resource
    import time

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    used = (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    cpu = sum(u.ru_utime + u.ru_stime for u in used)  # this process and the children it reaped
    with open(Path(_TIMELINE) / f"{worker}.tsv", "a") as out:
        out.write(f"{time.time():.3f}\t{what}\t{nodeid}\t{cpu:.2f}\n")
