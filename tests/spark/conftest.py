"""The ONE Spark session of the test run (session-scoped; ~5 s to start), shared by every test in tests/spark/, and
the ONE Spark Connect server (``connect_server``, session-scoped, started only by the tests that use it: in
tests/conftest.py, for the pipeline's rolling upgrade in tests/upgrade/ shares it too).

Sized for a 2-core machine (``apportion.spark.engine._session``): `local[2]`, 2 shuffle partitions, 1 GiB driver. A
test's fixtures put it in one of two xdist groups (``pytest_collection_modifyitems`` below), so that under `pytest -n 3
--dist loadgroup` each of those fixtures starts once, on one xdist worker each, and the two groups run side by side:
`xdist_group("thin-workers")` for the tests of the Connect server (thin workers: no JVM per process), then
`xdist_group("spark")` for those of the local session. (Marks written by hand named a test's module's group and its
own, which xdist joins into a third group, starting a third JVM; and pytest 9 made xdist 3.8 drop the groups: the
dev extra keeps pytest 8.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import jvm_options, require_java, spark_kafka_jars  # noqa: F401 (the Spark tests' helpers, imported from here)


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
    jvm_options()  # the class archive, if written by now (tests/jvm_archive.py)
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
