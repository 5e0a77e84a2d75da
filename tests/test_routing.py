"""THE routing hash, pure parts: XXH64 test vectors, cross-check with the xxhash package, vectorised == scalar.

Equality with real Spark on a million keys is in tests/spark/test_route.py.
"""

from __future__ import annotations

import struct

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.errors import InvalidRequest
from apportion.routing import SPARK_SEED, partition_for, partitions_for, spark_xxhash64, xxh64

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
KEYS = st.one_of(st.text(), st.binary(max_size=300), INT64, st.text(min_size=32, max_size=400))


def _signed(u: int) -> int:
    return int(struct.unpack("<q", struct.pack("<Q", u))[0])


@pytest.mark.parametrize(
    ("data", "seed", "expected"),
    [
        (b"", 0, 0xEF46DB3751D8E999),
        (b"a", 0, 0xD24EC4F1A98C6E5B),
        (b"abc", 0, 0x44BC2CF5AD770999),
        (b"message digest", 0, 0x066ED728FCEEB3BE),
        (b"abcdefghijklmnopqrstuvwxyz", 0, 0xCFE1F278FA89835C),
        (b"", 42, 0x98B1582B0977E704),
        (bytes(range(100)), 42, 0x819D2B726001D507),
    ],
)
def test_xxh64_matches_published_and_reference_vectors(data: bytes, seed: int, expected: int) -> None:
    assert xxh64(data, seed) == expected


@given(st.binary(max_size=1000), st.integers(min_value=0, max_value=2**64 - 1))
def test_xxh64_equals_the_xxhash_package_for_any_bytes_and_seed(data: bytes, seed: int) -> None:
    assert xxh64(data, seed) == xxhash.xxh64_intdigest(data, seed)


@given(st.text())
def test_strings_hash_as_their_utf8_bytes_with_seed_42(key: str) -> None:
    assert spark_xxhash64(key) == _signed(xxh64(key.encode("utf-8"), SPARK_SEED))  # the pure-Python reference


@given(INT64)
def test_ints_hash_as_8_byte_little_endian_longs(key: int) -> None:
    assert spark_xxhash64(key) == _signed(xxh64(struct.pack("<q", key), SPARK_SEED))


@settings(deadline=None)  # the first call imports numpy
@given(st.lists(KEYS, max_size=100), st.integers(min_value=1, max_value=500))
def test_the_batch_path_equals_the_pure_python_reference_hash(keys: list[str | int | bytes], n: int) -> None:
    data = [k.encode() if isinstance(k, str) else k if isinstance(k, bytes) else struct.pack("<q", k) for k in keys]
    assert partitions_for(keys, n) == [_signed(xxh64(d, SPARK_SEED)) % n for d in data]


@given(KEYS, st.integers(min_value=1, max_value=10_000))
def test_partition_is_the_non_negative_modulo_of_the_signed_hash(key: str | int | bytes, n: int) -> None:
    p = partition_for(key, n)
    assert 0 <= p < n
    assert p == spark_xxhash64(key) % n


@given(st.lists(KEYS, max_size=200), st.integers(min_value=1, max_value=500))
def test_vectorised_partitions_equal_the_scalar_function(keys: list[str | int | bytes], n: int) -> None:
    assert partitions_for(keys, n) == [partition_for(k, n) for k in keys]


@given(st.lists(INT64, min_size=1, max_size=200), st.integers(min_value=1, max_value=500))
def test_vectorised_int_fast_path_equals_the_scalar_function(keys: list[int], n: int) -> None:
    assert partitions_for(keys, n) == [partition_for(k, n) for k in keys]


def test_vectorised_path_handles_many_lengths_and_long_keys() -> None:
    keys = [("é" * (i % 97)) + str(i) for i in range(5000)] + ["x" * 5000, ""]
    assert partitions_for(iter(keys), 31) == [partition_for(k, 31) for k in keys]


def test_unsigned_reduction_would_differ_so_the_signed_one_is_used() -> None:
    negative = next(k for k in range(1000) if spark_xxhash64(k) < 0)
    unsigned = spark_xxhash64(negative) + 2**64
    assert partition_for(negative, 7) == spark_xxhash64(negative) % 7
    assert any(spark_xxhash64(negative) % n != unsigned % n for n in (3, 7, 10))


@pytest.mark.parametrize("bad", [None, 1.5, True, 2**63, -(2**63) - 1, "\ud800", ["a"]])
def test_keys_spark_cannot_hash_the_same_way_are_rejected(bad: object) -> None:
    with pytest.raises(InvalidRequest) as info:
        partition_for(bad, 4)  # type: ignore[arg-type]
    assert info.value.field == "key"
    with pytest.raises(InvalidRequest):
        partitions_for(["ok", bad], 4)  # type: ignore[list-item]


@pytest.mark.parametrize("n", [0, -1, 1.0, True, "3"])
def test_partition_count_must_be_a_positive_int(n: object) -> None:
    with pytest.raises(InvalidRequest) as info:
        partition_for("k", n)  # type: ignore[arg-type]
    assert info.value.field == "n"
    with pytest.raises(InvalidRequest):
        partitions_for([], n)  # type: ignore[arg-type]
