"""What etcd pays for watchers (issue 27): one writer of claim-sized transactions (60 owner puts + 60 epoch puts, as a
60-partition claim) on a group prefix, with W watcher processes following that prefix as every member does.

    PYTHONPATH=src:. .venv/bin/python bench/etcd_fanout_bench.py [--watchers 0,32] [--txns 150]

Prints, per watcher count, the writer's transactions/s, p50/p99 latency and the etcd server's CPU seconds for the same
transactions (its ``process_cpu_seconds_total``). The watchers are separate processes (each its own GIL), on the same
machine as etcd: read the figures as "what a fleet on this machine costs the etcd beside it".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from tests.etcd_server import EtcdServer

from apportion.store import Put, connect

_WATCHER = (
    "import sys\n"
    "from apportion.store import connect\n"
    "watch = connect(sys.argv[1]).watch('/apportion/g/')\n"
    "while True:\n"
    "    watch.wait(1.0)\n"
)


def _etcd_cpu_s(client_url: str) -> float:
    for line in httpx.get(client_url + "/metrics").text.splitlines():
        if line.startswith("process_cpu_seconds_total"):
            return float(line.split()[1])
    return float("nan")


def run(watchers: int, txns: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as work, EtcdServer.single("/usr/bin/etcd", Path(work) / "etcd") as server:
        procs = [subprocess.Popen([sys.executable, "-c", _WATCHER, server.url]) for _ in range(watchers)]
        try:
            time.sleep(3)  # the watches are open
            store = connect(server.url)
            cpu0, began, latencies = _etcd_cpu_s(server.client_url), time.monotonic(), []
            for n in range(txns):
                ops = []
                for p in range(n * 60, n * 60 + 60):
                    ops += [Put(f"/apportion/g/owner/{p}", b'{"epoch":1,"member":"w001"}'),
                            Put(f"/apportion/g/epoch/{p}", b"1")]  # fmt: skip
                start = time.monotonic()
                store.txn([], ops)
                latencies.append(time.monotonic() - start)
            elapsed = time.monotonic() - began
            time.sleep(2)  # the events of the last transactions are delivered
            cpu = _etcd_cpu_s(server.client_url) - cpu0
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    latencies.sort()
    return {
        "watchers": watchers,
        "txn_per_s": round(txns / elapsed, 1),
        "p50_ms": round(latencies[len(latencies) // 2] * 1000),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000),
        "etcd_cpu_s": round(cpu, 1),
        "events_delivered": txns * 120 * watchers,
        "load": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watchers", default="0,32", help="comma-separated watcher counts")
    parser.add_argument("--txns", type=int, default=150)
    args = parser.parse_args()
    for watchers in (int(w) for w in args.watchers.split(",")):
        print(json.dumps(run(watchers, args.txns)), flush=True)


if __name__ == "__main__":
    main()
