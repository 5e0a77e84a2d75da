"""The pipeline's Kafka reads in Spark, two choices each measured against Spark's default in the same run, alternating.

``--compare group-id`` (default): one Kafka batch's fixed cost, Spark's default group id (a new one per read) against
one fixed ``kafka.group.id`` (``apportion.spark.pipeline._kafka.READER_GROUP_ID``).

Spark's executors keep their Kafka consumers in a pool keyed by (group id, partition): with a new id per read, every
batch opens a new consumer per partition. Each read here is what a pipeline batch does with tiny ranges (so the fixed
cost shows): ``assign`` of ``--partitions`` partitions, ``--records`` records each from explicit start and end offsets,
``sha2`` of the value, a Parquet write. A single-node KRaft broker (tests/kafka_server.py) and the connector's jars
(scripts/ensure-spark-kafka.sh) are started and resolved first; one untimed read of each kind warms the JVM.

    PYTHONPATH=. .venv/bin/python bench/kafka_read_bench.py [--reads 8] [--partitions 8] [--records 50]
        [--master local[1]]

``--compare options``: a backlog's read, the Java consumer's defaults against the pipeline's ``READER_OPTIONS``
(larger fetches and socket buffer), each with its own fixed group id, every read the same ``--records`` per partition
from offset 0 (the broker's page cache warm for both after the untimed reads):

    PYTHONPATH=. .venv/bin/python bench/kafka_read_bench.py --compare options --records 125000 --master 'local[2]'

Prints each kind's median seconds per read and the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--records", type=int, default=50)
    parser.add_argument("--master", default="local[1]")
    parser.add_argument("--compare", choices=["group-id", "options"], default="group-id")
    args = parser.parse_args()

    from tests.kafka_server import KafkaCluster

    from apportion.spark import spark_session
    from apportion.spark.engine import kafka_connector_config
    from apportion.spark.pipeline._kafka import READER_GROUP_ID, READER_OPTIONS  # noqa: TID251 (under test)
    from streaming_bench import TOPIC, kafka_jars, produce_kafka

    step = args.records
    with tempfile.TemporaryDirectory() as work, KafkaCluster.run(Path(work) / "kafka", nodes=1) as kafka:
        # keys spread unevenly over partitions (murmur2): twice what the reads need on average
        windows = 1 if args.compare == "options" else 2 * args.reads + 2
        produce_kafka(kafka.bootstrap, 2 * args.partitions * step * windows, args.partitions)
        spark = spark_session(args.master, "1g", "kafka-read-bench", parallelism=1,
                              config=kafka_connector_config(kafka_jars()))  # fmt: skip
        from pyspark.sql import functions as F

        def read(window: int, group_id: str | None, options: dict[str, str] | None = None) -> float:
            def offsets(at: int) -> str:
                return json.dumps({TOPIC: {str(p): at for p in range(args.partitions)}})

            reader: Any = (
                spark.read.format("kafka")
                .option("kafka.bootstrap.servers", kafka.bootstrap)
                .option("assign", json.dumps({TOPIC: list(range(args.partitions))}))
                .option("startingOffsets", offsets(window * step))
                .option("endingOffsets", offsets(window * step + step))
            )
            if group_id is not None:
                reader = reader.option("kafka.group.id", group_id)
            reader = reader.options(**(options or {}))
            frame = reader.load().select("partition", "offset", F.sha2(F.col("value").cast("string"), 256))
            began = time.perf_counter()
            frame.write.mode("overwrite").parquet(f"{work}/out")
            return time.perf_counter() - began

        if args.compare == "options":
            kinds = {
                "the Java consumer's defaults": lambda n: read(0, "bench-defaults"),
                "READER_OPTIONS": lambda n: read(0, "bench-options", READER_OPTIONS),
            }
        else:
            kinds = {
                "new id per read (Spark's default)": lambda n: read(2 * n, None),
                f"{READER_GROUP_ID!r}": lambda n: read(2 * n + 1, READER_GROUP_ID),
            }
        for run in kinds.values():
            run(0)  # untimed: the first read of each kind is cold
        seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
        for n in range(1, 1 + args.reads):
            order = list(kinds.items()) if n % 2 else list(kinds.items())[::-1]
            for kind, run in order:
                seconds[kind].append(run(n))
        medians = {kind: statistics.median(values) for kind, values in seconds.items()}
        for kind, values in seconds.items():
            print(f"{kind}: median {medians[kind]:.3f} s per read ({', '.join(f'{v:.2f}' for v in values)})")
        default, chosen = medians.values()
        print(f"{args.compare}: apportion's / Spark's default: {chosen / default:.2f}x the time "
              f"({default / chosen:.2f}x the reads per second)")  # fmt: skip


if __name__ == "__main__":
    main()
