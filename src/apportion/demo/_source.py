"""The demo's input: seeded keyed records, part up front, part streamed, into apportion's Parquet log
(``LogRecords``, `make demo`) or a Kafka topic (``TopicRecords``, ``apportion demo --source kafka``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from apportion.demo._checks import Check, check_kafka_output, check_output
from apportion.demo._config import GROUP, DemoConfig
from apportion.errors import ApportionError, BrokerUnavailable, InvalidRequest
from apportion.fleet import kafka_pipeline_args, pipeline_args
from apportion.store import Store
from apportion.waiting import wait_for

if TYPE_CHECKING:
    from apportion.kafka import KafkaConfig
    from apportion.log import SeededRecords


class RecordSource:
    """The demo's input: the same seeded keyed records (``SeededRecords``) whatever they are sent to, in chunks.

    The first half is produced before the workers start; the rest streams in while the group churns, so that the
    faults hit workers in the middle of their batches. ``resource`` is the group's resource the records go to,
    ``routing`` how a key finds its partition (said in the demo's output).
    """

    resource: str
    routing: str
    workers: str  # what the workers do with the records, said in the demo's output

    def __init__(self, config: DemoConfig, records: SeededRecords) -> None:
        self.config = config
        self.records = records
        self._thread: threading.Thread | None = None

    @property
    def produced(self) -> int:
        return self.records.produced

    def append(self, count: int) -> None:
        self.records.append(count)

    def remaining(self, store: Store) -> int:
        """Records produced and not yet covered by a committed checkpoint."""
        raise NotImplementedError

    def worker_args(self, store_url: str, output_dir: Path, *options: str) -> list[str]:
        """The command line of the demo's pipeline workers reading this source (without ``--id``)."""
        raise NotImplementedError

    def checks(self, store: Store, output_dir: Path, step: Callable[[str], None]) -> list[Check]:
        """The committed output (and state) against the records this source holds."""
        raise NotImplementedError

    def stream(self, duration_s: float, chunk: int = 25_000) -> None:
        """Append the rest in the background, evenly over about ``duration_s`` seconds."""
        remaining = self.streamed_total - self.produced
        pause = duration_s / max(1, -(-remaining // chunk))

        self._thread = self.records.stream(self.streamed_total, chunk, pause, name="demo-producer")

    @property
    def streamed_total(self) -> int:
        """Records produced by the end of the stream; the rest is a reserve appended on demand (``finish``)."""
        return self.config.records - self.reserve

    @property
    def reserve(self) -> int:
        return min(self.config.records // 2, max(self.config.partitions * 250, self.config.records // 20))

    def finish(self, limit_s: float) -> None:
        """End the stream after its current chunk (failing after ``limit_s`` without it ending), then append what it
        had left and the reserve at once: fresh work for every partition, right now. The stream has done its part
        by then (input arriving through the join and the kill); waiting out its pace only kept the workers idle
        (about 45 s of a 118 s demo, issue 31)."""
        thread = self._thread
        if thread is not None:
            self.records.stop()
            wait_for(
                "the producer to end its chunk",
                lambda: not thread.is_alive(),
                limit_s,
                progress=lambda: self.produced,
            )
        if self.records.error is not None:
            raise ApportionError(f"demo: the producer failed: {self.records.error}") from self.records.error
        self.append(self.config.records - self.produced)
        if self.produced < self.config.records:
            raise ApportionError(f"demo: produced only {self.produced} of {self.config.records} records")

    def stop(self) -> None:
        self.records.stop()


class LogRecords(RecordSource):
    """The records appended to apportion's partitioned Parquet log under ``log_dir`` by the Python producer."""

    routing = "pmod(xxhash64(key), n)"
    workers = "stateful (per-key aggregates per partition backed by a fenced changelog)"

    def __init__(self, config: DemoConfig, log_dir: Path) -> None:
        from apportion.log import PartitionedLog, SeededRecords

        self.resource = GROUP
        self.log = PartitionedLog(log_dir)
        self.log.create(GROUP, config.partitions)
        records = SeededRecords(
            self.log, GROUP, config.records, keys=config.keys, seed=config.seed, batch_records=config.batch_records
        )
        super().__init__(config, records)

    def remaining(self, store: Store) -> int:
        from apportion.spark import uncommitted_records

        return sum(uncommitted_records(store, GROUP, self.log, GROUP).values())

    def worker_args(self, store_url: str, output_dir: Path, *options: str) -> list[str]:
        state = ("--state-dir", str(self.config.directory / "state"))
        return pipeline_args(store_url, GROUP, self.log.root, output_dir, GROUP, *options, *state)

    def checks(self, store: Store, output_dir: Path, step: Callable[[str], None]) -> list[Check]:
        return check_output(store, self.log.root, output_dir, step)


class TopicRecords(RecordSource):
    """The records sent to a new Kafka ``topic`` of the demo's partition count (created here) by apportion's Kafka
    producer (idempotent: each key's records in order in its partition, none twice)."""

    routing = "Kafka's murmur2 partitioner"
    workers = "reading the topic with Spark's Kafka source (not stateful: the pipeline on Kafka has no --state-dir)"

    def __init__(self, config: DemoConfig, kafka: KafkaConfig, topic: str) -> None:
        from apportion.kafka import Producer, create_topic
        from apportion.log import SeededRecords

        self.resource = topic
        self.kafka = kafka
        create_topic(kafka, topic, config.partitions)

        def send(chunk: list[tuple[str, str]]) -> None:
            with Producer(kafka, topic, partitions=config.partitions) as producer:
                for key, value in chunk:
                    producer.send(key, value.encode())

        records = SeededRecords(None, topic, config.records, keys=config.keys, seed=config.seed, sink=send)
        super().__init__(config, records)

    def remaining(self, store: Store) -> int:
        from apportion.spark import committed_checkpoints

        # an idempotent producer without transactions: a partition's offsets are 0, 1, 2, ... (one per record)
        checkpoints = committed_checkpoints(store, GROUP, self.resource)
        return self.produced - sum(c.offset for c in checkpoints.values())

    def worker_args(self, store_url: str, output_dir: Path, *options: str) -> list[str]:
        return kafka_pipeline_args(store_url, GROUP, self.kafka.bootstrap, [self.resource], output_dir, *options)

    def checks(self, store: Store, output_dir: Path, step: Callable[[str], None]) -> list[Check]:
        return check_kafka_output(store, self.kafka, self.resource, output_dir, step)


def kafka_config(bootstrap: str) -> KafkaConfig:
    """The Kafka cluster at ``bootstrap`` once it answers (``InvalidRequest`` for a malformed address,
    ``BrokerUnavailable`` for one that does not answer, or without the kafka extra: one line each)."""
    try:
        import confluent_kafka  # noqa: F401 (the kafka extra's client)

        from apportion.kafka import KafkaConfig, topic_partitions
    except ImportError as exc:
        raise BrokerUnavailable(
            f"the demo on Kafka needs the kafka extra ({exc.name} is missing): pip install 'apportion[kafka]'"
        ) from exc
    try:
        config = KafkaConfig(bootstrap, connect_timeout_s=5.0)  # a broker answers in milliseconds
    except InvalidRequest as exc:
        raise InvalidRequest("--bootstrap", exc.reason) from exc
    try:
        topic_partitions(config, [])
    except BrokerUnavailable as exc:
        raise BrokerUnavailable(f"--bootstrap: {exc}") from exc
    return config


__all__ = ["LogRecords", "RecordSource", "TopicRecords", "kafka_config"]
