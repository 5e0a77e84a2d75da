"""A pipeline nemesis: random kill -9, SIGSTOP/SIGCONT and SIGTERM of random pipeline workers at random moments,
beside a CPU hog, then exactly once (output and state) and zero ownership overlaps.

One run (``run_nemesis``)::

    produce   ``records`` keyed records into ``partitions`` partitions; more streams in during the faults
    hog       ``stress-ng --cpu N`` (always stopped; its own --timeout as a backstop)
    start     ``workers`` stateful `apportion pipeline run` workers (``Fleet``); wait until every partition is owned
    faults    ``faults`` times: after a random gap, one random fault on a random eligible worker —
              kill    SIGKILL to its process group (JVM too); restarted at once under the same id
              stop    SIGSTOP for a random 0.3-2.5 ttl (short: it keeps its partitions; long: a zombie whose late
                      commits must meet the fence), then SIGCONT; faults continue meanwhile
              term    SIGTERM (graceful leave: exit code 0 required) to the worker alone (it finishes its batch) or to
                      its process group, as systemd and Ctrl-C do (the JVM stops under the batch in flight, which
                      is then not committed); restarted once it has exited
              Any other exit of a worker, or a traceback in its log, is a failure.
    drain     resume everyone, stop producing, wait until every record is committed; SIGTERM all (exit 0 each)
    verify    committed output = input exactly once (``verify``); every partition's state rebuilt from its committed
              changelog = a one-pass aggregate (``verify_state``); no two worker processes believed one partition at
              once (``belief_overlaps``, from their event lines); and zero overlaps in the group's history:
              ``ownership_intervals`` → ``overlaps`` (what `apportion report` counts) on the run's Connect
              server, or on a given local session (workers with JVMs of their own)

The schedule (gaps, kinds, victims, hold times) is drawn up front from ``random.Random(seed)``: the same seed gives
the same faults in the same order; where they land in the workers' batches depends on real time.

Exactly once is verified once, after the run, not per fault: verifying needs every record committed, and draining
between faults would make every fault land on a calm group, never on one still recovering from the previous fault.
A violation cannot heal later (checkpoints only advance; output is visible only through them), so the final check
sees any that happened; the fault log (seconds since start) and the workers' logs locate it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apportion.errors import ApportionError, InvalidRequest
from apportion.fleet import Fleet, pipeline_args
from apportion.waiting import wait_for

GROUP = "nemesis"
KINDS = ("kill", "stop", "term")


@dataclass(frozen=True, slots=True)
class NemesisConfig:
    """Sizes and timings of one nemesis run (defaults: the short run of `make test`)."""

    directory: Path
    seed: int
    faults: int = 5
    workers: int = 3
    partitions: int = 6
    records: int = 30_000  # half before the workers start, the rest streamed in while the faults run
    keys: int = 2_000
    batch_records: int = 1_500
    ttl_s: float = 2.0
    settle_s: float = 0.3
    min_interval_s: float = 0.6
    gap_s: tuple[float, float] = (1.0, 6.0)  # between two faults
    hold_ttl: tuple[float, float] = (0.3, 2.5)  # a SIGSTOP lasts this many ttl
    pause_s: float = 0.3  # every batch pauses between its write and its commit: faults land in that window too
    hog_cpus: int = 1
    spark_url: str | None = None  # an ``sc://`` Connect server for thin workers; None: a JVM of its own per worker
    startup_s: float = 300.0  # for the first workers to own every partition (Spark sessions on a loaded machine)
    drain_s: float = 300.0  # for the rest, without progress

    def __post_init__(self) -> None:
        if self.workers < 2:
            raise InvalidRequest("workers", "must be >= 2")
        if self.faults < 0:
            raise InvalidRequest("faults", "must be >= 0")
        if self.partitions < 1 or self.records < 2:
            raise InvalidRequest("records", "need >= 1 partition and >= 2 records")


@dataclass(frozen=True, slots=True)
class Fault:
    """One planned fault: after ``gap_s``, ``kind`` on the ``victim``-th eligible worker (modulo their number);
    ``hold_s`` for a stop, ``group`` for a term (to the process group, not the worker alone)."""

    gap_s: float
    kind: str
    victim: int
    hold_s: float
    group: bool


def schedule(config: NemesisConfig) -> list[Fault]:
    """The faults of a run, drawn from ``random.Random(config.seed)`` (the same seed, the same faults)."""
    rng = random.Random(config.seed)
    return [
        Fault(
            round(rng.uniform(*config.gap_s), 3),
            rng.choice(KINDS),
            rng.randrange(1 << 16),
            round(rng.uniform(*config.hold_ttl) * config.ttl_s, 3),
            rng.random() < 0.5,
        )
        for _ in range(config.faults)
    ]


@dataclass(slots=True)
class NemesisResult:
    seed: int
    faults: list[dict[str, Any]] = field(default_factory=list)  # what was done: at (s since start), kind, worker
    failures: list[str] = field(default_factory=list)
    output: dict[str, Any] = field(default_factory=dict)  # VerifyReport.to_json()
    state: dict[str, Any] = field(default_factory=dict)  # StateReport.to_json()
    belief_overlaps: list[dict[str, Any]] = field(default_factory=list)
    history_overlaps: int | None = None  # None: not analysed (no Spark session given)
    fenced: int = 0  # late commits of zombies that met the fence
    lost: int = 0  # on_lost reports
    exits: dict[str, int | None] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (
            not self.failures
            and bool(self.output.get("ok"))
            and bool(self.state.get("ok"))
            and not self.belief_overlaps
            and not self.history_overlaps
        )

    def summary(self) -> dict[str, Any]:
        kinds = {k: sum(1 for f in self.faults if f["kind"] == k) for k in KINDS}
        return {
            "ok": self.ok,
            "seed": self.seed,
            "faults": len(self.faults),
            "by_kind": kinds,
            "zombie_stops": sum(1 for f in self.faults if f["kind"] == "stop" and f.get("zombie")),
            "fenced_commits": self.fenced,
            "lost_reports": self.lost,
            "failures": self.failures,
            "records": self.output.get("input_records"),
            "duplicates": self.output.get("duplicates"),
            "missing": self.output.get("missing"),
            "state_ok": self.state.get("ok"),
            "state_mismatched_keys": self.state.get("mismatched_keys"),
            "belief_overlaps": len(self.belief_overlaps),
            "history_overlaps": self.history_overlaps,
            "exits": self.exits,
            "seconds": round(self.seconds, 1),
        }


@contextlib.contextmanager
def cpu_hog(cpus: int, limit_s: float) -> Iterator[subprocess.Popen[bytes] | None]:
    """``stress-ng --cpu N`` for the block (its own ``--timeout`` ends it even if this process is killed)."""
    if cpus <= 0:
        yield None
        return
    binary = shutil.which("stress-ng")
    if binary is None:
        raise ApportionError("nemesis: stress-ng is not installed (apt-get install -y stress-ng)")
    cmd = [binary, "--cpu", str(cpus), "--timeout", f"{int(limit_s)}s", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:
        stop_hog(proc)


def stop_hog(proc: subprocess.Popen[bytes] | None) -> None:
    """Stop ``cpu_hog``'s stress-ng now (again: nothing)."""
    if proc is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@dataclass(frozen=True, slots=True)
class Incarnation:
    """One worker process as the belief check sees it: its events, its SIGSTOPs (from, to) and when it was killed."""

    label: str
    events: Sequence[Mapping[str, Any]]
    stops: tuple[tuple[float, float], ...] = ()
    killed_at: float | None = None


def reported_end(events: Sequence[Mapping[str, Any]], partition: int, after: float) -> float:
    """The ``belief_until`` of the first ``lost`` event at or after ``after`` that names ``partition`` (infinity when
    there is none): the member's own deadline, when a loss it reports late had ended its belief."""
    for e in events:
        if e.get("event") != "lost" or float(e.get("time", 0.0)) < after:
            continue
        if partition in {int(p) for p in e.get("partitions", ())}:
            return float(e.get("belief_until", math.inf))
    return math.inf


def belief_overlaps(processes: Sequence[Incarnation], deadline_s: float) -> list[dict[str, Any]]:
    """Pairs of worker processes that believed one partition at once, from their event lines.

    A process believes ``p`` from its ``assigned`` event (its claim came just before) until its ``revoked`` or
    ``lost`` of ``p`` (the definition of belief in ``apportion.group._ownership``: a fenced commit ends it through
    ``on_lost``), or its end (when it was killed, else its last event). A ``lost`` event's ``belief_until`` (the
    member's local deadline when it had passed: a frozen process reports its loss late) ends the belief there.
    A ``revoked`` followed by a ``lost`` of the same partition ends at that loss's ``belief_until`` if earlier
    (``on_revoked`` began in time and returned after the deadline: it waited for a batch that a freeze held).
    A process frozen with SIGSTOP longer than ``deadline_s`` (0.8 ttl) lost its belief at ``from + deadline_s`` at the
    latest (its last acknowledged renewal was before the freeze) when it ends that belief by ``lost`` or dies, not by
    a graceful ``revoked``: its late report is then not an overlap. Times are one machine's wall clock.
    """
    intervals: list[tuple[int, float, float, str]] = []  # partition, start, end, process label
    for proc in processes:
        label, events = proc.label, proc.events
        default_end = proc.killed_at
        if default_end is None:
            default_end = max((float(e["time"]) for e in events if "time" in e), default=0.0)
        frozen = [(a, b) for a, b in proc.stops if b - a > deadline_s]
        open_at: dict[int, float] = {}

        def close(
            p: int, start: float, at: float, label: str = label, frozen: list[tuple[float, float]] = frozen
        ) -> None:
            end = at
            for a, b in frozen:  # frozen past its deadline inside this interval, resumed before it said lost
                if start <= a and a + deadline_s < at and b <= at + 1e-3:
                    end = min(end, a + deadline_s)
            intervals.append((p, start, end, label))

        for e in events:
            kind, t = e.get("event"), float(e.get("time", 0.0))
            if kind == "assigned":
                for p in e.get("partitions", ()):
                    open_at.setdefault(int(p), t)
            elif kind == "revoked":  # a graceful revocation: the worker believed until then, frozen or not ...
                for p in e.get("partitions", ()):
                    start = open_at.pop(int(p), None)
                    if start is not None:
                        # ... unless its own report ends the belief earlier: an on_revoked that began in time and
                        # returned after the deadline (it waited for a batch a freeze held) is followed by on_lost
                        # of that partition, whose belief_until is when the belief really ended
                        until = min(t, reported_end(events, int(p), t))
                        intervals.append((int(p), start, max(start, until), label))
            elif kind == "lost":
                until = min(t, float(e.get("belief_until", t)))
                for p in e.get("partitions", ()):
                    start = open_at.pop(int(p), None)
                    if start is not None:
                        close(int(p), start, max(start, until))
        for p, start in open_at.items():
            close(p, start, max(start, default_end))

    found = []
    intervals.sort()
    for i, (p, start, end, who) in enumerate(intervals):
        for q, start2, end2, who2 in intervals[i + 1 :]:
            if q != p:
                break
            if who2 != who and start2 < end and start < end2:
                found.append({"partition": p, "first": who, "second": who2, "from": start2, "to": min(end, end2)})
    return found


def history_overlaps(spark: Any, store: Any) -> int:
    """Overlapping ownership intervals in the group's history (Spark analytics; what `apportion report` counts)."""
    from apportion.group import history
    from apportion.spark.analytics._analytics import events_frame, overlaps, ownership_intervals

    events = history(store, GROUP)
    if not events:
        return 0
    return int(overlaps(ownership_intervals(events_frame(spark, events))).count())


def connect_overlaps(store_url: str, spark_url: str) -> int:
    """``history_overlaps`` on the run's Connect server, in a process of its own: a Connect session in the test's
    process would turn its pyspark into Connect mode for good (``SPARK_CONNECT_MODE_ENABLED``), and a local session
    for this one count cost make test a JVM start (`apportion report`, the same functions and 7 more jobs and plots,
    took 18 s; this, a few)."""
    code = (
        "import sys; from apportion.spark.engine import connect_session; from apportion.store import connect; "
        "from tests.spark.nemesis import history_overlaps; "
        "store = connect(sys.argv[1]); print(history_overlaps(connect_session(sys.argv[2]), store)); store.close()"
    )
    root = Path(__file__).resolve().parent.parent.parent
    done = subprocess.run([sys.executable, "-c", code, store_url, spark_url], capture_output=True, text=True,
                          timeout=600, cwd=root)  # fmt: skip
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        raise ApportionError(f"nemesis: the history's overlaps were not counted (exit {done.returncode}):\n"
                             f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")  # fmt: skip
    return int(done.stdout.strip())


def run_nemesis(
    config: NemesisConfig, spark: Callable[[], Any] | None = None, say: Callable[[str], None] = print
) -> NemesisResult:
    """One nemesis run (module docstring). The history analytics run once the workers are stopped: on
    ``config.spark_url``'s server, or else on ``spark()``'s session (None: not analysed); ``say`` gets a line per
    step and fault."""
    from apportion.group import owners as group_owners
    from apportion.log import PartitionedLog, SeededRecords
    from apportion.spark.pipeline._output import uncommitted_records, verify
    from apportion.spark.pipeline._stateful import verify_state
    from apportion.store import connect

    d = config.directory
    d.mkdir(parents=True, exist_ok=True)
    log_dir, out_dir = d / "log", d / "output"
    url = f"sqlite:///{d / 'store.db'}"
    result = NemesisResult(config.seed)
    began = time.monotonic()

    def step(text: str) -> None:
        say(f"[{time.monotonic() - began:6.1f}s] {text}")

    log = PartitionedLog(log_dir)
    log.create(GROUP, config.partitions)
    source = SeededRecords(
        log, GROUP, config.records, keys=config.keys, seed=config.seed, batch_records=config.batch_records
    )
    source.append(config.records // 2)
    plan = schedule(config)
    step(f"nemesis seed {config.seed}: {len(plan)} faults planned: {[f.kind for f in plan]}")
    engine = ("--spark", config.spark_url) if config.spark_url else ("--master", "local[1]", "--driver-memory", "512m")
    args = pipeline_args(
        url, GROUP, log_dir, out_dir, GROUP,
        "--batch-records", str(config.batch_records), "--ttl", str(config.ttl_s), "--settle", str(config.settle_s),
        "--min-interval", str(config.min_interval_s), *engine,
        "--idle", "0.1", "--state-dir", str(d / "state"),
        "--slow-commit", str(config.pause_s),
    )  # fmt: skip
    hog_limit = config.startup_s + config.drain_s + len(plan) * (config.gap_s[1] + 30.0)
    stops: dict[int, list[tuple[float, float]]] = {}  # id(process) -> SIGSTOP (confirmed, resumed) times
    ends: dict[int, float] = {}  # id(process) -> when it was seen killed
    with cpu_hog(config.hog_cpus, hog_limit) as hog, Fleet(d / "logs", args) as fleet, connect(url) as store:
        ids = [f"w{i}" for i in range(1, config.workers + 1)]
        for wid in ids:
            fleet.start(wid)
        step(f"stress-ng --cpu {config.hog_cpus} running; started {', '.join(ids)}")

        def owners() -> dict[int, str]:
            try:
                found = group_owners(store, GROUP)
            except ApportionError:  # the group is not defined yet
                return {}
            return {p: owner for p, owner in found.items() if owner}

        def owned() -> int:
            return len(owners())

        def events() -> int:
            return sum(len(fleet.log(w).refresh()) for w in ids)

        def unexpected_exits(expected: set[str]) -> None:
            for wid in ids:
                code = fleet[wid].proc.poll()
                if code is not None and wid not in expected:
                    raise ApportionError(f"nemesis: {wid} exited with {code}:\n{fleet.log(wid).tail(30)}")

        def started(wid: str) -> bool:
            return any(e.get("event") == "started" for e in fleet[wid].own_events())

        wait_for(
            "every worker to start and every partition to be owned",
            lambda: owned() == config.partitions and all(started(w) for w in ids),
            config.startup_s,
            progress=events,
            alive=lambda: unexpected_exits(set()),
            poll_s=0.2,
        )
        step(f"all {config.partitions} partitions owned; every worker's Spark session started: {owners()}")
        chunks = max(4, 2 * len(plan))  # the rest streams in while the faults run: batches are always in flight
        size = -(-(config.records - source.produced) // chunks)
        producer = source.stream(config.records, size, max(0.5, sum(f.gap_s for f in plan) / chunks), "nemesis-input")

        stopped: dict[str, tuple[float, float]] = {}  # wid -> (SIGSTOP confirmed at wall time, resume at monotonic)
        exiting: dict[str, str] = {}  # wid -> "kill" | "term", until it has exited and been restarted

        def tick() -> None:
            """Resume due SIGSTOPs; restart workers that exited as planned; fail on any other exit."""
            now = time.monotonic()
            for wid, (frozen_at, resume_at) in list(stopped.items()):
                if now >= resume_at:
                    fleet[wid].signal(signal.SIGCONT)
                    stops.setdefault(id(fleet[wid]), []).append((frozen_at, time.time()))
                    del stopped[wid]
            for wid in ids:
                proc = fleet[wid]
                code = proc.proc.poll()
                if code is None:
                    continue
                kind = exiting.pop(wid, None)
                if kind is None:
                    result.failures.append(f"{wid} exited unexpectedly with {code}")
                    raise ApportionError(f"nemesis: {wid} exited unexpectedly with {code}:\n{proc.tail(30)}")
                if kind == "term" and code != 0:
                    result.failures.append(f"{wid} left with exit code {code} after SIGTERM, not 0")
                fleet.start(wid)
                step(f"{wid} restarted")

        for n, fault in enumerate(plan, 1):
            next_at = time.monotonic() + fault.gap_s
            while time.monotonic() < next_at:
                tick()
                time.sleep(0.05)
            # eligible: running its Spark session (a member or about to be; a worker still starting Spark has no
            # SIGTERM handler yet and is no member), not frozen, not on its way out
            while True:
                tick()
                eligible = [w for w in ids if fleet[w].alive() and w not in stopped and w not in exiting and started(w)]
                if eligible:
                    break
                time.sleep(0.1)
            wid = eligible[fault.victim % len(eligible)]
            proc = fleet[wid]
            owned_now = [p for p, owner in owners().items() if owner == wid]
            record: dict[str, Any] = {"at": round(time.monotonic() - began, 1), "kind": fault.kind, "worker": wid,
                                      "owned": len(owned_now)}  # fmt: skip
            if fault.kind == "kill":
                proc.signal(signal.SIGKILL)
                proc.proc.wait()
                ends[id(proc)] = time.time()
                exiting[wid] = "kill"
            elif fault.kind == "term":
                proc.signal(signal.SIGTERM, group=fault.group)
                exiting[wid] = "term"
                record["group"] = fault.group
            else:
                proc.signal(signal.SIGSTOP)
                while proc.alive() and not proc.stopped():
                    time.sleep(0.005)
                stopped[wid] = (time.time(), time.monotonic() + fault.hold_s)
                record["hold_s"] = fault.hold_s
                record["zombie"] = fault.hold_s > config.ttl_s
            result.faults.append(record)
            step(f"fault {n}/{len(plan)}: {json.dumps(record)}")
            tick()

        # drain: resume everyone, restart whoever is out, all input in, everything committed
        for wid in list(stopped):
            stopped[wid] = (stopped[wid][0], 0.0)
        wait_for(
            "the last faults to be undone",
            lambda: not stopped and not exiting,
            config.drain_s,
            progress=events,
            alive=tick,
            poll_s=0.2,
        )
        source.stop()
        producer.join()
        if source.error is not None:
            raise ApportionError(f"nemesis: the producer failed: {source.error!r}") from source.error
        source.append(config.records - source.produced)
        step(f"all {source.produced:,} records produced; draining")

        def remaining() -> int:
            return sum(uncommitted_records(store, GROUP, log, GROUP).values())

        wait_for(
            "every record to be committed",
            lambda: remaining() == 0,
            config.drain_s,
            progress=remaining,
            alive=tick,
            poll_s=0.2,
        )
        wait_for(
            "every worker to run its Spark session",
            lambda: all(started(w) for w in ids),
            config.drain_s,
            progress=events,
            alive=tick,
            poll_s=0.2,
        )
        stop_hog(hog)  # the faults are over: the checks below need no CPU taken from them (make test's budget)
        step("every record committed; stress-ng stopped")
        result.exits = fleet.stop_all(120, group=False)  # each finishes its batch (a group SIGTERM is a fault)
        step(f"every record committed; stopped all workers: exit codes {result.exits}")
        for wid, code in result.exits.items():
            if code != 0:
                result.failures.append(f"{wid} left with exit code {code} at the end, not 0:\n{fleet[wid].tail(30)}")
        for wid in ids:
            if "Traceback" in fleet.log(wid).text():
                result.failures.append(f"a traceback in {wid}'s log: {fleet.log(wid).path}")

        result.fenced = sum(fleet.log(w).count("fenced") for w in ids)
        result.lost = sum(fleet.log(w).count("lost") for w in ids)
        result.output = verify(store, GROUP, log, GROUP, out_dir).to_json()
        result.state = verify_state(store, GROUP, log, GROUP).to_json()
        incarnations = [
            Incarnation(f"{w.id}#{n}", w.own_events(), tuple(stops.get(id(w), ())), ends.get(id(w)))
            for n, w in enumerate(fleet.started)
        ]
        result.belief_overlaps = belief_overlaps(incarnations, 0.8 * config.ttl_s)
        step("verified the output, the state and the workers' beliefs; analysing the history")
        if config.spark_url:
            result.history_overlaps = connect_overlaps(url, config.spark_url)
        elif spark is not None:
            result.history_overlaps = history_overlaps(spark(), store)
    result.seconds = time.monotonic() - began
    step(f"nemesis result: {json.dumps(result.summary())}")
    return result


__all__ = [
    "Fault",
    "Incarnation",
    "NemesisConfig",
    "NemesisResult",
    "belief_overlaps",
    "cpu_hog",
    "history_overlaps",
    "run_nemesis",
    "schedule",
]
