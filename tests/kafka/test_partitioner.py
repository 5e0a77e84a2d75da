"""Kafka's default partitioner in pure Python agrees with Kafka: the Java client's own test vectors, the Java client
computing it on the same keys, and where a real librdkafka producer with ``partitioner=murmur2_random`` (and
apportion's producer) puts keys on a real broker."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import given
from hypothesis import strategies as st

from apportion.errors import InvalidRequest
from apportion.kafka._client import KafkaConfig
from apportion.kafka._partitioner import key_bytes, murmur2, partition_for_key, to_positive
from apportion.kafka._producer import Producer
from apportion.routing import partition_for
from apportion.waiting import wait_for
from tests.kafka_server import KafkaCluster

ON_BROKER = [pytest.mark.kafka, pytest.mark.xdist_group("kafka")]

# org.apache.kafka.common.utils.UtilsTest.testMurmur2 (the Java client's own vectors)
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_is_the_java_clients_on_its_own_test_vectors() -> None:
    assert {data: murmur2(data) for data in JAVA_VECTORS} == JAVA_VECTORS


def test_to_positive_masks_the_sign_bit_as_java_does_not_abs() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(-973932308) == 1173551340
    assert partition_for_key("21", 7) == 1173551340 % 7 == 3


def test_keys_are_utf8_text_or_their_bytes_and_ints_their_digits() -> None:
    assert key_bytes("héllo") == "héllo".encode()
    assert key_bytes(b"\x00\xff") == b"\x00\xff"
    assert key_bytes(-42) == b"-42"
    assert partition_for_key(42, 12) == partition_for_key("42", 12)
    for bad in (True, 1.5, None):
        with pytest.raises(InvalidRequest, match="key"):
            key_bytes(bad)  # type: ignore[arg-type]
    for count in (0, -1, True):
        with pytest.raises(InvalidRequest, match="partitions"):
            partition_for_key("k", count)


@given(st.binary(max_size=64), st.integers(1, 10_000))
def test_every_key_has_one_partition_in_range_and_a_java_int_hash(data: bytes, partitions: int) -> None:
    h = murmur2(data)
    assert -(2**31) <= h < 2**31
    assert partition_for_key(data, partitions) == partition_for_key(data, partitions) < partitions


def test_kafkas_partitioner_is_not_apportions_routing_hash() -> None:
    """Documented as different (the module docstring): a topic's keys follow Kafka's producers, not xxhash."""
    keys = [f"order-{i}" for i in range(200)]
    assert sum(partition_for_key(k, 12) != partition_for(k, 12) for k in keys) > 150


_JAVA = """
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.utils.Utils;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HexFormat;
public class Partitions {
    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[0]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            byte[] key = HexFormat.of().parseHex(line.trim());
            out.append(Utils.murmur2(key)).append(' ').append(BuiltInPartitioner.partitionForKey(key, n)).append('\\n');
        }
        System.out.print(out);
    }
}
"""


def _keys(count: int, seed: int) -> list[bytes]:
    """Keys of every length 0-40: ASCII, non-ASCII text as UTF-8, integers' digits and random bytes."""
    rng = random.Random(seed)
    keys: list[bytes] = [b""]
    for i in range(count):
        kind = i % 4
        if kind == 0:
            keys.append(f"order-{rng.randrange(10**9)}".encode())
        elif kind == 1:
            keys.append("".join(rng.choice("aé€𝄞z0 ") for _ in range(rng.randrange(1, 12))).encode())
        elif kind == 2:
            keys.append(key_bytes(rng.randrange(-(10**12), 10**12)))
        else:
            keys.append(rng.randbytes(rng.randrange(1, 41)))
    return keys


@pytest.mark.kafka
@pytest.mark.xdist_group("kafka")
def test_the_java_client_computes_the_same_hash_and_partition(kafka: KafkaCluster, tmp_path: Path) -> None:
    """The Java client (kafka-clients on the broker's classpath) hashes 2,000 keys with ``Utils.murmur2`` and places
    them with ``BuiltInPartitioner.partitionForKey``: the same numbers, key for key."""
    source = tmp_path / "Partitions.java"
    source.write_text(_JAVA)
    keys = _keys(2000, seed=7)
    done = subprocess.run(
        ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", kafka.classpath, str(source), "13"],
        input="".join(k.hex() + "\n" for k in keys), capture_output=True, text=True, timeout=180,
        env={**os.environ, "JAVA_TOOL_OPTIONS": ""},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    java = [tuple(int(x) for x in line.split()) for line in done.stdout.splitlines()]
    ours = [(murmur2(k), partition_for_key(k, 13)) for k in keys]
    mismatches = [(k, j, o) for k, j, o in zip(keys, java, ours, strict=True) if j != o]
    assert not mismatches, mismatches[:5]


def _create(kafka: KafkaCluster, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
    for future in admin.create_topics([NewTopic(topic, partitions)], operation_timeout=30).values():
        future.result(60)


@pytest.mark.kafka
@pytest.mark.xdist_group("kafka")
def test_librdkafka_murmur2_random_and_apportions_producer_put_keys_in_the_same_partitions(
    kafka: KafkaCluster, topic: str
) -> None:
    """librdkafka chooses the partition (``murmur2_random``, no partition given) for 300 keys; apportion's producer
    chooses it itself (an explicit partition); reading the topic back, every key is where ``partition_for_key``
    says, in both records."""
    _create(kafka, topic, 7)
    keys = [k.decode("utf-8", errors="replace") for k in _keys(300, seed=11)]
    keys = list(dict.fromkeys(k for k in keys if k))
    placed: dict[str, int] = {}

    def delivered(error: object, message: object) -> None:
        assert error is None, error
        placed[message.key().decode()] = message.partition()  # type: ignore[attr-defined]

    native = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "partitioner": "murmur2_random", "log_level": 0})
    for key in keys:
        native.produce(topic, value=b"native", key=key.encode(), on_delivery=delivered)
    assert native.flush(60) == 0
    assert placed == {k: partition_for_key(k, 7) for k in keys}

    with Producer(KafkaConfig(kafka.bootstrap), topic) as producer:
        assert producer.partitions == 7
        chosen = {key: producer.send(key, b"apportion") for key in keys}
    assert chosen == placed

    found = _read_all(kafka, topic, 7, expected=2 * len(keys))
    assert {(k, v, p) for k, v, p in found} == {(k, v, placed[k]) for k in keys for v in (b"native", b"apportion")}


def _read_all(kafka: KafkaCluster, topic: str, partitions: int, expected: int) -> list[tuple[str, bytes, int]]:
    """Every record of the topic: (key, value, partition)."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "reader", "log_level": 0,
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: list[tuple[str, bytes, int]] = []

    def more() -> bool:
        for m in consumer.consume(500, timeout=0.2):
            if m.error() is None:
                found.append((m.key().decode(), m.value(), m.partition()))
        return len(found) >= expected

    try:
        wait_for(f"{expected} records read back", more, 60, poll_s=0)
    finally:
        consumer.close()
    return found
