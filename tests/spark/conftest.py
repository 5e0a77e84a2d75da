"""The ONE Spark session of the test run (session-scoped; ~5 s to start), shared by every test in tests/spark/.

Sized for a 2-core machine (``apportion.spark._session``): `local[2]`, 2 shuffle partitions, 1 GiB driver. Every test
module here must mark its tests `pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]` so that, under
`pytest -n 2 --dist loadgroup`, a single xdist worker starts Spark.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

IN_CI = os.environ.get("CI") == "true"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession; stopped at the end of the run."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        if IN_CI:
            pytest.fail("Java 17+ is not installed: Spark tests cannot run (see scripts/check-java.sh)")
        pytest.skip("Java 17+ is not installed")
    from apportion.spark._session import spark_session

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
