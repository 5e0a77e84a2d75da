"""The pipeline on Kafka (``apportion pipeline run --kafka B --topic T``; ``apportion.spark.pipeline._kafka``): Spark's
executors read each owned partition's offset range with Spark's Kafka source, the output is committed exactly once
and fenced, on a real KRaft broker and a real Spark.

- thin workers on the shared Connect server (tests/spark/conftest.py gives it the Kafka connector): a SIGSTOP zombie
  past its ttl, a late join, a kill -9, and records produced while they run; ``pipeline verify --kafka`` then finds
  every record of the topic in the committed output once, in per-key order;
- a worker on its own JVM whose topic lost unread records to ``delete-records`` (retention's deterministic twin)
  stops with one line naming the partition and the offsets lost, exit 1, nothing skipped;
- the 3-broker cluster with a broker killed mid-run (``make soak``);
- the pure parts: the lost-records check, Spark's Kafka options, the connector's settings.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apportion.errors import InvalidRequest
from apportion.fleet import Fleet, WorkerProcess
from apportion.spark.pipeline._kafka import KafkaSource, lost_records, reader_group_id, spark_kafka_options
from apportion.store import connect
from apportion.waiting import wait_for
from tests.kafka import conftest as kafka_fixtures
from tests.spark.conftest import spark_kafka_jars
from tests.spark.test_pipeline import timeline

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

TIMINGS = ["--settle", "0.3", "--min-interval", "0.6", "--ttl", "3", "--idle", "0.1"]


@pytest.fixture(scope="module")
def jars() -> str:
    found = spark_kafka_jars()
    if found is None:
        pytest.skip("Maven cannot resolve Spark's Kafka connector (scripts/ensure-spark-kafka.sh); CI runs these")
    return found


def create_topic(bootstrap: str, name: str, partitions: int, replication: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, replication)]).values():
        future.result(60)


def produce(bootstrap: str, name: str, first: int, count: int, keys: int = 200) -> None:
    """``count`` keyed records ``k-<i % keys>`` / ``v-<i>`` (i from ``first``), idempotent (no duplicates on retry);
    each key's records in one partition, in order (the Java client's murmur2 partitioner)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "partitioner": "murmur2_random"})  # fmt: skip
    for i in range(first, first + count):
        producer.produce(name, key=f"k-{i % keys}", value=f"v-{i}")
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def kafka_args(url: str, bootstrap: str, name: str, out: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "apportion.cli", "pipeline", "run", "--store", url, "--group", "g", "--kafka",
            bootstrap, "--topic", name, "--output", str(out), *options]  # fmt: skip


def verify(url: str, bootstrap: str, name: str, out: Path) -> dict[str, Any]:
    import json

    done = subprocess.run(
        [sys.executable, "-m", "apportion.cli", "pipeline", "verify", "--store", url, "--group", "g", "--kafka",
         bootstrap, "--topic", name, "--output", str(out), "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    return dict(json.loads(done.stdout))


def committed(store_url: str, name: str) -> int:
    """Offsets committed over the topic's partitions (the sum of the checkpoints)."""
    from apportion.spark.pipeline._output import committed_checkpoints

    with connect(store_url) as store:
        return sum(c.offset for c in committed_checkpoints(store, "g", name).values())


@pytest.fixture
def env(jars: str) -> Iterator[dict[str, str]]:
    yield {"APPORTION_KAFKA_JARS": jars}


# tests/kafka/conftest.py's fixtures, for this module of tests/spark/ (a broker of its own on the thin-workers' xdist
# worker: a conftest's fixtures reach only its folder)
kafka, kafka3, topic, store_url = (
    kafka_fixtures.kafka,
    kafka_fixtures.kafka3,
    kafka_fixtures.topic,
    kafka_fixtures.store_url,
)


def test_thin_workers_on_kafka_commit_every_record_once_across_a_zombie_a_late_join_and_a_kill(
    connect_server: Any, kafka: Any, topic: str, store_url: str, tmp_path: Path, env: dict[str, str]
) -> None:
    create_topic(kafka.bootstrap, topic, 4)
    produce(kafka.bootstrap, topic, 0, 8_000)
    out = tmp_path / "out"
    args = kafka_args(store_url, kafka.bootstrap, topic, out, "--spark", connect_server.url, "--batch-records", "500",
                      *TIMINGS)  # fmt: skip
    workers: list[WorkerProcess] = []
    with Fleet(tmp_path / "logs", args, env) as fleet:
        workers.append(fleet.start("w1"))
        wait_for("w1 commits", lambda: workers[0].of("commit"), 300, alive=lambda: fleet.check(["w1"]),
                 context=lambda: timeline(workers))  # fmt: skip
        # the zombie: frozen past its ttl while w2 joins and takes its partitions over
        workers[0].signal(signal.SIGSTOP)
        workers.append(fleet.start("w2"))
        wait_for("w2 to own every partition and commit", lambda: len(workers[1].applied()) == 4 and workers[1].of(
            "commit"), 300, alive=lambda: fleet.check(["w2"]), context=lambda: timeline(workers))  # fmt: skip
        workers[0].signal(signal.SIGCONT)  # resumes mid-batch at most: its commit is fenced, its output discarded
        produce(kafka.bootstrap, topic, 8_000, 4_000)
        wait_for("w1 to rejoin and be assigned partitions again", lambda: len(workers[0].of("assigned")) > 1, 300,
                 context=lambda: timeline(workers))  # fmt: skip
        workers[1].signal(signal.SIGKILL)  # kill -9 of the late joiner mid-run
        wait_for("every record committed", lambda: committed(store_url, topic) == 12_000, 300,
                 alive=lambda: fleet.check(["w1"]), context=lambda: timeline(workers))  # fmt: skip
        codes = fleet.stop_all(60)
    assert codes["w1"] == 0, timeline(workers)
    report = verify(store_url, kafka.bootstrap, topic, out)
    assert report["ok"] and report["input_records"] == report["output_records"] == 12_000, report
    assert report["duplicates"] == report["missing"] == report["order_violations"] == 0, report


@pytest.mark.xdist_group("thin-workers")  # with the Connect tests: one broker for the module on one xdist worker
def test_records_deleted_before_they_were_processed_stop_the_worker_with_the_partition_and_offsets(
    kafka: Any, topic: str, store_url: str, tmp_path: Path, env: dict[str, str]
) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    create_topic(kafka.bootstrap, topic, 2)
    produce(kafka.bootstrap, topic, 0, 400, keys=20)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 1, 40)]).values():  # retention, deterministically
        future.result(60)
    # its own JVM (local[1], the connector from APPORTION_KAFKA_JARS)
    done = subprocess.run(
        kafka_args(store_url, kafka.bootstrap, topic, tmp_path / "out", "--id", "w1", "--exit-when-idle", "5",
                   *TIMINGS),
        capture_output=True, text=True, timeout=600, env={**os.environ, **env}, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("apportion: error: ") and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"partition {topic}-1: offsets 0 to 39 (40 records) were deleted" in last, last
    assert committed(store_url, topic) <= 400 - 40  # nothing of partition 1 was committed past the loss


@pytest.mark.soak
@pytest.mark.xdist_group("thin-workers")
def test_a_broker_killed_mid_run_on_three_brokers_loses_and_duplicates_nothing(
    connect_server: Any, kafka3: Any, topic: str, store_url: str, tmp_path: Path, env: dict[str, str]
) -> None:
    create_topic(kafka3.bootstrap, topic, 6, replication=3)
    produce(kafka3.bootstrap, topic, 0, 30_000)
    out = tmp_path / "out"
    args = kafka_args(store_url, kafka3.bootstrap, topic, out, "--spark", connect_server.url, "--batch-records",
                      "1000", *TIMINGS)  # fmt: skip
    workers: list[WorkerProcess] = []
    with Fleet(tmp_path / "logs", args, env) as fleet:
        workers += [fleet.start("w1"), fleet.start("w2")]
        wait_for("both workers commit", lambda: all(w.of("commit") for w in workers), 180,
                 alive=lambda: fleet.check(["w1", "w2"]), context=lambda: timeline(workers))  # fmt: skip
        kafka3.kill(2)
        produce(kafka3.bootstrap, topic, 30_000, 10_000)
        kafka3.restart(2)
        wait_for("every record committed", lambda: committed(store_url, topic) == 40_000, 300,
                 alive=lambda: fleet.check(["w1", "w2"]), context=lambda: timeline(workers))  # fmt: skip
        codes = fleet.stop_all(60)
    assert codes == {"w1": 0, "w2": 0}, timeline(workers)
    report = verify(store_url, kafka3.bootstrap, topic, out)
    assert report["ok"] and report["output_records"] == 40_000, report


def test_a_checkpoint_the_partition_no_longer_covers_is_an_error_naming_the_offsets() -> None:
    assert lost_records("t", 0, 5, 0, 10) is None
    assert lost_records("t", 0, 10, 3, 10) is None  # at the end: nothing new, nothing lost
    below = lost_records("t", 2, 10, 25, 40)
    assert below is not None and str(below).startswith("partition t-2: offsets 10 to 24 (15 records) were deleted")
    above = lost_records("t", 1, 50, 0, 20)
    assert above is not None and "checkpoint is offset 50 but the partition ends at 20" in str(above)


def test_spark_gets_the_brokers_the_protocol_and_a_jaas_line_for_sasl() -> None:
    from apportion.kafka import KafkaConfig

    assert spark_kafka_options(KafkaConfig("127.0.0.1:9092")) == {
        "kafka.bootstrap.servers": "127.0.0.1:9092",
        "kafka.security.protocol": "PLAINTEXT",
    }
    options = spark_kafka_options(KafkaConfig("h:1", username="alice", password='se"cret', sasl_mechanism="PLAIN"))
    assert options["kafka.security.protocol"] == "SASL_PLAINTEXT" and options["kafka.sasl.mechanism"] == "PLAIN"
    assert options["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="se\\"cret";'
    )


@pytest.mark.xdist_group("thin-workers")
def test_two_pipelines_with_other_client_settings_read_one_partition_on_one_connect_server(
    connect_server: Any, kafka: Any, topic: str
) -> None:
    """Spark's executors pool their Kafka consumers by (group id, partition) and fail a task whose settings differ from
    the pooled consumer's: two groups on one server reading one topic, one in plain text and one with SASL
    credentials, must each get consumers of their own (``reader_group_id``)."""
    from apportion.kafka import KafkaConfig
    from apportion.spark import spark_session

    create_topic(kafka.bootstrap, topic, 1)
    produce(kafka.bootstrap, topic, 0, 300)
    plain = KafkaConfig(kafka.bootstrap)
    sasl = KafkaConfig(kafka.sasl_bootstrap, username="alice", password="alice-secret", sasl_mechanism="PLAIN")
    spark = spark_session(connect_server.url)
    counts = [KafkaSource(c)._reader(spark, topic, {0: (0, 300)}).load().count() for c in (plain, sasl, plain)]
    assert counts == [300, 300, 300]
    assert reader_group_id(spark_kafka_options(plain)) != reader_group_id(spark_kafka_options(sasl))
    assert reader_group_id(spark_kafka_options(plain)) == reader_group_id(
        spark_kafka_options(KafkaConfig(kafka.bootstrap))
    )


def test_an_engine_without_the_kafka_connector_is_one_line_saying_how_to_give_it_before_the_broker_is_asked(
    spark: Any,
) -> None:
    """The tests' own local session has no Kafka connector; nothing listens at the bootstrap address, so a check that
    asked the broker first would fail on the broker instead."""
    from apportion.errors import SparkUnavailable
    from apportion.kafka import KafkaConfig
    from apportion.spark.engine import JARS_ENV
    from apportion.spark.pipeline._pipeline import transform

    source = KafkaSource(KafkaConfig("127.0.0.1:1", connect_timeout_s=1.0), wait_s=1.0)
    with pytest.raises(SparkUnavailable) as raised:
        source.warm_up(spark, "orders", 8, transform)
    said = str(raised.value)
    assert said.startswith("Spark has no Kafka connector (spark-sql-kafka-0-10): ") and JARS_ENV in said, said
    assert "\n" not in said


def test_the_connector_comes_from_listed_jars_or_else_sparks_package_of_pysparks_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyspark

    from apportion.spark.engine import JARS_ENV, kafka_connector_config

    monkeypatch.delenv(JARS_ENV, raising=False)
    assert kafka_connector_config() == {
        "spark.jars.packages": f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    }
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"")
    monkeypatch.setenv(JARS_ENV, str(jar))
    assert kafka_connector_config() == {"spark.jars": str(jar)}
    with pytest.raises(InvalidRequest, match=r"kafka-jars: .*missing\.jar is not a file"):
        kafka_connector_config(f"{jar},{tmp_path / 'missing.jar'}")


@pytest.mark.xdist_group("thin-workers")
def test_the_input_is_the_log_or_kafka_not_both_and_an_unknown_topic_is_one_line_before_spark(
    kafka: Any, store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from apportion.cli import main

    run = ["pipeline", "run", "--store", store_url, "--group", "g", "--id", "w1", "--output", str(tmp_path / "out")]
    assert main([*run, "--input", str(tmp_path), "--kafka", kafka.bootstrap, "--topic", "t"]) == 2
    assert main(run) == 2
    assert main([*run, "--kafka", kafka.bootstrap, "--topic", "t", "--state-dir", str(tmp_path / "s")]) == 2
    assert main([*run, "--kafka", kafka.bootstrap, "--topic", "no-such-topic"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split(":", 3)[2].strip() for line in lines[:3]] == ["input", "input", "kafka"], lines
    assert "topic 'no-such-topic' does not exist" in lines[-1] and len(lines) == 4, lines
