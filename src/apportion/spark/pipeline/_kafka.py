"""Kafka topics as a pipeline's source: Spark's executors read each owned partition's offset range.

A pipeline over Kafka runs in a group whose resources are the topics (``apportion.kafka``: topic ``T``'s partitions
are ``T-0`` .. ``T-(n-1)``); each topic's ``Pipeline`` sees its partitions by index, and :class:`KafkaSource`
answers the batch loop's two questions (``apportion.spark.pipeline._source``):

- ``ends``: each planned partition's high watermark and earliest offset, from the broker in one ListOffsets request
  each (confluent-kafka's AdminClient: the worker reads offsets, never records). A checkpoint below the earliest
  offset means retention (or ``kafka-delete-records``) deleted records the pipeline has not processed; a checkpoint
  above the high watermark means the partition lost records it had (the topic created again, an unclean leader
  election). Both are :class:`apportion.errors.RecordsLost` naming the partition and the offsets lost: the worker
  stops with that line (exit 1), never skipping them. The broker not answering (a partition without a leader during
  a failover answers no offset) fails the batch, which is planned again after a pause with the partition locks
  released (``OffsetsUnavailable``); unanswered for ``wait_s`` (60 s), it is ``BrokerUnavailable``;
- ``frames``: ONE batch read of Spark's Kafka source (``spark.read.format("kafka")``, the ``spark-sql-kafka-0-10``
  connector: ``apportion.spark.engine._connector``) with ``assign`` of exactly the batch's partitions and their
  ``startingOffsets``/``endingOffsets`` as JSON; the executors fetch the records, one Spark partition per Kafka
  partition, in offset order. ``failOnDataLoss`` stays on: records deleted between ``ends`` and the read fail the
  Spark job (the batch is retried and ``ends`` says what was lost).

The rows are the log's columns (``partition``, ``offset``, ``key`` and ``value`` as UTF-8 strings, ``ts_ms`` the
record's timestamp in ms), so the same transform and output serve both sources. The transform sees one frame with
every partition of the batch: it must be narrow (``select``, ``where``, ``withColumn``: each Spark partition's rows
stay in it, as the default transform does); a shuffle would mix partitions' rows before the per-partition write.

The Kafka client settings Spark gets: the bootstrap servers, the security protocol and, with a username, SASL's
JAAS line (PLAIN or SCRAM) — ``--kafka-option``'s librdkafka settings are not Java client settings and are not
passed. Through Spark Connect the password travels in the query plan to the server (loopback only).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from apportion.errors import BrokerUnavailable, InvalidRequest, RecordsLost, SparkUnavailable
from apportion.kafka import KafkaConfig, topic_partitions
from apportion.spark.pipeline._output import Checkpoint, InputRecords, VerifyReport, verify_records
from apportion.spark.pipeline._source import Frame, Task
from apportion.store import Store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from apportion.spark.pipeline._pipeline import Transform

log = logging.getLogger("apportion.pipeline")

DEFAULT_WAIT_S = 60.0
"""How long the offsets may stay unanswered, over consecutive batches, before ``BrokerUnavailable`` (or fewer: at
the batch loop's last allowed failure)."""
ATTEMPT_S = 10.0
"""How long one ``ends`` call retries (holding the batch's partition locks) before the batch fails."""
MIN_ATTEMPTS = 3
WARM_UP_RECORDS = 1_000
"""The most records a worker's warm-up reads (``KafkaSource.warm_up``): the read path's classes and one consumer."""


READER_GROUP_ID = "apportion-pipeline"
"""The prefix of the Kafka group id of the executors' consumers (``reader_group_id``). Spark's default is a new id per
read, and its executors keep their consumers in a pool keyed by (group id, partition): every batch then opened a new
consumer per partition. One id lets the next batch reuse them: a batch of 8 partitions x 50 records read and written in
0.98 s instead of 1.16 s (median of 8 alternating reads, local[1], idle machine). The group is never joined: the reads
``assign`` their partitions and commit nothing (apportion's store holds the offsets), so Spark's caution about sharing
an id (queries splitting a subscription's partitions) does not apply."""

READER_OPTIONS = {
    "kafka.max.partition.fetch.bytes": str(4 << 20),
    "kafka.receive.buffer.bytes": str(4 << 20),
}
"""The executors' consumer settings apportion sets (the Java client's defaults otherwise). Spark asks for a 64 KiB
socket buffer and the client fetches at most 1 MiB per partition per request, so reading a backlog of small records
is thousands of round trips with the broker. Measured reading and writing a backlog of 1,000,000 records of 8
partitions on a warm local[2] JVM (``bench/kafka_read_bench.py --compare options``, 5 alternating reads on 2 cores):
0.90x the time of the defaults, 3.92 s against 4.34 s (docs/benchmarks/streaming.md). A larger ``max.poll.records``
was no faster (it only hands over what was already fetched). The cost: a cached consumer may hold one fetch of up to
4 MiB per partition beyond its range (Spark keeps at most ``spark.kafka.consumer.cache.capacity``, 64, consumers per
executor)."""


_DIGEST_KEY = os.urandom(16)


def reader_group_id(options: Mapping[str, str]) -> str:
    """The executors' group id for this process's reads with these ``kafka.*`` options: :data:`READER_GROUP_ID` and a
    digest of them. Spark's consumer pool refuses to hand a task a cached consumer of the same (group id, partition)
    made with other settings ("Kafka parameters for same cache key should be equal": the task fails), as two pipelines
    on one Connect server reading one topic with different credentials or brokers would; with the digest each has its
    own. The digest is keyed by a random key of this process because the options may hold a password and the broker
    sees the group id: a worker's id is its own, so a partition that moves to another worker on the same server gets a
    new consumer (one consumer's start), as it would on another engine."""
    digest = hashlib.blake2b(json.dumps(sorted(options.items())).encode(), digest_size=6, key=_DIGEST_KEY)
    return f"{READER_GROUP_ID}-{digest.hexdigest()}"


class OffsetsUnavailable(Exception):
    """The broker did not give a partition's offsets this time (no leader during a failover, a timeout): the batch
    fails and is planned again after a pause (``run_batches``), its partition locks released meanwhile. Not an
    ``ApportionError`` on purpose (those end the batch loop) and never seen by a user: the last failure the loop
    allows (``MAX_FAILED_BATCHES``) is ``BrokerUnavailable``."""


LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def spark_kafka_options(config: KafkaConfig) -> dict[str, str]:
    """The ``kafka.*`` options of Spark's Kafka source for ``config`` (module docstring)."""
    options = {"kafka.bootstrap.servers": config.bootstrap, "kafka.security.protocol": config.protocol}
    if config.username is not None:
        module = LOGIN_MODULES[config.sasl_mechanism]
        options["kafka.sasl.mechanism"] = config.sasl_mechanism
        options["kafka.sasl.jaas.config"] = (
            f"{module} required username={json.dumps(config.username)} password={json.dumps(config.password)};"
        )
    return options


def lost_records(topic: str, partition: int, checkpoint: int, earliest: int, latest: int) -> RecordsLost | None:
    """The error for a checkpoint the partition's offsets ``[earliest, latest)`` no longer cover; None when they do."""
    if checkpoint < earliest:
        return RecordsLost(
            f"partition {topic}-{partition}: offsets {checkpoint} to {earliest - 1} ({earliest - checkpoint} records) "
            f"were deleted before the pipeline processed them (retention or delete-records; the earliest offset is "
            f"now {earliest}): they are lost; not skipping them"
        )
    if checkpoint > latest:
        return RecordsLost(
            f"partition {topic}-{partition}: the committed checkpoint is offset {checkpoint} but the partition ends "
            f"at {latest} (was the topic deleted and created again, or truncated by an unclean leader election?): "
            "not reading from an offset it never had"
        )
    return None


class KafkaSource:
    """Kafka topics as a pipeline's source (module docstring); ``resource`` is the topic's name."""

    def __init__(self, config: KafkaConfig, *, wait_s: float = DEFAULT_WAIT_S) -> None:
        self.config = config
        self.wait_s = wait_s
        self._admin: Any = None
        self._failing_since: float | None = None  # when the offsets stopped being answered (consecutive calls)
        self._failures = 0  # consecutive calls that ended unanswered

    def partitions(self, resource: str) -> int:
        return topic_partitions(self.config, [resource])[resource]

    def ends(self, resource: str, starts: Mapping[int, int]) -> dict[int, int]:
        if not starts:
            return {}
        earliest, latest = self._offsets(resource, sorted(starts))
        for p, start in sorted(starts.items()):
            lost = lost_records(resource, p, start, earliest[p], latest[p])
            if lost is not None:
                raise lost
        return latest

    def _offsets(self, topic: str, partitions: Sequence[int]) -> tuple[dict[int, int], dict[int, int]]:
        """Each partition's earliest offset and high watermark, retried for :data:`ATTEMPT_S` while the broker does
        not answer; then :class:`OffsetsUnavailable` (the batch fails and is retried), or ``BrokerUnavailable`` once
        the offsets have gone unanswered for ``wait_s`` over consecutive calls (a leader's failover takes a broker
        session timeout, 9 s by default, and more on a loaded machine)."""
        from confluent_kafka import KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        deadline = time.monotonic() + min(ATTEMPT_S, self.wait_s)
        attempts = 0
        while True:
            admin = self._client()
            timeout_s = max(1.0, min(self.config.connect_timeout_s, deadline - time.monotonic()))
            attempts += 1
            try:
                found = []
                for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):  # type: ignore[no-untyped-call]
                    futures = admin.list_offsets(
                        {TopicPartition(topic, p): spec for p in partitions}, request_timeout=timeout_s
                    )
                    found.append({tp.partition: f.result(timeout=timeout_s + 1).offset for tp, f in futures.items()})
                unknown = sorted({p for offsets in found for p, offset in offsets.items() if offset < 0})
                if not unknown:
                    self._failing_since, self._failures = None, 0
                    return found[0], found[1]
                # a partition without a leader (its broker killed, the election not over) answers -1001: not an end
                error: Exception = LookupError(f"no offsets for partitions {unknown} (leader unavailable)")
            except (KafkaException, TimeoutError) as exc:
                error = exc
            self._admin = None  # a new client next time: librdkafka's cached leaders may be stale (FENCED_LEADER_EPOCH)
            # by attempts too: a process frozen (SIGSTOP, a long pause) past the deadline tries again on waking
            if time.monotonic() >= deadline and attempts >= MIN_ATTEMPTS:
                from apportion.spark.pipeline._pipeline import MAX_FAILED_BATCHES

                now = time.monotonic()
                since = self._failing_since = self._failing_since if self._failing_since is not None else now
                self._failures += 1
                detail = str(error.args[0]) if error.args else type(error).__name__
                if now - since < self.wait_s and self._failures < MAX_FAILED_BATCHES:
                    raise OffsetsUnavailable(f"offsets of topic {topic!r} from {self.config.who}: {detail}") from error
                raise BrokerUnavailable(
                    f"cannot read the offsets of topic {topic!r}: {self.config.who} did not answer them for "
                    f"{now - since + ATTEMPT_S:.0f} s ({detail})"
                ) from error
            time.sleep(0.5)  # a failover in progress: the partitions' new leaders are elected meanwhile

    def _client(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            try:
                self._admin = AdminClient(self.config.client())
            except Exception as exc:  # a malformed --kafka-option: librdkafka refuses the configuration
                raise InvalidRequest("kafka-option", str(exc)) from exc
        return self._admin

    def warm_up_task(self, topic: str, partitions: int) -> Task | None:
        """A task over the first records of ``topic`` (of ``partitions`` partitions): at most :data:`WARM_UP_RECORDS`,
        of its first partition that holds any, for ``warm_up``; None when every partition is empty."""
        earliest, latest = self._offsets(topic, range(partitions))
        for p in range(partitions):
            if latest[p] > earliest[p]:
                return Task(p, 0, earliest[p], min(latest[p], earliest[p] + WARM_UP_RECORDS), Checkpoint())
        return None

    def warm_up(self, spark: SparkSession, topic: str, partitions: int, transform: Transform) -> float:
        """Before joining: the batch path warmed up on the first records of ``topic`` (of ``partitions`` partitions:
        ``warm_up`` with :meth:`warm_up_task`; on an empty topic, an empty read of it run as a job, then the
        one-record log), which also proves the engine has Spark's Kafka connector (through Connect, the server's
        classpath): ``SparkUnavailable`` saying how to give it otherwise. Through Connect, once a worker has warmed
        the server up (``warm_up_view``), this asks neither the broker nor Spark for anything more. Returns the
        seconds it took."""
        from apportion.spark.pipeline._pipeline import warm_up, warm_up_view

        started = time.perf_counter()
        view = warm_up_view(spark, transform, type(self))
        if view is not None and spark.catalog.tableExists(f"global_temp.{view}"):
            return time.perf_counter() - started  # the view exists only after a Kafka read succeeded on the server
        self._check_connector(spark, topic)
        task = self.warm_up_task(topic, partitions)
        if task is None:
            self._reader(spark, topic, {0: (0, 0)}).load().count()  # the read path as a job, on no record
            warm_up(spark, transform)
            if view is not None:  # the next worker on this server skips the checks too
                spark.range(0).createOrReplaceGlobalTempView(view)
        else:
            warm_up(spark, transform, (self, topic, task))
        return time.perf_counter() - started

    def _check_connector(self, spark: SparkSession, topic: str) -> None:
        """``SparkUnavailable`` saying how to give the engine Spark's Kafka connector when it has none. Analysis only:
        Spark builds the Kafka relation without asking the broker anything, and runs no job."""
        from apportion.spark.engine import JARS_ENV, is_connect

        try:
            self._reader(spark, topic, {0: (0, 0)}).load().schema  # noqa: B018 (the analysis is the check)
        except Exception as exc:
            if "DATA_SOURCE_NOT_FOUND" not in str(exc) and "Failed to find data source" not in str(exc):
                raise
            remedy = (
                "start the Connect server with apportion spark serve --kafka-connector"
                if is_connect(spark)
                else f"set {JARS_ENV} to its jars (scripts/ensure-spark-kafka.sh) or let Spark resolve its package"
            )
            raise SparkUnavailable(f"Spark has no Kafka connector (spark-sql-kafka-0-10): {remedy}") from exc

    def _reader(self, spark: SparkSession, topic: str, ranges: Mapping[int, tuple[int, int]]) -> Any:
        """Spark's batch read of ``topic``'s partitions ``{p: (start, end)}`` (executors read them)."""
        options = {**spark_kafka_options(self.config), **READER_OPTIONS}
        return (
            spark.read.format("kafka")
            .options(**options)
            .option("assign", json.dumps({topic: sorted(ranges)}))
            .option("startingOffsets", json.dumps({topic: {str(p): r[0] for p, r in ranges.items()}}))
            .option("endingOffsets", json.dumps({topic: {str(p): r[1] for p, r in ranges.items()}}))
            .option("failOnDataLoss", "true")
            .option("kafka.group.id", reader_group_id(options))
        )

    def frames(self, spark: SparkSession, resource: str, tasks: Sequence[Task]) -> list[Frame]:
        from pyspark.sql import functions as F

        df = self._reader(spark, resource, {t.partition: (t.start, t.end) for t in tasks}).load()
        df = df.select(
            F.col("partition").cast("int").alias("partition"),
            F.col("offset"),
            F.col("key").cast("string").alias("key"),
            F.col("value").cast("string").alias("value"),
            F.unix_millis(F.col("timestamp")).alias("ts_ms"),
        )
        return [(tuple(tasks), df)]


def read_topic(config: KafkaConfig, topic: str, *, timeout_s: float = 120.0) -> dict[int, InputRecords]:
    """Every record of ``topic`` now, by partition (``pipeline verify``'s input: from each partition's earliest offset
    to its high watermark, read with one confluent-kafka consumer of this process; keys and values as UTF-8).
    ``BrokerUnavailable`` when the records do not arrive within ``timeout_s``."""
    from confluent_kafka import Consumer, TopicPartition

    n = topic_partitions(config, [topic])[topic]
    source = KafkaSource(config)
    earliest, latest = source._offsets(topic, range(n))
    consumer = Consumer(config.client(**{"group.id": "apportion-verify", "enable.auto.commit": False}))
    records = {p: InputRecords([], [], [], latest[p]) for p in range(n)}
    try:
        wanted = [TopicPartition(topic, p, earliest[p]) for p in range(n) if latest[p] > earliest[p]]
        consumer.assign(wanted)
        remaining = {tp.partition for tp in wanted}
        deadline = time.monotonic() + timeout_s
        while remaining:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"reading topic {topic!r}: partitions {sorted(remaining)} not read to their "
                                        f"end within {timeout_s:g} s from {config.who}")  # fmt: skip
            for message in consumer.consume(10_000, timeout=1.0):
                if message.error() is not None:
                    continue  # partition EOF and transient errors: the deadline bounds the wait
                p, offset = message.partition(), message.offset()
                if p is None or offset is None or p not in remaining or offset >= latest[p]:
                    continue
                got = records[p]
                key, value = message.key(), message.value()
                got.offsets.append(offset)
                got.keys.append(None if key is None else key.decode("utf-8", "replace"))
                got.values.append(None if value is None else value.decode("utf-8", "replace"))
                if offset + 1 >= latest[p]:
                    remaining.discard(p)
    finally:
        consumer.close()
    return records


def verify_kafka(store: Store, group: str, config: KafkaConfig, topic: str, output_dir: str | Path) -> VerifyReport:
    """``pipeline verify`` on Kafka: the committed output of ``group`` (resource ``topic``) against every record the
    topic holds now (``read_topic``): each once, unchanged, in per-key offset order."""
    return verify_records(store, group, topic, output_dir, read_topic(config, topic))


__all__ = [
    "DEFAULT_WAIT_S",
    "KafkaSource",
    "OffsetsUnavailable",
    "READER_GROUP_ID",
    "READER_OPTIONS",
    "WARM_UP_RECORDS",
    "lost_records",
    "read_topic",
    "reader_group_id",
    "spark_kafka_options",
    "verify_kafka",
]
