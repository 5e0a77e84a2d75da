"""Shared fixtures. `etcd_url` gives a fresh, empty real etcd server (see tests/etcd_server.py)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI") == "true"


def etcd_binary() -> str | None:
    return shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)


@pytest.fixture
def etcd_bin() -> str:
    """The etcd server binary; a clear skip on a developer machine without it, a failure in CI."""
    binary = etcd_binary()
    if binary is None:
        if IN_CI:
            pytest.fail("etcd is not installed: run scripts/ensure-test-tools.sh (apt-get install -y etcd-server)")
        pytest.skip("etcd is not installed (apt-get install -y etcd-server); CI installs it and runs these tests")
    return binary


@pytest.fixture
def etcd_url(etcd_bin: str, tmp_path: Path) -> Iterator[str]:
    """A fresh single-node etcd on free loopback ports; stopped after the test. Never skipped in CI."""
    from tests.etcd_server import EtcdServer  # written with the etcd backend

    with EtcdServer.single(etcd_bin, tmp_path / "etcd") as server:
        yield server.url
