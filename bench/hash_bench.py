"""THE routing hash: the xxhash package (C) against the pure-Python XXH64 and the numpy batch path that
``apportion.routing`` carried before issue 18 item 7, single keys and batches, in the same run.

Run: .venv/bin/python bench/hash_bench.py [--keys 1000000] [--repeat 3] [--baseline-rev 5c31e40]

The baseline module is ``src/apportion/routing.py`` as of ``--baseline-rev`` (read with ``git show``), loaded beside
the current one; every case checks that both give the same partitions. Keys: ``user-<i mod 1,000,003>`` strings (as
the Spark bench routes) and int64s. Each column is the median of ``--repeat`` runs, before and now alternating (each
goes first every other run). The batch of ints runs the same numpy kernel before and now: its ratio is noise.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from xxhash import xxh64_intdigest  # noqa: E402

from apportion import routing  # noqa: E402


def baseline_module(rev: str) -> ModuleType:
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:src/apportion/routing.py"], check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "routing_baseline.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("routing_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seconds(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline-rev", default="5c31e40")
    args = parser.parse_args()
    old = baseline_module(args.baseline_rev)
    n = args.keys
    strings = [f"user-{i % 1_000_003}" for i in range(n)]
    ints = list(range(-n // 2, n - n // 2))
    single = strings[: max(1, n // 50)]
    single_ints = ints[: max(1, n // 50)]
    assert old.partitions_for(strings[:10_000], 16) == routing.partitions_for(strings[:10_000], 16)
    assert old.partitions_for(ints[:10_000], 7) == routing.partitions_for(ints[:10_000], 7)
    assert [old.partition_for(k, 16) for k in single[:1000]] == [routing.partition_for(k, 16) for k in single[:1000]]
    encoded = [k.encode() for k in single]
    cases: list[tuple[str, int, Callable[[], object], Callable[[], object]]] = [
        ("the hash alone: `xxh64(bytes)` vs `xxhash.xxh64_intdigest(bytes, 42)`", len(single),
         lambda: [routing.xxh64(b) for b in encoded], lambda: [xxh64_intdigest(b, 42) for b in encoded]),
        ("`partition_for(str, 16)`, one key per call", len(single),
         lambda: [old.partition_for(k, 16) for k in single], lambda: [routing.partition_for(k, 16) for k in single]),
        ("`partition_for(int, 16)`, one key per call", len(single_ints),
         lambda: [old.partition_for(k, 16) for k in single_ints],
         lambda: [routing.partition_for(k, 16) for k in single_ints]),
        ("`partitions_for(strings, 16)`, one batch", n,
         lambda: old.partitions_for(strings, 16), lambda: routing.partitions_for(strings, 16)),
        ("`partitions_for(ints, 16)`, one batch", n,
         lambda: old.partitions_for(ints, 16), lambda: routing.partitions_for(ints, 16)),
    ]  # fmt: skip
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name, *_ in cases}
    for run in range(args.repeat):
        for name, _count, before, after in cases:
            if run % 2:  # each goes first in every other run
                times[name][1].append(seconds(after))
                times[name][0].append(seconds(before))
            else:
                times[name][0].append(seconds(before))
                times[name][1].append(seconds(after))
    print(f"command: .venv/bin/python bench/hash_bench.py --keys {n} --repeat {args.repeat}")
    print(f"python {sys.version.split()[0]}, baseline routing.py at {args.baseline_rev}, load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; medians of {args.repeat} runs, each side first "
          "every other run")  # fmt: skip
    print()
    print("| case | keys | before: pure Python / numpy | now: xxhash (C) | speed-up |")
    print("|---|---:|---:|---:|---:|")
    for name, count, *_ in cases:
        before_s, after_s = (statistics.median(t) for t in times[name])
        print(f"| {name} | {count:,} | {before_s * 1e9 / count:,.0f} ns/key | {after_s * 1e9 / count:,.0f} ns/key "
              f"| {before_s / after_s:.1f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
