"""THE routing hash: the Python port equals Spark's native pmod(xxhash64(key), n), and the Spark writer."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from apportion.routing import partition_for, partitions_for, spark_xxhash64
from apportion.spark import spark_partition_expr
from tests.spark._keys import varied_int_keys, varied_string_keys

pytestmark = pytest.mark.spark

MODULI = (1, 7, 64, 1000)


def _spark_hashes(spark: Any, path: Path, table: pa.Table) -> pa.Table:
    """xxhash64 and pmod(xxhash64, n) of every key, computed by Spark, back in key order."""
    from pyspark.sql import functions as F

    pq.write_table(table, path)
    df = spark.read.parquet(str(path))
    cols = [F.col("i"), F.xxhash64("key").alias("h")]
    cols += [spark_partition_expr("key", n).alias(f"p{n}") for n in MODULI]
    return df.select(*cols).toArrow().sort_by("i")


# A million keys in `make soak`; a quarter of them in `make test` (the same generators: every length class, the empty
# key, astral characters and the int extremes are in both; the million took ~75 s of the Spark group on 2 cores)
SOAK = os.environ.get("APPORTION_SOAK") == "1"
STRING_KEYS, INT_KEYS = (700_000, 320_000) if SOAK else (175_000, 80_000)


def test_python_partition_equals_spark_on_many_varied_string_and_int_keys(spark: Any, tmp_path: Path) -> None:
    strings = varied_string_keys(STRING_KEYS)
    ints = varied_int_keys(INT_KEYS)
    assert "" in strings and max(map(len, strings)) >= 1000 and any(ord(max(s, default="a")) > 0xFFFF for s in strings)
    for name, keys, arrow_type in (("strings", strings, pa.string()), ("ints", ints, pa.int64())):
        table = pa.table({"i": pa.array(np.arange(len(keys))), "key": pa.array(keys, type=arrow_type)})
        got = _spark_hashes(spark, tmp_path / f"{name}.parquet", table)
        assert got.num_rows == len(keys)
        spark_h = got.column("h").to_numpy()
        ours_h = np.array([spark_xxhash64(k) for k in keys[:20_000]], dtype=np.int64)
        assert np.array_equal(spark_h[:20_000], ours_h), f"{name}: scalar xxhash64 differs from Spark"
        for n in MODULI:
            spark_p = got.column(f"p{n}").to_numpy()
            ours_p = np.array(partitions_for(keys, n), dtype=np.int64)
            mismatches = np.flatnonzero(spark_p != ours_p)
            assert mismatches.size == 0, f"{name}, n={n}: first differing key {keys[int(mismatches[0])]!r}"
        assert [partition_for(k, 64) for k in keys[-5000:]] == got.column("p64").to_pylist()[-5000:]


def test_python_ints_are_long_in_spark_and_int_columns_need_a_cast(spark: Any) -> None:
    from pyspark.sql import functions as F

    keys = [0, 5, -3, 2**40, -(2**62)]
    df = spark.createDataFrame([(k,) for k in keys], ["k"])
    assert df.schema["k"].dataType.typeName() == "long"
    assert [r.p for r in df.select(spark_partition_expr("k", 13).alias("p")).collect()] == partitions_for(keys, 13)
    small = df.where(F.abs("k") < 100).select(F.col("k").cast("int").alias("k"))
    as_int = [r.p for r in small.select(spark_partition_expr("k", 1000).alias("p")).collect()]
    as_long = [r.p for r in small.select(spark_partition_expr(F.col("k").cast("long"), 1000).alias("p")).collect()]
    assert as_long == partitions_for([0, 5, -3], 1000)
    assert as_int != as_long  # Spark hashes IntegerType as 4 bytes: the reason integral keys must be long


def test_bytes_keys_hash_like_spark_binary(spark: Any) -> None:
    keys = [b"", b"\x00", bytes(range(256)), "é".encode()]
    df = spark.createDataFrame([(bytearray(k),) for k in keys], "k binary")
    assert [r.p for r in df.select(spark_partition_expr("k", 97).alias("p")).collect()] == partitions_for(keys, 97)


def test_route_appends_every_row_once_to_its_partition_with_contiguous_offsets(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    from apportion.log import PartitionedLog, Producer
    from apportion.spark import route

    log = PartitionedLog(tmp_path / "log")
    log.create("orders", 5)
    with Producer(log, "orders") as producer:  # a Python producer writes first: Spark appends after its offsets
        producer.send_many([(f"user-{i}", "python") for i in range(100)])
    rows = 300_000
    df = spark.range(rows).select(F.concat(F.lit("user-"), (F.col("id") % 7919).cast("string")).alias("k"), "id")
    result = route(df, "k", log, "orders", segment_records=40_000)
    assert result.records == rows
    assert sum(result.records_by_partition().values()) == rows
    ids: list[int] = []
    for p in range(5):
        table = log.read("orders", p)
        assert table.column("offset").to_pylist() == list(range(table.num_rows)), f"partition {p} has offset gaps"
        keys = table.column("key").to_pylist()
        assert partitions_for(keys, 5) == [p] * len(keys), f"partition {p} holds a key routed elsewhere"
        values = table.column("value").to_pylist()
        ids += [int(v[len('{"id":') : -1]) for v in values if v != "python"]
        assert values.count("python") == sum(partition_for(f"user-{i}", 5) == p for i in range(100))
    assert sorted(ids) == list(range(rows))
    assert all(a.records <= 40_000 for a in result.appended)


def test_route_rejects_an_unknown_key_column(spark: Any, tmp_path: Path) -> None:
    from apportion.errors import InvalidRequest
    from apportion.log import PartitionedLog
    from apportion.spark import route

    log = PartitionedLog(tmp_path / "log")
    log.create("orders", 2)
    with pytest.raises(InvalidRequest, match="key_col"):
        route(spark.range(3), "nope", log, "orders")
