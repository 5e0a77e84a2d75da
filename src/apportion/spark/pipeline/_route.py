"""Route: the Spark side of THE routing hash (see ``apportion.routing``).

``spark_partition_expr(col, n)`` is the native Spark expression ``pmod(xxhash64(col), n)``; ``partition_for`` in
``apportion.routing`` is its proven-equal Python port. Spark hashes ``IntegerType``/``ShortType``/``ByteType`` as
4-byte ints but Python ints as longs, so integral columns must be ``long`` (``route`` casts them for you).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from apportion.errors import InvalidRequest
from apportion.log import Appended, PartitionedLog

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def spark_partition_expr(col: str | Column, n: int) -> Column:
    """``pmod(xxhash64(col), n)``: the partition of each row, equal to ``apportion.routing.partition_for``.

    The column must be string, binary or bigint (cast int/smallint/tinyint columns to ``long`` first).
    """
    from pyspark.sql import functions as F

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidRequest("n", f"the number of partitions must be an int >= 1, got {n!r}")
    column = F.col(col) if isinstance(col, str) else col
    return F.pmod(F.xxhash64(column), F.lit(n))


@dataclass(frozen=True, slots=True)
class RouteResult:
    """What ``route`` appended: one ``Appended`` per segment, sorted by (partition, first offset)."""

    resource: str
    appended: tuple[Appended, ...]

    @property
    def records(self) -> int:
        return sum(a.records for a in self.appended)

    def records_by_partition(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for a in self.appended:
            counts[a.partition] = counts.get(a.partition, 0) + a.records
        return dict(sorted(counts.items()))


def route(
    df: DataFrame,
    key_col: str,
    log: PartitionedLog,
    resource: str,
    *,
    value_col: str | None = None,
    ts_col: str | None = None,
    segment_records: int = 1_000_000,
) -> RouteResult:
    """Append every row of ``df`` to ``resource`` in ``log``, in partition ``pmod(xxhash64(key), n)``.

    The key is the column ``key_col`` cast to string (log keys are strings, so a Python producer sending the same
    key string lands in the same partition); the value is ``value_col`` cast to string, or the JSON of the row's
    other columns. ``ts_col`` (epoch milliseconds) is optional.

    How: the partition is computed natively by Spark, then each Spark task appends its own rows — grouped per log
    partition, in the task's row order, at most ``segment_records`` per segment — through the log's locked atomic
    append, exactly like a Python producer. No shuffle and no collect to the driver: the cost is one pass over
    the data plus Parquet writes. Offsets stay contiguous because appends to a partition serialise on its flock.
    The log root must be a filesystem every executor sees (local mode: the local disk). A Spark task that fails
    after some appends and is retried appends those rows again (at-least-once under task retries; local mode does
    not retry tasks).
    """
    from pyspark.sql import functions as F

    n = log.partitions(resource)
    if key_col not in df.columns:
        raise InvalidRequest("key_col", f"{key_col!r} is not a column of the DataFrame: {df.columns}")
    for field, name in (("value_col", value_col), ("ts_col", ts_col)):
        if name is not None and name not in df.columns:
            raise InvalidRequest(field, f"{name!r} is not a column of the DataFrame: {df.columns}")
    if isinstance(segment_records, bool) or not isinstance(segment_records, int) or segment_records < 1:
        raise InvalidRequest("segment_records", f"must be an int >= 1, got {segment_records!r}")
    key = F.col(key_col).cast("string")
    if value_col is not None:
        value = F.col(value_col).cast("string")
    else:
        others = [c for c in df.columns if c not in (key_col, ts_col)]
        value = F.to_json(F.struct(*others)) if others else F.lit(None).cast("string")
    ts = F.col(ts_col).cast("long") if ts_col is not None else F.lit(None).cast("long")
    routed = df.select(
        spark_partition_expr(key, n).cast("int").alias("partition"),
        key.alias("key"),
        value.alias("value"),
        ts.alias("ts_ms"),
    )
    root, limit = str(log.root), segment_records

    def append_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _append_task(root, resource, limit, batches)

    summary = routed.mapInArrow(append_task, "partition int, first_offset long, last_offset long").toArrow()
    appended = [
        Appended(resource, p, a, b)
        for p, a, b in zip(
            summary.column("partition").to_pylist(),
            summary.column("first_offset").to_pylist(),
            summary.column("last_offset").to_pylist(),
            strict=True,
        )
    ]
    return RouteResult(resource, tuple(sorted(appended, key=lambda a: (a.partition, a.first_offset))))


def _append_task(root: str, resource: str, limit: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Runs in a Spark task: buffer the task's rows per log partition, append segments of at most ``limit`` rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    log = PartitionedLog(root)
    buffers: dict[int, list[pa.Table]] = {}
    sizes: dict[int, int] = {}
    done: list[Appended] = []

    def flush(partition: int) -> None:
        table = pa.concat_tables(buffers.pop(partition))
        sizes.pop(partition)
        for start in range(0, table.num_rows, limit):
            appended = log.append(resource, partition, table.slice(start, limit))
            if appended is not None:
                done.append(appended)

    for batch in batches:
        if batch.num_rows == 0:
            continue
        table = pa.Table.from_batches([batch])
        order = pc.sort_indices(table, sort_keys=[("partition", "ascending")])  # stable: keeps the row order
        table = table.take(order)
        parts = table.column("partition").to_numpy()
        bounds = [0, *(np.flatnonzero(np.diff(parts)) + 1).tolist(), table.num_rows]
        for lo, hi in itertools.pairwise(bounds):
            partition = int(parts[lo])
            buffers.setdefault(partition, []).append(table.slice(lo, hi - lo).drop_columns(["partition"]))
            sizes[partition] = sizes.get(partition, 0) + hi - lo
            if sizes[partition] >= limit:
                flush(partition)
    for partition in sorted(buffers):
        flush(partition)
    yield pa.RecordBatch.from_pydict(
        {
            "partition": pa.array([a.partition for a in done], pa.int32()),
            "first_offset": pa.array([a.first_offset for a in done], pa.int64()),
            "last_offset": pa.array([a.last_offset for a in done], pa.int64()),
        }
    )


__all__ = ["RouteResult", "route", "spark_partition_expr"]
