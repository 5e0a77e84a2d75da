"""The demo's report: the group's history analysed with Spark into HTML with plots, and its overlap check."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from apportion.demo._checks import Check
from apportion.demo._config import GROUP
from apportion.group import history
from apportion.store import Store


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` (appending) while the block runs; child processes started inside keep it."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as target:
        os.dup2(target.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def report(store: Store, directory: Path, step: Callable[[str], None]) -> tuple[Path | None, Check]:
    from apportion.spark import spark_session, write_report

    events = history(store, GROUP)
    with _stderr_to(directory / "logs" / "report-spark.log"):  # the JVM inherits fd 2: its banner goes to the log
        spark = spark_session(master="local[2]", app_name="apportion-demo-report")
    try:
        summary = write_report(spark, events, directory / "report")
    finally:
        spark.stop()
    overlaps = int(summary.overlaps)
    step(
        f"history analysed with Spark: {summary.rounds} rounds, {summary.intervals} ownership intervals, "
        f"{summary.overlaps} overlaps, planned handoff p50/p99 "
        f"{_ms(summary.handoff_p50_s)}/{_ms(summary.handoff_p99_s)}, "
        f"failover p50 {_ms(summary.failover_p50_s)}"
    )
    step(f"report written: {summary.index_html}")
    return Path(summary.index_html), Check("zero ownership overlaps", overlaps == 0, f"{overlaps} overlaps")


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


__all__ = ["report"]
