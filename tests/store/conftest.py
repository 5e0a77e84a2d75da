"""Backends for the ONE conformance suite: every test taking `store_url` or `store` runs on each backend.

Each test gets a fresh, empty store. Tests must not assume absolute revision numbers (etcd starts at 1, the others
at 0): compare against `store.revision()` read at the start.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.store import Store, connect

BACKENDS = ["memory", "sqlite", "etcd", "postgres"]


def fresh_store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "memory":
        return f"memory://conformance-{uuid.uuid4().hex}"
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    if backend == "etcd":
        url: str = request.getfixturevalue("etcd_url")  # defined in tests/conftest.py (a real etcd server)
        return url
    if backend == "postgres":
        database: str = request.getfixturevalue("postgres_url")  # a fresh database on a real PostgreSQL server
        return database
    raise ValueError(backend)


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return fresh_store_url(request.param, tmp_path, request)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with connect(store_url) as opened:
        yield opened
