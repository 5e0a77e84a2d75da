"""Pipeline output: the checkpoint format, the output layout, and the ONLY correct ways to read the output.

Layout under the output directory (one directory per committed micro-batch of a partition, written by Spark's
executors with ``partitionBy``; its data files are Spark's ``part-*.parquet``)::

    <output>/<resource>/p=<p>/batch=<start:020d>-<end:020d>-e<epoch:010d>/part-*.parquet   start <= offset < end
    <output>/<resource>/.spark-staging-<job>/                                                a write in flight

The epoch of the writer is part of the name: a fenced zombie and the new owner may process the same offset range at
the same time, and each must be able to delete its own uncommitted output without ever touching the other's. The
name is still deterministic: the same owner (epoch) re-running the same range replaces its own attempt (Spark's
dynamic partition overwrite replaces exactly the directories a job writes).

An output is *committed* when the checkpoint of its partition (``commit/<p>`` in the store, written by a fenced
transaction) lists it: the checkpoint is the manifest, as in Spark's file sink and Delta's log. It is
``Checkpoint.to_json()``::

    {"offset": E, "outputs": ["<resource>/p=<p>/batch=<...>", ...]}     E = next input offset to process

Anything not listed (a crashed or fenced writer's directory, a staging directory) is invisible: ``read_committed``
and ``read_committed_arrow`` read exactly the listed outputs, in checkpoint order (= offset order per partition), and
``verify`` checks the committed output against the input log (counts, duplicates, gaps, per-key order, checksums).
Checkpoints written before this layout list single files ``<resource>/<p>/<start>-<end>-e<epoch>.parquet``; they
are read the same way (a listed output is a Parquet file or a directory of them).

A checkpoint is input that anyone with write access to the store can change: ``Checkpoint.parse`` refuses one whose
outputs are not plain relative paths (absolute, ``..``, empty names) and ``committed_files`` — the one reader of
output paths — one whose output resolves outside the output directory through a symlink (``apportion._files``):
both ``CorruptRecord`` (exit 2), never a read outside the output. A listed output file that is truncated or not
Parquet is ``CorruptFile`` (exit 2) naming it.

Paths: the worker resolves the output directory (clean-up, the stateful path, verify) and Spark's executors resolve
it (the writes), so it must be the same directory for both: the same machine, or a shared mount at the same path.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import pyarrow as pa

from apportion._files import inside, plain_relpath, read_parquet
from apportion.errors import CorruptFile, CorruptRecord, InvalidRequest
from apportion.group import committed
from apportion.log import PartitionedLog
from apportion.model import split_partition_name
from apportion.store import Store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OUTPUT_BATCH = re.compile(r"^batch=(\d{20})-(\d{20})-e(\d{10})$")
"""A batch directory's name: offsets ``start``, ``end`` and the writer's ``epoch``."""
PARTITION_COLUMN, BATCH_COLUMN = "p", "batch"
"""The columns Spark's writer partitions by (the directory names ``p=<p>/batch=<...>``; not in the data files)."""

OUTPUT_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("key", pa.string()),
        pa.field("value", pa.string()),
        pa.field("digest", pa.string()),
    ]
)
"""Schema written by the default transform (``apportion.spark.transform``); a custom transform may differ but must
keep ``partition`` and ``offset``."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A partition's committed progress: the next input offset, every committed output file (relative paths) and,
    for a stateful pipeline, the committed ranges of its changelog (``apportion.spark.state``: what a restore
    replays)."""

    offset: int = 0
    outputs: tuple[str, ...] = field(default_factory=tuple)
    changelog: tuple[tuple[int, int], ...] = field(default_factory=tuple)

    def to_json(self) -> str:
        raw: dict[str, Any] = {"offset": self.offset, "outputs": list(self.outputs)}
        if self.changelog:
            raw["changelog"] = [list(r) for r in self.changelog]
        return json.dumps(raw, separators=(",", ":"))

    @classmethod
    def parse(cls, text: str | None, partition: int) -> Checkpoint:
        """The checkpoint in ``text`` (None: nothing committed yet). ``CorruptRecord`` for a foreign format, and for
        an output that is not a plain relative path (absolute, ``..``: it would be read outside the output)."""
        if text is None:
            return cls()
        try:
            raw = json.loads(text)
            offset = int(raw["offset"])
            if not isinstance(raw["outputs"], list):
                raise TypeError("outputs must be a list")
            outputs = tuple(raw["outputs"])
            changelog = tuple((int(first), int(end)) for first, end in raw.get("changelog", ()))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise CorruptRecord(
                None,
                f"the committed checkpoint of partition {partition}, {text[:80]!r}, is not a pipeline checkpoint "
                "(was the group used by something else?)",
            ) from exc
        for output in outputs:
            if not plain_relpath(output):
                raise CorruptRecord(
                    None,
                    f"the committed checkpoint of partition {partition} lists the output {output!r:.80}, which is not "
                    "a relative path inside the output directory",
                )
        return cls(offset, outputs, changelog)

    def then(self, end: int, output: str | None, changelog: tuple[tuple[int, int], ...] | None = None) -> Checkpoint:
        """The checkpoint after committing ``output`` (None: the batch produced no rows) for the offsets up to
        ``end`` (and, for a stateful pipeline, the changelog ranges that include the batch's appended records)."""
        outputs = self.outputs if output is None else (*self.outputs, output)
        return Checkpoint(end, outputs, self.changelog if changelog is None else changelog)


def batch_name(start: int, end: int, epoch: int) -> str:
    """The value of the ``batch`` column for ``start <= offset < end`` written under ``epoch``."""
    return f"{start:020d}-{end:020d}-e{epoch:010d}"


def partition_dir(resource: str, partition: int) -> str:
    """The directory (relative to the output directory) of every batch of ``partition``."""
    return f"{resource}/{PARTITION_COLUMN}={partition}"


def output_relpath(resource: str, partition: int, start: int, end: int, epoch: int) -> str:
    """The output directory of one batch, relative to the output directory (what a checkpoint lists)."""
    return f"{partition_dir(resource, partition)}/{BATCH_COLUMN}={batch_name(start, end, epoch)}"


OUTPUT_REMEDY = (
    "restore it from a backup, or rebuild the output: the input log still holds its records (a new group over an "
    "empty output directory processes them again)"
)


def read_output(path: str | Path) -> pa.Table:
    """One listed output (a batch directory, or a Parquet file of the layout before it) as a table; ``CorruptFile``
    naming a data file that is truncated or not Parquet."""
    return read_parquet(path, OUTPUT_REMEDY)  # a directory: its data files; names starting with "." or "_" skipped


def remove_output(path: str | Path) -> None:
    """Delete one output (a batch directory or a file); nothing if it is gone already."""
    target = Path(path)
    if target.is_dir():
        shutil.rmtree(target, ignore_errors=True)
    else:
        target.unlink(missing_ok=True)


def committed_checkpoints(store: Store, group: str, resource: str | None = None) -> dict[int, Checkpoint]:
    """Every partition's committed checkpoint (partitions that never committed are absent), by partition index: the
    group's partitions, or in a group over several resources those of ``resource`` (``<resource>-<index>``)."""
    found: dict[int, Checkpoint] = {}
    for pid, text in committed(store, group).items():
        if isinstance(pid, str):
            named = split_partition_name(pid)  # committed() gives only ids of this form
            if named is None or named[0] != resource:
                continue
            pid = int(named[1])
        found[pid] = Checkpoint.parse(text, pid)
    return found


def committed_files(store: Store, group: str, output_dir: str | Path, resource: str | None = None) -> list[Path]:
    """The committed outputs (batch directories, or files of the older layout), by partition then offset; raises
    ``CorruptFile`` if a listed output is missing, ``CorruptRecord`` if one leads out of ``output_dir``.
    ``resource``: as for :func:`committed_checkpoints`."""
    root = Path(output_dir)
    files: list[Path] = []
    for partition, checkpoint in committed_checkpoints(store, group, resource).items():
        for rel in checkpoint.outputs:
            if inside(root, rel) is None:
                raise CorruptRecord(
                    None,
                    f"the committed checkpoint of partition {partition} lists the output {rel!r:.80}, which leads out "
                    f"of the output directory {root} (a symlink?)",
                )
            path = root / rel
            if not path.exists():
                raise CorruptFile(path, f"missing, but the checkpoint of partition {partition} lists it", OUTPUT_REMEDY)
            files.append(path)
    return files


@overload
def read_committed(spark: None, store: Store, group: str, output_dir: str | Path) -> pa.Table: ...
@overload
def read_committed(spark: SparkSession, store: Store, group: str, output_dir: str | Path) -> DataFrame: ...
def read_committed(spark: SparkSession | None, store: Store, group: str, output_dir: str | Path) -> Any:
    """The committed output of ``group`` under ``output_dir``: a Spark DataFrame, or a pyarrow Table when ``spark``
    is None. Reads only the files the committed checkpoints list (never a directory listing)."""
    if spark is None:
        return read_committed_arrow(store, group, output_dir)
    files = [os.path.abspath(p) for p in committed_files(store, group, output_dir)]  # Connect: the server reads
    if not files:
        return spark.createDataFrame(OUTPUT_SCHEMA.empty_table().to_pandas(), schema=_spark_schema(OUTPUT_SCHEMA))
    return spark.read.parquet(*files)


def read_committed_arrow(store: Store, group: str, output_dir: str | Path, resource: str | None = None) -> pa.Table:
    """The committed output as one pyarrow Table, in checkpoint order (partition, then offset); of ``resource`` in a
    group over several resources."""
    tables = [read_output(p) for p in committed_files(store, group, output_dir, resource)]
    if not tables:
        return OUTPUT_SCHEMA.empty_table()
    return pa.concat_tables(tables, promote_options="default")


def _spark_schema(schema: pa.Schema) -> str:
    names = {pa.int32(): "int", pa.int64(): "long", pa.string(): "string"}
    return ", ".join(f"`{f.name}` {names[f.type]}" for f in schema)


# -- verification -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """Committed output vs input log. ``ok`` when every input record is in the output exactly once, unchanged,
    in per-key offset order, and nothing else is."""

    input_records: int
    output_records: int
    missing: int
    duplicates: int
    unexpected: int
    mismatched: int
    order_violations: int
    uncommitted_lag: int
    input_checksum: str
    output_checksum: str
    partitions: int

    @property
    def ok(self) -> bool:
        return (
            self.missing == self.duplicates == self.unexpected == self.mismatched == self.order_violations == 0
            and self.input_records == self.output_records
            and self.input_checksum == self.output_checksum
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in self.__slots__}
        out["ok"] = self.ok
        return out


def _checksum(rows: Iterable[tuple[int, int, str | None, str | None]]) -> tuple[int, str]:
    """Order-independent checksum of (partition, offset, key, value) rows: sum of 64-bit blake2b digests."""
    total = count = 0
    for p, o, k, v in rows:
        digest = hashlib.blake2b(f"{p}\x00{o}\x00{k}\x00{v}".encode(), digest_size=8).digest()
        total = (total + int.from_bytes(digest, "big")) % (1 << 64)
        count += 1
    return count, f"{total:016x}"


@dataclass(frozen=True, slots=True)
class InputRecords:
    """One input partition's records as ``verify`` compares them: their offsets (ascending; Kafka's may start above
    0 after retention and skip transaction markers), keys and values, and the offset after the last."""

    offsets: list[int]
    keys: list[str | None]
    values: list[str | None]
    end: int

    @classmethod
    def of(cls, table: pa.Table, first: int = 0) -> InputRecords:
        """A log partition's records (offsets ``first``, ``first + 1``, ... in table order)."""
        n = table.num_rows
        return cls(list(range(first, first + n)), table.column("key").to_pylist(), table.column("value").to_pylist(),
                   first + n)  # fmt: skip


def verify(store: Store, group: str, log: PartitionedLog, resource: str, output_dir: str | Path) -> VerifyReport:
    """Compare the committed output of ``group`` with every committed record of ``resource`` in ``log``."""
    n = log.partitions(resource)
    return verify_records(
        store, group, resource, output_dir, {p: InputRecords.of(log.read(resource, p)) for p in range(n)}
    )


def verify_records(
    store: Store, group: str, resource: str, output_dir: str | Path, inputs: Mapping[int, InputRecords]
) -> VerifyReport:
    """Compare the committed output of ``group`` (of ``resource``) with ``inputs``, every input partition's records
    (the log's, or a Kafka topic's: ``apportion.spark.pipeline._kafka.read_topic``)."""
    n = len(inputs)
    checkpoints = committed_checkpoints(store, group, resource)
    unknown = [p for p in checkpoints if p not in inputs]
    if unknown:
        raise InvalidRequest("resource", f"group {group!r} committed partitions {unknown} that {resource!r} lacks")
    output = read_committed_arrow(store, group, output_dir, resource)
    for column in ("partition", "offset", "key", "value"):
        if column not in output.column_names:
            raise InvalidRequest("output", f"the committed output has no {column!r} column: {output.column_names}")
    out_p = output.column("partition").to_pylist()
    out_o = output.column("offset").to_pylist()
    out_k = output.column("key").to_pylist()
    out_v = output.column("value").to_pylist()
    index = {p: {o: i for i, o in enumerate(records.offsets)} for p, records in inputs.items()}
    seen: dict[tuple[int, int], int] = {}
    last_offset: dict[tuple[int, str | None], int] = {}
    unexpected = mismatched = order_violations = 0
    for p, o, k, v in zip(out_p, out_o, out_k, out_v, strict=True):
        seen[(p, o)] = seen.get((p, o), 0) + 1
        i = index[p].get(o) if p in index else None
        if i is None:
            unexpected += 1
            continue
        if inputs[p].keys[i] != k or inputs[p].values[i] != v:
            mismatched += 1
        if last_offset.get((p, k), -1) >= o:
            order_violations += 1
        last_offset[(p, k)] = o
    input_records = sum(len(r.offsets) for r in inputs.values())
    missing = sum(1 for p, records in inputs.items() for o in records.offsets if (p, o) not in seen)
    duplicates = sum(c - 1 for c in seen.values() if c > 1)
    lag = sum(max(0, r.end - checkpoints.get(p, Checkpoint()).offset) for p, r in inputs.items())
    _, in_sum = _checksum(
        (p, o, k, v) for p, r in inputs.items() for o, k, v in zip(r.offsets, r.keys, r.values, strict=True)
    )
    _, out_sum = _checksum(zip(out_p, out_o, out_k, out_v, strict=True))
    return VerifyReport(
        input_records=input_records,
        output_records=output.num_rows,
        missing=missing,
        duplicates=duplicates,
        unexpected=unexpected,
        mismatched=mismatched,
        order_violations=order_violations,
        uncommitted_lag=lag,
        input_checksum=in_sum,
        output_checksum=out_sum,
        partitions=n,
    )


def uncommitted_records(store: Store, group: str, log: PartitionedLog, resource: str) -> dict[int, int]:
    """Per partition: input records not yet covered by the committed checkpoint."""
    checkpoints: Mapping[int, Checkpoint] = committed_checkpoints(store, group, resource)
    return {
        p: log.end_offset(resource, p) - checkpoints.get(p, Checkpoint()).offset
        for p in range(log.partitions(resource))
    }


__all__ = [
    "BATCH_COLUMN",
    "OUTPUT_BATCH",
    "OUTPUT_SCHEMA",
    "PARTITION_COLUMN",
    "Checkpoint",
    "InputRecords",
    "VerifyReport",
    "committed_checkpoints",
    "committed_files",
    "uncommitted_records",
    "batch_name",
    "output_relpath",
    "partition_dir",
    "read_committed",
    "read_committed_arrow",
    "read_output",
    "remove_output",
    "verify",
    "verify_records",
]
