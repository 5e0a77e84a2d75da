"""Route benchmark: append N records to the partitioned log with apportion's Spark `route` vs bare
`df.repartition(n, key).write.parquet` (Spark's own hash partitioning + Parquet write, no offsets, no manifest).

Also measures the Python producer path: `partitions_for` keys/s (vectorised THE routing hash).

    .venv/bin/python bench/spark_bench.py [--records 10000000] [--partitions 16]

Prints one JSON object; ratio = bare time / apportion time (>= 0.8 is the target).
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


def _session() -> object:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("apportion-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=16)
    args = parser.parse_args()

    from pyspark.sql import functions as F

    from apportion.log import PartitionedLog
    from apportion.routing import partitions_for
    from apportion.spark import route

    keys = [f"user-{i}" for i in range(1_000_000)]
    started = time.perf_counter()
    partitions_for(keys, args.partitions)
    keys_per_s = len(keys) / (time.perf_counter() - started)

    spark = _session()
    work = Path(tempfile.mkdtemp(prefix="apportion-bench-"))
    try:
        source = str(work / "source.parquet")
        spark.range(args.records).select(  # type: ignore[attr-defined]
            F.concat(F.lit("user-"), (F.col("id") % 1_000_003).cast("string")).alias("k"),
            F.col("id"),
        ).write.parquet(source)
        df = spark.read.parquet(source)  # type: ignore[attr-defined]

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
        spark.stop()  # type: ignore[attr-defined]
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
