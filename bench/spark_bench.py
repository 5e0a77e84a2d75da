"""Route benchmark: append N records to the partitioned log with apportion's Spark `route` vs bare
`df.repartition(n, key).write.parquet` (Spark's own hash partitioning + Parquet write, no offsets, no manifest).

Also measures the Python producer path: `partitions_for` keys/s (vectorised THE routing hash).

    .venv/bin/python bench/spark_bench.py [--records 10000000] [--partitions 16]

Prints one JSON object; ratio = bare time / apportion time (>= 0.8 is the target).

Process (``--mode process``): ONE pipeline worker (``apportion.spark.Pipeline``, ``local[1]``, SQLite store) processes
``--process-records`` records of ``--partitions`` partitions in micro-batches of ``--batch-records`` per partition;
prints records/s and, per batch, the fenced commit's time vs the same batch without it (read+transform+collect+write).

    .venv/bin/python bench/spark_bench.py --mode process [--process-records 500000] [--batch-records 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def bench_process(records: int, partitions: int, batch_records: int) -> dict[str, object]:
    """One worker, one Spark session (local[1]), SQLite store: throughput and commit overhead per batch."""
    import uuid

    from apportion.log import PartitionedLog, Producer
    from apportion.spark import Pipeline, joined, spark_session, verify, warm_up
    from apportion.store import connect
    from apportion.worker import Group

    work = Path(tempfile.mkdtemp(prefix="apportion-bench-process-"))
    spark = spark_session("local[1]", "1g", "apportion-bench-process")
    try:
        log = PartitionedLog(work / "log")
        log.create("r", partitions)
        with Producer(log, "r", batch_records=50_000) as producer:
            for first in range(0, records, 100_000):
                producer.send_many((f"key-{i % 10_007}", f"v-{i}") for i in range(first, min(records, first + 100_000)))
        warm_up(spark)
        batches = []
        with connect(f"sqlite:///{work / 'store.db'}") as store:
            group = Group(store, f"bench-{uuid.uuid4().hex[:8]}", partitions=partitions, settle_s=0.2)
            pipeline = Pipeline(spark, log, work / "out", "r", batch_records=batch_records, emit=lambda *a, **k: None)
            with joined(group, "w1", pipeline) as worker:
                if not worker.wait_until_stable(30):
                    raise SystemExit("the worker did not settle")
                started = time.perf_counter()
                while (stats := pipeline.run_once()) is not None:
                    batches.append(stats)
                elapsed = time.perf_counter() - started
            report = verify(store, group.name, log, "r", work / "out")
        if not report.ok or pipeline.records != records:
            raise SystemExit(f"pipeline output is wrong: {report}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    commits = sum(len(b.committed) for b in batches)
    commit_s = sum(b.commit_s for b in batches)
    without_s = sum(b.total_s - b.commit_s for b in batches)
    return {
        "process_records": records,
        "partitions": partitions,
        "batch_records_per_partition": batch_records,
        "batches": len(batches),
        "records_per_s": round(records / elapsed),
        "batch_ms_without_commit": round(1000 * without_s / len(batches), 1),
        "commit_ms_per_batch": round(1000 * commit_s / len(batches), 2),
        "commit_ms_per_partition": round(1000 * commit_s / commits, 2),
        "commit_overhead_pct": round(100 * commit_s / without_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--mode", choices=["route", "process", "all"], default="all")
    parser.add_argument("--process-records", type=int, default=500_000)
    parser.add_argument("--batch-records", type=int, default=20_000)
    args = parser.parse_args()
    if args.mode in ("process", "all"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        print(json.dumps(bench_process(args.process_records, args.partitions, args.batch_records)))
    if args.mode == "process":
        return

    from pyspark.sql import functions as F

    from apportion.log import PartitionedLog
    from apportion.routing import partitions_for
    from apportion.spark import route

    keys = [f"user-{i}" for i in range(1_000_000)]
    started = time.perf_counter()
    partitions_for(keys, args.partitions)
    keys_per_s = len(keys) / (time.perf_counter() - started)

    from apportion.spark import spark_session

    spark = spark_session("local[2]", "2g", "apportion-bench", parallelism=2)
    work = Path(tempfile.mkdtemp(prefix="apportion-bench-"))
    try:
        source = str(work / "source.parquet")
        spark.range(args.records).select(
            F.concat(F.lit("user-"), (F.col("id") % 1_000_003).cast("string")).alias("k"),
            F.col("id"),
        ).write.parquet(source)
        df = spark.read.parquet(source)

        started = time.perf_counter()
        df.repartition(args.partitions, "k").write.parquet(str(work / "bare"))
        bare_s = time.perf_counter() - started

        log = PartitionedLog(work / "log")
        log.create("bench", args.partitions)
        started = time.perf_counter()
        result = route(df, "k", log, "bench", value_col="id")
        route_s = time.perf_counter() - started
        if result.records != args.records:
            raise SystemExit(f"route appended {result.records} records, expected {args.records}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(
        json.dumps(
            {
                "records": args.records,
                "partitions": args.partitions,
                "bare_repartition_write_s": round(bare_s, 2),
                "apportion_route_s": round(route_s, 2),
                "ratio_bare_over_route": round(bare_s / route_s, 2),
                "segments": len(result.appended),
                "partitions_for_keys_per_s": round(keys_per_s),
            }
        )
    )


if __name__ == "__main__":
    main()
