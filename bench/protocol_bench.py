"""Protocol benchmark: failover after kill -9, unowned gap of planned handoffs, simulator speed.

    .venv/bin/python bench/protocol_bench.py [--workers 16] [--partitions 256] [--skip-processes] [--sim-scale full]

1. Failover (SQLite, real `apportion worker` processes): kill -9 one worker, time until all its partitions are owned
   again (polling the store). Goal: <= ttl + RST + 1 s.
2. Planned handoff gap: from the group's history, for every partition that moved because a worker joined or left
   gracefully, the time between the old owner's release and the new owner's claim. Goal: p99 <= 200 ms. Also split
   by cause (join, leave), with the slowest handoff attributed to the protocol steps between its release and claim.
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
    gaps = handoff_gaps(events)
    return {
        "workers": workers,
        "partitions": partitions,
        "failover_s": {"p50": statistics.median(failover), "max": max(failover), "n": len(failover)},
        "failover_goal_s": TTL_S + SETTLE_S + 1.0,
        "handoff_gap_ms": _summary([g["gap_ms"] for g in gaps]),
        "handoff_gap_ms_by_cause": {
            cause: _summary([g["gap_ms"] for g in gaps if g["cause"] == cause]) for cause in ("join", "leave")
        },
        "slowest_handoff": max(gaps, key=lambda g: g["gap_ms"], default=None),
    }


def _summary(gaps_ms: list[float]) -> dict[str, float]:
    return {"p50": round(_pct(gaps_ms, 0.5), 1), "p99": round(_pct(gaps_ms, 0.99), 1), "n": len(gaps_ms)}


def handoff_gaps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every planned handoff in the group's history (a partition released, then claimed): its unowned gap (release
    -> claim, two processes' clocks) and its cause: ``leave`` when the releasing member's next event other than a
    release is its ``left``, else ``join`` (a plan moved the partition away from a member that stays). Each gap is
    attributed to the protocol steps between the release and the claim, from the same history (``steps_ms``): how
    long after the release a round was opened (``->round_opened``), then closed (``->round_closed``), and the rest up
    to the claim (``->claim``, the whole gap when no round happened in between)."""
    next_of: dict[int, str] = {}  # index of a release -> type of the same member's next event that is not one
    pending: dict[str, list[int]] = {}
    for i, e in enumerate(events):
        if e["type"] == "release":
            pending.setdefault(e["member"], []).append(i)
        else:
            for j in pending.pop(e["member"], []):
                next_of[j] = e["type"]
    released: dict[int, int] = {}
    gaps: list[dict[str, Any]] = []
    for i, e in enumerate(events):
        if e["type"] == "release":
            released[e["partition"]] = i
        elif e["type"] == "claim" and e.get("partition") in released:
            j = released.pop(e["partition"])
            release = events[j]
            steps: dict[str, float] = {}
            last = release["time"]
            for kind in ("round_opened", "round_closed"):
                found = next((x for x in events[j:i] if x["type"] == kind), None)
                if found is not None:
                    steps[f"->{kind}"] = round(1000 * (found["time"] - last), 1)
                    last = found["time"]
            steps["->claim"] = round(1000 * (e["time"] - last), 1)
            gaps.append(
                {
                    "gap_ms": round(1000 * (e["time"] - release["time"]), 1),
                    "cause": "leave" if next_of.get(j) == "left" else "join",
                    "partition": e["partition"],
                    "from": release["member"],
                    "to": e["member"],
                    "steps_ms": steps,
                }
            )
    return gaps


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
