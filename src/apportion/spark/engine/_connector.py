"""Spark's Kafka connector on an engine's classpath: the settings a JVM that reads Kafka starts with.

Spark reads Kafka with its ``spark-sql-kafka-0-10`` connector, which pyspark does not ship: it is a Maven artifact of
pyspark's own version (and its dependencies: ``kafka-clients``, ``commons-pool2``, the token provider). Every JVM
that runs the pipeline's Kafka reads must have it when it starts — a worker's own JVM (``local[N]``), the Connect
server (``apportion spark serve --kafka-jars``); a standalone cluster's executors fetch it from their driver.

Two ways, in this order (:func:`kafka_connector_config`):

1. ``jars``, or ``$APPORTION_KAFKA_JARS``: the connector's jars as local files, comma-separated (``spark.jars``).
   ``scripts/ensure-spark-kafka.sh`` resolves them with Maven once (into ``~/.m2``) and prints the file that lists
   them; the tests and benchmarks use it. Preferred: nothing is resolved when a JVM starts;
2. otherwise ``spark.jars.packages`` with the connector's coordinate for the installed pyspark: Spark's own Ivy
   resolution from Maven Central at every JVM start (a network round trip per repository of Ivy's chain: about a
   minute on a machine that reaches only Maven Central, even with a warm cache).

The connector's version must be pyspark's: pyspark is pinned to the newest line Maven Central serves a connector of
(``pyproject.toml``).
"""

from __future__ import annotations

import os

from apportion.errors import InvalidRequest

JARS_ENV = "APPORTION_KAFKA_JARS"
CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13"


def connector_coordinate() -> str:
    """The Maven coordinate of the connector matching the installed pyspark (``group:artifact:version``)."""
    import pyspark

    return f"{CONNECTOR}:{pyspark.__version__}"


def kafka_connector_config(jars: str | None = None) -> dict[str, str]:
    """The Spark settings that put the Kafka connector on a starting JVM's classpath (module docstring); ``jars``
    (comma-separated paths) over ``$APPORTION_KAFKA_JARS`` over Spark's package resolution. A listed jar that is not
    a file is ``InvalidRequest`` (before a JVM starts: Spark's own error is a Java stack trace)."""
    given = jars if jars is not None else os.environ.get(JARS_ENV, "")
    paths = [p.strip() for p in given.replace(":", ",").split(",") if p.strip()]
    for path in paths:
        if not os.path.isfile(path):
            raise InvalidRequest(
                "kafka-jars", f"{path} is not a file (the jars of Spark's Kafka connector, comma-separated)"
            )
    if paths:
        return {"spark.jars": ",".join(os.path.abspath(p) for p in paths)}
    return {"spark.jars.packages": connector_coordinate()}


__all__ = ["CONNECTOR", "JARS_ENV", "connector_coordinate", "kafka_connector_config"]
