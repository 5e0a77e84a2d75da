"""The demo's scenario: start, join, kill -9, freeze, drain, stop — each step waited for on the store and the
workers' event lines, with limits from ``Pace``."""

from __future__ import annotations

import contextlib
import json
import shlex
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from apportion.demo._checks import Check, DemoResult, print_checks
from apportion.demo._config import GROUP, DemoConfig, Pace
from apportion.demo._report import report
from apportion.demo._source import LogRecords, RecordSource, TopicRecords, kafka_config
from apportion.errors import ApportionError
from apportion.events import WorkerEvent
from apportion.fleet import Fleet, WorkerLog
from apportion.group import HistoryType, history, owned_by, owners, settled
from apportion.spark import ConnectServer
from apportion.spark.engine import connect_session, kafka_connector_config
from apportion.store import Store, connect
from apportion.waiting import wait_for


def _fleet(config: DemoConfig, store_url: str, spark_url: str | None, source: RecordSource, output_dir: Path) -> Fleet:
    """The demo's workers (stopped with SIGCONT + SIGKILL when the ``with`` block ends, whatever happens): thin
    clients of the shared Spark Connect server ``spark_url``, no JVM of their own (None: a JVM each), reading what
    ``source`` gives them."""
    c = config
    engine = ("--spark", spark_url) if spark_url else ("--master", "local[1]", "--driver-memory", "768m")
    args = source.worker_args(
        store_url, output_dir,
        "--batch-records", str(c.batch_records), "--ttl", str(c.ttl_s), "--settle", str(c.settle_s),
        "--min-interval", str(c.min_interval_s), *engine,
    )  # fmt: skip
    return Fleet(c.directory / "logs", args)


@contextlib.contextmanager
def _record_source(config: DemoConfig, log_dir: Path, step: Callable[[str], None]) -> Iterator[RecordSource]:
    """The demo's input (``_source``): the log under ``log_dir``; or (``source="kafka"``) a new topic on the broker
    at ``bootstrap``, or on a single-node KRaft broker started here and stopped when the block ends, whatever
    happens. The source's producer stops first."""
    with contextlib.ExitStack() as stack:
        if config.source != "kafka":
            source: RecordSource = LogRecords(config, log_dir)
        else:
            if config.bootstrap is not None:
                kafka = kafka_config(config.bootstrap)
                step(f"Kafka broker at {config.bootstrap} (--bootstrap): nothing started, nothing stopped")
            else:
                from apportion.kafka import KafkaCluster

                started = time.monotonic()
                broker = stack.enter_context(KafkaCluster.run(config.directory / "kafka", nodes=1))
                kafka = kafka_config(broker.bootstrap)
                step(f"Kafka broker (KRaft, one node, Kafka's Maven artifacts) up at {broker.bootstrap} after "
                     f"{time.monotonic() - started:.1f} s; stopped when the demo ends")  # fmt: skip
            topic = f"{GROUP}-{uuid.uuid4().hex[:8]}"  # a new topic each run, also on a broker that outlives it
            source = TopicRecords(config, kafka, topic)
            step(f"topic {topic} created with {config.partitions} partitions")
        stack.callback(source.stop)
        yield source


@contextlib.contextmanager
def _spark_engine(config: DemoConfig, step: Callable[[str], None]) -> Iterator[str | None]:
    """The demo's Spark: one Connect server (``local[2]``: this machine's cores) that every worker and the report
    share — one JVM instead of one per worker (``apportion spark serve`` by hand); yields its URL. Without
    ``shared_spark`` (``apportion demo --engine per-worker``, the design before the shared engine, kept to measure
    against) yields None: every worker starts its own JVM."""
    if not config.shared_spark:
        step("Spark: every worker starts a local[1] JVM of its own (--engine per-worker)")
        yield None
        return
    if config.spark_url is not None:  # `apportion demo --spark sc://...`: a server someone else started and stops
        checked_s = time.monotonic()
        connect_session(config.spark_url)
        step(
            f"Spark Connect server at {config.spark_url} (--spark) answered in {time.monotonic() - checked_s:.1f} s: "
            "every worker and the report share it"
        )
        yield config.spark_url
        return
    log_path = config.directory / "logs" / "spark-connect.log"
    started = time.monotonic()
    # on Kafka, the server reads the topic for every worker: Spark's Kafka connector on its classpath
    connector = kafka_connector_config() if config.source == "kafka" else None
    with ConnectServer("local[2]", port=0, driver_memory="2g", log_path=log_path, config=connector) as server:
        warm_s = server.check_session()
        step(
            f"Spark Connect server up at {server.url} after {time.monotonic() - started:.1f} s: one JVM shared by "
            f"every worker and the report (first query {warm_s:.1f} s)"
        )
        yield server.url


def dashboard_command(store_url: str) -> str:
    """The one command that serves the live dashboard of the demo's group (``apportion dashboard``)."""
    return f"apportion dashboard --store {shlex.quote(store_url)} --group {GROUP}"


def run_demo(config: DemoConfig, console: Console | None = None) -> DemoResult:
    """Run the main job; return its checks (the caller turns a failed check into a non-zero exit)."""
    console = console or Console(stderr=False)
    d = config.directory
    d.mkdir(parents=True, exist_ok=True)
    log_dir, output_dir = d / "log", d / "output"
    store_url = f"sqlite:///{d / 'apportion.db'}"
    result = DemoResult(dashboard=dashboard_command(store_url))
    began = time.monotonic()

    def step(text: str) -> None:
        console.print(f"[bold cyan][{time.monotonic() - began:6.1f}s][/] {text}", soft_wrap=True)  # copyable lines

    step(f"working directory {d}")
    with _record_source(config, log_dir, step) as source:
        source.append(config.records // 2)
        step(
            f"produced {source.produced:,} of {config.records:,} records into {config.partitions} partitions of "
            f"{source.resource} (routing: {source.routing}); the rest streams in while the group churns"
        )
        with _spark_engine(config, step) as spark_url:
            _run_scenario(config, source, store_url, spark_url, output_dir, result, step, console)
    print_checks(result, console)
    return result


def _run_scenario(
    config: DemoConfig,
    source: RecordSource,
    store_url: str,
    spark_url: str | None,
    output_dir: Path,
    result: DemoResult,
    step: Callable[[str], None],
    console: Console,
) -> None:
    produced = config.records
    d = config.directory
    with connect(store_url) as store, _fleet(config, store_url, spark_url, source, output_dir) as fleet:
        ids = [f"w{i}" for i in range(1, config.workers + 2)]
        first, joiner = ids[:-1], ids[-1]
        zombie = first[1]
        logs = {wid: fleet.log(wid) for wid in ids}
        pace = Pace(config, logs)
        for wid in first:
            # The worker that will be frozen is a slow committer (`pipeline run --slow-commit`: a pause between
            # writing a batch's output and committing it), so that the freeze lands inside that window and its late
            # commit meets the fence.
            slow = ("--slow-commit", "1.5") if wid == zombie else ()
            fleet.start(wid, *slow)
        step(f"started {len(first)} pipeline workers ({', '.join(first)}), sticky strategy, {source.workers}")

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
        step(f"watch it live in a browser (another terminal): {result.dashboard}")  # the group exists from here

        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
        with Progress(*columns, console=console, transient=True) as progress:
            bar = progress.add_task("records committed", total=produced)
            remaining = [produced]

            def advance() -> int:
                remaining[0] = source.remaining(store)
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
            batches_before = zombie_log.count(WorkerEvent.BATCH_DONE)
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
                lambda: (
                    zombie_log.count(WorkerEvent.BATCH_DONE) > batches_before
                    or zombie_log.count(WorkerEvent.FENCED) > 0
                ),
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
            fenced = zombie_log.count(WorkerEvent.FENCED)
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

        result.checks.extend(source.checks(store, output_dir, step))
        if config.report:
            result.report_path, overlap_check = report(store, d, spark_url, step, result.checks)
            result.checks.append(overlap_check)


def _freeze_in_window(
    fleet: Fleet,
    store: Store,
    zombie: str,
    zombie_log: WorkerLog,
    pace: Pace,
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
        if event["type"] == HistoryType.ROUND_CLOSED and joiner in event.get("participants", ()):
            return event
    raise ApportionError(f"demo: no round with {joiner} in the history")


def _load(store: Store) -> str:
    counts: dict[str, int] = {}
    for owner in owners(store, GROUP).values():
        if owner is not None:
            counts[owner] = counts.get(owner, 0) + 1
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))


__all__ = ["run_demo"]
