"""`make bench`: run every benchmark script in bench/ one after the other and print each table.

Each script prints its own table and the command that produced it; copy them into bench/README.md.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    "assign_bench.py",
    "check_bench.py",
    "assign_cli_bench.py",
    "hash_bench.py",
    "store_bench.py",
    "router_bench.py",
    "dashboard_bench.py",
    "status_bench.py",
    "protocol_bench.py",
    "scale_bench.py",
    "spark_bench.py",
    "stateful_bench.py",
]


def main() -> int:
    failed = []
    for name in SCRIPTS:
        script = HERE / name
        if not script.exists():
            continue
        print(f"\n=== {name} ===", flush=True)
        if subprocess.run([sys.executable, str(script)], check=False).returncode != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
