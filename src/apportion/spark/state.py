"""The local state store of a stateful partition, backed by a changelog in the partitioned log.

Design (Kafka Streams style): the state of a partition is a function of its *committed changelog ranges*. The
changelog is ``<resource>.changelog`` (same partition count as ``resource``); each record holds the new absolute
aggregate of one key, ``{"count":c,"total":t}``, so replaying a record twice is harmless.

- The active processes a batch, ``fold``s it, ``merge``s the delta with its local state and appends those new
  absolute values to the changelog (``append_changelog``) BEFORE its fenced commit; the commit adds the appended
  ``(first, end)`` range to the checkpoint (``add_range``). Only AFTER the commit succeeds does it write its local
  file (``PartitionState.apply`` with the new position).
- A restorer (standby, learner, new active) replays only offsets inside the committed ranges (``restore``), so what a
  fenced zombie or a crashed writer appended but never committed is never applied; ``lag`` is what is left to replay.
- Local files are caches: a crash between the commit and the local write leaves the file at an older position, and
  replaying from that position repairs it. SQLite runs in WAL mode with ``synchronous=NORMAL``: a power loss may roll
  back the last transactions, but state and position roll back together, so replay repairs that too. A file that is
  corrupt when opened (not a database, truncated, a page that fails SQLite's ``quick_check``) is deleted and started
  again at position 0, with a warning: the restore then replays the whole committed changelog.
- The changelog is a resource of the partitioned log: a truncated or lost manifest of it is ``CorruptFile`` (exit 2,
  naming the file), as for any resource (``apportion.log``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from apportion.clock import SYSTEM_CLOCK, Clock
from apportion.errors import ApportionError, InvalidRequest
from apportion.log import PartitionedLog

log = logging.getLogger("apportion.state")

Ranges = tuple[tuple[int, int], ...]
"""Committed changelog ranges: sorted, non-overlapping, half-open ``(first, end)`` offset ranges."""

_VALUE = re.compile(r'^\{"count":(?P<count>\d+),"total":(?P<total>\d+)\}$')
_GET_CHUNK = 500  # keys per ``IN (...)`` query: well under SQLite's bound-parameter limit
_RESTORE_CHUNK = 100_000  # changelog records read and applied per transaction by ``restore``
_CORRUPT_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)  # the file is not (any more) a whole database


class _CorruptCache(Exception):
    """The local state file is corrupt (``PartitionState.open`` rebuilds it)."""


def changelog_resource(resource: str) -> str:
    """The log resource holding the changelog of ``resource``."""
    return f"{resource}.changelog"


@dataclass(frozen=True, slots=True)
class Aggregate:
    """The running aggregate of one key: ``count`` records whose values have ``total`` UTF-8 characters."""

    count: int
    total: int

    def __post_init__(self) -> None:
        for field in ("count", "total"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidRequest(field, f"must be an int >= 0, got {value!r}")


# -- pure functions ------------------------------------------------------------------------------------------------
def fold(records: pa.Table) -> dict[str, Aggregate]:
    """The per-key delta of a batch (columns ``key``, ``value``; others ignored), sorted by key.

    A null value counts one record of length 0; a null key is rejected (an aggregate needs a key).
    """
    if "key" not in records.column_names or "value" not in records.column_names:
        raise InvalidRequest("records", f"need columns key and value, got {records.column_names}")
    try:
        keys = records.column("key").cast(pa.string())
        values = records.column("value").cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidRequest("records", f"key and value must be strings: {exc}") from exc
    if keys.null_count:
        raise InvalidRequest("records", f"{keys.null_count} record(s) have a null key")
    lengths = pc.fill_null(pc.utf8_length(values), 0).cast(pa.int64())
    grouped = (
        pa.table({"key": keys, "length": lengths}).group_by("key").aggregate([("length", "sum"), ([], "count_all")])
    )
    rows = zip(
        grouped.column("key").to_pylist(),
        grouped.column("count_all").to_pylist(),
        grouped.column("length_sum").to_pylist(),
        strict=True,
    )
    return {key: Aggregate(count, total) for key, count, total in sorted(rows)}


def merge(state: Mapping[str, Aggregate], delta: Mapping[str, Aggregate]) -> dict[str, Aggregate]:
    """The new absolute values of the keys of ``delta`` (previous value from ``state``, absent = 0), sorted by key."""
    merged = {}
    for key in sorted(delta):
        d = delta[key]
        previous = state.get(key)
        merged[key] = d if previous is None else Aggregate(previous.count + d.count, previous.total + d.total)
    return merged


def add_range(ranges: Ranges, first: int, end: int) -> Ranges:
    """``ranges`` plus ``[first, end)``, merged with the last range when contiguous; an empty range adds nothing."""
    ranges = _check_ranges(ranges)
    _check_offset("first", first)
    _check_offset("end", end)
    if first > end:
        raise InvalidRequest("end", f"{end} is before first {first}")
    last_end = ranges[-1][1] if ranges else 0
    if first < last_end:
        raise InvalidRequest("first", f"{first} overlaps the committed ranges, which end at {last_end}")
    if first == end:
        return ranges
    if ranges and first == last_end:
        return (*ranges[:-1], (ranges[-1][0], end))
    return (*ranges, (first, end))


def lag(ranges: Ranges, position: int) -> int:
    """How many committed offsets are >= ``position`` (what a store at ``position`` still has to replay)."""
    ranges = _check_ranges(ranges)
    _check_offset("position", position)
    return sum(end - max(first, position) for first, end in ranges if end > position)


# -- the changelog -------------------------------------------------------------------------------------------------
def append_changelog(
    log: PartitionedLog,
    resource: str,
    partition: int,
    updates: Mapping[str, Aggregate],
    *,
    clock: Clock = SYSTEM_CLOCK,
) -> tuple[int, int]:
    """Append ``updates`` (one record per key, in key order) to the changelog; return their ``(first, end)`` offsets.

    Creates the changelog (same partition count as ``resource``) if needed. Empty updates append nothing and return
    ``(e, e)``, ``e`` being the changelog's end offset.
    """
    keys = _check_updates(updates)
    changelog = changelog_resource(resource)
    _ensure_changelog(log, resource, changelog)
    if not keys:
        end = log.end_offset(changelog, partition)
        return end, end
    values = [json.dumps({"count": updates[k].count, "total": updates[k].total}, separators=(",", ":")) for k in keys]
    now_ms = int(clock.now() * 1000)
    table = pa.table(
        {
            "key": pa.array(keys, type=pa.string()),
            "value": pa.array(values, type=pa.string()),
            "ts_ms": pa.repeat(pa.scalar(now_ms, type=pa.int64()), len(keys)),
        }
    )
    appended = log.append(changelog, partition, table)
    if appended is None:  # pragma: no cover - the table is never empty here
        raise ApportionError(f"appending {len(keys)} records to {changelog}/{partition} appended nothing")
    return appended.first_offset, appended.last_offset + 1


def _ensure_changelog(log: PartitionedLog, resource: str, changelog: str) -> None:
    partitions = log.partitions(resource)
    try:
        existing = log.partitions(changelog)
    except InvalidRequest:
        log.create(changelog, partitions)  # serialised by the log's flock: a no-op for the losers of a race
        return
    if existing != partitions:
        raise InvalidRequest("resource", f"{changelog!r} has {existing} partitions but {resource!r} has {partitions}")


def restore(
    log: PartitionedLog,
    resource: str,
    partition: int,
    state: PartitionState,
    ranges: Ranges,
    max_records: int | None = None,
) -> int:
    """Replay committed changelog records at or beyond ``state.position`` (oldest first, at most ``max_records``).

    Only offsets inside ``ranges`` are read; the last value of each key wins. Advances ``state.position`` past the
    last replayed record, or to the end of the last range once everything committed is applied. Returns how many
    records were replayed.
    """
    ranges = _check_ranges(ranges)
    if max_records is not None:
        _check_offset("max_records", max_records)
    changelog = changelog_resource(resource)
    pending = lag(ranges, state.position)
    budget = pending if max_records is None else min(max_records, pending)
    replayed = 0
    while replayed < budget:
        pieces = _pending(ranges, state.position, min(budget - replayed, _RESTORE_CHUNK))
        tables = []
        for lo, hi in pieces:
            table = log.read(changelog, partition, lo, hi)
            if table.num_rows != hi - lo:
                raise ApportionError(
                    f"{changelog}/{partition}: committed range [{lo}, {hi}) but the log has {table.num_rows} of "
                    f"those records (end offset {log.end_offset(changelog, partition)})"
                )
            tables.append(table.select(["key", "value"]))
        replayed += sum(hi - lo for lo, hi in pieces)
        # past the last replayed record; once all is replayed that is the end of the last range
        state.apply(_last_values(pa.concat_tables(tables), f"{changelog}/{partition}"), pieces[-1][1])
    return replayed


def _pending(ranges: Ranges, position: int, limit: int) -> list[tuple[int, int]]:
    """The committed pieces at or beyond ``position``, oldest first, holding at most ``limit`` offsets."""
    pieces: list[tuple[int, int]] = []
    for first, end in ranges:
        lo = max(first, position)
        if lo >= end:
            continue
        if limit <= 0:
            break
        hi = min(end, lo + limit)
        pieces.append((lo, hi))
        limit -= hi - lo
    return pieces


def _last_values(records: pa.Table, where: str) -> dict[str, Aggregate]:
    """Decode changelog records (in offset order); the last record of each key wins."""
    if records.column("key").null_count:
        raise ApportionError(f"changelog {where} holds a record with a null key")
    indexed = records.append_column("index", pa.array(np.arange(records.num_rows, dtype=np.int64)))
    last = indexed.group_by("key").aggregate([("index", "max")]).column("index_max")
    latest = records.take(last)
    parsed = pc.extract_regex(latest.column("value"), _VALUE.pattern)
    if parsed.null_count:
        raise ApportionError(f'changelog {where} holds a value that is not {{"count":c,"total":t}}')
    try:
        counts = pc.struct_field(parsed, "count").cast(pa.int64()).to_pylist()
        totals = pc.struct_field(parsed, "total").cast(pa.int64()).to_pylist()
    except pa.ArrowInvalid as exc:
        raise ApportionError(f"changelog {where} holds an out-of-range aggregate: {exc}") from exc
    rows = zip(latest.column("key").to_pylist(), counts, totals, strict=True)
    return {key: Aggregate(count, total) for key, count, total in sorted(rows)}


# -- the local store -----------------------------------------------------------------------------------------------
class PartitionState:
    """The local SQLite cache of one partition's state (``<directory>/<partition>.sqlite``); thread-safe."""

    def __init__(self, path: Path, connection: sqlite3.Connection) -> None:
        self.path = path
        self._connection = connection
        self._lock = threading.Lock()

    @classmethod
    def open(cls, directory: str | Path, partition: int) -> PartitionState:
        """Open (creating the directory and the file if needed) the store of ``partition``. A corrupt file is a lost
        cache: it is deleted and started again at position 0 (a warning), so a restore rebuilds it from the changelog.
        """
        _check_offset("partition", partition)
        path = Path(directory) / f"{partition}.sqlite"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ApportionError(f"cannot create the state directory {path.parent}: {exc}") from exc
        try:
            return cls(path, _connect(path))
        except _CorruptCache as exc:
            log.warning("local state %s is corrupt (%s): rebuilding it from the changelog (it is a cache)", path, exc)
            for name in (path.name, f"{path.name}-wal", f"{path.name}-shm"):
                (path.parent / name).unlink(missing_ok=True)
        try:
            return cls(path, _connect(path))
        except _CorruptCache as exc:  # pragma: no cover - a new file is not corrupt
            raise ApportionError(f"local state {path}: cannot open: {exc}") from exc

    @contextlib.contextmanager
    def _sql(self, what: str) -> Iterator[sqlite3.Connection]:
        """The connection under the lock; an open transaction is rolled back on any error, sqlite3 errors mapped."""
        with self._lock:
            try:
                yield self._connection
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):  # the original error is the one to report
                    if self._connection.in_transaction:
                        self._connection.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise ApportionError(f"local state {self.path}: {what}: {exc}") from exc
                raise

    @property
    def position(self) -> int:
        """The changelog offset below which every committed record is applied (0 for a new store)."""
        with self._sql("read position") as db:
            row = db.execute("SELECT value FROM meta WHERE name = 'position'").fetchone()
        return 0 if row is None else int(row[0])

    def get(self, keys: Iterable[str]) -> dict[str, Aggregate]:
        """The aggregates of those ``keys`` that are present, in key order."""
        wanted = sorted(set(_check_keys(keys)))
        found: dict[str, Aggregate] = {}
        with self._sql("get") as db:
            for i in range(0, len(wanted), _GET_CHUNK):
                chunk = wanted[i : i + _GET_CHUNK]
                marks = ",".join("?" * len(chunk))
                sql = f"SELECT key, count, total FROM state WHERE key IN ({marks})"
                for key, count, total in db.execute(sql, chunk):
                    found[key] = Aggregate(count, total)
        return dict(sorted(found.items()))

    def apply(self, updates: Mapping[str, Aggregate], position: int) -> None:
        """Upsert ``updates`` and set the position, in one transaction; the position never goes backwards."""
        _check_offset("position", position)
        rows = [(key, updates[key].count, updates[key].total) for key in _check_updates(updates)]
        with self._sql("apply") as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT value FROM meta WHERE name = 'position'").fetchone()
            current = 0 if row is None else int(row[0])
            if position < current:
                raise InvalidRequest("position", f"{position} is before the store's position {current}")
            db.executemany(
                "INSERT INTO state (key, count, total) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET count = excluded.count, total = excluded.total",
                rows,
            )
            db.execute(
                "INSERT INTO meta (name, value) VALUES ('position', ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                (position,),
            )
            db.execute("COMMIT")

    def snapshot(self) -> dict[str, Aggregate]:
        """Every key's aggregate, in key order."""
        with self._sql("snapshot") as db:
            rows = db.execute("SELECT key, count, total FROM state").fetchall()
        return {key: Aggregate(count, total) for key, count, total in sorted(rows)}

    def reset(self) -> None:
        """Delete every key and set the position back to 0 (before restoring from scratch)."""
        with self._sql("reset") as db:
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM state")
            db.execute("DELETE FROM meta")
            db.execute("COMMIT")

    def __len__(self) -> int:
        with self._sql("count") as db:
            return int(db.execute("SELECT COUNT(*) FROM state").fetchone()[0])

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._sql("close") as db:
            db.close()

    def __enter__(self) -> PartitionState:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def _connect(path: Path) -> sqlite3.Connection:
    """A connection to the local state file ``path`` with its tables; ``_CorruptCache`` when the file is corrupt,
    ``ApportionError`` for any other failure (a disk, permissions)."""
    connection = None
    try:
        connection = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        problems = [str(row[0]) for row in connection.execute("PRAGMA quick_check(1)")]
        if problems == ["ok"]:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute(
                "CREATE TABLE IF NOT EXISTS state "
                "(key TEXT PRIMARY KEY, count INTEGER NOT NULL, total INTEGER NOT NULL)"
            )
            connection.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            connection.execute("COMMIT")
            return connection
    except sqlite3.Error as exc:
        if connection is not None:
            connection.close()
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None and int(code) & 0xFF in _CORRUPT_CODES:
            raise _CorruptCache(str(exc)) from exc
        raise ApportionError(f"local state {path}: cannot open: {exc}") from exc
    connection.close()
    raise _CorruptCache(problems[0].splitlines()[0] if problems else "quick_check found problems")


# -- validation ----------------------------------------------------------------------------------------------------
def _check_offset(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRequest(field, f"must be an int >= 0, got {value!r}")


def _check_keys(keys: Iterable[Any]) -> list[str]:
    if isinstance(keys, str):
        raise InvalidRequest("keys", "must be an iterable of str, not a single str")
    checked = list(keys)
    for key in checked:
        if not isinstance(key, str):
            raise InvalidRequest("keys", f"must be str, got {key!r}")
    return checked


def _check_updates(updates: Mapping[str, Aggregate]) -> list[str]:
    """The keys of ``updates`` in order, after checking keys are str and values Aggregate."""
    if not isinstance(updates, Mapping):
        raise InvalidRequest("updates", f"must be a mapping of str to Aggregate, got {type(updates).__name__}")
    for key, value in updates.items():
        if not isinstance(key, str):
            raise InvalidRequest("updates", f"keys must be str, got {key!r}")
        if not isinstance(value, Aggregate):
            raise InvalidRequest("updates", f"values must be Aggregate, got {value!r} for {key!r}")
    return sorted(updates)


def _check_ranges(ranges: Sequence[Sequence[int]]) -> Ranges:
    """``ranges`` as a tuple of ``(first, end)`` tuples (lists from a JSON checkpoint are accepted), validated."""
    if isinstance(ranges, str) or not isinstance(ranges, Sequence):
        raise InvalidRequest("ranges", f"must be a sequence of (first, end) pairs, got {ranges!r}")
    checked: list[tuple[int, int]] = []
    previous_end = 0
    for item in ranges:
        if isinstance(item, str) or not isinstance(item, Sequence) or len(item) != 2:
            raise InvalidRequest("ranges", f"each range must be a (first, end) pair, got {item!r}")
        first, end = item
        _check_offset("ranges", first)
        _check_offset("ranges", end)
        if not previous_end <= first < end:
            raise InvalidRequest("ranges", f"must be sorted, non-empty and non-overlapping, got {tuple(ranges)!r}")
        checked.append((first, end))
        previous_end = end
    return tuple(checked)


__all__ = [
    "Aggregate",
    "PartitionState",
    "Ranges",
    "add_range",
    "append_changelog",
    "changelog_resource",
    "fold",
    "lag",
    "merge",
    "restore",
]
