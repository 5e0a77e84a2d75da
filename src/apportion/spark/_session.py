"""The one way apportion starts Spark: a small local session (UI off, quiet logs, UTC, loopback only).

Used by the pipeline worker, ``apportion report``, the simulation grid, the demo, the benchmarks and the tests'
session fixture; they differ only in ``master``, ``driver_memory``, ``parallelism`` and extra ``config``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_session(
    master: str = "local[1]",
    driver_memory: str = "1g",
    app_name: str = "apportion-pipeline",
    *,
    parallelism: int = 1,
    config: Mapping[str, str] | None = None,
) -> SparkSession:
    """A small Spark session for one process (``getOrCreate``: an existing session of the process is reused).
    ``parallelism`` sets the shuffle partitions and the default parallelism (1 for a pipeline worker's
    ``local[1]``); ``config`` adds or overrides Spark settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(parallelism),
        "spark.default.parallelism": str(parallelism),
        "spark.driver.memory": driver_memory,
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        **(config or {}),
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


__all__ = ["spark_session"]
