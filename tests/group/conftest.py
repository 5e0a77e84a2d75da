"""The group process tests' store: ``url``, one per kind (a SQLite file, a fresh real etcd server, a fresh database on
the session's real PostgreSQL server); a test narrows the kinds with ``@pytest.mark.parametrize("url", [...],
indirect=True)``."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", "etcd", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param in ("etcd", "postgres"):
        server: str = request.getfixturevalue(f"{request.param}_url")
        return server
    return f"sqlite:///{tmp_path / 'apportion.db'}"
