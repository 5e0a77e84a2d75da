"""The partitioned log: per resource and partition, ordered Parquet segments with contiguous offsets.

Layout under ``root``::

    <root>/<resource>/_resource.json                 {"version": 1, "partitions": n}
    <root>/<resource>/<partition>/_manifest.json     {"version": 1, "end_offset": E, "segments": [...]}
    <root>/<resource>/<partition>/.lock              flock(2) target: one appender at a time
    <root>/<resource>/<partition>/<first:020d>-<last:020d>.parquet

Columns of every segment: ``offset`` (int64, contiguous from 0 per partition), ``key`` (string: the routing key,
``partition_for(key, n)`` is the partition), ``value`` (string payload; strings keep the demo and Spark SQL simple —
put JSON or base64 there for binary data), ``ts_ms`` (int64 epoch milliseconds, nullable).

Append protocol (the manifest is the only source of truth):

1. take the exclusive ``flock`` of the partition (appenders in any process serialise; readers take no lock);
2. read the manifest: ``E`` = end offset; delete leftovers of crashed appenders (temp files and segment files the
   manifest does not list — "torn" segments, truncated or whole);
3. write the segment ``E .. E+k-1`` to a temp file, fsync, rename to its final name, fsync the directory;
4. write the new manifest to a temp file, fsync, rename over ``_manifest.json``, fsync the directory;
5. release the lock.

Races: the leftover clean-up of step 2 deletes temp and unlisted files, which would break an appender between its
write and its rename (step 3 or 4) — but it runs only under the lock that appender holds, so it only ever meets the
files of appenders that died (a frozen appender keeps the lock, and the others wait for it). Listed segments are
never deleted or rewritten, so a reader holding an older manifest still reads whole files. ``PartitionedLog(root,
fault=...)`` is the deterministic fault-injection point that tests use to act between a temp write and its rename:
``fault(path)`` runs with the temp file written and fsynced.

A crash before step 4 leaves at most a file the manifest does not list: readers never see it and the next append
removes or overwrites it, so offsets stay contiguous and no record is duplicated. A crash after step 4 has committed
the records. Readers read the manifest (replaced atomically, so always whole) and only the segments it lists, which
are immutable; a listed segment that cannot be read means the disk lost fsynced data and raises ``ApportionError``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from apportion.errors import ApportionError, InvalidRequest

SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("key", pa.string()),
        pa.field("value", pa.string()),
        pa.field("ts_ms", pa.int64()),
    ]
)
"""Schema of every segment (and of ``PartitionedLog.read``)."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_SEGMENT = re.compile(r"^(\d{20})-(\d{20})\.parquet$")
_MANIFEST = "_manifest.json"
_RESOURCE = "_resource.json"
_LOCK = ".lock"
_TMP_PREFIX = ".tmp-"


@dataclass(frozen=True, slots=True)
class Segment:
    """One committed segment: records ``first_offset .. last_offset`` (inclusive) in the Parquet file ``path``."""

    path: str
    first_offset: int
    last_offset: int

    @property
    def records(self) -> int:
        return self.last_offset - self.first_offset + 1


@dataclass(frozen=True, slots=True)
class Appended:
    """Records ``first_offset .. last_offset`` (inclusive) were committed to ``partition`` of ``resource``."""

    resource: str
    partition: int
    first_offset: int
    last_offset: int

    @property
    def records(self) -> int:
        return self.last_offset - self.first_offset + 1


@dataclass(frozen=True, slots=True)
class _Manifest:
    end_offset: int
    segments: tuple[tuple[str, int, int], ...]  # (file name, first, last), in offset order

    def to_json(self) -> str:
        entries = [{"file": f, "first": a, "last": b} for f, a, b in self.segments]
        return json.dumps({"version": 1, "end_offset": self.end_offset, "segments": entries})

    @classmethod
    def from_json(cls, text: str) -> _Manifest:
        raw = json.loads(text)
        segments = tuple((str(e["file"]), int(e["first"]), int(e["last"])) for e in raw["segments"])
        return cls(int(raw["end_offset"]), segments)


def segment_name(first_offset: int, last_offset: int) -> str:
    return f"{first_offset:020d}-{last_offset:020d}.parquet"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(directory: Path, name: str, write: Any, fault: Callable[[Path], None] | None = None) -> None:
    """``write(file)`` into a temp file of ``directory``, fsync it, rename it to ``name``, fsync the directory."""
    tmp = directory / f"{_TMP_PREFIX}{os.getpid()}-{name}"
    with open(tmp, "wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
    if fault is not None:
        fault(tmp)
    os.replace(tmp, directory / name)
    _fsync_dir(directory)


def records_table(records: Sequence[tuple[str, str | None] | tuple[str, str | None, int | None]]) -> pa.Table:
    """A table of (key, value[, ts_ms]) tuples with the log's columns but no offsets yet."""
    keys = [r[0] for r in records]
    values = [r[1] for r in records]
    stamps = [r[2] if len(r) > 2 else None for r in records]
    return pa.table(
        {
            "key": pa.array(keys, type=pa.string()),
            "value": pa.array(values, type=pa.string()),
            "ts_ms": pa.array(stamps, type=pa.int64()),
        }
    )


class PartitionedLog:
    """The embedded log rooted at a directory (local or shared filesystem with working flock and rename)."""

    def __init__(self, root: str | os.PathLike[str], *, fault: Callable[[Path], None] | None = None) -> None:
        self.root = Path(root)
        self._fault = fault  # tests: runs between an append's temp write and its rename (segment and manifest)

    # -- resources -------------------------------------------------------------------------------------------
    def create(self, resource: str, partitions: int) -> None:
        """Create ``resource`` with ``partitions`` partitions; a no-op if it exists with the same count."""
        _check_name(resource)
        if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= 100_000:
            raise InvalidRequest("partitions", f"must be an int in 1..100000, got {partitions!r}")
        directory = self.root / resource
        directory.mkdir(parents=True, exist_ok=True)
        with _flock(directory / _LOCK):
            existing = self._read_partitions(resource)
            if existing is not None:
                if existing != partitions:
                    raise InvalidRequest(
                        "partitions", f"resource {resource!r} exists with {existing} partitions, not {partitions}"
                    )
                return
            for p in range(partitions):
                (directory / str(p)).mkdir(exist_ok=True)
            payload = json.dumps({"version": 1, "partitions": partitions}).encode()
            _write_atomically(directory, _RESOURCE, lambda f: f.write(payload))

    def resources(self) -> list[str]:
        """The resources of the log, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(d.name for d in self.root.iterdir() if (d / _RESOURCE).is_file())

    def partitions(self, resource: str) -> int:
        """The partition count of ``resource``."""
        _check_name(resource)
        count = self._read_partitions(resource)
        if count is None:
            raise InvalidRequest("resource", f"{resource!r} does not exist in the log at {self.root}")
        return count

    def _read_partitions(self, resource: str) -> int | None:
        try:
            text = (self.root / resource / _RESOURCE).read_text()
        except FileNotFoundError:
            return None
        return int(json.loads(text)["partitions"])

    def _partition_dir(self, resource: str, partition: int) -> Path:
        n = self.partitions(resource)
        if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < n:
            raise InvalidRequest("partition", f"must be an int in 0..{n - 1} for {resource!r}, got {partition!r}")
        return self.root / resource / str(partition)

    # -- reading ---------------------------------------------------------------------------------------------
    def end_offset(self, resource: str, partition: int) -> int:
        """The offset the next appended record gets (= the number of committed records)."""
        return _read_manifest(self._partition_dir(resource, partition)).end_offset

    def segments(self, resource: str, partition: int, start_offset: int = 0) -> list[Segment]:
        """Committed segments holding offsets >= ``start_offset``, in offset order (paths for Spark to read)."""
        _check_offset("start_offset", start_offset)
        directory = self._partition_dir(resource, partition)
        manifest = _read_manifest(directory)
        return [
            Segment(str(directory / name), first, last)
            for name, first, last in manifest.segments
            if last >= start_offset
        ]

    def read(self, resource: str, partition: int, start_offset: int = 0, end_offset: int | None = None) -> pa.Table:
        """Committed records with ``start_offset <= offset < end_offset`` (default: to the end), in offset order."""
        _check_offset("start_offset", start_offset)
        if end_offset is not None:
            _check_offset("end_offset", end_offset)
            if end_offset < start_offset:
                raise InvalidRequest("end_offset", f"{end_offset} is before start_offset {start_offset}")
        tables = []
        for segment in self.segments(resource, partition, start_offset):
            if end_offset is not None and segment.first_offset >= end_offset:
                break
            table = _read_segment(segment)
            lo = max(start_offset - segment.first_offset, 0)
            hi = segment.records if end_offset is None else min(end_offset - segment.first_offset, segment.records)
            tables.append(table.slice(lo, hi - lo))
        if not tables:
            return SCHEMA.empty_table()
        return pa.concat_tables(tables)

    # -- appending -------------------------------------------------------------------------------------------
    def append(self, resource: str, partition: int, records: pa.Table) -> Appended | None:
        """Commit ``records`` (columns key, value[, ts_ms]) as the next offsets of the partition, atomically.

        Returns the offsets they got, or None for an empty table. Safe across threads and processes.
        """
        directory = self._partition_dir(resource, partition)
        if records.num_rows == 0:
            return None
        body = _conform(records)
        with _flock(directory / _LOCK):
            manifest = _read_manifest(directory)
            _remove_leftovers(directory, manifest)
            first = manifest.end_offset
            last = first + body.num_rows - 1
            offsets = pa.array(np.arange(first, last + 1, dtype=np.int64))
            table = pa.Table.from_arrays([offsets, *body.columns], schema=SCHEMA)
            name = segment_name(first, last)
            _write_atomically(directory, name, lambda f: pq.write_table(table, f, use_dictionary=["key"]), self._fault)
            updated = _Manifest(last + 1, (*manifest.segments, (name, first, last)))
            payload = updated.to_json().encode()
            _write_atomically(directory, _MANIFEST, lambda f: f.write(payload), self._fault)
        return Appended(resource, partition, first, last)


def _conform(records: pa.Table) -> pa.Table:
    names = set(records.column_names)
    if "key" not in names or "value" not in names:
        raise InvalidRequest("records", f"need columns key and value, got {records.column_names}")
    ts = records.column("ts_ms") if "ts_ms" in names else pa.nulls(records.num_rows, type=pa.int64())
    try:
        columns = [
            records.column("key").cast(pa.string()),
            records.column("value").cast(pa.string()),
            ts.cast(pa.int64()),
        ]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidRequest("records", f"cannot convert to (key string, value string, ts_ms int64): {exc}") from exc
    return pa.Table.from_arrays(columns, names=["key", "value", "ts_ms"]).combine_chunks()


def _check_name(resource: object) -> None:
    if not isinstance(resource, str) or not _NAME.match(resource):
        raise InvalidRequest("resource", f"must match {_NAME.pattern} (a directory name), got {resource!r}")


def _check_offset(field: str, offset: object) -> None:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidRequest(field, f"must be an int >= 0, got {offset!r}")


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock (also when the process dies)


def _read_manifest(directory: Path) -> _Manifest:
    try:
        return _Manifest.from_json((directory / _MANIFEST).read_text())
    except FileNotFoundError:
        return _Manifest(0, ())


def _remove_leftovers(directory: Path, manifest: _Manifest) -> None:
    """Under the lock: delete temp files and segment files the manifest does not list (torn appends)."""
    listed = {name for name, _, _ in manifest.segments}
    for entry in os.listdir(directory):
        if entry.startswith(_TMP_PREFIX) or (_SEGMENT.match(entry) and entry not in listed):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / entry)


def _read_segment(segment: Segment) -> pa.Table:
    try:
        table = pq.read_table(segment.path, schema=SCHEMA)
    except (OSError, pa.ArrowInvalid) as exc:
        raise ApportionError(f"committed segment {segment.path} is unreadable (disk lost fsynced data)") from exc
    if table.num_rows != segment.records:
        raise ApportionError(f"committed segment {segment.path} has {table.num_rows} rows, not {segment.records}")
    return table
