"""The ONE Spark session of the test run (session-scoped; ~5 s to start), shared by every test in tests/spark/, and
the ONE Spark Connect server (``connect_server``, session-scoped, started only by the tests that use it).

Sized for a 2-core machine (``apportion.spark.engine._session``): `local[2]`, 2 shuffle partitions, 1 GiB driver. A
test's fixtures put it in one of two xdist groups (``pytest_collection_modifyitems`` below), so that under `pytest -n 2
--dist loadgroup` each of those fixtures starts once, on one xdist worker each, and the two groups run side by side:
`xdist_group("thin-workers")` for the tests of the Connect server (thin workers: no JVM per process), then
`xdist_group("spark")` for those of the local session. (Marks written by hand named a test's module's group and its
own, which xdist joins into a third group, starting a third JVM; and pytest 9 made xdist 3.8 drop the groups: the
dev extra keeps pytest 8.)
"""

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


def require_java() -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        if IN_CI:
            pytest.fail("Java 17+ is not installed: Spark tests cannot run (see scripts/check-java.sh)")
        pytest.skip("Java 17+ is not installed")


@functools.cache
def spark_kafka_jars() -> str | None:
    """The jars of Spark's Kafka connector for the installed pyspark, comma-separated (scripts/ensure-spark-kafka.sh:
    Maven resolves them once into ~/.m2); None when Maven cannot (the Kafka pipeline tests skip; CI fails instead)."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "ensure-spark-kafka.sh"
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        if IN_CI:
            raise RuntimeError(f"{script} failed: {done.stderr.strip()}")
        return None
    return Path(done.stdout.strip().splitlines()[-1]).read_text().strip() or None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, group in (("connect_server", "thin-workers"), ("spark", "spark")):
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(group))
                break


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession; stopped at the end of the run."""
    require_java()
    from apportion.spark.engine._session import spark_session

    session = spark_session(
        "local[2]", "1g", "apportion-tests", parallelism=2, config={"spark.sql.execution.arrow.pyspark.enabled": "true"}
    )
    try:
        yield session
    finally:
        session.stop()


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
    server = ConnectServer(
        "local[2]", port=0, log_path=tmp_path_factory.mktemp("connect") / "server.log", config=config
    )
    try:
        server.start()
        server.check_session()
        yield server
    finally:
        server.stop()


@pytest.fixture
def processes() -> Iterator[list[Any]]:
    """Worker processes a test starts (``apportion.fleet.WorkerProcess``); each is resumed and killed at the end
    if still alive."""
    started: list[Any] = []
    yield started
    for w in started:
        w.kill()
