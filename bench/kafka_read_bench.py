"""One Kafka batch's fixed cost in Spark: the pipeline's batch read with Spark's default group id (a new one per read)
against one fixed ``kafka.group.id`` (``apportion.spark.pipeline._kafka.READER_GROUP_ID``), same run, alternating.

Spark's executors keep their Kafka consumers in a pool keyed by (group id, partition): with a new id per read, every
batch opens a new consumer per partition. Each read here is what a pipeline batch does with tiny ranges (so the fixed
cost shows): ``assign`` of ``--partitions`` partitions, ``--records`` records each from explicit start and end offsets,
``sha2`` of the value, a Parquet write. A single-node KRaft broker (tests/kafka_server.py) and the connector's jars
(scripts/ensure-spark-kafka.sh) are started and resolved first; one untimed read of each kind warms the JVM.

    PYTHONPATH=. .venv/bin/python bench/kafka_read_bench.py [--reads 8] [--partitions 8] [--records 50]
        [--master local[1]]

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
    args = parser.parse_args()

    from tests.kafka_server import KafkaCluster

    from apportion.spark import spark_session
    from apportion.spark.engine import kafka_connector_config
    from apportion.spark.pipeline._kafka import READER_GROUP_ID  # noqa: TID251 (the constant under test)
    from streaming_bench import TOPIC, kafka_jars, produce_kafka

    step = args.records
    with tempfile.TemporaryDirectory() as work, KafkaCluster.run(Path(work) / "kafka", nodes=1) as kafka:
        # keys spread unevenly over partitions (murmur2): twice what the reads need on average
        produce_kafka(kafka.bootstrap, 2 * args.partitions * step * (2 * args.reads + 2), args.partitions)
        spark = spark_session(args.master, "1g", "kafka-read-bench", parallelism=1,
                              config=kafka_connector_config(kafka_jars()))  # fmt: skip
        from pyspark.sql import functions as F

        def read(window: int, group_id: str | None) -> float:
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
            frame = reader.load().select("partition", "offset", F.sha2(F.col("value").cast("string"), 256))
            began = time.perf_counter()
            frame.write.mode("overwrite").parquet(f"{work}/out")
            return time.perf_counter() - began

        read(0, None)
        read(1, READER_GROUP_ID)
        seconds: dict[str, list[float]] = {"new id per read (Spark's default)": [], f"{READER_GROUP_ID!r}": []}
        for window in range(2, 2 + 2 * args.reads, 2):
            seconds["new id per read (Spark's default)"].append(read(window, None))
            seconds[f"{READER_GROUP_ID!r}"].append(read(window + 1, READER_GROUP_ID))
        medians = {kind: statistics.median(values) for kind, values in seconds.items()}
        for kind, values in seconds.items():
            print(f"{kind}: median {medians[kind]:.3f} s per read ({', '.join(f'{v:.2f}' for v in values)})")
        default, fixed = medians.values()
        print(f"fixed id / default: {fixed / default:.2f}x the time ({default / fixed:.2f}x the reads per second)")


if __name__ == "__main__":
    main()
