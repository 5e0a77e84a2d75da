"""Live scale (issue 27): N real `apportion worker` processes started together with identical arguments, as the pods
of one Deployment, on SQLite, a 1-node etcd, a 3-node etcd cluster and a PostgreSQL server (``postgres``: one started
for the run by ``tests/postgres_server.py``, fsync on).

    PYTHONPATH=src:. .venv/bin/python bench/scale_bench.py [--stores sqlite,etcd-1,etcd-3,postgres] [--sizes ...]
        [--commit-every 5] [--stagger 0.1] [--window 20] [--idle-window 10] [--no-idle]
        [--ttl S] [--settle S] [--min-interval S] [--heartbeat S] [--converge-timeout 120] [--keep]

The issue's sizes are 16x1024, 32x16384 and 64x100000 (``--sizes``); the default is the small one. A run is one
store and one size, in phases, each with its own time limit (reported as "never (N s)" when it runs out):

1. **converge**: start N workers (``--partitions P --commit-every 5``, default timings unless given) ``--stagger``
   apart; time from the last start until the fleet is converged (``bench/scale_probe.py``: every partition has an
   owner record naming a live member, counts within floor/ceil(P/N), and each owner has applied its partitions: its
   event lines' assigned less revoked and lost equal the store's set for it). Polls the owner prefix directly.
2. **steady window** (``--window`` s, measured whether or not 1 converged; it opens 2 commit intervals after the
   fleet converged, as a committer takes its leases at one tick and commits at the next, or at once after a "never"):
   commits accepted (commit lines/s) vs offered (partitions owned / commit interval), lost and fenced events; CPU per
   member (utime + stime deltas from /proc, % of one core); store bytes per minute (SQLite: db + wal file sizes;
   etcd: ``etcd_mvcc_db_total_size_in_bytes`` and ``..._in_use_in_bytes`` from /metrics, the largest over the
   nodes); watch events per member per second (a watch of ``/apportion/<group>/`` and one of the owner records'
   deletions, exactly what each member watches), and the store server's CPU.
3. **kill -9** the first worker: time until converged on the N-1 (goal: ttl + RST + 2 s, read from the group's
   stored definition), and the lost events of the survivors since the kill.
4. **join**: start one more with the same arguments: time until converged on N+1.
5. **idle** (unless ``--no-idle``): a fresh store, the same N workers with ``--commit-every 0``: time to converge
   without commits, then CPU per member, store growth and watch events over ``--idle-window`` s.

Kill and join are skipped when the phase before them did not converge. Progress goes to stderr; stdout gets one JSON
object and a markdown table with one row per run. Every worker and store server is stopped on exit, Ctrl-C or
SIGTERM; the work directory (worker logs, stores) is removed unless ``--keep``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # for tests.etcd_server (real etcd servers)

from tests.conftest import etcd_binary, postgres_bin
from tests.etcd_server import EtcdServer

from apportion.errors import ApportionError, StoreUnavailable
from apportion.fleet import Fleet, worker_args
from apportion.group import GroupConfig
from apportion.group.internals import Keys
from apportion.store import connect
from scale_probe import Phase, Probe, cpu_s, failover_timeline, last_apply_s, read_owners, say, start_staggered

GROUP = "scale"
STORES = ("sqlite", "etcd-1", "etcd-3", "postgres")
ISSUE_SIZES = ((16, 1024), (32, 16384), (64, 100_000))
COUNTED = ("commit", "fenced", "commit_failed")  # one line per partition and batch: counted, not kept
KINDS = ("commit", "fenced", "commit_failed", "lost")
ETCD_SIZES = ("etcd_mvcc_db_total_size_in_bytes", "etcd_mvcc_db_total_size_in_use_in_bytes")


# -- stores ---------------------------------------------------------------------------------------------------------


class StoreHandle:
    """A store under test: its URL, the bytes it takes and its server processes (none for SQLite)."""

    def __init__(
        self, kind: str, url: str, path: Path | None = None, nodes: Sequence[EtcdServer] = (), server: Any = None
    ) -> None:
        self.kind = kind
        self.url = url
        self.path = path
        self.nodes = list(nodes)
        self.server = server  # a tests.postgres_server.PostgresServer

    def sizes(self) -> dict[str, int]:
        """SQLite: ``file`` (db + wal); etcd: ``db_total`` and ``db_in_use`` (the largest over the nodes);
        PostgreSQL: ``file`` (its data directory, WAL included)."""
        if self.server is not None:
            total = 0
            for p in Path(self.server.data_dir).rglob("*"):
                with contextlib.suppress(OSError):  # a WAL segment recycled under the walk
                    total += p.stat().st_size if p.is_file() else 0
            return {"file": total}
        if self.path is not None:
            total = 0
            for suffix in ("", "-wal"):
                with contextlib.suppress(OSError):
                    total += Path(f"{self.path}{suffix}").stat().st_size
            return {"file": total}
        found = {"db_total": 0, "db_in_use": 0}
        for node in self.nodes:
            try:
                text = httpx.get(node.client_url + "/metrics", timeout=5.0).text
            except httpx.HTTPError:
                continue
            for line in text.splitlines():
                name, _, value = line.partition(" ")
                for metric, key in zip(ETCD_SIZES, ("db_total", "db_in_use"), strict=True):
                    if name == metric:
                        found[key] = max(found[key], int(float(value)))
        return found

    def pids(self) -> list[int]:
        if self.server is not None and self.server.process is not None:
            return [self.server.process.pid]  # the postmaster (its backends are processes of their own)
        return [node.process.pid for node in self.nodes if node.process is not None]


@contextlib.contextmanager
def store_server(kind: str, directory: Path) -> Iterator[StoreHandle]:
    directory.mkdir(parents=True, exist_ok=True)
    if kind == "sqlite":
        path = directory / "scale.db"
        yield StoreHandle(kind, f"sqlite:///{path}", path=path)
        return
    if kind == "postgres":  # a fresh server with fsync on (tests/postgres_server.py), one database
        from tests.postgres_server import PostgresServer

        bin_dir = postgres_bin()
        if bin_dir is None:
            raise SystemExit("PostgreSQL is not installed: run scripts/ensure-test-tools.sh, or pass --stores sqlite")
        with PostgresServer.start_new(bin_dir, durable=True) as server:
            yield StoreHandle(kind, server.url(server.create_database("scale")), server=server)
        return
    binary = etcd_binary()
    if binary is None:
        raise SystemExit("etcd is not installed: run scripts/ensure-test-tools.sh, or pass --stores sqlite")
    if kind == "etcd-1":
        with EtcdServer.single(binary, directory / "etcd") as server:
            yield StoreHandle(kind, server.url, nodes=[server])
    else:
        with EtcdServer.cluster(binary, directory / "etcd", n=3) as cluster:
            yield StoreHandle(kind, cluster.url, nodes=cluster.members)


# -- measuring ------------------------------------------------------------------------------------------------------


def _load() -> float:
    return round(os.getloadavg()[0], 1)


def _counts(fleet: Fleet, members: Sequence[str]) -> dict[str, int]:
    return {kind: sum(fleet[m].log.count(kind) for m in members) for kind in KINDS}


def steady_window(
    fleet: Fleet, members: Sequence[str], handle: StoreHandle, seconds: float, commit_every_s: float, label: str
) -> dict[str, Any]:
    """Rates over ``seconds`` of a running fleet (see the module docstring, phase 2)."""
    say(f"{label}: measuring a {seconds:g} s window")
    keys = Keys(GROUP)  # what each member watches: the prefix, and the owner records' deletions beside it
    with (
        connect(handle.url) as store,
        store.watch(keys.prefix) as watch,
        store.watch(keys.owners, deletes_only=True) as freed,
    ):
        cpu0 = {m: cpu_s(fleet[m].proc.pid) for m in members}
        server0 = [cpu_s(pid) for pid in handle.pids()]
        counts0 = _counts(fleet, members)
        sizes0 = handle.sizes()
        watch.poll()  # nothing before the window
        freed.poll()
        watched = 0
        owned: list[int] = []
        began = time.monotonic()
        while time.monotonic() < began + seconds:
            live = set(members)
            with contextlib.suppress(StoreUnavailable):  # a loaded machine: this sample is skipped
                owned.append(sum(1 for m in read_owners(store, GROUP).owners.values() if m in live))
            watched += len(watch.poll()) + len(freed.poll())
            _counts(fleet, members)  # keep reading the logs as they grow
            time.sleep(max(0.0, min(1.0, began + seconds - time.monotonic())))
        watched += len(watch.poll()) + len(freed.poll())
        elapsed = time.monotonic() - began
        cpu1 = {m: cpu_s(fleet[m].proc.pid) for m in members}
        server1 = [cpu_s(pid) for pid in handle.pids()]
        counts1 = _counts(fleet, members)
        sizes1 = handle.sizes()
    cpu = [100 * (b - a) / elapsed for m in members if (a := cpu0[m]) is not None and (b := cpu1[m]) is not None]
    server = [100 * (b - a) / elapsed for a, b in zip(server0, server1, strict=True) if a is not None and b is not None]
    mean_owned = statistics.mean(owned) if owned else 0.0
    delta = {kind: counts1[kind] - counts0[kind] for kind in KINDS}
    return {
        "seconds": round(elapsed, 1),
        "mean_owned": round(mean_owned, 1),
        "owned_samples": {"n": len(owned), "min": min(owned, default=0), "max": max(owned, default=0)},
        "commits_accepted_per_s": round(delta["commit"] / elapsed, 1),
        "commits_offered_per_s": round(mean_owned / commit_every_s, 1) if commit_every_s > 0 else 0.0,
        "events": delta,
        "cpu_pct_per_member": {"mean": round(statistics.mean(cpu), 1), "max": round(max(cpu), 1)} if cpu else None,
        "store_server_cpu_pct": [round(x, 1) for x in server],
        "store_bytes_per_min": {k: round((sizes1[k] - sizes0[k]) * 60 / elapsed) for k in sizes1},
        "store_bytes_at_end": sizes1,
        "watch_events_per_s": round(watched / elapsed, 1),
    }


def _wait_until(instant: float, why: str) -> None:
    """Sleep until ``time.monotonic()`` is ``instant`` (a measuring window's start, not a synchronisation)."""
    left = instant - time.monotonic()
    if left > 0:
        say(f"{why} ({left:.1f} s)")
        time.sleep(left)


def _options(args: argparse.Namespace, partitions: int, commit_every_s: float) -> list[str]:
    options = ["--partitions", str(partitions), "--commit-every", f"{commit_every_s:g}"]
    for flag, value in (("--ttl", args.ttl), ("--settle", args.settle), ("--min-interval", args.min_interval),
                        ("--heartbeat", args.heartbeat)):  # fmt: skip
        if value is not None:
            options += [flag, f"{value:g}"]
    return options


def _ids(workers: int) -> list[str]:
    return [f"w{i:02d}" for i in range(workers)]


def _definition(url: str) -> GroupConfig:
    with connect(url) as store:
        kv = store.get(Keys(GROUP).resource)
    return GroupConfig() if kv is None else GroupConfig.from_record(kv)


def committing_run(
    handle: StoreHandle, work: Path, workers: int, partitions: int, args: argparse.Namespace, label: str
) -> dict[str, Any]:
    """Phases 1-4 on one store."""
    out: dict[str, Any] = {}
    ids = _ids(workers)
    progress = lambda line: say(f"{label}: {line}")  # noqa: E731
    command = worker_args(handle.url, GROUP, *_options(args, partitions, args.commit_every))
    with Fleet(work / "logs", command, count_only=COUNTED) as fleet, connect(handle.url) as store:
        probe = Probe(store, GROUP, fleet, range(partitions))
        say(f"{label}: starting {workers} workers {args.stagger:g} s apart")
        last = start_staggered(fleet, ids, args.stagger)
        converge = probe.until_converged(
            "converge", ids, args.converge_timeout, since=last, poll_s=args.poll, progress=progress
        )
        out["converge"] = converge.to_json()
        say(f"{label}: converge: {converge.text()}; {converge.summary()}")
        config = _definition(handle.url)
        goal_s = config.ttl_s + config.settle_s + 2.0
        out["timings"] = {"ttl_s": config.ttl_s, "settle_s": config.settle_s, "min_interval_s": config.min_interval_s,
                          "heartbeat_s": config.heartbeat_s}  # fmt: skip
        # A committer takes its leases at one tick and commits them at the next: the window opens once the partitions
        # held at convergence are being committed (a fleet that never converged has been committing for long).
        if converge.seconds is not None:
            _wait_until(last + converge.seconds + 2 * args.commit_every + 0.5, f"{label}: awaiting the first commits")
        out["steady"] = steady_window(fleet, ids, handle, args.window, args.commit_every, label)
        out["steady"]["converged_before"] = converge.seconds is not None
        out["failover_goal_s"] = goal_s
        out["failover"] = out["join"] = None
        if converge.seconds is not None:
            victim, survivors = ids[0], ids[1:]
            lost_before = sum(fleet[m].log.count("lost") for m in survivors)
            fleet[victim].signal(signal.SIGKILL)
            killed, killed_wall = time.monotonic(), time.time()
            say(f"{label}: kill -9 {victim}")
            failover = probe.until_converged(
                "kill -9 failover", survivors, args.failover_timeout, since=killed, poll_s=args.poll, progress=progress
            )
            out["failover"] = failover.to_json()
            out["failover"]["survivors_lost_events"] = sum(fleet[m].log.count("lost") for m in survivors) - lost_before
            out["failover"]["timeline"] = timeline = failover_timeline(store, GROUP, killed_wall)
            timeline["last_apply_s"] = last_apply_s(fleet, survivors, killed_wall) if failover.seconds else None
            say(f"{label}: kill -9 timeline (s after the kill): {timeline}")
            say(f"{label}: kill -9 failover: {failover.text()} (goal {goal_s:g} s)")
            if failover.seconds is not None:
                joiner = f"w{workers:02d}"
                fleet.start(joiner)
                joined, joined_wall = time.monotonic(), time.time()
                members = [*survivors, joiner]
                join = probe.until_converged(
                    "join", members, args.join_timeout, since=joined, poll_s=args.poll, progress=progress
                )
                out["join"] = join.to_json()
                out["join"]["last_apply_s"] = last_apply_s(fleet, members, joined_wall) if join.seconds else None
                say(f"{label}: join: {join.text()}")
        everyone = list(fleet.logs)
        out["run_events"] = _counts(fleet, everyone)
    return out


def idle_run(
    handle: StoreHandle, work: Path, workers: int, partitions: int, args: argparse.Namespace, label: str
) -> dict[str, Any]:
    """Phase 5: the same fleet without commits."""
    ids = _ids(workers)
    progress = lambda line: say(f"{label} idle: {line}")  # noqa: E731
    command = worker_args(handle.url, GROUP, *_options(args, partitions, 0.0))
    with Fleet(work / "logs-idle", command, count_only=COUNTED) as fleet, connect(handle.url) as store:
        probe = Probe(store, GROUP, fleet, range(partitions))
        say(f"{label} idle: starting {workers} workers with --commit-every 0")
        last = start_staggered(fleet, ids, args.stagger)
        converge: Phase = probe.until_converged(
            "converge", ids, args.converge_timeout, since=last, poll_s=args.poll, progress=progress
        )
        say(f"{label} idle: converge: {converge.text()}")
        window = steady_window(fleet, ids, handle, args.idle_window, 0.0, f"{label} idle")
        window["converged_before"] = converge.seconds is not None
        return {"converge": converge.to_json(), "window": window}


def run(kind: str, workers: int, partitions: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    label = f"{kind} {workers}x{partitions}"
    result: dict[str, Any] = {"store": kind, "workers": workers, "partitions": partitions, "load_before": _load()}
    work = root / f"{kind}-{workers}x{partitions}"
    try:
        with store_server(kind, work / "store") as handle:
            result.update(committing_run(handle, work, workers, partitions, args, label))
        if not args.no_idle:
            with store_server(kind, work / "store-idle") as handle:
                result["idle"] = idle_run(handle, work, workers, partitions, args, label)
    except ApportionError as exc:  # a worker exited, the store failed: reported, and the next run goes on
        result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        say(f"{label}: failed: {result['error']}")
    result["load_after"] = _load()
    return result


# -- output ---------------------------------------------------------------------------------------------------------

HEADER = (
    "| store | N x P | load (1 min) | converge: committing / idle | kill -9 → converged (goal) | join → converged | "
    "commits/s accepted / offered | lost / fenced (run) | CPU per member: idle / committing | store growth: idle / "
    "committing | watch events/s per member: idle / committing |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def _phase(phase: dict[str, Any] | None) -> str:
    return "not run" if phase is None else str(phase["text"])


def _cpu(window: dict[str, Any] | None) -> str:
    cpu = None if window is None else window.get("cpu_pct_per_member")
    return "-" if not cpu else f"{cpu['mean']:.1f}% (max {cpu['max']:.1f}%)"


def _growth(window: dict[str, Any] | None) -> str:
    """KiB per minute: SQLite's db + wal files; etcd's db total (and in use)."""
    if window is None:
        return "-"
    rates = window["store_bytes_per_min"]
    if "file" in rates:
        return f"{rates['file'] / 1024:,.0f} KiB/min"
    return f"{rates['db_total'] / 1024:,.0f} KiB/min (in use {rates['db_in_use'] / 1024:+,.0f})"


def _watch(window: dict[str, Any] | None) -> str:
    return "-" if window is None else f"{window['watch_events_per_s']:,.0f}"


def row(result: dict[str, Any]) -> str:
    """One run's markdown table row (``HEADER``)."""
    size = f"{result['workers']} x {result['partitions']:,}"
    load = f"{result['load_before']}-{result['load_after']}"
    if "converge" not in result:
        return f"| {result['store']} | {size} | {load} | error: {result.get('error', '?')[:80]} |" + " |" * 7
    steady, idle = result["steady"], result.get("idle") or {}
    window = idle.get("window")
    failover = _phase(result["failover"])
    if result["failover"] is not None:
        failover += f" ({result['failover_goal_s']:g} s)"
    run_events = result["run_events"]
    return (
        f"| {result['store']} | {size} | {load} | {_phase(result['converge'])} / {_phase(idle.get('converge'))} | "
        f"{failover} | {_phase(result['join'])} | "
        f"{steady['commits_accepted_per_s']:,.0f} / {steady['commits_offered_per_s']:,.0f} | "
        f"{run_events['lost']} / {run_events['fenced']} | {_cpu(window)} / {_cpu(steady)} | "
        f"{_growth(window)} / {_growth(steady)} | {_watch(window)} / {_watch(steady)} |"
    )


def table(results: Sequence[dict[str, Any]]) -> str:
    return "\n".join([HEADER, *(row(r) for r in results), "", timeline_table(results)])


def timeline_table(results: Sequence[dict[str, Any]]) -> str:
    """Where each kill -9 failover's seconds went (``failover_timeline``; runs saved before it have none)."""
    lines = [
        "| store | N x P | kill → round opened | round closed | first claim | last claim (claims) | last apply | "
        "converged (seen) | join: last apply / seen |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        failover = r.get("failover") or {}
        t = failover.get("timeline")
        if t is None:
            continue
        shown = lambda v: "-" if v is None else f"{v:.2f} s"  # noqa: E731
        lines.append(
            f"| {r['store']} | {r['workers']} x {r['partitions']:,} | {shown(t['round_opened_s'])} | "
            f"{shown(t['round_closed_s'])} | {shown(t['first_claim_s'])} | {shown(t['last_claim_s'])} "
            f"({t['claims']:,}) | {shown(t.get('last_apply_s'))} | {failover['text']} | "
            f"{shown((r.get('join') or {}).get('last_apply_s'))} / {_phase(r.get('join'))} |"
        )
    return "\n".join(lines)


def _sizes(text: str) -> list[tuple[int, int]]:
    """``16x1024,32x16384``: (workers, partitions) pairs."""
    sizes = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        workers, _, partitions = item.lower().partition("x")
        try:
            sizes.append((int(workers), int(partitions.replace("_", ""))))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: a size is WORKERSxPARTITIONS, e.g. 16x1024") from None
    return sizes


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--stores", default=",".join(STORES), help=f"comma-separated, of {', '.join(STORES)}")
    parser.add_argument("--sizes", type=_sizes, default="16x1024", help="comma-separated WORKERSxPARTITIONS "
                        "(issue 27: 16x1024,32x16384,64x100000)")  # fmt: skip
    parser.add_argument("--commit-every", type=float, default=5.0, help="the workers' --commit-every (s)")
    parser.add_argument("--stagger", type=float, default=0.1, help="seconds between two workers' starts")
    parser.add_argument("--ttl", type=float, default=None, help="the workers' --ttl (default: theirs)")
    parser.add_argument("--settle", type=float, default=None, help="the workers' --settle (default: theirs)")
    parser.add_argument("--min-interval", type=float, default=None, help="the workers' --min-interval")
    parser.add_argument("--heartbeat", type=float, default=None, help="the workers' --heartbeat")
    parser.add_argument("--window", type=float, default=20.0, help="steady window while committing (s)")
    parser.add_argument("--idle-window", type=float, default=10.0, help="idle window (s)")
    parser.add_argument("--no-idle", action="store_true", help="skip the idle phase (phase 5)")
    parser.add_argument("--converge-timeout", type=float, default=120.0)
    parser.add_argument("--failover-timeout", type=float, default=60.0)
    parser.add_argument("--join-timeout", type=float, default=60.0)
    parser.add_argument("--poll", type=float, default=0.25, help="seconds between two looks at the store")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (worker logs, stores)")
    parser.add_argument("--table", metavar="OUTPUT", help="only print the table of a saved run's output, and exit")
    args = parser.parse_args()
    if args.table:
        saved, _ = json.JSONDecoder().raw_decode(Path(args.table).read_text())
        print(table(saved["runs"]))
        return 0
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    unknown = sorted(set(stores) - set(STORES))
    if unknown:
        parser.error(f"unknown store(s) {unknown}: choose from {', '.join(STORES)}")
    sizes: list[tuple[int, int]] = args.sizes

    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored (a background job)
    logging.basicConfig(level=logging.WARNING, format="[%(asctime)s] %(message)s", datefmt="%H:%M:%S")  # stderr
    root = Path(tempfile.mkdtemp(prefix="apportion-scale-"))
    results: list[dict[str, Any]] = []
    interrupted = False
    try:
        for workers, partitions in sizes:
            for kind in stores:
                results.append(run(kind, workers, partitions, args, root))
                say(row(results[-1]))
    except KeyboardInterrupt:
        interrupted = True
        say("interrupted: every worker and server is stopped; results so far follow")
    finally:
        if args.keep:
            say(f"work directory kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({
        "command": shlex.join(["bench/scale_bench.py", *sys.argv[1:]]),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "runs": results,
    }, indent=2))  # fmt: skip
    print()
    print(table(results))
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
