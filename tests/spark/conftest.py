"""The ONE Spark session of the test run (session-scoped; ~5 s to start), shared by every test in tests/spark/, and
the ONE Spark Connect server (``connect_server``, session-scoped, started only by the tests that use it: in
tests/conftest.py, for the pipeline's rolling upgrade in tests/upgrade/ shares it too).

Sized for a 2-core machine (``apportion.spark.engine._session``): `local[2]`, 2 shuffle partitions, 1 GiB driver.
Every test that runs Spark is in ONE xdist group, ``xdist_group("spark")`` (``pytest_collection_modifyitems`` below
marks the tests of both fixtures; the demo's, the cluster's, the pipeline on Kafka's and the pipeline's upgrade are
marked by hand), so that under `pytest -n 2 --dist loadgroup` one xdist worker runs them one after the other while
the other runs everything else. Two Spark groups side by side on 2 cores ran each ~1.5x slower (one run of make
test: the Connect tests 334 s -> 590 s, the local session's 182 s -> 268 s, the standalone cluster's 94 s -> 144 s)
and made the whole run 4 minutes longer. (A test marked with two groups would be put in a third, their names joined;
and pytest 9 made xdist 3.8 drop the groups: the dev extra keeps pytest 8.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import require_java, spark_kafka_jars  # noqa: F401 (the Spark tests' helpers, imported from here)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if ("connect_server" in fixtures or "spark" in fixtures) and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group("spark"))


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


@pytest.fixture
def processes() -> Iterator[list[Any]]:
    """Worker processes a test starts (``apportion.fleet.WorkerProcess``); each is resumed and killed at the end
    if still alive."""
    started: list[Any] = []
    yield started
    for w in started:
        w.kill()
