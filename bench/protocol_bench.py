"""Protocol benchmark: failover after kill -9, unowned gap of planned handoffs, simulator speed.

    .venv/bin/python bench/protocol_bench.py [--workers 16] [--partitions 256] [--skip-processes] [--sim-scale full]

1. Failover (SQLite, real `apportion worker` processes): kill -9 one worker, time until all its partitions are owned
   again (polling the store). Goal: <= ttl + RST + 1 s.
2. Planned handoff gap: from the group's history, for every partition that moved because a worker joined or left
   gracefully, the time between the old owner's release and the new owner's claim. Goal: p99 <= 200 ms.
3. Simulator speed: members x partitions x churn events on one core (goal for 1,000 x 100,000 x 100: <= 60 s).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from apportion.fleet import Fleet, worker_args
from apportion.group import GroupConfig, history, owned_by, settled
from apportion.sim import SimConfig, simulate
from apportion.store import connect
from apportion.waiting import wait_for

SETTLE_S, MIN_INTERVAL_S, TTL_S = (
    GroupConfig.DEFAULT_SETTLE_S,
    GroupConfig.DEFAULT_MIN_INTERVAL_S,
    GroupConfig.DEFAULT_TTL_S,
)


def _owned_by(url: str, alive: set[str]) -> bool:
    with connect(url) as store:
        return owned_by(store, "bench", alive)


def _settled(url: str, alive: set[str]) -> bool:
    with connect(url) as store:
        return settled(store, "bench", alive)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_processes(workers: int, partitions: int, rounds: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="apportion-bench-"))
    url = f"sqlite:///{tmp / 'bench.db'}"
    options = ["--partitions", str(partitions), "--settle", str(SETTLE_S), "--min-interval", str(MIN_INTERVAL_S),
               "--ttl", str(TTL_S)]  # fmt: skip
    alive = {f"w{i}" for i in range(workers)}
    failover: list[float] = []
    with Fleet(tmp / "logs", worker_args(url, "bench", *options)) as fleet:
        for wid in sorted(alive):
            fleet.start(wid)
        wait_for("the group to settle", lambda: _settled(url, alive), 60, poll_s=0.01)
        for i in range(rounds):
            victim = sorted(alive)[i % len(alive)]
            fleet[victim].signal(signal.SIGKILL)
            alive.discard(victim)
            failover.append(
                wait_for(f"{victim}'s partitions to be owned again", lambda: _owned_by(url, alive), 30, poll_s=0.01)
            )
            wait_for("the group to settle", lambda: _settled(url, alive), 30, poll_s=0.01)
            wid = f"n{i}"  # a newcomer: planned handoffs to it
            fleet.start(wid)
            alive.add(wid)
            wait_for("the group to settle", lambda: _settled(url, alive), 30, poll_s=0.01)
            leaver = sorted(alive)[0]  # graceful leave: planned handoffs from it
            fleet[leaver].signal(signal.SIGTERM)
            fleet[leaver].proc.wait(30)
            alive.discard(leaver)
            wait_for("the group to settle", lambda: _settled(url, alive), 30, poll_s=0.01)
        with connect(url) as store:
            events = history(store, "bench")
    released: dict[int, float] = {}
    gaps: list[float] = []
    for e in events:
        if e["type"] == "release":
            released[e["partition"]] = e["time"]
        elif e["type"] == "claim" and e.get("partition") in released:
            gaps.append(e["time"] - released.pop(e["partition"]))
    return {
        "workers": workers,
        "partitions": partitions,
        "failover_s": {"p50": statistics.median(failover), "max": max(failover), "n": len(failover)},
        "failover_goal_s": TTL_S + SETTLE_S + 1.0,
        "handoff_gap_ms": {"p50": 1000 * _pct(gaps, 0.5), "p99": 1000 * _pct(gaps, 0.99), "n": len(gaps)},
    }


def bench_simulator(members: int, partitions: int, events: int) -> dict[str, Any]:
    started = time.process_time()
    result = simulate(SimConfig(members=members, partitions=partitions, events=events, seed=1, faults=False))
    return {
        "members": members,
        "partitions": partitions,
        "events": events,
        "cpu_s": round(time.process_time() - started, 2),
        "rounds": result.rounds,
        "moves": result.moves,
        "moves_lower_bound": result.min_moves,
        "ok": result.ok,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--partitions", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5, help="kill/join/leave cycles")
    parser.add_argument("--skip-processes", action="store_true")
    parser.add_argument("--sim-scale", choices=["small", "full"], default="small")
    args = parser.parse_args()
    out: dict[str, Any] = {}
    if not args.skip_processes:
        out["sqlite"] = bench_processes(args.workers, args.partitions, args.rounds)
    sizes = [(100, 10_000, 20)] if args.sim_scale == "small" else [(100, 10_000, 20), (1000, 100_000, 100)]
    out["simulator"] = [bench_simulator(*size) for size in sizes]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
