"""Benchmark of `apportion assign` end to end (JSON in -> JSON out) against the in-process plan() and a naive CLI.

Run: .venv/bin/python bench/assign_cli_bench.py [--partitions 1000000] [--members 10000] [--repeat 3]

The request: one resource of P partitions, N members that owned a balanced plan (generation 1), then the first
member left: its partitions are spread over the others (the "dry run of a big cluster" case). Each repeat runs, in
this order and in fresh processes: `apportion assign --input FILE` (wall time and peak RSS of the child), the naive
baseline (bench/naive_sticky.py behind stdlib json: read the same file, assign, write the assignment), and in-process
phases (read + parse_request, plan(), plan_to_json + dumps) in one child. Medians over the repeats; the ratios are
of medians from the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent

NAIVE_CLI = """
import json, sys
sys.path.insert(0, {here!r})
from naive_sticky import naive_sticky
req = json.loads(open(sys.argv[1], encoding="utf-8").read())
parts = [f"{{name}}-{{i}}" for name, n in req["resources"].items() for i in range(n)]
members = req["members"]
owned = {{m: spec.get("owned", []) for m, spec in members.items()}}
out = naive_sticky(parts, list(members), owned)
sys.stdout.write(json.dumps({{"assignment": out}}) + "\\n")
"""

PHASES = """
import json, resource, sys, time
from apportion.assign import loads_request, plan
from apportion.assign import dumps_plan
t0 = time.perf_counter()
text = open(sys.argv[1], encoding="utf-8").read()
req = loads_request(text)
t1 = time.perf_counter()
result = plan(req)
t2 = time.perf_counter()
out = dumps_plan(result)
t3 = time.perf_counter()
print(json.dumps({"parse": t1 - t0, "plan": t2 - t1, "output": t3 - t2, "bytes": len(out),
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def write_request(path: Path, partitions: int, members: int) -> None:
    """Balanced previous ownership (contiguous blocks, generation 1) for members 1..N-1; member 0 is gone."""
    ids = [f"m{i:05d}" for i in range(members)]
    per = -(-partitions // members)
    body = {
        m: {"owned": [f"t-{p}" for p in range(i * per, min(partitions, (i + 1) * per))], "generation": 1}
        for i, m in enumerate(ids)
        if i > 0
    }
    req = {"strategy": "sticky", "resources": {"t": partitions}, "members": body}
    path.write_text(json.dumps(req), encoding="utf-8")


def run_rss(argv: list[str]) -> tuple[float, float, bytes]:
    """Wall seconds, the child's own peak RSS (MiB, from wait4) and its stdout."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        pid = os.posix_spawn(argv[0], argv, dict(os.environ), file_actions=[
            (os.POSIX_SPAWN_DUP2, out_file.fileno(), 1),
            (os.POSIX_SPAWN_DUP2, err_file.fileno(), 2),
        ])  # fmt: skip
        _, status, usage = os.wait4(pid, 0)
        wall = time.perf_counter() - t
        out_file.seek(0)
        err_file.seek(0)
        out, err = out_file.read(), err_file.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv} failed: {err.decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=1_000_000)
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--request", type=Path, help="reuse this request file (written if missing)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="assign-cli-bench-"))
    path = args.request or tmp / "request.json"
    if not path.exists():
        write_request(path, args.partitions, args.members)
    python = sys.executable
    apportion = str(Path(python).parent / "apportion")
    naive_py = tmp / "naive_cli.py"
    naive_py.write_text(NAIVE_CLI.format(here=str(HERE)))
    phases_py = tmp / "phases.py"
    phases_py.write_text(PHASES)
    cli_runs: list[tuple[float, float]] = []
    naive_runs: list[tuple[float, float]] = []
    phase_runs: list[dict[str, float]] = []
    for _ in range(args.repeat):
        wall, rss, out = run_rss([apportion, "assign", "--input", str(path)])
        cli_runs.append((wall, rss))
        assert out.startswith(b'{"assignment":'), out[:100]
        wall, rss, _ = run_rss([python, str(naive_py), str(path)])
        naive_runs.append((wall, rss))
        _, _, out = run_rss([python, str(phases_py), str(path)])
        phase_runs.append(json.loads(out))
    cli_s = statistics.median(w for w, _ in cli_runs)
    naive_s = statistics.median(w for w, _ in naive_runs)
    phase = {k: statistics.median(r[k] for r in phase_runs) for k in ("parse", "plan", "output", "rss_mib")}
    load = os.getloadavg()[0]
    print(f"command: .venv/bin/python bench/assign_cli_bench.py --partitions {args.partitions} "
          f"--members {args.members} --repeat {args.repeat}")  # fmt: skip
    print(f"python {sys.version.split()[0]}, request {path.stat().st_size / 1e6:.0f} MB, load average {load:.1f} "
          f"on {os.cpu_count()} cores; medians of {args.repeat} alternating runs")  # fmt: skip
    print()
    print("| what | wall (median) | runs | peak RSS |")
    print("|---|---:|---|---:|")

    def row(name: str, runs: list[tuple[float, float]]) -> None:
        walls = ", ".join(f"{w:.2f}" for w, _ in runs)
        rss = statistics.median(r for _, r in runs)
        print(f"| {name} | {statistics.median(w for w, _ in runs):.2f} s | {walls} | {rss:.0f} MiB |")

    row("`apportion assign --input FILE` (JSON in -> JSON out)", cli_runs)
    row("naive greedy sticky behind stdlib json (same file)", naive_runs)
    print(f"| in process: read + `loads_request` | {phase['parse']:.2f} s | | |")
    print(f"| in process: `plan()` | {phase['plan']:.2f} s | | |")
    print(f"| in process: `dumps_plan` | {phase['output']:.2f} s | | {phase['rss_mib']:.0f} MiB (whole child) |")
    print()
    print(f"CLI / plan() = {cli_s / phase['plan']:.2f}x (goal <= 2x); naive / CLI = {naive_s / cli_s:.2f}x "
          "(goal >= 4x)")  # fmt: skip


if __name__ == "__main__":
    main()
