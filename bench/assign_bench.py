"""Benchmark of apportion.assign: sticky at scale, join/leave, baselines, moves vs the lower bound.

Run: .venv/bin/python bench/assign_bench.py [--quick] [--against REV [--repeat K]]
Each case runs in a fresh process so its peak RSS (ru_maxrss) is its own. Prints a Markdown table.
``--against REV`` also times sticky from scratch at the largest size with the ``src/`` of git revision ``REV``
(exported with ``git archive``), alternating K fresh interpreters of each, and prints the medians and their ratio.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from apportion.assign import min_moves, plan
from apportion.model import AssignRequest, Member, Resource


def members_fresh(n: int) -> tuple[Member, ...]:
    return tuple(Member(f"m{i:05d}") for i in range(n))


def owned_from(req: AssignRequest, generation: int = 1) -> tuple[Member, ...]:
    result = plan(req)
    return tuple(Member(m, owned=ps, generation=generation) for m, ps in result.assignment.items())


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def case_sticky(partitions: int, members: int, mode: str) -> dict[str, object]:
    res = (Resource("t", partitions),)
    base = AssignRequest("sticky", res, members_fresh(members))
    if mode == "scratch":
        req = base
    else:
        prev = owned_from(base)
        if mode == "owned":
            req = AssignRequest("sticky", res, prev)
        elif mode == "join":
            req = AssignRequest("sticky", res, (*prev, Member("zz-new")))
        else:  # leave
            req = AssignRequest("sticky", res, prev[1:])
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seconds, result = timed(lambda: plan(req))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert hasattr(result, "stats")
    stats = result.stats  # type: ignore[attr-defined]
    return {
        "seconds": seconds,
        "rss_mib": rss / 1024,
        "rss_before_mib": rss_before / 1024,
        "moved": stats.moved,
        "bound": min_moves(req) if partitions <= 200_000 else stats.min_moves,
        "placed": len(result.moves),
    }  # type: ignore[attr-defined]


def case_naive(partitions: int, members: int, mode: str) -> dict[str, object]:
    from naive_sticky import naive_sticky

    parts = [f"t-{i}" for i in range(partitions)]
    ids = [f"m{i:05d}" for i in range(members)]
    owned: dict[str, list[str]] = {}
    if mode != "scratch":
        owned = naive_sticky(parts, ids, {})
        ids = [*ids, "zz-new"] if mode == "join" else ids
    seconds, out = timed(lambda: naive_sticky(parts, ids, owned))
    moved = sum(1 for m, ps in owned.items() for p in ps if p not in set(out.get(m, ()))) if owned else 0
    return {"seconds": seconds, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "moved": moved}


def case_kazoo(partitions: int, members: int, mode: str) -> dict[str, object]:
    from kazoo.recipe.partitioner import SetPartitioner

    split = SetPartitioner._partitioner  # the split logic alone: sorted round robin, evaluated by every member
    parts = [f"t-{i}" for i in range(partitions)]
    ids = [f"m{i:05d}" for i in range(members)]
    if mode == "join":
        before = {m: set(split(None, m, ids, parts)) for m in ids}
        ids = [*ids, "zz-new"]
    seconds, out = timed(lambda: {m: split(None, m, ids, parts) for m in ids})
    moved = 0
    if mode == "join":
        moved = sum(len(before[m] - set(out[m])) for m in before)  # type: ignore[index]
    return {"seconds": seconds, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "moved": moved}


def case_uhashring(partitions: int, members: int, mode: str) -> dict[str, object]:
    from uhashring import HashRing

    parts = [f"t-{i}" for i in range(partitions)]
    ids = [f"m{i:05d}" for i in range(members)]
    before = None
    if mode == "join":
        ring = HashRing(nodes=ids)
        before = {p: ring.get_node(p) for p in parts}
        ids = [*ids, "zz-new"]

    def run() -> dict[str, str]:
        ring = HashRing(nodes=ids)
        return {p: ring.get_node(p) for p in parts}

    seconds, out = timed(run)
    moved = sum(1 for p in parts if before and before[p] != out[p] and out[p] != "zz-new")  # type: ignore[index]
    loads: dict[str, int] = {}
    for m in out.values():  # type: ignore[attr-defined]
        loads[m] = loads.get(m, 0) + 1
    moved_to_new = sum(1 for p in parts if before and before[p] != out[p])  # type: ignore[index]
    return {
        "seconds": seconds,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "moved": moved_to_new,
        "max_load": max(loads.values()),
        "stray": moved,
    }


def case_strategy(strategy: str, partitions: int, members: int) -> dict[str, object]:
    """One join with every strategy: moves (owner changes between live members) vs the sticky lower bound."""
    res = (Resource("t", partitions),)
    base = AssignRequest(strategy, res, tuple(Member(f"m{i:05d}", capacity=1 + i % 3) for i in range(members)))
    prev = plan(base)
    joined = tuple(Member(m.id, owned=prev.assignment[m.id], generation=1, capacity=m.capacity) for m in base.members)
    req = AssignRequest(strategy, res, (*joined, Member("zz-new", capacity=2)))
    seconds, result = timed(lambda: plan(req))
    sticky_bound = min_moves(AssignRequest("sticky", res, req.members))
    stats = result.stats  # type: ignore[attr-defined]
    return {
        "seconds": seconds,
        "moved": stats.moved,
        "bound": min_moves(req) if strategy == "weighted" else sticky_bound,
        "min": stats.min,
        "max": stats.max,
    }


# Run by a fresh interpreter with PYTHONPATH set to the src/ under test: plan() from scratch, then read every move.
_SCRATCH_SCRIPT = """
import json, resource, sys, time
from apportion.assign import plan
from apportion.model import AssignRequest, Member, Resource
p, n = int(sys.argv[1]), int(sys.argv[2])
req = AssignRequest("sticky", (Resource("t", p),), tuple(Member(f"m{i:05d}") for i in range(n)))
w0, c0 = time.perf_counter(), time.process_time()
result = plan(req)
w1, c1 = time.perf_counter(), time.process_time()
count = sum(1 for _ in result.moves)
w2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"plan_s": w1 - w0, "plan_cpu_s": c1 - c0, "read_moves_s": w2 - w1, "read_moves_cpu_s": c2 - c1,
                  "placed": count, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def scratch_in(src: Path, partitions: int, members: int) -> dict[str, float]:
    """One fresh interpreter importing apportion from ``src``: sticky from scratch, times and peak RSS."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    args = [sys.executable, "-c", _SCRATCH_SCRIPT, str(partitions), str(members)]
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def export_src(rev: str, into: Path) -> Path:
    """``src/`` of git revision ``rev`` of this repository, extracted under ``into``."""
    repo = Path(__file__).resolve().parent.parent
    archive = into / "src.tar"
    with archive.open("wb") as f:
        subprocess.run(["git", "-C", str(repo), "archive", rev, "src"], check=True, stdout=f)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def against(rev: str, partitions: int, members: int, repeat: int) -> list[str]:
    """Sticky from scratch with this checkout's src/ and with ``rev``'s, alternating; Markdown rows of medians."""
    ours_src = Path(__file__).resolve().parent.parent / "src"
    runs: dict[str, list[dict[str, float]]] = {"this checkout": [], rev: []}
    with tempfile.TemporaryDirectory() as tmp:
        theirs_src = export_src(rev, Path(tmp))
        for _ in range(repeat):
            runs["this checkout"].append(scratch_in(ours_src, partitions, members))
            runs[rev].append(scratch_in(theirs_src, partitions, members))

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    rows = [
        f"Sticky from scratch, {partitions:,} x {members:,}: medians of {repeat} alternating fresh interpreters "
        f"(load average before: {os.getloadavg()[0]:.1f})",
        "",
        "| src | plan() wall | plan() CPU | then reading every move (wall / CPU) | peak RSS |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in runs:
        rows.append(
            f"| {name} | {med(name, 'plan_s') * 1000:.0f} ms | {med(name, 'plan_cpu_s') * 1000:.0f} ms "
            f"| {med(name, 'read_moves_s') * 1000:.0f} / {med(name, 'read_moves_cpu_s') * 1000:.0f} ms "
            f"| {med(name, 'rss_mib'):.0f} MiB |"
        )
    ratio = med(rev, "plan_s") / med("this checkout", "plan_s")
    cpu_ratio = med(rev, "plan_cpu_s") / med("this checkout", "plan_cpu_s")
    rows.append("")
    rows.append(f"Ratio {rev} / this checkout, plan(): {ratio:.2f}x wall, {cpu_ratio:.2f}x CPU.")
    return rows


def _child(conn: object, fn: Callable[..., dict[str, object]], args: tuple[object, ...]) -> None:
    conn.send(fn(*args))  # type: ignore[attr-defined]


def isolated(fn: Callable[..., dict[str, object]], *args: object) -> dict[str, object]:
    parent, child = mp.Pipe()
    proc = mp.Process(target=_child, args=(child, fn, args))
    proc.start()
    out = parent.recv()
    proc.join()
    return out  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10x smaller (a smoke run)")
    parser.add_argument("--against", metavar="REV", help="also time sticky from scratch with git revision REV's src/")
    parser.add_argument("--repeat", type=int, default=5, help="alternating runs per side for --against (default 5)")
    parser.add_argument("--only-against", action="store_true", help="with --against: skip the other cases")
    args = parser.parse_args()
    big_p, big_n, mid_p, mid_n, small_p, small_n = 1_000_000, 10_000, 100_000, 1_000, 10_000, 100
    if args.quick:
        big_p, big_n, mid_p, mid_n = big_p // 10, big_n // 10, mid_p // 10, mid_n // 10
    rows: list[str] = []
    if args.against:
        rows.extend(against(args.against, big_p, big_n, args.repeat))
        rows.append("")
    if args.only_against:
        print(f"command: .venv/bin/python bench/assign_bench.py {' '.join(sys.argv[1:])}")
        print("\n".join(rows))
        return
    rows.append("| case | size (P x N) | time | peak RSS | moves | lower bound | goal |")
    rows.append("|---|---|---:|---:|---:|---:|---|")

    def add(name: str, size: str, r: dict[str, object], goal: str) -> None:
        rss = f"{r['rss_mib']:.0f} MiB" if "rss_mib" in r else "-"
        rows.append(
            f"| {name} | {size} | {float(r['seconds']) * 1000:.0f} ms | {rss} | {r.get('moved', '-')} "  # type: ignore[arg-type]
            f"| {r.get('bound', '-')} | {goal} |"
        )

    big = f"{big_p:,} x {big_n:,}"
    mid = f"{mid_p:,} x {mid_n:,}"
    scratch = isolated(case_sticky, big_p, big_n, "scratch")
    add("sticky from scratch", big, scratch, "<= 1.0 s, <= 1 GiB")
    owned = isolated(case_sticky, big_p, big_n, "owned")
    add("sticky, previous ownership kept", big, owned, "<= 1.0 s, <= 1 GiB")
    add("sticky, one join", big, isolated(case_sticky, big_p, big_n, "join"), "moves = bound")
    for mode in ("join", "leave"):
        add(f"sticky, one {mode}", mid, isolated(case_sticky, mid_p, mid_n, mode), "<= 50 ms, moves = bound")
    naive = isolated(case_naive, mid_p, mid_n, "scratch")
    add("baseline: naive greedy sticky, from scratch", mid, naive, "-")
    ours_mid = isolated(case_sticky, mid_p, mid_n, "scratch")
    add("sticky from scratch (same size as baselines)", mid, ours_mid, "-")
    add("baseline: naive greedy sticky, one join", mid, isolated(case_naive, mid_p, mid_n, "join"), "-")
    kaz = isolated(case_kazoo, mid_p, mid_n, "join")
    add("baseline: kazoo SetPartitioner split (all members), one join", mid, kaz, "-")
    uh = isolated(case_uhashring, small_p, small_n, "join")
    add(f"baseline: uhashring ring, one join (max load {uh['max_load']})", f"{small_p:,} x {small_n}", uh, "-")
    rows.append("")
    rows.append(
        f"Ratios at {mid}: naive greedy / sticky = {float(naive['seconds']) / float(ours_mid['seconds']):.1f}x; "  # type: ignore[arg-type]
        f"kazoo split / sticky = {float(kaz['seconds']) / float(ours_mid['seconds']):.1f}x."
    )  # type: ignore[arg-type]
    rows.append("")
    rows.append(
        f"Moves after one join, {small_p:,} partitions x {small_n} members (capacities 1-3; the bound is the "
        "sticky lower bound, weighted's own bound for weighted):"
    )
    rows.append("")
    rows.append("| strategy | time | moves | lower bound | min..max load |")
    rows.append("|---|---:|---:|---:|---|")
    for strategy in ("sticky", "weighted", "range", "round_robin", "rendezvous", "bounded_load"):
        n = small_n if strategy != "rendezvous" else small_n // 4
        r = isolated(case_strategy, strategy, small_p if strategy != "rendezvous" else small_p // 4, n)
        rows.append(
            f"| {strategy}{' (2,500 x 25)' if strategy == 'rendezvous' else ''} | {float(r['seconds']) * 1000:.0f} ms "  # type: ignore[arg-type]
            f"| {r['moved']} | {r['bound']} | {r['min']}..{r['max']} |"
        )
    print(f"command: .venv/bin/python bench/assign_bench.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"python {sys.version.split()[0]}, one process per case")
    print()
    print("\n".join(rows))


if __name__ == "__main__":
    main()
