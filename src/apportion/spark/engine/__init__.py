"""The Spark engine apportion runs on: the one session every part starts, local or through a Connect server
(``_session``), with Spark's Kafka connector when it reads Kafka (``_connector``); a Connect server started from the
pip package (``_serve``, ``apportion spark serve``); a standalone cluster of the same package for tests and benchmarks
(``_cluster``). Nothing here imports pyspark at import time."""

from __future__ import annotations

from apportion._ports import free_port
from apportion.spark.engine._cluster import StandaloneCluster
from apportion.spark.engine._connector import JARS_ENV, connector_coordinate, kafka_connector_config
from apportion.spark.engine._serve import ConnectServer, check_port_free, java_executable
from apportion.spark.engine._session import (
    DEFAULT_CONNECT_PORT,
    connect_address,
    connect_session,
    default_parallelism,
    is_connect,
    is_connect_url,
    reach_master,
    spark_session,
    validate_master,
)

__all__ = [
    "DEFAULT_CONNECT_PORT",
    "JARS_ENV",
    "ConnectServer",
    "StandaloneCluster",
    "check_port_free",
    "connect_address",
    "connect_session",
    "connector_coordinate",
    "default_parallelism",
    "free_port",
    "is_connect",
    "is_connect_url",
    "java_executable",
    "kafka_connector_config",
    "reach_master",
    "spark_session",
    "validate_master",
]
