"""`make demo` with one shared Spark Connect server vs a JVM per worker (the design before it), same run.

Runs ``apportion demo --engine shared`` and ``--engine per-worker`` one after the other on the same sizes and reports,
for each: wall time, the peak of the summed resident memory (RSS) of the demo's whole process tree (sampled every
0.2 s from /proc: the demo, its workers, their JVMs and the Connect server), the number of JVMs at the peak, and
whether every check passed; then the ratios shared / per-worker.

    .venv/bin/python bench/demo_bench.py [--records 1000000] [--partitions 32]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(parent, []).append(int(entry))
    return tree


def _tree_rss(root: int) -> tuple[int, int]:
    """(summed RSS bytes, JVMs) of ``root`` and all its descendants."""
    tree, todo, rss, jvms = _children(), [root], 0, 0
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, ()))
        try:
            with open(f"/proc/{pid}/statm") as handle:
                rss += int(handle.read().split()[1]) * PAGE
            with open(f"/proc/{pid}/comm") as handle:
                jvms += handle.read().strip() == "java"
        except (OSError, IndexError, ValueError):
            continue
    return rss, jvms


def run_demo(work: Path, engine: str, records: int, partitions: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "apportion.cli", "demo", "--dir", str(work / engine), "--engine", engine,
               "--records", str(records), "--partitions", str(partitions), "--json"]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak, peak_jvms, max_jvms, done = 0, 0, 0, threading.Event()

    def sample() -> None:
        nonlocal peak, peak_jvms, max_jvms
        while not done.is_set():
            rss, jvms = _tree_rss(proc.pid)
            max_jvms = max(max_jvms, jvms)
            if rss > peak:
                peak, peak_jvms = rss, jvms
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    wall = time.monotonic() - started
    done.set()
    sampler.join()
    summary = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"ok": False}
    return {
        "engine": engine,
        "ok": bool(summary.get("ok")) and proc.returncode == 0,
        "wall_s": round(wall, 1),
        "peak_rss_mib": round(peak / 2**20),
        "jvms_at_peak": peak_jvms,
        "max_jvms": max_jvms,
        "failover_s": summary.get("failover_s"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="apportion-demo-bench-") as tmp:
        runs = [run_demo(Path(tmp), engine, args.records, args.partitions) for engine in ("per-worker", "shared")]
    base, shared = runs
    result = {
        "command": " ".join(["bench/demo_bench.py", *sys.argv[1:]]),
        "load_1m_at_end": round(os.getloadavg()[0], 1),
        "runs": runs,
        "wall_ratio_shared_per_worker": round(shared["wall_s"] / base["wall_s"], 2),
        "peak_rss_ratio_shared_per_worker": round(shared["peak_rss_mib"] / base["peak_rss_mib"], 2),
    }
    print(json.dumps(result, indent=2))
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
