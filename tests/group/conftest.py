"""The group process tests' store: ``url``, one per kind (a SQLite file, a fresh real etcd server, a fresh database on
the session's real PostgreSQL server); a test narrows the kinds with ``@pytest.mark.parametrize("url", [...],
indirect=True)``.

The coordinator and static modes' process tests (test_modes_processes.py) run on PostgreSQL in `make soak` only: the
modes sit above the store's interface, which the contract tests and the rounds protocol's process tests check on
PostgreSQL in `make test`, and its six variants cost make test ~40 s of its 15 minutes."""

from __future__ import annotations

from pathlib import Path

import pytest

SOAK_ONLY = {("test_modes_processes.py", "postgres")}


@pytest.hookimpl(tryfirst=True)  # before the marks are read to deselect `-m "not soak"`
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        kind = getattr(getattr(item, "callspec", None), "params", {}).get("url")
        if (item.path.name, kind) in SOAK_ONLY:
            item.add_marker(pytest.mark.soak)


@pytest.fixture(params=["sqlite", "etcd", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param in ("etcd", "postgres"):
        server: str = request.getfixturevalue(f"{request.param}_url")
        return server
    return f"sqlite:///{tmp_path / 'apportion.db'}"
