"""The Jepsen-style nemesis over network namespaces (issue 19): a 3-node etcd cluster and 3 `apportion worker`
processes, each on its own host, under a seeded random schedule of partitions (a worker cut off from etcd, a worker
that reaches only one etcd node, the leader or a follower isolated), a frozen leader, kill -9 of etcd nodes and
workers, and workers leaving and joining; then the independent checker (tests/nemesis/checker.py) on the store's own
history and the workers' event lines: 0 violations.

The short run is part of `make test` (4 faults, the kinds drawn by the seed); `make soak` (APPORTION_SOAK=1) runs
APPORTION_NEMESIS_FAULTS faults (default 240) within APPORTION_NEMESIS_BUDGET_S (default 1,800 s). The seed is
printed; APPORTION_NEMESIS_SEED=<seed> replays the same schedule.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.nemesis.nemesis import KINDS, NemesisConfig, run, schedule

pytestmark = [pytest.mark.etcd, pytest.mark.xdist_group("netns-nemesis"), pytest.mark.usefixtures("netns_ok")]


def _seed() -> int:
    value = os.environ.get("APPORTION_NEMESIS_SEED")
    return int(value) if value else random.SystemRandom().randrange(1 << 32)


def _run(tmp_path: Path, etcd_bin: str, faults: int, budget_s: float, capsys: pytest.CaptureFixture[str]) -> None:
    seed = _seed()
    config = NemesisConfig(tmp_path / "run", seed=seed, faults=faults, budget_s=budget_s)
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        with capsys.disabled():
            print(line, flush=True)

    say(f"\nnemesis seed {seed} (replay: APPORTION_NEMESIS_SEED={seed}); history in {config.directory}/history")
    outcome = run(config, etcd_bin, say)
    report = outcome.report
    assert report is not None
    say(report.table())
    context = f"seed {seed}\n" + "\n".join(lines)
    assert report.violations == [], "\n".join(report.violations[:20]) + "\n" + context
    assert len(outcome.injected) >= min(faults, 3), context
    assert report.store_commits >= report.worker_commits > 0, context
    assert set(report.availability) == set(range(12)) and min(report.availability.values()) > 0.25, context


def test_the_schedule_is_a_function_of_the_seed_and_covers_every_kind_before_repeating(tmp_path: Path) -> None:
    config = NemesisConfig(tmp_path, seed=7, faults=len(KINDS) + 3, budget_s=1)
    plan = schedule(config)
    assert plan == schedule(config)
    assert sorted(p.kind for p in plan[: len(KINDS)]) == sorted(KINDS)
    assert all(p.hold_s > config.ttl_s for p in plan if p.kind == "isolate-worker")
    assert schedule(NemesisConfig(tmp_path, seed=8, faults=len(KINDS), budget_s=1)) != plan[: len(KINDS)]


@pytest.mark.timeout(300)
def test_etcd_cluster_and_workers_on_separate_hosts_survive_random_partitions_and_kills(
    tmp_path: Path, etcd_bin: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _run(tmp_path, etcd_bin, faults=4, budget_s=45, capsys=capsys)


@pytest.mark.soak  # make soak only (make test runs the short one above): deselected there, never skipped
@pytest.mark.timeout(7200)
def test_long_nemesis_hundreds_of_faults(tmp_path: Path, etcd_bin: str, capsys: pytest.CaptureFixture[str]) -> None:
    faults = int(os.environ.get("APPORTION_NEMESIS_FAULTS", "240"))
    budget_s = float(os.environ.get("APPORTION_NEMESIS_BUDGET_S", "1800"))
    _run(tmp_path, etcd_bin, faults=faults, budget_s=budget_s, capsys=capsys)
