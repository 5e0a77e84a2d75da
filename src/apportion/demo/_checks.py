"""The demo's checks: exactly once (output and state) against the input, and the table and JSON of the results."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from apportion.demo._config import GROUP
from apportion.store import Store

if TYPE_CHECKING:
    from apportion.kafka import KafkaConfig
    from apportion.spark import VerifyReport


@dataclass(slots=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass(slots=True)
class DemoResult:
    checks: list[Check] = field(default_factory=list)
    report_path: Path | None = None
    dashboard: str | None = None  # the command that opens the live dashboard on the demo's store
    failover_s: float | None = None

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def check_output(store: Store, log_dir: Path, output_dir: Path, step: Callable[[str], None]) -> list[Check]:
    """The log demo's: exactly once in the output, and in the per-key state rebuilt from the changelog."""
    from apportion.log import PartitionedLog
    from apportion.spark import verify, verify_state

    log = PartitionedLog(log_dir)
    exactly_once = _exactly_once(verify(store, GROUP, log, GROUP, output_dir), "the input", step)
    state = verify_state(store, GROUP, log, GROUP)
    step("rebuilt every partition's state from its committed changelog: " + json.dumps(state.to_json()))
    state_detail = (
        f"{state.keys:,} keys of {state.partitions} partitions rebuilt from the committed changelog = one-pass "
        f"aggregate of {state.records:,} records; {state.mismatched_keys} differ"
    )
    return [exactly_once, Check("state exactly once (changelog = reference)", state.ok, state_detail)]


def check_kafka_output(
    store: Store, kafka: KafkaConfig, topic: str, output_dir: Path, step: Callable[[str], None]
) -> list[Check]:
    """The Kafka demo's: exactly once in the output against every record of ``topic``; no state check (the pipeline
    on Kafka is not stateful), said in one line."""
    from apportion.spark import verify_kafka

    exactly_once = _exactly_once(verify_kafka(store, GROUP, kafka, topic, output_dir), f"topic {topic}", step)
    step("state checks skipped: the pipeline on Kafka is not stateful (no --state-dir); every other check runs")
    return [exactly_once]


def _exactly_once(report: VerifyReport, what: str, step: Callable[[str], None]) -> Check:
    data = report.to_json()
    step(f"verified committed output against {what}: " + json.dumps(data))
    detail = (
        f"{data['input_records']:,} in, {data['output_records']:,} out, checksum "
        f"{'equal' if data['input_checksum'] == data['output_checksum'] else 'DIFFERENT'}, "
        f"{data['duplicates']} duplicates, {data['missing']} missing, {data['order_violations']} out of order"
    )
    return Check("exactly once (count, checksum, order)", report.ok, detail)


def print_checks(result: DemoResult, console: Console) -> None:
    table = Table(title="apportion demo: checks")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for check in result.checks:
        table.add_row(check.name, "[green]ok[/]" if check.ok else "[red]FAILED[/]", check.detail)
    console.print(table)
    if result.report_path is not None:
        console.print(f"HTML report: {result.report_path}")
    if result.dashboard is not None:
        console.print(f"Live dashboard (during a demo, or now to look back): {result.dashboard}", soft_wrap=True)
    console.print("[green]all checks passed[/]" if result.ok else "[red]some checks failed[/]")


def summary_json(result: DemoResult) -> dict[str, Any]:
    return {
        "ok": result.ok,
        "failover_s": result.failover_s,
        "report": None if result.report_path is None else str(result.report_path),
        "dashboard": result.dashboard,
        "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in result.checks],
    }


__all__ = ["Check", "DemoResult", "check_kafka_output", "check_output", "print_checks", "summary_json"]
