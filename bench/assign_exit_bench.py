"""How `apportion assign` should end (issue 18 item 1, the exit cost): freeing the request and plan, ``gc.freeze()``
before the interpreter's teardown, or ``os._exit`` with them alive (what ``apportion.cli.run`` does).

Run: .venv/bin/python bench/assign_exit_bench.py --request FILE [--repeat 9]
(FILE: a request, e.g. the one bench/assign_cli_bench.py writes with ``--request FILE``.) Each repeat runs the three
endings in fresh processes, alternating; it reports the medians of each child's wall time and CPU time (user + sys,
from wait4: steadier than wall on a shared machine) and checks that each printed the whole plan.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parent.parent / "src")
ENDINGS = {
    "free, then the interpreter's teardown (`sys.exit(main(argv))`)": (
        "import sys; from apportion.cli import main; sys.exit(main(sys.argv[1:]))"
    ),
    "free, `gc.freeze()`, then the teardown": (
        "import gc, sys; from apportion.cli import main; code = main(sys.argv[1:]); gc.freeze(); sys.exit(code)"
    ),
    "`os._exit` with the request and plan alive (`apportion.cli.run`, what `apportion` runs)": (
        "from apportion.cli import run; run()"
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--request", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPATH": SRC}
    walls: dict[str, list[float]] = {name: [] for name in ENDINGS}
    cpus: dict[str, list[float]] = {name: [] for name in ENDINGS}
    for _ in range(args.repeat):
        for name, code in ENDINGS.items():
            argv = [sys.executable, "-c", code, "assign", "--input", str(args.request)]
            with tempfile.TemporaryFile() as out:
                start = time.perf_counter()
                pid = os.posix_spawn(sys.executable, argv, env, file_actions=[(os.POSIX_SPAWN_DUP2, out.fileno(), 1)])
                _, status, usage = os.wait4(pid, 0)
                walls[name].append(time.perf_counter() - start)
                cpus[name].append(usage.ru_utime + usage.ru_stime)
                out.seek(0)
                text = out.read()
            assert os.waitstatus_to_exitcode(status) == 0 and text.startswith(b'{"assignment":'), name
            assert text.endswith(b"}\n"), f"{name}: the plan was cut short"
    print(f"command: .venv/bin/python bench/assign_exit_bench.py --request FILE --repeat {args.repeat}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; medians of {args.repeat} alternating runs")
    print()
    print("| ending | wall | CPU (user + sys) | CPU vs the first |")
    print("|---|---:|---:|---:|")
    base = statistics.median(next(iter(cpus.values())))
    for name in ENDINGS:
        cpu = statistics.median(cpus[name])
        print(f"| {name} | {statistics.median(walls[name]):.2f} s | {cpu:.2f} s | {cpu / base:.2f}x |")


if __name__ == "__main__":
    main()
