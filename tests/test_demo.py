"""A smaller main job, end to end, as `make demo` runs it: real worker processes, real Spark, real faults."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.xdist_group("spark")]


def test_small_demo_passes_every_check_and_writes_its_report(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "apportion.cli", "demo", "--dir", str(directory), "--records", "40000",
         "--partitions", "8", "--batch-records", "2000", "--stream-seconds", "8", "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, f"demo failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True
    names = {c["name"] for c in summary["checks"] if c["ok"]}
    assert {
        "exactly once (count, checksum, order)",
        "state exactly once (changelog = reference)",
        "zero ownership overlaps",
        "join moves = lower bound",
    } <= names
    assert summary["failover_s"] is not None
    assert Path(summary["report"]).exists()


def test_demo_refuses_a_non_empty_directory_without_clean(tmp_path: Path) -> None:
    (tmp_path / "something").write_text("x")
    proc = subprocess.run(
        [sys.executable, "-m", "apportion.cli", "demo", "--dir", str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "--clean" in proc.stderr
    assert "Traceback" not in proc.stderr
