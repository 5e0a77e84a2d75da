"""A real Apache Kafka for tests: apportion's local KRaft broker (``apportion.kafka.KafkaCluster``, from Kafka's Maven
artifacts on free loopback ports; its module docstring says how the classpath is resolved), with SASL users.

``KafkaCluster.run(base, nodes=1)`` is a context manager: a fresh cluster, waited for until every broker answers,
always stopped. Each broker listens on two client ports: PLAINTEXT (``bootstrap``) and SASL_PLAINTEXT with the PLAIN
mechanism (``sasl_bootstrap``; users ``alice``/``alice-secret`` and ``admin``/``admin-secret``), so the one session
broker also serves the test of wrong credentials. Fault tests use :meth:`KafkaCluster.kill` (SIGKILL one node),
:meth:`KafkaCluster.restart` and :meth:`KafkaCluster.tool` (a Kafka admin command, e.g. ``TopicCommand``). A
missing Java or Maven, or no Maven Central, is ``apportion.errors.BrokerUnavailable`` (one line naming it).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from apportion.kafka import KafkaCluster as LocalKafka
from apportion.kafka import KafkaNode, kafka_classpath

SASL_USERS = {"admin": "admin-secret", "alice": "alice-secret"}  # the first is the brokers' own login


class KafkaCluster(LocalKafka):
    """apportion's local Kafka with the tests' SASL users (module docstring)."""

    def __init__(
        self, classpath: str, base: Path, nodes: int = 1, sasl_users: Mapping[str, str] | None = SASL_USERS
    ) -> None:
        super().__init__(classpath, base, nodes, sasl_users)


__all__ = ["SASL_USERS", "KafkaCluster", "KafkaNode", "kafka_classpath"]
