"""Fixtures of the multi-host tests: network namespaces can be made (root, iproute2), else a failure in CI that says
why and a skip elsewhere."""

from __future__ import annotations

import pytest

from tests.conftest import IN_CI
from tests.nemesis.netns import unavailable


@pytest.fixture(scope="session")
def netns_ok() -> None:
    """Network namespaces can be made here; CI (run as root) fails with the reason instead of skipping."""
    reason = unavailable()
    if reason is None:
        return
    if IN_CI:
        pytest.fail(f"network namespaces cannot be made in CI: {reason}")
    pytest.skip(f"network namespaces cannot be made here: {reason}")
