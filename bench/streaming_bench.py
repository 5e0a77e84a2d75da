"""apportion's pipeline vs Spark Structured Streaming on the same log, alternating, same run (issue 31 item 1).

The input is produced once by ``apportion pipeline produce`` (``--records`` in ``--partitions``). Each run launches
one process per side and engine and times it from the spawn (JVM or Connect session start included) to its last
output committed:

- ``apportion``: ``apportion pipeline run`` (one worker, SQLite store, fresh group and output), until its last
  ``batch_done``; the default transform (``partition, offset, key, value, sha2(value)``);
- ``streaming``: a Structured Streaming query, file source over the log's segments, the same columns (the partition
  from the file's directory, ``sha2(value, 256)``), Parquet sink, ``Trigger.AvailableNow``, until it ends.

Engines: ``local`` (each process its own JVM, ``local[1]``) and ``connect`` (both through one shared Spark Connect
server, ``local[2]``, warmed by one untimed run of each side). The sides alternate (their order flips every run),
so both see the same load; the ratio apportion / Structured Streaming is taken within each run, and the median ratio
is reported.

``--stateful``: both sides also keep a running aggregate per key (count and characters of value): apportion with
``--state-dir`` (each partition's state in a local SQLite file, every batch's new values appended to the fenced
changelog: ``apportion pipeline run``'s stateful partitions), Structured Streaming with its stateful aggregation
(``groupBy(partition, key).agg(count, sum(length(value)))``, the HDFS-backed state store, update mode, each
batch's updated aggregates appended as Parquet by ``foreachBatch``). apportion still writes every record's row
(``sha2``) besides its state; Structured Streaming writes only the aggregates. Checked: apportion's output as above
and its state rebuilt from the changelog (``verify_state``); Structured Streaming's last aggregate of every key equal
to a one-pass aggregate of the log.

``--source kafka``: the same records in a Kafka topic (``--partitions`` partitions, keyed ``key-<n>``) on a
single-node KRaft broker the bench starts (tests/kafka_server.py; or ``--bootstrap`` an existing one), read by both
sides: apportion with ``pipeline run --kafka B --topic T`` (Spark's Kafka source, a batch read of each owned
partition's offset range per micro-batch), Structured Streaming with ``readStream.format("kafka")`` from the earliest
offsets; the same columns, transform and Parquet sink, ``Trigger.AvailableNow``. Both engines carry Spark's Kafka
connector from ``scripts/ensure-spark-kafka.sh`` (``APPORTION_KAFKA_JARS``).

``--rate R --duration S`` (with ``--source kafka``): end-to-end latency at a steady rate instead of throughput. Each run
and side gets a new topic; the side starts on it empty (apportion: ``pipeline run --kafka`` until it owns every
partition; Structured Streaming: ``readStream`` with its default trigger, a micro-batch as soon as the last one ends,
until its first progress), then the bench produces ``R`` records/s for ``S`` s (ticks of 10 ms) and waits for the last
one to be committed. A record's latency is from its Kafka timestamp (the producer's clock when it was produced) to
the moment its output was committed: apportion's ``commit`` event of the range holding it (the checkpoint written, the
output visible to ``read_committed``), Structured Streaming's file sink log entry of the batch holding it (the
``_spark_metadata`` file's mtime: the batch visible to readers; its end offsets from the checkpoint's ``offsets``
log). The first quarter of the run (at most 10 s) is left out on both sides (cold JVM code), and p50/p99/max of the
rest reported; both sides run with the producer on the same 2 cores.

Every run is checked before it counts: every input record is in the output, no (partition, offset) twice, and the
per-key offset order is kept in the committed output's checkpoint order (apportion: a run that breaks it fails).
Structured Streaming promises no order: its file sink writes a file per task, whose rows come in the order of the
files its task was given (Spark packs them by size), so the bench reports whether each of its files happened to keep
per-key order (``order_kept``) rather than failing the run.

    PYTHONPATH=src .venv/bin/python bench/streaming_bench.py [--records 2000000] [--partitions 8] [--runs 3]
        [--engines local,connect] [--batch-records N (default: none, the pipeline's adaptive size)] [--stateful]
        [--source log|kafka [--bootstrap HOST:PORT] [--rate 20000 --duration 60]]

Prints a Markdown table (and ``--json FILE`` writes every run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

RESOURCE = "r"
TOPIC = "bench"
ROOT = Path(__file__).resolve().parent.parent


def kafka_jars() -> str:
    """Spark's Kafka connector for both engines (scripts/ensure-spark-kafka.sh: Maven, once)."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "ensure-spark-kafka.sh")], check=True, capture_output=True,
                          text=True)  # fmt: skip
    return Path(done.stdout.strip().splitlines()[-1]).read_text().strip()


def produce_kafka(bootstrap: str, records: int, partitions: int, keys: int = 1000) -> None:
    """``records`` keyed records into a new topic of ``partitions`` partitions (idempotent producer)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, partitions, 1)]).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "batch.size": 1_000_000, "partitioner": "murmur2_random"})  # fmt: skip
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, key=f"key-{i % keys}", value=f"v-{i}-{i * 7919 % 1000003:07d}")
                break
            except BufferError:
                producer.poll(0.1)
        if i % 50_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit("the producer could not deliver every record")


def produce(work: Path, records: int, partitions: int) -> None:
    subprocess.run(
        [sys.executable, "-m", "apportion.cli", "pipeline", "produce", "--input", str(work / "log"), "--resource",
         RESOURCE, "--partitions", str(partitions), "--records", str(records)],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip


def check(table: pa.Table, records: int, order_chunks: list[pa.Table]) -> str | None:
    """None when ``table`` holds every record once and each chunk of ``order_chunks`` keeps per-key offset order."""
    if table.num_rows != records:
        return f"{table.num_rows:,} records out of {records:,}"
    ids = table.column("partition").to_numpy().astype(np.int64) << 40 | table.column("offset").to_numpy()
    if len(np.unique(ids)) != records:
        return f"{records - len(np.unique(ids)):,} duplicates"
    for chunk in order_chunks:
        p = chunk.column("partition").to_numpy().astype(np.int64)
        key = pa.compute.dictionary_encode(chunk.column("key")).combine_chunks().indices.to_numpy().astype(np.int64)
        offset = chunk.column("offset").to_numpy()
        order = np.lexsort((np.arange(len(p)), key, p))  # stable: by (partition, key), then position
        same = (p[order][1:] == p[order][:-1]) & (key[order][1:] == key[order][:-1])
        if np.any(same & (offset[order][1:] <= offset[order][:-1])):
            return "per-key order broken"
    return None


def run_apportion(
    work: Path,
    run: str,
    engine: list[str],
    batch_records: int | None,
    src: Path | None = None,
    stateful: bool = False,
    bootstrap: str | None = None,
) -> dict[str, Any]:
    from apportion.fleet import Fleet, pipeline_args
    from apportion.spark import read_committed_arrow
    from apportion.store import connect

    store = work / f"store-{run}.db"
    out = work / f"out-{run}"
    size = [] if batch_records is None else ["--batch-records", str(batch_records)]  # none: the default, adaptive
    state = ["--state-dir", str(work / f"state-{run}")] if stateful else []
    timings = ["--idle", "0.1", "--exit-when-idle", "1", "--settle", "0.2", "--min-interval", "0.4"]
    if bootstrap is None:
        args = pipeline_args(f"sqlite:///{store}", "g", work / "log", out, RESOURCE, *engine, *size, *state, *timings)
    else:
        args = [sys.executable, "-m", "apportion.cli", "pipeline", "run", "--store", f"sqlite:///{store}",
                "--group", "g", "--kafka", bootstrap, "--topic", TOPIC, "--output", str(out), *engine, *size,
                *timings]  # fmt: skip
    env = None if src is None else {"PYTHONPATH": str(src)}
    with Fleet(work / f"logs-{run}", args, env=env) as fleet:
        spawned = time.time()
        worker = fleet.start("w1")
        code = worker.proc.wait(1800)
        if code != 0:
            raise SystemExit(f"apportion {run} exited with {code}:\n{worker.tail()}")
        done, started = worker.of("batch_done"), worker.of("started")
    with connect(f"sqlite:///{store}") as client:
        table = read_committed_arrow(client, "g", out, RESOURCE if bootstrap is None else TOPIC)
        if stateful:
            from apportion.log import PartitionedLog
            from apportion.spark import verify_state

            report = verify_state(client, "g", PartitionedLog(work / "log"), RESOURCE)
            if not report.ok:
                raise SystemExit(f"apportion {run}: state differs from the input's aggregate: {report.to_json()}")
    return {
        "seconds": float(done[-1]["time"]) - spawned,
        "batches": len(done),
        "warm_up_s": started[0].get("warm_up_s"),
        "started_s": float(started[0]["time"]) - spawned,  # the worker's start: Python, the engine, its warm-up
        "first_batch_s": float(worker.of("batch")[0]["time"]) - spawned,  # from the spawn to the first batch's start
        "table": table,
        "chunks": [table],
    }


STREAMING_CHILD = r"""
import json, sys, time
from apportion.spark import spark_session
from pyspark.sql import functions as F
master, log, out = sys.argv[1:4]
spark = spark_session(master, "1g", "streaming-bench")
df = spark.readStream.schema("offset long, key string, value string, ts_ms long").parquet(log + "/*/*.parquet")
partition = F.regexp_extract(F.col("_metadata.file_path"), r"/(\d+)/[^/]+$", 1).cast("int")
df = df.select(partition.alias("partition"), "offset", "key", "value", F.sha2(F.col("value"), 256).alias("digest"))
query = (df.writeStream.format("parquet").option("checkpointLocation", out + "/_checkpoint")
         .trigger(availableNow=True).start(out + "/data"))
query.awaitTermination()
print(json.dumps({"ended": time.time()}))
"""


KAFKA_CHILD = r"""
import json, sys, time
from apportion.spark import spark_session
from apportion.spark.engine import kafka_connector_config
from pyspark.sql import functions as F
master, bootstrap, out = sys.argv[1:4]
spark = spark_session(master, "1g", "streaming-bench", config=kafka_connector_config())
df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "bench")
      .option("startingOffsets", "earliest").load())
df = df.select(F.col("partition").cast("int").alias("partition"), "offset", F.col("key").cast("string").alias("key"),
               F.col("value").cast("string").alias("value"))
df = df.select("partition", "offset", "key", "value", F.sha2(F.col("value"), 256).alias("digest"))
query = (df.writeStream.format("parquet").option("checkpointLocation", out + "/_checkpoint")
         .trigger(availableNow=True).start(out + "/data"))
query.awaitTermination()
print(json.dumps({"ended": time.time()}))
"""


STATEFUL_CHILD = r"""
import json, sys, time
from apportion.spark import spark_session
from pyspark.sql import functions as F
master, log, out = sys.argv[1:4]
spark = spark_session(master, "1g", "streaming-bench")
df = spark.readStream.schema("offset long, key string, value string, ts_ms long").parquet(log + "/*/*.parquet")
partition = F.regexp_extract(F.col("_metadata.file_path"), r"/(\d+)/[^/]+$", 1).cast("int")
aggregate = df.groupBy(partition.alias("partition"), "key").agg(
    F.count(F.lit(1)).alias("count"), F.sum(F.length("value")).alias("total"))
def append(batch, batch_id):
    batch.withColumn("batch", F.lit(batch_id)).write.mode("append").parquet(out + "/data")
query = (aggregate.writeStream.outputMode("update").foreachBatch(append)
         .option("checkpointLocation", out + "/_checkpoint").trigger(availableNow=True).start())
query.awaitTermination()
print(json.dumps({"ended": time.time()}))
"""


def reference_aggregate(work: Path) -> dict[tuple[int, str], tuple[int, int]]:
    """(partition, key) -> (count, characters of value) of the whole log, in one pass."""
    from apportion.log import PartitionedLog
    from apportion.spark.state import fold

    log = PartitionedLog(work / "log")
    return {
        (p, key): (a.count, a.total)
        for p in range(log.partitions(RESOURCE))
        for key, a in fold(log.read(RESOURCE, p, 0, None)).items()
    }


def check_aggregate(table: pa.Table, reference: dict[tuple[int, str], tuple[int, int]]) -> str | None:
    """None when the last aggregate of every (partition, key) in ``table`` equals ``reference``'s."""
    last: dict[tuple[int, str], tuple[int, int, int]] = {}
    columns = (table.column(c).to_pylist() for c in ("partition", "key", "count", "total", "batch"))
    for p, key, count, total, batch in zip(*columns, strict=True):
        if (p, key) not in last or batch >= last[(p, key)][0]:
            last[(p, key)] = (batch, count, total)
    got = {k: (v[1], v[2]) for k, v in last.items()}
    wrong = sum(1 for k in reference.keys() | got.keys() if reference.get(k) != got.get(k))
    return None if wrong == 0 else f"{wrong:,} keys' aggregates differ from the log's"


def run_streaming(
    work: Path, run: str, master: str, stateful: bool = False, bootstrap: str | None = None
) -> dict[str, Any]:
    out = work / f"out-{run}"
    spawned = time.time()
    child = KAFKA_CHILD if bootstrap is not None else STATEFUL_CHILD if stateful else STREAMING_CHILD
    proc = subprocess.run(
        [sys.executable, "-c", child, master, bootstrap or str(work / "log" / RESOURCE), str(out)],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"streaming {run} exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    ended = json.loads(proc.stdout.strip().splitlines()[-1])["ended"]
    if stateful:
        table = pq.read_table(out / "data")
        return {"seconds": ended - spawned, "table": table, "chunks": [], "aggregates": table.num_rows}
    files = sorted((out / "data").glob("*.parquet"))
    chunks = [pq.read_table(f) for f in files]
    return {"seconds": ended - spawned, "table": pa.concat_tables(chunks), "chunks": chunks}


STEADY_CHILD = r"""
import json, sys, time
from apportion.spark import spark_session
from apportion.spark.engine import kafka_connector_config
from pyspark.sql import functions as F
master, bootstrap, topic, out = sys.argv[1:5]
spark = spark_session(master, "1g", "streaming-bench", config=kafka_connector_config())
df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
      .option("startingOffsets", "earliest").load())
df = df.select(F.col("partition").cast("int").alias("partition"), "offset", F.col("key").cast("string").alias("key"),
               F.col("value").cast("string").alias("value"))
df = df.select("partition", "offset", "key", "value", F.sha2(F.col("value"), 256).alias("digest"))
query = df.writeStream.format("parquet").option("checkpointLocation", out + "/_checkpoint").start(out + "/data")
while query.lastProgress is None:
    time.sleep(0.05)
print("ready", flush=True)
sys.stdin.readline()  # the bench says when every record is committed
query.stop()
"""


def produce_steady(bootstrap: str, topic: str, rate: int, duration_s: float, keys: int = 1000) -> int:
    """``rate`` records/s into ``topic`` for ``duration_s`` s, in ticks of 10 ms (each record's Kafka timestamp is the
    moment it was produced); returns how many."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "partitioner": "murmur2_random"})  # fmt: skip
    began = time.monotonic()
    sent = 0
    while (now := time.monotonic() - began) < duration_s:
        due = min(int(now * rate), int(duration_s * rate))
        for i in range(sent, due):
            producer.produce(topic, key=f"key-{i % keys}", value=f"v-{i}-{i * 7919 % 1000003:07d}")
        sent = due
        producer.poll(0)
        time.sleep(0.01)
    if producer.flush(120) != 0:
        raise SystemExit("the producer could not deliver every record")
    return sent


def record_times(bootstrap: str, topic: str, partitions: int) -> dict[int, np.ndarray]:
    """Each partition's records' Kafka timestamps (s), indexed by offset."""
    from confluent_kafka import Consumer, TopicPartition

    from apportion.kafka import KafkaConfig
    from apportion.spark.pipeline._kafka import KafkaSource  # noqa: TID251 (its offsets call)

    _, latest = KafkaSource(KafkaConfig(bootstrap))._offsets(topic, range(partitions))
    times = {p: np.zeros(latest[p]) for p in range(partitions)}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-times", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if latest[p] > 0])
    left = sum(latest.values())
    while left:
        for message in consumer.consume(10_000, timeout=1.0):
            p, offset = message.partition(), message.offset()
            if message.error() is None and p is not None and offset is not None:
                times[p][offset] = message.timestamp()[1] / 1000
                left -= 1
    consumer.close()
    return times


def latencies(commits: dict[int, list[tuple[float, int]]], times: dict[int, np.ndarray], since: float) -> np.ndarray:
    """Every record's latency (s) produced at or after ``since``: ``commits[p]`` is ``(when, end offset)`` in order."""
    found = []
    for p, stamps in times.items():
        start = 0
        for when, end in sorted(commits.get(p, []), key=lambda c: c[1]):
            chunk = stamps[start:end]
            found.append(when - chunk[chunk >= since])
            start = max(start, end)
        if start < len(stamps):
            raise SystemExit(f"partition {p}: offsets {start}..{len(stamps) - 1} were never committed")
    return np.concatenate(found)


def steady_apportion(work: Path, run: str, engine: list[str], bootstrap: str, topic: str, args: argparse.Namespace,
                     partitions: int) -> tuple[int, dict[int, list[tuple[float, int]]]]:  # fmt: skip
    from apportion.fleet import Fleet, kafka_pipeline_args
    from apportion.waiting import wait_for

    cli = kafka_pipeline_args(f"sqlite:///{work / f'store-{run}.db'}", "g", bootstrap, [topic], work / f"out-{run}",
                              *engine, "--idle", "0.1", "--settle", "0.2", "--min-interval", "0.4")  # fmt: skip
    with Fleet(work / f"logs-{run}", cli) as fleet:
        worker = fleet.start("w1")
        wait_for("the worker to own every partition", lambda: len(worker.applied()) == partitions, 600,
                 alive=lambda: fleet.check(["w1"]), context=worker.tail)  # fmt: skip
        produced = produce_steady(bootstrap, topic, args.rate, args.duration)

        def ends() -> dict[int, int]:
            return {int(c["partition"]): int(c["offset"]) for c in worker.of("commit")}

        wait_for("every record committed", lambda: sum(ends().values()) >= produced, 600,
                 alive=lambda: fleet.check(["w1"]), context=worker.tail)  # fmt: skip
        fleet.stop_all(60)
    commits: dict[int, list[tuple[float, int]]] = {}
    for c in worker.of("commit"):
        commits.setdefault(int(c["partition"]), []).append((float(c["time"]), int(c["offset"])))
    return produced, commits


def steady_streaming(work: Path, run: str, master: str, bootstrap: str, topic: str, args: argparse.Namespace,
                     partitions: int) -> tuple[int, dict[int, list[tuple[float, int]]]]:  # fmt: skip
    from apportion.waiting import wait_for

    out = work / f"out-{run}"
    command = [sys.executable, "-c", STEADY_CHILD, master, bootstrap, topic, str(out)]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}
    child = subprocess.Popen(command, text=True, **pipes)  # type: ignore[call-overload]
    try:
        assert child.stdout is not None and child.stdin is not None
        if child.stdout.readline().strip() != "ready":
            raise SystemExit(f"streaming {run} did not start (exit {child.wait()})")
        produced = produce_steady(bootstrap, topic, args.rate, args.duration)

        def batches() -> dict[int, tuple[float, dict[int, int]]]:
            """Committed batches: id -> (when its sink log entry was written, end offsets by partition)."""
            found = {}
            for entry in (out / "data" / "_spark_metadata").glob("[0-9]*"):
                batch = int(entry.name.split(".")[0])
                offsets = out / "_checkpoint" / "offsets" / str(batch)
                if offsets.is_file():
                    ends = json.loads(offsets.read_text().splitlines()[2])[topic]
                    found[batch] = (entry.stat().st_mtime, {int(p): int(o) for p, o in ends.items()})
            return found

        wait_for("every record committed", lambda: sum(max(batches().items())[1][1].values()) >= produced
                 if batches() else False, 600)  # fmt: skip
        child.stdin.write("stop\n")
        child.stdin.flush()
        child.wait(120)
    finally:
        child.kill()
    commits: dict[int, list[tuple[float, int]]] = {}
    for _, (when, ends) in sorted(batches().items()):
        for p, end in ends.items():
            commits.setdefault(p, []).append((when, end))
    return produced, commits


def steady(args: argparse.Namespace, engines: list[str], work: Path, bootstrap: str) -> None:
    """The steady-rate latency runs (module docstring)."""
    from apportion.kafka import KafkaConfig, create_topic

    server = None
    if "connect" in engines:
        from apportion.spark import ConnectServer
        from apportion.spark.engine import kafka_connector_config

        server = ConnectServer("local[2]", args.port, log_path=work / "server.log", config=kafka_connector_config())
        server.__enter__()
        server.check_session()
        # untimed, as for throughput: the first jobs of each kind on a fresh server are cold, whichever side ran first
        warm = argparse.Namespace(**{**vars(args), "duration": min(args.duration, 10.0)})
        for name in ("steady-warm-a", "steady-warm-s"):
            create_topic(KafkaConfig(bootstrap), name, args.partitions)
        thin = ["--spark", server.url]
        steady_apportion(work, "steady-warm-a", thin, bootstrap, "steady-warm-a", warm, args.partitions)
        steady_streaming(work, "steady-warm-s", server.url, bootstrap, "steady-warm-s", warm, args.partitions)
    skip = min(10.0, args.duration / 4)
    rows: list[dict[str, Any]] = []
    try:
        for n in range(args.runs):
            for engine in engines:
                sides = ["apportion", "streaming"] if n % 2 == 0 else ["streaming", "apportion"]
                for side in sides:
                    run = f"steady-{side}-{engine}-{n}"
                    topic = f"steady-{side}-{engine}-{n}"
                    create_topic(KafkaConfig(bootstrap), topic, args.partitions)
                    load = os.getloadavg()[0]
                    began = time.time()
                    if side == "apportion":
                        spec = ["--master", "local[1]"] if engine == "local" else ["--spark", server.url]  # type: ignore[union-attr]
                        produced, commits = steady_apportion(work, run, spec, bootstrap, topic, args, args.partitions)
                    else:
                        master = "local[1]" if engine == "local" else server.url  # type: ignore[union-attr]
                        produced, commits = steady_streaming(work, run, master, bootstrap, topic, args, args.partitions)
                    times = record_times(bootstrap, topic, args.partitions)
                    first = min(float(t[0]) for t in times.values() if len(t))
                    lat = latencies(commits, times, first + skip)
                    row = {"run": n, "engine": engine, "side": side, "load": round(load, 2), "produced": produced,
                           "measured": int(lat.size), "p50_s": round(float(np.percentile(lat, 50)), 3),
                           "p99_s": round(float(np.percentile(lat, 99)), 3), "max_s": round(float(lat.max()), 3),
                           "seconds": round(time.time() - began, 1)}  # fmt: skip
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
                    shutil.rmtree(work / f"out-{run}", ignore_errors=True)
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    print(f"{args.rate:,} records/s for {args.duration:g} s into {args.partitions} partitions (kafka), latency from "
          f"produce to committed output, the first {skip:g} s left out, {args.runs} alternating runs; load average "
          f"{min(r['load'] for r in rows)}-{max(r['load'] for r in rows)} on 2 cores\n")  # fmt: skip
    print("| engine | side | p50 s (median) | p99 s (median) | p99 per run | max s (median) |\n"
          "|---|---|---:|---:|---|---:|")  # fmt: skip
    for engine in engines:
        for side in ("apportion", "streaming"):
            mine = [r for r in rows if r["engine"] == engine and r["side"] == side]
            p99s = ", ".join(f"{r['p99_s']:.2f}" for r in mine)
            print(f"| {engine} | {side} | {statistics.median(r['p50_s'] for r in mine):.2f} | "
                  f"{statistics.median(r['p99_s'] for r in mine):.2f} | {p99s} | "
                  f"{statistics.median(r['max_s'] for r in mine):.2f} |")  # fmt: skip
        a = {r["run"]: r["p99_s"] for r in rows if r["engine"] == engine and r["side"] == "apportion"}
        st = {r["run"]: r["p99_s"] for r in rows if r["engine"] == engine and r["side"] == "streaming"}
        ratios = [a[n] / st[n] for n in sorted(a)]
        print(f"| {engine} | p99 apportion / SS | | **{statistics.median(ratios):.2f}x** | "
              f"{', '.join(f'{x:.2f}x' for x in ratios)} | |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engines", default="local,connect")
    parser.add_argument("--batch-records", type=int, default=None, help="Fixed (default: the pipeline's, adaptive).")
    parser.add_argument("--port", type=int, default=15031)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--against", default=None, help="Also run apportion at this commit (side 'before').")
    parser.add_argument("--stateful", action="store_true", help="Both sides keep a running aggregate per key.")
    parser.add_argument("--source", choices=["log", "kafka"], default="log", help="The input both sides read.")
    parser.add_argument(
        "--bootstrap", default=None, help="With --source kafka: a broker to use (default: one started)."
    )
    parser.add_argument(
        "--rate", type=int, default=None, help="With --source kafka: records/s (latency, not throughput)."
    )
    parser.add_argument("--duration", type=float, default=60.0, help="With --rate: seconds of producing.")
    args = parser.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if args.source == "kafka" and (args.stateful or args.against):
        raise SystemExit("--source kafka: neither --stateful nor --against (the pipeline on Kafka is not stateful)")
    if args.rate is not None and (args.source != "kafka" or args.rate < 1 or args.duration <= 0):
        raise SystemExit("--rate: with --source kafka, a rate >= 1 and a --duration > 0")

    work = Path(tempfile.mkdtemp(prefix="apportion-streaming-bench-"))
    with contextlib.ExitStack() as stack:
        bootstrap = None
        if args.source == "kafka":
            os.environ["APPORTION_KAFKA_JARS"] = kafka_jars()
            bootstrap = args.bootstrap
            if bootstrap is None:
                sys.path.insert(0, str(ROOT))
                from tests.kafka_server import KafkaCluster

                bootstrap = stack.enter_context(KafkaCluster.run(work / "kafka", nodes=1)).bootstrap
            if args.rate is not None:
                steady(args, engines, work, bootstrap)
                return
            started = time.monotonic()
            produce_kafka(bootstrap, args.records, args.partitions)
            print(f"produced {args.records:,} records in {time.monotonic() - started:.1f} s", file=sys.stderr)
        else:
            produce(work, args.records, args.partitions)
        bench(args, engines, work, bootstrap)


def bench(args: argparse.Namespace, engines: list[str], work: Path, bootstrap: str | None) -> None:
    reference = reference_aggregate(work) if args.stateful else {}
    before = None
    if args.against is not None:
        before = work / "before"
        before.mkdir()
        archive = subprocess.run(["git", "archive", args.against, "src"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
        before = before / "src"
    server = None
    if "connect" in engines:
        from apportion.spark import ConnectServer
        from apportion.spark.engine import kafka_connector_config

        config = None if bootstrap is None else kafka_connector_config()
        server = ConnectServer("local[2]", args.port, log_path=work / "server.log", config=config)
        server.__enter__()
        server.check_session()
        # untimed: the first job of each kind on a fresh server is cold, whichever side would run it first
        run_apportion(work, "warm-a", ["--spark", server.url], args.batch_records, stateful=args.stateful,
                      bootstrap=bootstrap)  # fmt: skip
        run_streaming(work, "warm-s", server.url, args.stateful, bootstrap)
    rows: list[dict[str, Any]] = []
    try:
        for n in range(args.runs):
            for engine in engines:
                sides = ["apportion", "streaming", *(["before"] if before else [])]
                sides = sides if n % 2 == 0 else sides[::-1]
                for side in sides:
                    run = f"{side}-{engine}-{n}"
                    load = os.getloadavg()[0]
                    if side != "streaming":
                        spec = ["--master", "local[1]"] if engine == "local" else ["--spark", server.url]  # type: ignore[union-attr]
                        src = before if side == "before" else None
                        result = run_apportion(work, run, spec, args.batch_records, src, args.stateful, bootstrap)
                    else:
                        master = "local[1]" if engine == "local" else server.url  # type: ignore[union-attr]
                        result = run_streaming(work, run, master, args.stateful, bootstrap)
                    table, chunks = result.pop("table"), result.pop("chunks")
                    if side == "streaming" and args.stateful:
                        problem = check_aggregate(table, reference)
                    else:
                        problem = check(table, args.records, [])
                    if problem is not None:
                        raise SystemExit(f"{run}: {problem}")
                    order = None if side == "streaming" and args.stateful else check(table, args.records, chunks)
                    if order is not None and side != "streaming":
                        raise SystemExit(f"{run}: {order}")
                    result["order_kept"] = order is None
                    shutil.rmtree(work / f"out-{run}", ignore_errors=True)
                    row = {"run": n, "engine": engine, "side": side, "load": round(load, 2), **result,
                           "records_per_s": round(args.records / result["seconds"])}  # fmt: skip
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    size = "adaptive" if args.batch_records is None else f"{args.batch_records:,}"
    print(f"{args.records:,} records in {args.partitions} partitions ({args.source}), --batch-records {size}, "
          f"{'stateful (a running aggregate per key), ' if args.stateful else ''}"
          f"{args.runs} alternating runs; load average {min(r['load'] for r in rows)}-{max(r['load'] for r in rows)}"
          " on 2 cores\n")  # fmt: skip
    print("| engine | apportion records/s (median) | Structured Streaming records/s (median) | apportion / SS per run "
          "| median ratio |\n|---|---:|---:|---|---:|")  # fmt: skip
    for engine in engines:
        mine = [r for r in rows if r["engine"] == engine]
        a = {r["run"]: r["records_per_s"] for r in mine if r["side"] == "apportion"}
        s = {r["run"]: r["records_per_s"] for r in mine if r["side"] == "streaming"}
        ratios = [a[n] / s[n] for n in sorted(a)]
        print(f"| {engine} | {statistics.median(a.values()):,.0f} | {statistics.median(s.values()):,.0f} | "
              f"{', '.join(f'{x:.2f}x' for x in ratios)} | **{statistics.median(ratios):.2f}x** |")  # fmt: skip
        b = {r["run"]: r["records_per_s"] for r in mine if r["side"] == "before"}
        if b:
            now_before = [a[n] / b[n] for n in sorted(b)]
            before_ss = ", ".join(f"{b[n] / s[n]:.2f}x" for n in sorted(b))
            print(f"| {engine}: {args.against} (before) | {statistics.median(b.values()):,.0f} | | "
                  f"before / SS: {before_ss}; now / before: {', '.join(f'{x:.2f}x' for x in now_before)} | "
                  f"**{statistics.median(now_before):.2f}x** now/before |")  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
