"""The main job on embedded defaults (`make demo` / `apportion demo`): the whole of apportion, end to end.

SQLite store, partitioned Parquet log, local Spark; real worker processes and real faults. Steps::

    produce   N keyed records routed by partition_for into P partitions (the Python producer)
    start     W `apportion pipeline run` workers (sticky, stateful: per-key aggregates per partition in local
              stores backed by a fenced changelog) — each its own Spark session
    join      one more worker; the group rebalances with the minimum of moves
    kill -9   one worker: its lease lapses, its partitions are claimed again (failover time measured)
    freeze    one worker with SIGSTOP until its partitions are owned by others, then SIGCONT: its late commit is
              fenced (epochs) and it reports on_lost, then rejoins
    drain     wait until every record is committed
    stop      SIGTERM everyone: graceful leave (revoke, commit, release)
    verify    exactly once (counts + checksum of committed output vs input, no duplicate, none missing, per-key
              order), state exactly once (every partition's state rebuilt from its committed changelog equals a
              one-pass aggregate of the input: the killed worker's and the zombie's appends never count), zero
              ownership overlaps in the history, moves vs the lower bound, failover time
    report    Spark analytics of the history → HTML with plots

Every wait is on a state (store records, the workers' event lines) and fails with what it waited for; its time
limit is not tuned to an idle machine but derived from what the demo observes (``_Pace``): the protocol's own times
(ttl + settle + min interval), the slowest micro-batch seen so far in any worker's log, how long the Spark workers
took to start, and the machine's load average. Long waits (start-up, draining) fail only after that long *without
progress*, and a wait fails at once, with the tail of its log, when a worker it needs has exited. The freeze is
checked too: if SIGSTOP missed the zombie's window between writing and committing, it is resumed and frozen again
at its next batch. The job exits non-zero when any check fails. Child processes are always stopped (SIGCONT +
SIGKILL) when the demo ends, whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from apportion.errors import ApportionError, InvalidRequest
from apportion.fleet import Fleet, WorkerLog, pipeline_args
from apportion.group import history, owned_by, owners, settled
from apportion.store import Store, connect
from apportion.waiting import wait_for

GROUP = "orders"


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """Sizes and timings of the demo (defaults: the main job; tests run a smaller one)."""

    directory: Path
    records: int = 1_000_000
    partitions: int = 32
    workers: int = 3
    keys: int = 10_000
    batch_records: int = 20_000
    seed: int = 7
    ttl_s: float = 5.0
    stream_s: float = 60.0
    settle_s: float = 0.5
    min_interval_s: float = 1.0
    report: bool = True
    timeout_s: float = 180.0  # the floor of the start-up limit (x the load factor); others derive from observations

    def __post_init__(self) -> None:
        if self.records < 1:
            raise InvalidRequest("records", "must be >= 1")
        if self.partitions < 2:
            raise InvalidRequest("partitions", "must be >= 2")
        if self.workers < 2:
            raise InvalidRequest("workers", "must be >= 2 (one is killed, one frozen)")


@dataclass(slots=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass(slots=True)
class DemoResult:
    checks: list[Check] = field(default_factory=list)
    report_path: Path | None = None
    failover_s: float | None = None

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


@dataclass(slots=True)
class _Pace:
    """The demo's time limits, from what it observed (never a fixed timeout tuned to an idle machine).

    ``protocol_s`` = ttl + settle + min interval (a lapse noticed plus a round); ``batch_s`` = the slowest batch
    any worker has logged; ``startup_s`` = how long the first Spark workers took to own every partition; ``load``
    = the 1-minute load average per core (>= 1). Each limit is a floor or a multiple of those, whichever is larger.
    """

    config: DemoConfig
    logs: dict[str, WorkerLog]
    startup_s: float = 0.0

    @property
    def protocol_s(self) -> float:
        c = self.config
        return c.ttl_s + c.settle_s + c.min_interval_s

    @property
    def load(self) -> float:
        try:
            return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
        except OSError:
            return 1.0

    @property
    def batch_s(self) -> float:
        return max((log.slowest_batch_s() for log in self.logs.values()), default=0.0)

    def startup(self) -> float:
        """Spark sessions starting (JVM, warm-up) and the first round: nothing to scale with yet but the load."""
        return self.config.timeout_s * self.load

    def spark_start(self) -> float:
        """One more worker's Spark session starting, or the first commits: like the first start-up."""
        return max(90.0, 2.0 * self.startup_s) * self.load

    def rebalance(self) -> float:
        """Ownership changing hands: leases lapse, rounds close, revocations wait for the batches in flight."""
        return max(60.0, 4.0 * self.protocol_s + 4.0 * self.batch_s) * self.load

    def batch(self) -> float:
        """A worker finishing the batch it is in (or starting its next one)."""
        return max(60.0, 4.0 * self.batch_s + 2.0 * self.protocol_s) * self.load


class _RecordSource:
    """The demo's input: seeded keyed records appended through the Python producer, in chunks.

    The first half is appended before the workers start; the rest streams in while the group churns, so that the
    faults hit workers in the middle of their batches.
    """

    def __init__(self, config: DemoConfig, log_dir: Path) -> None:
        from apportion.log import PartitionedLog, SeededRecords

        self.config = config
        self.log = PartitionedLog(log_dir)
        self.log.create(GROUP, config.partitions)
        self.records = SeededRecords(
            self.log, GROUP, config.records, keys=config.keys, seed=config.seed, batch_records=config.batch_records
        )
        self._thread: threading.Thread | None = None

    @property
    def produced(self) -> int:
        return self.records.produced

    def append(self, count: int) -> None:
        self.records.append(count)

    def stream(self, duration_s: float, chunk: int = 25_000) -> None:
        """Append the rest in the background, evenly over about ``duration_s`` seconds."""
        remaining = self.streamed_total - self.produced
        pause = duration_s / max(1, -(-remaining // chunk))

        self._thread = self.records.stream(self.streamed_total, chunk, pause, name="demo-producer")

    @property
    def streamed_total(self) -> int:
        """Records produced by the end of the stream; the rest is a reserve appended on demand (``finish``)."""
        return self.config.records - self.reserve

    @property
    def reserve(self) -> int:
        return min(self.config.records // 2, max(self.config.partitions * 250, self.config.records // 20))

    def finish(self, limit_s: float) -> None:
        """Wait for the stream (failing after ``limit_s`` without a chunk appended), then append the reserve: fresh
        work for every partition, right now."""
        thread = self._thread
        if thread is not None:
            wait_for(
                "the producer to append the streamed input",
                lambda: not thread.is_alive(),
                limit_s,
                progress=lambda: self.produced,
            )
        if self.records.error is not None:
            raise ApportionError(f"demo: the producer failed: {self.records.error}") from self.records.error
        self.append(self.config.records - self.produced)
        if self.produced < self.config.records:
            raise ApportionError(f"demo: produced only {self.produced} of {self.config.records} records")

    def stop(self) -> None:
        self.records.stop()


def _fleet(config: DemoConfig, store_url: str, log_dir: Path, output_dir: Path) -> Fleet:
    """The demo's workers (stopped with SIGCONT + SIGKILL when the ``with`` block ends, whatever happens)."""
    c = config
    args = pipeline_args(
        store_url, GROUP, log_dir, output_dir, GROUP,
        "--batch-records", str(c.batch_records), "--ttl", str(c.ttl_s), "--settle", str(c.settle_s),
        "--min-interval", str(c.min_interval_s), "--master", "local[1]", "--driver-memory", "768m",
        "--state-dir", str(c.directory / "state"),
    )  # fmt: skip
    return Fleet(c.directory / "logs", args)


def _remaining(store: Store, log_dir: Path) -> int:
    from apportion.log import PartitionedLog
    from apportion.spark._output import lag

    return sum(lag(store, GROUP, PartitionedLog(log_dir), GROUP).values())


def run_demo(config: DemoConfig, console: Console | None = None) -> DemoResult:
    """Run the main job; return its checks (the caller turns a failed check into a non-zero exit)."""
    console = console or Console(stderr=False)
    d = config.directory
    d.mkdir(parents=True, exist_ok=True)
    log_dir, output_dir = d / "log", d / "output"
    store_url = f"sqlite:///{d / 'apportion.db'}"
    result = DemoResult()
    began = time.monotonic()

    def step(text: str) -> None:
        console.print(f"[bold cyan][{time.monotonic() - began:6.1f}s][/] {text}")

    step(f"working directory {d}")
    source = _RecordSource(config, log_dir)
    source.append(config.records // 2)
    step(
        f"produced {source.produced:,} of {config.records:,} records into {config.partitions} partitions "
        "(routing: pmod(xxhash64(key), n)); the rest streams in while the group churns"
    )
    try:
        _run_scenario(config, source, store_url, log_dir, output_dir, result, step, console)
    finally:
        source.stop()
    _print_checks(result, console)
    return result


def _run_scenario(
    config: DemoConfig,
    source: _RecordSource,
    store_url: str,
    log_dir: Path,
    output_dir: Path,
    result: DemoResult,
    step: Callable[[str], None],
    console: Console,
) -> None:
    produced = config.records
    d = config.directory
    with connect(store_url) as store, _fleet(config, store_url, log_dir, output_dir) as fleet:
        ids = [f"w{i}" for i in range(1, config.workers + 2)]
        first, joiner = ids[:-1], ids[-1]
        zombie = first[1]
        logs = {wid: fleet.log(wid) for wid in ids}
        pace = _Pace(config, logs)
        for wid in first:
            # The worker that will be frozen is a slow committer (a pause between writing a batch's output and
            # committing it), so that the freeze lands inside that window and its late commit meets the fence.
            slow = ("--pause-before-commit", "1.5", "--pause-batches", "1000000") if wid == zombie else ()
            fleet.start(wid, *slow)
        step(
            f"started {len(first)} pipeline workers ({', '.join(first)}), sticky strategy, stateful (per-key "
            "aggregates per partition backed by a fenced changelog); Spark sessions starting"
        )

        def running(*wids: str) -> Callable[[], None]:
            return lambda: fleet.check(wids)

        def events() -> int:
            return sum(len(log.refresh()) for log in logs.values())

        took = wait_for(
            "the first workers to own every partition",
            lambda: owned_by(store, GROUP, first),
            pace.startup(),
            progress=lambda: (events(), _load(store)),
            alive=running(*first),
        )
        pace.startup_s = took
        step(f"all {config.partitions} partitions owned after {took:.1f} s: {_load(store)}")

        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
        with Progress(*columns, console=console, transient=True) as progress:
            bar = progress.add_task("records committed", total=produced)
            remaining = [produced]

            def advance() -> int:
                remaining[0] = _remaining(store, log_dir)
                progress.update(bar, completed=produced - remaining[0])
                return remaining[0]

            def committed() -> int:
                return produced - remaining[0]

            # Input keeps arriving; a member joins.
            source.stream(duration_s=config.stream_s)
            wait_for(
                "first commits",
                lambda: advance() < produced,
                pace.spark_start(),
                progress=events,
                alive=running(*first),
            )
            fleet.start(joiner)
            step(f"worker {joiner} joins (its Spark session starts first)")
            wait_for(
                f"{joiner} to own partitions",
                lambda: advance() >= 0 and joiner in owners(store, GROUP).values(),
                pace.spark_start(),
                progress=committed,
                alive=running(*first, joiner),
            )
            wait_for(
                "the rebalance to settle",
                lambda: advance() >= 0 and settled(store, GROUP, ids),
                pace.rebalance(),
                progress=lambda: _load(store),
                alive=running(*first, joiner),
            )
            join_round = _join_round(store, joiner)
            moved, lower = int(join_round.get("moves", -1)), int(join_round.get("min_moves", -1))
            step(f"rebalanced in round {join_round.get('round')}: {moved} partitions moved (lower bound {lower}): "
                 f"{_load(store)}")  # fmt: skip
            result.checks.append(Check("join moves = lower bound", moved == lower, f"{moved} moved, bound {lower}"))

            # kill -9 one worker: failover time = until all its partitions are owned by others.
            victim = first[0]
            others = [w for w in ids if w != victim]
            victim_parts = [p for p, o in owners(store, GROUP).items() if o == victim]
            fleet[victim].signal(signal.SIGKILL, group=False)
            step(f"kill -9 {victim} (owned {len(victim_parts)} partitions)")
            failover = wait_for(
                f"{victim}'s partitions to be owned again",
                lambda: advance() >= 0 and all(owners(store, GROUP).get(p) not in (None, victim) for p in victim_parts),
                pace.rebalance(),
                poll_s=0.05,
                alive=running(*others),
            )
            result.failover_s = failover
            bound = config.ttl_s + config.settle_s + config.min_interval_s + 2.0
            step(f"failover: {victim}'s partitions owned again after {failover:.2f} s")
            result.checks.append(
                Check("failover within ttl + RST + MRI + 2 s", failover <= bound, f"{failover:.2f} s (≤ {bound} s)")
            )

            # freeze one worker until it is replaced, then resume it: its late commit must be fenced.
            wait_for(
                f"{zombie} to own partitions",
                lambda: zombie in owners(store, GROUP).values(),
                pace.rebalance(),
                progress=lambda: _load(store),
                alive=running(*others),
            )
            zombie_log = logs[zombie]
            source.finish(pace.batch())  # the last records arrive: every worker has a batch to do
            step(f"all {source.produced:,} records produced")
            zombie_parts = _freeze_in_window(fleet, store, zombie, zombie_log, pace, committed, advance, step)
            batches_before = zombie_log.count("batch_done")
            lost_before = len(zombie_log.lost())
            step(f"SIGSTOP {zombie} (owned {len(zombie_parts)} partitions) between writing a batch and committing it")
            replaced = wait_for(
                f"{zombie}'s partitions to be owned by others",
                lambda: advance() >= 0 and all(owners(store, GROUP).get(p) not in (None, zombie) for p in zombie_parts),
                pace.rebalance(),
                progress=lambda: _load(store),
                alive=running(*others),
            )
            step(f"{zombie} replaced after {replaced:.2f} s; SIGCONT {zombie}")
            fleet[zombie].signal(signal.SIGCONT, group=False)
            wait_for(
                f"{zombie} to finish its frozen batch (its late commits meet the fence)",
                lambda: zombie_log.count("batch_done") > batches_before or zombie_log.count("fenced") > 0,
                pace.batch(),
                progress=lambda: len(zombie_log.refresh()),
                alive=running(*others),
            )
            # on_lost follows (for the fenced partitions first, then the rest when the lapse is noticed)
            wait_for(
                f"{zombie} to report its partitions lost (on_lost)",
                lambda: len(zombie_log.lost()) > lost_before,
                pace.rebalance(),
                poll_s=0.05,
                alive=running(*others),
            )
            lost = zombie_log.lost()[lost_before:]
            fenced = zombie_log.count("fenced")
            step(
                f"{zombie} resumed: {len(lost)} partitions reported lost, "
                f"{fenced} late commits fenced (output discarded)"
            )
            result.checks.append(
                Check(
                    "zombie loses its partitions, its late commit is fenced",
                    bool(lost) and fenced > 0,
                    f"lost {len(lost)}, fenced {fenced}",
                )
            )

            wait_for(
                "every record to be committed",
                lambda: advance() == 0,
                pace.rebalance(),
                progress=committed,
                alive=running(*others),
            )
            step("every record committed")

        exits = fleet.stop_all(pace.batch(), group=False)
        step(f"stopped all workers gracefully: exit codes {exits}")
        graceful = all(code == 0 for wid, code in exits.items() if wid != victim)
        result.checks.append(Check("graceful stop", graceful, json.dumps(exits)))

        result.checks.extend(_verify(store, log_dir, output_dir, step))
        if config.report:
            result.report_path, overlap_check = _report(store, d, step)
            result.checks.append(overlap_check)


def _freeze_in_window(
    fleet: Fleet,
    store: Store,
    zombie: str,
    zombie_log: WorkerLog,
    pace: _Pace,
    committed: Callable[[], int],
    advance: Callable[[], int],
    step: Callable[[str], None],
    attempts: int = 5,
) -> list[int]:
    """SIGSTOP ``zombie`` inside its window between writing a batch and committing it; returns the partitions it
    owned. The freeze is checked against its log: one that landed outside the window (a loaded machine delayed the
    signal past the pause) is undone with SIGCONT and tried again at the next batch."""

    def alive() -> None:
        advance()  # the progress bar moves on
        fleet.check([zombie])

    for attempt in range(1, attempts + 1):
        pauses = zombie_log.count("pausing")
        wait_for(
            f"{zombie} to write a batch (it then pauses before committing)",
            lambda n=pauses: zombie_log.count("pausing") > n,  # type: ignore[misc]
            pace.batch(),
            poll_s=0.02,
            progress=lambda: (committed(), len(zombie_log.refresh())),
            alive=alive,
        )
        zombie_parts = [p for p, o in owners(store, GROUP).items() if o == zombie]
        fleet[zombie].signal(signal.SIGSTOP, group=False)
        wait_for(f"{zombie} to stop (SIGSTOP)", fleet[zombie].stopped, pace.batch(), poll_s=0.005)
        if zombie_parts and zombie_log.frozen_in_window():
            return zombie_parts
        fleet[zombie].signal(signal.SIGCONT, group=False)
        step(f"the SIGSTOP of {zombie} missed its window before a commit (attempt {attempt}); trying the next batch")
    raise ApportionError(f"demo: could not freeze {zombie} between a write and its commit in {attempts} attempts")


def _join_round(store: Store, joiner: str) -> dict[str, Any]:
    """The round_closed event of the first plan that included ``joiner``."""
    for event in history(store, GROUP):
        if event["type"] == "round_closed" and joiner in event.get("participants", ()):
            return event
    raise ApportionError(f"demo: no round with {joiner} in the history")


def _load(store: Store) -> str:
    counts: dict[str, int] = {}
    for owner in owners(store, GROUP).values():
        if owner is not None:
            counts[owner] = counts.get(owner, 0) + 1
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))


def _verify(store: Store, log_dir: Path, output_dir: Path, step: Callable[[str], None]) -> list[Check]:
    from apportion.log import PartitionedLog
    from apportion.spark._output import verify
    from apportion.spark._stateful import verify_state

    log = PartitionedLog(log_dir)
    report = verify(store, GROUP, log, GROUP, output_dir)
    data = report.to_json()
    step("verified committed output against the input: " + json.dumps(data))
    detail = (
        f"{data['input_records']:,} in, {data['output_records']:,} out, checksum "
        f"{'equal' if data['input_checksum'] == data['output_checksum'] else 'DIFFERENT'}, "
        f"{data['duplicates']} duplicates, {data['missing']} missing, {data['order_violations']} out of order"
    )
    state = verify_state(store, GROUP, log, GROUP)
    step("rebuilt every partition's state from its committed changelog: " + json.dumps(state.to_json()))
    state_detail = (
        f"{state.keys:,} keys of {state.partitions} partitions rebuilt from the committed changelog = one-pass "
        f"aggregate of {state.records:,} records; {state.mismatched_keys} differ"
    )
    return [
        Check("exactly once (count, checksum, order)", report.ok, detail),
        Check("state exactly once (changelog = reference)", state.ok, state_detail),
    ]


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


def _report(store: Store, directory: Path, step: Callable[[str], None]) -> tuple[Path | None, Check]:
    from apportion.spark._pipeline import spark_session
    from apportion.spark._report import write_report

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


def _print_checks(result: DemoResult, console: Console) -> None:
    table = Table(title="apportion demo: checks")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for check in result.checks:
        table.add_row(check.name, "[green]ok[/]" if check.ok else "[red]FAILED[/]", check.detail)
    console.print(table)
    if result.report_path is not None:
        console.print(f"HTML report: {result.report_path}")
    console.print("[green]all checks passed[/]" if result.ok else "[red]some checks failed[/]")


def summary_json(result: DemoResult) -> dict[str, Any]:
    return {
        "ok": result.ok,
        "failover_s": result.failover_s,
        "report": None if result.report_path is None else str(result.report_path),
        "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in result.checks],
    }


__all__ = ["DemoConfig", "DemoResult", "run_demo", "summary_json"]
