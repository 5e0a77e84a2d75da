"""Fixtures of the Kafka tests: one real single-node KRaft broker per test session (``kafka``; tests/kafka_server.py,
the broker from Kafka's Maven artifacts), never skipped in CI, and a fresh topic name per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.errors import BrokerUnavailable
from tests.conftest import IN_CI
from tests.kafka_server import KafkaCluster

if not IN_CI:  # CI installs the extra (make test): there a missing client fails the collection instead
    pytest.importorskip("confluent_kafka", reason="the kafka extra is not installed (pip install 'apportion[kafka]')")

_TOPICS = itertools.count()


def _cluster(base: Path, nodes: int) -> Iterator[KafkaCluster]:
    try:
        with KafkaCluster.run(base, nodes=nodes) as cluster:
            yield cluster
    except BrokerUnavailable as exc:
        if IN_CI or ("Maven" not in str(exc) and "Java" not in str(exc)):
            raise
        pytest.skip(f"{exc}; CI installs it and runs these tests")


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A fresh single-node KRaft broker on free loopback ports (PLAINTEXT and SASL/PLAIN) for the session."""
    yield from _cluster(tmp_path_factory.mktemp("kafka"), 1)


@pytest.fixture(scope="module")
def kafka3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A 3-node KRaft cluster (each node broker and controller) for one module's fault tests."""
    yield from _cluster(tmp_path_factory.mktemp("kafka3"), 3)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name of this test alone (not created: the test creates it with the partitions it needs)."""
    name = "".join(c if c.isalnum() or c in "._-" else "-" for c in request.node.name[:40])
    return f"t{next(_TOPICS)}-{name}"


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'apportion.db'}"
