"""Kafka topics as a group's resources, on a real KRaft broker: ``apportion worker --kafka B --topic T`` reads the
partition counts from the broker, a topic grown with Kafka's own ``kafka-topics --alter`` is a new round within one
heartbeat, and a topic deleted, unknown, recreated smaller, a broker unreachable or credentials refused are each one
line and exit 1, nothing else lost (the partitions are released as in a graceful leave)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from apportion.errors import BrokerUnavailable, TopicUnavailable
from apportion.fleet import Fleet, worker_args
from apportion.group import GroupConfig
from apportion.group.internals import Keys
from apportion.kafka import KafkaConfig, resources_text, sync_definition, topic_partitions, topic_resources
from apportion.model import Resource
from apportion.store import MemoryStore, Store, connect
from apportion.waiting import wait_for
from tests.doc_samples import DOCS, marked_block
from tests.kafka_server import SASL_USERS, KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("kafka")]

HEARTBEAT_S = 2.0
ROOT = Path(__file__).resolve().parents[2]


def create_topic(kafka: KafkaCluster, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
    for future in admin.create_topics([NewTopic(name, partitions)], operation_timeout=30).values():
        future.result(60)
    wait_for("topic", lambda: _counts(kafka, name) == {name: partitions}, 30)


def delete_topic(kafka: KafkaCluster, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
    for future in admin.delete_topics([name], operation_timeout=30).values():
        future.result(60)


def define(store: Store, group: str, resources: str) -> None:
    """Store ``group``'s definition as its first member would (a group that ran before)."""
    store.put(Keys(group).resource, GroupConfig(resources=resources).record())


def apportion(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "apportion.cli", *args], capture_output=True, text=True, timeout=timeout_s
    )


def test_topic_resources_are_the_brokers_partition_counts(kafka: KafkaCluster, topic: str) -> None:
    create_topic(kafka, topic, 5)
    other = topic + "-b"
    create_topic(kafka, other, 2)
    config = KafkaConfig(kafka.bootstrap)
    assert topic_resources(config, [other, topic]) == (Resource(topic, 5), Resource(other, 2))
    assert resources_text({topic: 5, other: 2}) == f"{topic}:5,{other}:2"
    sasl = KafkaConfig(kafka.sasl_bootstrap, username="alice", password=SASL_USERS["alice"])
    assert topic_partitions(sasl, [topic]) == {topic: 5}


def test_sync_grows_the_stored_definition_and_refuses_a_shrink() -> None:
    store = MemoryStore()
    assert sync_definition(store, "g", {"orders": 4}) == {}  # no definition yet: the first member writes it
    define(store, "g", "orders:4,payments:2")
    assert sync_definition(store, "g", {"orders": 4, "payments": 2}) == {}
    assert sync_definition(store, "g", {"orders": 7, "payments": 2}) == {"orders": (4, 7)}
    stored = GroupConfig.load(store, "g")
    assert {r.name: r.partitions for r in stored.resources} == {"orders": 7, "payments": 2}
    with pytest.raises(TopicUnavailable, match="cannot shrink"):
        sync_definition(store, "g", {"orders": 3, "payments": 2})
    assert {r.name: r.partitions for r in GroupConfig.load(store, "g").resources} == {"orders": 7, "payments": 2}


def test_a_grown_topic_is_a_new_round_within_one_heartbeat(kafka: KafkaCluster, topic: str, tmp_path: Path) -> None:
    create_topic(kafka, topic, 4)
    url = f"sqlite:///{tmp_path / 'g.db'}"
    args = worker_args(url, "g", "--kafka", kafka.bootstrap, "--topic", topic, "--heartbeat", str(HEARTBEAT_S))
    with Fleet(tmp_path / "logs", args) as fleet:
        a, b = fleet.start("a"), fleet.start("b")
        owned = lambda: a.applied() | b.applied()  # noqa: E731
        wait_for("the 4 partitions owned", lambda: owned() == {f"{topic}-{i}" for i in range(4)}, 60)
        # Kafka's own tool, as an operator grows a topic (kafka-topics.sh --alter --partitions 7)
        altered = kafka.tool("org.apache.kafka.tools.TopicCommand", "--alter", "--topic", topic, "--partitions", "7")
        assert altered.returncode == 0, altered.stderr
        grown_at = time.monotonic()
        store = connect(url)
        try:
            wait_for(
                "definition grown", lambda: GroupConfig.load(store, "g").resources[0].partitions == 7, 3 * HEARTBEAT_S
            )
            stored_after = time.monotonic() - grown_at
        finally:
            store.close()
        assert stored_after <= HEARTBEAT_S + 1.0  # polled at half the heartbeat; +1 s for a busy machine
        wait_for("the 7 partitions owned", lambda: owned() == {f"{topic}-{i}" for i in range(7)}, 30)
        assert not a.applied() & b.applied()
        assert abs(len(a.applied()) - len(b.applied())) <= 1
        codes = fleet.stop_all(30)
    assert codes == {"a": 0, "b": 0}


def test_a_deleted_topic_ends_the_worker_with_one_line(kafka: KafkaCluster, topic: str, tmp_path: Path) -> None:
    create_topic(kafka, topic, 3)
    url = f"sqlite:///{tmp_path / 'g.db'}"
    args = worker_args(url, "g", "--kafka", kafka.bootstrap, "--topic", topic, "--heartbeat", str(HEARTBEAT_S))
    with Fleet(tmp_path / "logs", args) as fleet:
        a = fleet.start("a")
        wait_for("the 3 partitions owned", lambda: len(a.applied()) == 3, 60)
        delete_topic(kafka, topic)
        wait_for("the worker to exit", lambda: not a.alive(), 30)
        assert a.proc.returncode == 1
        revoked = {p for e in a.of("revoked") for p in e["partitions"]}
        assert revoked == {f"{topic}-{i}" for i in range(3)}  # released as in a graceful leave, not lost
        assert not a.of("lost")
        errors = [line for line in a.log.text().splitlines() if line.startswith("apportion: error:")]
        assert errors == [f"apportion: error: topic {topic!r} does not exist on Kafka at {kafka.bootstrap}"]
        assert "Traceback" not in a.log.text()


def test_bad_kafka_input_is_one_line_each(kafka: KafkaCluster, topic: str, tmp_path: Path) -> None:
    create_topic(kafka, topic, 6)
    url = f"sqlite:///{tmp_path / 'g.db'}"
    base = ["worker", "--store", url, "--group", "g", "--id", "a"]

    def one_line(done: subprocess.CompletedProcess[str], code: int, *fragments: str) -> str:
        assert done.returncode == code, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("apportion: error:"), done.stderr
        for fragment in fragments:
            assert fragment in lines[0], lines[0]
        return lines[0]

    one_line(apportion(*base, "--kafka", kafka.bootstrap, "--topic", "no-such-topic"), 1, "'no-such-topic' does not")
    started = time.monotonic()
    one_line(apportion(*base, "--kafka", "nohostport", "--topic", topic), 2, "HOST:PORT")
    start_up_s = time.monotonic() - started  # the same command refused before any connection: its start-up alone
    started = time.monotonic()
    one_line(apportion(*base, "--kafka", "127.0.0.1:1", "--topic", topic, "--connect-timeout", "2"), 1, "within 2 s")
    # the timeout kept: beyond start-up, 2 s and the Kafka client's set-up and teardown (10.3 s at load 20)
    assert time.monotonic() - started - start_up_s < 2 + 12
    done = subprocess.run(
        [sys.executable, "-m", "apportion.cli", *base, "--kafka", kafka.sasl_bootstrap, "--topic", topic,
         "--kafka-username", "alice", "--connect-timeout", "4"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "APPORTION_KAFKA_PASSWORD": "not-the-password"},  # as a deployment passes it
    )  # fmt: skip
    line = one_line(done, 1, "authentication failed", "'alice'")
    assert "not-the-password" not in done.stdout + done.stderr, line
    one_line(apportion(*base, "--kafka", "nohostport", "--topic", topic), 2, "HOST:PORT")
    one_line(apportion(*base, "--kafka", kafka.bootstrap, "--topic", "bad topic"), 2, "'bad topic'")
    one_line(apportion(*base, "--topic", topic), 2, "--kafka")
    one_line(apportion(*base, "--kafka", kafka.bootstrap, "--topic", topic, "--partitions", "3"), 2, "no --partitions")
    one_line(
        apportion(*base, "--kafka", kafka.bootstrap, "--topic", topic, "--kafka-option", "nonsense"), 2, "KEY=VALUE"
    )


def test_a_topic_with_fewer_partitions_than_the_group_stored(kafka: KafkaCluster, topic: str, tmp_path: Path) -> None:
    create_topic(kafka, topic, 6)
    url = f"sqlite:///{tmp_path / 'g.db'}"
    store = connect(url)
    try:
        define(store, "g", f"{topic}:6")
        delete_topic(kafka, topic)
        wait_for("topic deleted", lambda: _absent(kafka, topic), 30)
        create_topic(kafka, topic, 3)  # deleted and created again, smaller: its offsets start over
        done = apportion(
            "worker", "--store", url, "--group", "g", "--id", "a", "--kafka", kafka.bootstrap, "--topic", topic
        )
        assert done.returncode == 1, done.stderr
        assert done.stderr.strip().splitlines() == [
            f"apportion: error: topic {topic!r} has 3 partitions on the broker but group 'g' stored 6: a Kafka topic "
            "cannot shrink (was it deleted and created again?); the group is left as it was"
        ]
        assert GroupConfig.load(store, "g").resources[0].partitions == 6
    finally:
        store.close()


def _counts(kafka: KafkaCluster, topic: str) -> dict[str, int] | None:
    """The topic's partition count as the broker's metadata has it now; None while it does not exist."""
    try:
        return topic_partitions(KafkaConfig(kafka.bootstrap), [topic])
    except BrokerUnavailable:
        return None


def _absent(kafka: KafkaCluster, topic: str) -> bool:
    return _counts(kafka, topic) is None


def readme_example() -> str:
    """The example as the Kafka guide shows it (the docs' block marked ``examples/kafka_topics.py``)."""
    return marked_block(DOCS / "guides" / "kafka.md", "examples/kafka_topics.py")


def test_the_readme_example_is_examples_kafka_topics_py() -> None:
    assert readme_example() == (ROOT / "examples" / "kafka_topics.py").read_text()


def test_the_python_example_shares_and_follows_a_growing_topic(kafka: KafkaCluster, topic: str, tmp_path: Path) -> None:
    """Two processes of examples/kafka_topics.py (the Kafka guide's) share a topic's partitions; grown, the new ones are
    dealt out; SIGTERM leaves (exit 0)."""
    create_topic(kafka, topic, 4)
    url = f"sqlite:///{tmp_path / 'g.db'}"
    command = [sys.executable, str(ROOT / "examples" / "kafka_topics.py"), url, kafka.bootstrap, topic]
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=tmp_path) for log in logs]
    try:

        def held() -> list[set[str]]:
            out = []
            for log in logs:
                mine: set[str] = set()
                for line in log.read_text().splitlines():
                    if line.startswith("gained "):
                        mine |= set(line.split()[1:])
                    elif line.startswith("gave up "):
                        mine -= set(line.split()[2:])
                out.append(mine)
            return out

        def dealt(n: int) -> bool:
            a, b = held()
            return a | b == {f"{topic}-{i}" for i in range(n)} and not a & b and abs(len(a) - len(b)) <= 1

        wait_for("the 4 partitions shared", lambda: dealt(4), 60)
        grow = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
        for future in grow.create_partitions([NewPartitions(topic, 6)]).values():
            future.result(60)
        wait_for("the 6 partitions shared", lambda: dealt(6), 30)
    finally:
        for proc in procs:
            proc.terminate()
        codes = [proc.wait(30) for proc in procs]
    assert codes == [0, 0], [log.read_text() for log in logs]
