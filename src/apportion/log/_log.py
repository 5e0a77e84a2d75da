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
2. read the manifest: ``E`` = end offset; delete leftovers of crashed appenders: temp files, and segment files the
   manifest does not list that start at ``E`` ("torn" appends: step 3 done, step 4 not). A partition without a
   manifest gets the empty one (``E`` = 0) first, BEFORE its first segment;
3. write the segment ``E .. E+k-1`` to a temp file, fsync, rename to its final name, fsync the directory;
4. write the new manifest to a temp file, fsync, rename over ``_manifest.json``, fsync the directory;
5. release the lock.

What the clean-up of step 2 may delete is only what it can prove uncommitted. An appender writes its segment at the
end offset of the manifest it holds the lock with, so a torn append is an unlisted segment starting at ``E``; an
unlisted segment starting elsewhere, or any segment in a partition without a manifest (step 2 writes the manifest
before the first segment, so this never happens by appending), is data whose manifest was lost or replaced — a
manifest deleted by hand, an older one restored, a partial copy. Then the append refuses (``CorruptFile``, exit 2,
naming the directory) and touches nothing, and readers refuse a partition with segments and no manifest the same way
(rather than read it as empty and restart its offsets at 0). The manifest and ``_resource.json`` are validated when
read (a truncated or hand-edited one is ``CorruptFile`` too), and every segment path a manifest lists is a plain
file name checked to resolve inside its partition directory (``apportion._files``).

Races: the leftover clean-up of step 2 deletes temp and unlisted files, which would break an appender between its
write and its rename (step 3 or 4) — but it runs only under the lock that appender holds, so it only ever meets the
files of appenders that died (a frozen appender keeps the lock, and the others wait for it). Listed segments are
never deleted or rewritten, so a reader holding an older manifest still reads whole files. A reader that finds no
manifest reads it again after seeing segments (the manifest is written before the first segment and never removed),
so a first append in flight is never mistaken for a lost manifest. ``PartitionedLog(root, fault=...)`` is the
deterministic fault-injection point that tests use to act between a temp write and its rename: ``fault(path)`` runs
with the temp file written and fsynced.

A crash before step 4 leaves at most a file the manifest does not list: readers never see it and the next append
removes or overwrites it, so offsets stay contiguous and no record is duplicated. A crash after step 4 has committed
the records. Readers read the manifest (replaced atomically, so always whole) and only the segments it lists, which
are immutable; a listed segment that is missing or not whole Parquet is ``CorruptFile`` (exit 2), one the disk fails
to read an ``ApportionError`` (exit 1).
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

from apportion._files import inside, read_json, read_parquet
from apportion.errors import CorruptFile, InvalidRequest

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
MANIFEST_REMEDY = (
    "restore it from a backup: apportion does not guess which segment files of the directory are committed"
)
LOST_MANIFEST_REMEDY = (
    f"restore {_MANIFEST} from a backup, or move the segment files out of the directory to start the partition "
    "empty; nothing was changed (apportion deletes no segment it cannot prove uncommitted)"
)
SEGMENT_REMEDY = "restore it from a backup: the manifest lists it as committed"


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
    def parse(cls, raw: Any, path: Path) -> _Manifest:
        """The manifest ``raw`` (parsed JSON of ``path``), validated: every segment a plain file name whose offsets
        are its name's, contiguous from 0 to ``end_offset``. ``CorruptFile`` otherwise."""

        def bad(reason: str) -> CorruptFile:
            return CorruptFile(path, reason, MANIFEST_REMEDY)

        if not isinstance(raw, dict) or not isinstance(raw.get("segments"), list):
            raise bad("not a manifest (no 'segments' list)")
        end = raw.get("end_offset")
        if not _is_offset(end):
            raise bad(f"'end_offset' must be an int >= 0, got {end!r:.40}")
        segments: list[tuple[str, int, int]] = []
        expected = 0
        for entry in raw["segments"]:
            name = entry.get("file") if isinstance(entry, dict) else None
            match = _SEGMENT.match(name) if isinstance(name, str) else None
            if match is None or (entry.get("first"), entry.get("last")) != (int(match[1]), int(match[2])):
                raise bad(f"segment entry {entry!r:.80} is not a segment file <first:020d>-<last:020d>.parquet")
            first, last = int(match[1]), int(match[2])
            if first != expected or last < first:
                raise bad(f"segment {match[0]} does not continue the offsets at {expected}")
            segments.append((match[0], first, last))
            expected = last + 1
        if end != expected:
            raise bad(f"'end_offset' {end} is not the end of its segments ({expected})")
        return cls(end, tuple(segments))


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
        """The partition count of ``_resource.json``; None for a resource that does not exist. ``CorruptFile`` for a
        file that is not one, or that is missing while partition directories hold data."""
        directory = self.root / resource
        path = directory / _RESOURCE
        try:
            raw = read_json(path, "")
        except CorruptFile as exc:
            raise CorruptFile(path, exc.reason, _resource_remedy(directory)) from exc
        if raw is None:
            holding = [name for name in _partition_names(directory) if _holds_data(directory / name)]
            if holding:
                raise CorruptFile(
                    path, f"missing, but partitions {', '.join(holding[:5])} hold data (deleted, or lost in a copy?)",
                    f"{_resource_remedy(directory)}; nothing was changed",
                )  # fmt: skip
            return None
        count = raw.get("partitions") if isinstance(raw, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 100_000:
            reason = f"'partitions' must be an int in 1..100000, got {count!r:.40}"
            raise CorruptFile(path, reason, _resource_remedy(directory))
        return count

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
            Segment(str(_segment_path(directory, name)), first, last)
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
    def check(self, resource: str) -> None:
        """Refuse (``CorruptFile``) a resource that an append would refuse in some partition — a lost or corrupt
        manifest, a segment file its manifest lost track of — before appending to any: ``pipeline produce`` changes
        nothing or appends everywhere it was asked to. Takes each partition's lock in turn; deletes nothing."""
        for partition in range(self.partitions(resource)):
            directory = self._partition_dir(resource, partition)
            with _flock(directory / _LOCK):
                _leftovers(directory, _read_manifest(directory))

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
            for leftover in _leftovers(directory, manifest):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(directory / leftover)
            if not (directory / _MANIFEST).exists():  # the manifest comes before the first segment (see above)
                empty = manifest.to_json().encode()
                _write_atomically(directory, _MANIFEST, lambda f: f.write(empty))
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


def _is_offset(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= 0


def _partition_names(directory: Path) -> list[str]:
    """The partition directories (``0``, ``1``, ...) of a resource directory, in partition order (none if absent)."""
    try:
        names = [name for name in os.listdir(directory) if name.isdigit() and (directory / name).is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(names, key=int)


def _resource_remedy(directory: Path) -> str:
    count = len(_partition_names(directory))
    return (
        f'restore it from a backup, or write {{"version": 1, "partitions": N}} to it (N: the partition count; '
        f"{count} partition directories here)"
    )


def _holds_data(directory: Path) -> bool:
    """Whether the partition directory ``directory`` holds a manifest or a segment file."""
    return any(name == _MANIFEST or _SEGMENT.match(name) for name in os.listdir(directory))


def _segments_on_disk(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if _SEGMENT.match(name))


def _read_manifest(directory: Path) -> _Manifest:
    """The partition's manifest, validated; the empty one for a partition that never had a segment. ``CorruptFile``
    for a manifest that is not one, and for segment files without a manifest (lost: see the module docstring)."""
    path = directory / _MANIFEST
    raw = read_json(path, MANIFEST_REMEDY)
    if raw is None:
        found = _segments_on_disk(directory)
        if not found:
            return _Manifest(0, ())
        raw = read_json(path, MANIFEST_REMEDY)  # a first append may have written both since the first read
        if raw is None:
            reason = f"{len(found)} segment file(s) ({found[0]}, ...) but no {_MANIFEST} (deleted, or lost in a copy?)"
            raise CorruptFile(directory, reason, LOST_MANIFEST_REMEDY)
    return _Manifest.parse(raw, path)


def _leftovers(directory: Path, manifest: _Manifest) -> list[str]:
    """Under the lock: what crashed appenders left, to delete — temp files and torn appends (unlisted segment files
    that start at the manifest's end offset). Any other unlisted segment file means the manifest lost track of data:
    ``CorruptFile``."""
    listed = {name for name, _, _ in manifest.segments}
    torn: list[str] = []
    foreign: list[str] = []
    temp: list[str] = []
    for entry in os.listdir(directory):
        match = _SEGMENT.match(entry)
        if entry.startswith(_TMP_PREFIX):
            temp.append(entry)
        elif match is not None and entry not in listed:
            (torn if int(match.group(1)) == manifest.end_offset else foreign).append(entry)
    if foreign:
        foreign.sort()
        raise CorruptFile(
            directory,
            f"segment file(s) {', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''} are not listed in "
            f"{_MANIFEST}, which ends at offset {manifest.end_offset} (an older manifest restored over newer data?)",
            f"restore the {_MANIFEST} that lists them, or move them out of the directory; nothing was changed "
            "(apportion deletes no segment it cannot prove uncommitted)",
        )
    return temp + torn


def _segment_path(directory: Path, name: str) -> Path:
    """A listed segment's path (``name`` is a plain file name: ``_Manifest.parse``), refused when a symlink leads it
    out of its partition directory."""
    if inside(directory, name) is None:
        raise CorruptFile(directory / name, "leads out of its partition directory (a symlink?)", SEGMENT_REMEDY)
    return directory / name


def _read_segment(segment: Segment) -> pa.Table:
    table = read_parquet(segment.path, SEGMENT_REMEDY, schema=SCHEMA)
    if table.num_rows != segment.records:
        reason = f"{table.num_rows} rows, but the manifest lists offsets {segment.first_offset}..{segment.last_offset}"
        raise CorruptFile(segment.path, reason, SEGMENT_REMEDY)
    return table
