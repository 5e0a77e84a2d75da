"""Spark Connect bench: a thin worker (`pipeline run --spark sc://...`, shared server already warm) vs a worker with its
own JVM (`--master local[1]`, today's default), same run, same data.

For each mode ONE `apportion pipeline run` process on its own group processes the whole log and exits when idle:
- start → first commit: from spawning the process to its first fenced commit (Spark start-up + warm-up + join);
  a second thin worker ("connect, warmed") runs after the first on the same server, whose warm-up it then skips;
- records/s: records over the span from its first batch to its last batch_done (steady state).

    .venv/bin/python bench/connect_bench.py [--records 400000] [--partitions 4] [--batch-records 20000]

The server (``apportion.spark.ConnectServer``, local[2]) is started and warmed (one session, one query) first.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def run_worker(work: Path, mode: str, engine: list[str], batch_records: int) -> dict[str, Any]:
    from apportion.fleet import Fleet, pipeline_args

    name = mode.replace(", ", "-")
    args = pipeline_args(f"sqlite:///{work / 'store.db'}", f"g-{name}", work / "log", work / f"out-{name}", "r",
                         *engine, "--batch-records", str(batch_records), "--idle", "0.1", "--exit-when-idle", "1",
                         "--settle", "0.2", "--min-interval", "0.4")  # fmt: skip
    with Fleet(work / f"logs-{name}", args) as fleet:
        spawned = time.time()
        worker = fleet.start("w1")
        code = worker.proc.wait(900)
        if code != 0:
            raise SystemExit(f"{mode} worker exited with {code}:\n{worker.tail()}")
        started, commits = worker.of("started"), worker.of("commit")
        batches, done = worker.of("batch"), worker.of("batch_done")
    records = sum(int(e["records"]) for e in done)
    span = float(done[-1]["time"]) - float(batches[0]["time"])
    return {
        "mode": mode,
        "start_to_first_commit_s": round(float(commits[0]["time"]) - spawned, 2),
        "start_to_started_s": round(float(started[0]["time"]) - spawned, 2),
        "started_to_first_commit_s": round(float(commits[0]["time"]) - float(started[0]["time"]), 2),
        "warm_up_s": started[0].get("warm_up_s"),
        "records": records,
        "batches": len(done),
        "records_per_s": round(records / span) if span > 0 else None,
    }


def produce_log(name: str, records: int, partitions: int) -> Path:
    """A fresh work directory whose ``log`` holds ``records`` records of resource ``r`` over ``partitions``."""
    from apportion.log import PartitionedLog, Producer

    work = Path(tempfile.mkdtemp(prefix=f"apportion-bench-{name}-"))
    log = PartitionedLog(work / "log")
    log.create("r", partitions)
    with Producer(log, "r", batch_records=50_000) as producer:
        producer.send_many((f"key-{i % 10_007}", f"v-{i}") for i in range(records))
    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch-records", type=int, default=20_000)
    parser.add_argument("--port", type=int, default=15012)
    args = parser.parse_args()

    from apportion.spark import ConnectServer

    work = produce_log("connect", args.records, args.partitions)
    server = ConnectServer("local[2]", args.port, log_path=work / "server.log")
    began = time.monotonic()
    with server:
        server_start_s = time.monotonic() - began
        first_session_s = server.check_session()
        results = [
            run_worker(work, "local", ["--master", "local[1]"], args.batch_records),
            run_worker(work, "connect", ["--spark", server.url], args.batch_records),
            # a second thin worker: the server has run apportion's warm-up once, so it skips its own (issue 31.2)
            run_worker(work, "connect, warmed", ["--spark", server.url], args.batch_records),
        ]
    local, connect, _ = results
    out = {
        "python": sys.version.split()[0],
        "records": args.records,
        "partitions": args.partitions,
        "batch_records": args.batch_records,
        "server_start_s": round(server_start_s, 2),
        "server_first_session_s": round(first_session_s, 2),
        "results": results,
        "first_commit_speedup": round(local["start_to_first_commit_s"] / connect["start_to_first_commit_s"], 2),
        "throughput_ratio_connect_over_local": round(connect["records_per_s"] / local["records_per_s"], 2),
        "work_dir": str(work),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
