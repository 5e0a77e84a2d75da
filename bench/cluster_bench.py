"""Pipeline throughput on a Spark standalone cluster: 1 vs 2 Spark workers behind the same kind of Connect server,
same data, same run (issue 16: goal >= 1.6x).

For each size a fresh ``StandaloneCluster`` (``workers`` x 1 core, loopback) and a ``ConnectServer`` on it are started
and warmed; then ONE thin `apportion pipeline run --spark sc://...` process on its own group processes the whole log
and exits when idle (``connect_bench.run_worker``: records/s from its first batch to its last batch_done).

    .venv/bin/python bench/cluster_bench.py [--records 400000] [--partitions 4] [--batch-records 20000]

Prints one JSON object. On a 2-core machine the driver (the Connect server), the apportion worker and the executors
share the same two cores: read the ratio with ``cpus`` beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from connect_bench import produce_log, run_worker


def run_on_cluster(work: Path, spark_workers: int, batch_records: int) -> dict[str, Any]:
    from apportion.spark import ConnectServer, StandaloneCluster

    began = time.monotonic()
    with StandaloneCluster(workers=spark_workers, directory=work / f"cluster-{spark_workers}") as cluster, \
            ConnectServer(cluster.url, port=0, log_path=work / f"connect-{spark_workers}.log",
                          config=cluster.executor_config()) as server:  # fmt: skip
        up_s = time.monotonic() - began
        server.check_session()
        result = run_worker(work, f"{spark_workers}-workers", ["--spark", server.url], batch_records)
    return {"spark_workers": spark_workers, "cluster_and_server_up_s": round(up_s, 1), **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch-records", type=int, default=20_000)
    args = parser.parse_args()

    work = produce_log("cluster", args.records, args.partitions)
    one, two = (run_on_cluster(work, n, args.batch_records) for n in (1, 2))
    print(json.dumps({
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "records": args.records,
        "partitions": args.partitions,
        "batch_records": args.batch_records,
        "results": [one, two],
        "throughput_ratio_2_over_1": round(two["records_per_s"] / one["records_per_s"], 2),
        "work_dir": str(work),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
