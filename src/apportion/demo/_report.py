"""The demo's report: the group's history analysed with Spark into HTML with plots, and its overlap check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from apportion.demo._checks import Check
from apportion.demo._config import GROUP
from apportion.group import history
from apportion.store import Store


def report(
    store: Store,
    directory: Path,
    spark_url: str | None,
    step: Callable[[str], None],
    checks: Sequence[Check] = (),
) -> tuple[Path | None, Check]:
    """Analyse the group's history on the demo's Spark Connect server ``spark_url`` (None: a local[2] session);
    the exactly-once ``checks`` made so far join the report's headline."""
    from apportion.spark import Verdict, spark_session, write_report

    events = history(store, GROUP)
    verdicts = [Verdict(c.name, c.ok, c.detail) for c in checks if "exactly once" in c.name]
    spark = spark_session(master=spark_url or "local[2]", app_name="apportion-demo-report", parallelism=2)
    try:
        title = f"apportion demo — group {GROUP}"
        summary = write_report(spark, events, directory / "report", title=title, verdicts=verdicts)
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
