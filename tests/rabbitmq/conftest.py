"""Fixtures of the RabbitMQ tests: one private RabbitMQ node per test session (``rabbit``; see
tests/rabbitmq_server.py), never skipped in CI, and a fresh queue prefix per test so tests never share a queue."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI
from tests.rabbitmq_server import RabbitServer, rabbitmq_binary

if not IN_CI:  # CI installs the extra (make test): there a missing pika fails the collection instead
    pytest.importorskip("pika", reason="the rabbitmq extra is not installed (pip install 'apportion[rabbitmq]')")

_PREFIXES = itertools.count()


@pytest.fixture(scope="session")
def rabbit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitServer]:
    """A fresh RabbitMQ node on free loopback ports for the session; stopped (with its epmd) at the end."""
    server = rabbitmq_binary()
    if server is None:
        if IN_CI:
            pytest.fail("rabbitmq-server is not installed: run scripts/ensure-test-tools.sh")
        pytest.skip("rabbitmq-server is not installed (apt-get install -y rabbitmq-server); CI runs these tests")
    with RabbitServer.run(server, tmp_path_factory.mktemp("rabbitmq")) as node:
        yield node


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """A queue prefix of this test alone."""
    return f"t{next(_PREFIXES)}-{request.node.name[:40]}"


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'apportion.db'}"
