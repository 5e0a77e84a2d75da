"""Benchmark of `apportion assign` end to end (JSON in -> JSON out) against the in-process plan() and a naive CLI.

Run: .venv/bin/python bench/assign_cli_bench.py [--partitions 1000000] [--members 10000] [--repeat 3]

The request: one resource of P partitions, N members that owned a balanced plan (generation 1), then the first
member left: its partitions are spread over the others (the "dry run of a big cluster" case). Each repeat runs, in
this order and in fresh processes: `apportion assign --input FILE` (wall time and peak RSS of the child), the naive
baseline (bench/naive_sticky.py behind stdlib json: read the same file, assign, write the assignment), and in-process
phases (read + loads_request, plan(), dumps_plan; then parse_request of the stdlib-decoded value) in one child.
With ``--before DIR`` (a ``src/`` exported from an earlier commit, e.g. ``git archive 5c31e40 src | tar -x -C
/tmp/before``) the same command runs with that source too, and must print the same plan. Medians over the repeats;
the ratios are of medians from the same run. The last lines say CLI / plan() twice from that one run: by wall time and
by CPU (the command's user + sys against plan()'s in-process time, which is CPU: it runs on one core, no I/O).
``--instructions`` adds a figure the machine's load does not move: the instructions (valgrind's cachegrind, no cache
simulation) of the command and of plan() (a child that reads the request and plans, less one that only reads it).
``--no-libraries`` leaves out the JSON libraries' table (six decodes and encodes of the request per repeat).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
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
from apportion.assign import dumps_plan, loads_request, parse_request, plan
t0 = time.perf_counter()
text = open(sys.argv[1], encoding="utf-8").read()
req = loads_request(text)
t1 = time.perf_counter()
result = plan(req)
t2 = time.perf_counter()
out = dumps_plan(result)
t3 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
del req, result, out
obj = json.loads(text)
t4 = time.perf_counter()
parse_request(obj)
t5 = time.perf_counter()
print(json.dumps({"parse": t1 - t0, "plan": t2 - t1, "output": t3 - t2, "parse_request": t5 - t4, "rss_mib": rss}))
"""


# a child that imports what the command imports, reads the request and runs the phases up to argv[2], then ends as the
# command does (os._exit): the instructions of plan() are those of "plan" less those of "parse"
STAGES = """
import os, sys
from apportion.cli import _assign_io
from apportion.assign import dumps_plan, loads_request, plan
request = loads_request(open(sys.argv[1], "rb").read())
if sys.argv[2] in ("plan", "output"):
    result = plan(request)
    if sys.argv[2] == "output":
        dumps_plan(result)
os._exit(0)
"""

VALGRIND = "/usr/bin/valgrind"


def instructions(argv: list[str], pythonpath: str) -> int:
    """The instructions (cachegrind's ``I refs``) a child runs, ``apportion`` from ``pythonpath``."""
    import re
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"PYTHONPATH": pythonpath, "PYTHONPYCACHEPREFIX": PYCACHE}
    command = [VALGRIND, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *argv]
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise SystemExit(f"no instruction count from valgrind: {done.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


def instruction_ratio(python: str, path: Path, stages_py: Path, pythonpath: str) -> tuple[float, float, float]:
    """(the command's instructions, plan()'s, command / plan()) in billions and x."""
    cli = instructions([python, "-m", "apportion.cli", "assign", "--input", str(path)], pythonpath)
    parsed = instructions([python, str(stages_py), str(path), "parse"], pythonpath)
    planned = instructions([python, str(stages_py), str(path), "plan"], pythonpath)
    return cli / 1e9, (planned - parsed) / 1e9, cli / (planned - parsed)


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


PYCACHE = tempfile.mkdtemp(prefix="assign-cli-bench-pycache-")


LAST_CPU = [0.0]  # the CPU seconds (user + sys, from wait4) of the last run_rss child


GNU_TIME = "/usr/bin/time"


def run_rss(argv: list[str], pythonpath: str) -> tuple[float, float, bytes]:
    """Wall seconds, the child's own peak RSS (MiB) and its stdout; ``apportion`` from ``pythonpath``.
    Bytecode is cached (in a temporary prefix) as an installed package has it, whatever PYTHONDONTWRITEBYTECODE says:
    compiling every module on every run would add ~0.5 s to each command.

    The peak RSS comes from GNU time (``%M``) run in between: a child spawned from this process (vfork, then exec)
    keeps this process's high-water mark in its own ``ru_maxrss`` (Linux carries it across exec), so wait4's figure
    would be the bench's, hundreds of MiB; time's child is forked from a 2 MiB process. Without GNU time: wait4's."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"PYTHONPATH": pythonpath, "PYTHONPYCACHEPREFIX": PYCACHE}
    timed = os.access(GNU_TIME, os.X_OK)
    with (
        tempfile.NamedTemporaryFile() as rss_file,
        tempfile.TemporaryFile() as out_file,
        tempfile.TemporaryFile() as err_file,
    ):
        command = [GNU_TIME, "-f", "%M", "-o", rss_file.name, *argv] if timed else argv
        t = time.perf_counter()
        pid = os.posix_spawn(command[0], command, env, file_actions=[
            (os.POSIX_SPAWN_DUP2, out_file.fileno(), 1),
            (os.POSIX_SPAWN_DUP2, err_file.fileno(), 2),
        ])  # fmt: skip
        _, status, usage = os.wait4(pid, 0)  # its CPU includes time's child, waited for by time
        wall = time.perf_counter() - t
        LAST_CPU[0] = usage.ru_utime + usage.ru_stime
        out_file.seek(0)
        err_file.seek(0)
        out, err = out_file.read(), err_file.read()
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{argv} failed: {err.decode()[-2000:]}")
        rss_kib = float(rss_file.read().split()[-1]) if timed else usage.ru_maxrss
    return wall, rss_kib / 1024, out


def libraries(path: Path, repeat: int) -> None:
    """Decode and encode of the request itself with the standard library, orjson and msgspec (medians, alternating):
    what chose msgspec. orjson is not a dependency: ``pip install orjson`` to include it."""
    import msgspec

    text = path.read_text(encoding="utf-8")
    data = path.read_bytes()

    def no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
        out = dict(pairs)
        if len(out) != len(pairs):
            raise ValueError("duplicate key")
        return out

    cases: dict[str, Callable[[], object]] = {
        "json.loads": lambda: json.loads(text),
        "json.loads with the duplicate-key hook (as before)": lambda: json.loads(text, object_pairs_hook=no_duplicates),
        "msgspec.json.decode": lambda: msgspec.json.decode(data),
    }
    value = json.loads(text)
    encoders: dict[str, Callable[[], object]] = {
        "json.dumps": lambda: json.dumps(value),
        "msgspec.json.encode": lambda: msgspec.json.encode(value),
    }
    try:
        import orjson

        cases["orjson.loads"] = lambda: orjson.loads(data)
        encoders["orjson.dumps"] = lambda: orjson.dumps(value)
    except ImportError:
        pass
    times: dict[str, list[float]] = {name: [] for name in [*cases, *encoders]}
    for _ in range(repeat):
        for name, fn in [*cases.items(), *encoders.items()]:
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    print()
    print("| decode / encode the request (in process) | median |")
    print("|---|---:|")
    for name, measured in times.items():
        print(f"| `{name}` | {statistics.median(measured) * 1000:.0f} ms |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=1_000_000)
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--request", type=Path, help="reuse this request file (written if missing)")
    parser.add_argument("--before", type=Path, help="a src/ directory of an earlier apportion, run the same way")
    parser.add_argument("--instructions", action="store_true", help="also count instructions under valgrind")
    parser.add_argument("--no-libraries", action="store_true", help="leave out the JSON libraries' table")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="assign-cli-bench-"))
    path = args.request or tmp / "request.json"
    if not path.exists():
        write_request(path, args.partitions, args.members)
    python = sys.executable
    naive_py = tmp / "naive_cli.py"
    naive_py.write_text(NAIVE_CLI.format(here=str(HERE)))
    phases_py = tmp / "phases.py"
    phases_py.write_text(PHASES)
    src = str(HERE.parent / "src")
    cli = [python, "-m", "apportion.cli", "assign", "--input", str(path)]
    runs: dict[str, list[tuple[float, float]]] = {"cli": [], "before": [], "naive": []}
    cpu: dict[str, list[float]] = {"cli": [], "before": [], "naive": []}
    phase_runs: list[dict[str, float]] = []
    before_phases: list[dict[str, float]] = []
    for warm_up in (cli, [python, "-c", "import json"]):  # bytecode caches: every module the command imports
        run_rss(warm_up, src)
        if args.before:
            run_rss(warm_up, str(args.before))
    for _ in range(args.repeat):
        wall, rss, out = run_rss(cli, src)
        runs["cli"].append((wall, rss))
        cpu["cli"].append(LAST_CPU[0])
        assert out.startswith(b'{"assignment":'), out[:100]
        if args.before:
            wall, rss, before = run_rss(cli, str(args.before))
            runs["before"].append((wall, rss))
            cpu["before"].append(LAST_CPU[0])
            assert json.loads(before) == json.loads(out), "the plan differs from the one before"
        wall, rss, _ = run_rss([python, str(naive_py), str(path)], src)
        runs["naive"].append((wall, rss))
        cpu["naive"].append(LAST_CPU[0])
        _, _, out = run_rss([python, str(phases_py), str(path)], src)
        phase_runs.append(json.loads(out))
        if args.before:
            _, _, out = run_rss([python, str(phases_py), str(path)], str(args.before))
            before_phases.append(json.loads(out))
    cli_s = statistics.median(w for w, _ in runs["cli"])
    naive_s = statistics.median(w for w, _ in runs["naive"])
    keys = ("parse", "plan", "output", "parse_request", "rss_mib")
    phase = {k: statistics.median(r[k] for r in phase_runs) for k in keys}
    load = os.getloadavg()[0]
    before = f" --before {args.before}" if args.before else ""
    before += " --instructions" if args.instructions else ""
    before += " --no-libraries" if args.no_libraries else ""
    print(f"command: .venv/bin/python bench/assign_cli_bench.py --partitions {args.partitions} "
          f"--members {args.members} --repeat {args.repeat}{before}")  # fmt: skip
    print(f"python {sys.version.split()[0]}, request {path.stat().st_size / 1e6:.0f} MB, load average {load:.1f} "
          f"on {os.cpu_count()} cores; medians of {args.repeat} alternating runs")  # fmt: skip
    print()
    print("| what | wall (median) | runs | peak RSS |")
    print("|---|---:|---|---:|")

    def row(name: str, measured: list[tuple[float, float]]) -> None:
        walls = ", ".join(f"{w:.2f}" for w, _ in measured)
        rss = statistics.median(r for _, r in measured)
        print(f"| {name} | {statistics.median(w for w, _ in measured):.2f} s | {walls} | {rss:.0f} MiB |")

    row("`apportion assign --input FILE` (JSON in -> JSON out)", runs["cli"])
    if args.before:
        row(f"the same command with the source at {args.before}", runs["before"])
    row("naive greedy sticky behind stdlib json (same file)", runs["naive"])
    print(f"| in process: read + `loads_request` | {phase['parse']:.2f} s | | |")
    print(f"| in process: `plan()` | {phase['plan']:.2f} s | | |")
    print(f"| in process: `dumps_plan` | {phase['output']:.2f} s | | {phase['rss_mib']:.0f} MiB (whole child) |")
    print(f"| in process: `parse_request(json.loads(text))`, the parse alone | {phase['parse_request']:.2f} s | | |")
    before_plan = 0.0
    if args.before:
        old = {k: statistics.median(r[k] for r in before_phases) for k in keys}
        before_plan = old["plan"]
        print(f"| before, in process: read + `loads_request` / `plan()` / `dumps_plan` | {old['parse']:.2f} / "
              f"{old['plan']:.2f} / {old['output']:.2f} s | | |")  # fmt: skip
    print()
    before_ratio = ""
    if args.before:
        before_ratio = f"before / now = {statistics.median(w for w, _ in runs['before']) / cli_s:.2f}x; "
    if not args.no_libraries:
        libraries(path, args.repeat)
        print()
    if args.before:
        before_ratio += f"CLI / the before's plan() = {cli_s / before_plan:.2f}x; "
    print(f"{before_ratio}CLI / plan() = {cli_s / phase['plan']:.2f}x (goal <= 2x); "
          f"naive / CLI = {naive_s / cli_s:.2f}x (goal >= 4x)")  # fmt: skip
    med = {k: statistics.median(v) for k, v in cpu.items() if v}
    before_cpu = ""
    if args.before:
        before_cpu = f", before {med['before']:.2f} s (before / now {med['before'] / med['cli']:.2f}x)"
    print(f"CPU (user + sys of each child, medians): CLI {med['cli']:.2f} s, naive {med['naive']:.2f} s "
          f"(naive / CLI {med['naive'] / med['cli']:.2f}x){before_cpu}")  # fmt: skip
    before_cpu_ratio = f"; before: {med['before'] / before_plan:.2f}x" if args.before else ""
    print(f"CLI / plan() by CPU = {med['cli'] / phase['plan']:.2f}x (the command's CPU {med['cli']:.2f} s, "
          f"plan() {phase['plan']:.3f} s){before_cpu_ratio}")  # fmt: skip
    if args.instructions:
        stages_py = tmp / "stages.py"
        stages_py.write_text(STAGES)
        cli_g, plan_g, ratio = instruction_ratio(python, path, stages_py, src)
        line = f"CLI / plan() by instructions = {ratio:.2f}x (the command {cli_g:.3f} G, plan() {plan_g:.3f} G)"
        if args.before:
            old_cli, old_plan, old_ratio = instruction_ratio(python, path, stages_py, str(args.before))
            line += f"; before: {old_ratio:.2f}x ({old_cli:.3f} G, plan() {old_plan:.3f} G); before / now "
            line += f"{old_cli / cli_g:.2f}x"
        print(line)


if __name__ == "__main__":
    main()
