"""``sqlite:///path`` — the embedded default store: many processes on one machine share one SQLite file.

URL: ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (SQLAlchemy's convention), with optional
query parameters ``timeout`` (seconds to wait for the write lock, default 5), ``synchronous`` (``normal``, the
default, or ``full``), ``poll_ms`` (watch polling interval, default 10) and ``history`` (events kept for watches,
default 200,000, ~40 MB at an estimated ~200 bytes an event: a revision holds one event per key it changed, so at
most as many revisions).

How the contract is kept:

- **Transactions.** WAL journal; every write (``txn`` with a put/delete in either branch, lease operations,
  ``compact``) runs in one ``BEGIN IMMEDIATE`` transaction, so writers are serialised by SQLite's write lock and the
  compares see the latest committed state; readers run in a deferred transaction (one consistent snapshot) and never
  block writers. A busy timeout bounds the wait for the lock; past it the call raises ``StoreUnavailable``.
- **Opening never fails because another process is opening.** SQLite answers ``SQLITE_BUSY`` *without* calling the
  busy handler where waiting could deadlock (https://www.sqlite.org/c3ref/busy_handler.html): ``PRAGMA
  journal_mode=WAL`` on a fresh file (each opener holds a read lock and wants the exclusive one), and a first read
  that meets another connection's WAL recovery or last-close clean-up (https://www.sqlite.org/wal.html, "Sometimes
  Queries Return SQLITE_BUSY In WAL Mode"). So the schema creation (WAL switch and ``CREATE ... IF NOT EXISTS`` in
  one ``BEGIN IMMEDIATE``), the first statement of every transaction and a read-only open are retried with backoff
  while SQLite says busy or locked, within the same budget as the lock wait (``timeout``, or less under a
  ``time_limit``). A read-only open of a file that holds no table yet (a writer is creating it) is ``NoSuchStore``,
  as before the file existed.
- **Revisions.** The revision is the global order; a transaction that writes takes the next one, and appends each
  change to ``events`` (the watch history, keyed by revision) in the same transaction. The current revision is the
  newest event's (or the compaction point if compaction emptied the history), so no counter row is rewritten.
- **Leases** live in ``leases`` with an indexed absolute ``expires_at`` on the injected clock (default: the wall
  clock, ``time.time()``, which every process of the machine shares). There is no daemon: every operation first
  reads ``min(expires_at)`` together with the revision (one indexed query); when something has expired, the expired
  leases and their keys are removed (one revision and one DELETE event per lease with keys, in lease-id order, as in
  the memory backend) inside a write transaction, before the operation itself. A wall-clock jump moves every lease:
  forwards, leases expire early (all at once if the jump exceeds their TTL); backwards, they live longer by the jump.
- **Watches** poll ``events`` every ``poll_ms`` (one indexed query outside a transaction when nothing changed)
  while events come; after polls that found nothing the interval doubles, up to ``IDLE_POLL_S`` (50 ms), and the
  next event brings it back: an idle member polled 100 times a second, 1.5 % of a core at 32 x 16,384 (issue 31
  item 5), for a latency nobody waits on when nothing happens. Commits made by this process to the same file wake
  its watches at once. A watch remembers the revision up to
  which it has read, so it misses nothing; if compaction overtook it (it did not poll for a whole ``history`` of
  revisions) it raises ``Compacted`` instead of skipping events.
- **Compaction.** ``compact(revision)`` deletes events at or below ``revision``; a write also compacts on its own
  once more than ``history`` revisions or events (plus 1/16 slack) are kept (events: checked every 256 revisions).
- **Space.** A write that meets a full file system (``SQLITE_FULL``: the WAL or the database cannot grow) is rolled
  back by SQLite and raised as ``StoreFull`` (a ``StoreUnavailable``) naming the file; ``refusing_writes()`` holds
  that message until a write is taken again. Unlike etcd's NOSPACE alarm, a lease renewal is a write here, so a
  running member cannot keep its partitions: its belief ends at its deadline (``on_lost``), it says once that the
  disk is full (``Worker``: repeated every ``REFUSAL_REPEAT_S`` while it lasts), waits, and registers again once
  space is freed. Reads go on working.
- **Durability.** ``synchronous=NORMAL`` (default): a commit is written to the WAL in the OS page cache before it is
  acknowledged, so an acknowledged transaction survives the crash or SIGKILL of any process. A power loss or OS
  crash may lose the transactions acknowledged since the WAL was last synced (at the latest checkpoint, i.e. within
  the last ~1000 pages of WAL); the file stays consistent and no transaction is ever half applied.
  ``?synchronous=full`` syncs every commit (survives power loss; measured ~6k instead of ~35k small txn/s).
- **Read-only** (``connect(url, read_only=True)``: ``status``, ``explain``, ``route``, ``report``): the file is
  opened with ``mode=ro`` and nothing is ever created or written — a missing file raises ``NoSuchStore``, and an
  expired lease is not removed: reads hide the keys attached to it instead (what an expiry would have deleted). In
  WAL mode a reader needs the ``-wal`` and ``-shm`` files: if a writer is live they exist and a read-only user can
  read them; if none is and they cannot be created (a directory the user cannot write), nobody is writing at that
  moment and the file is read with ``immutable=1`` — checked again after each read: should a ``-wal`` have appeared
  meanwhile (a writer started), the read is repeated through a normal read-only connection. (``immutable=1`` is
  never used while a writer is live: it would ignore the WAL and could read pages a checkpoint is rewriting.)
  A read-only store also checks after every read and watch poll that its path still names the file it opened (the
  file's ``st_dev``/``st_ino``, one ``stat``): a connection keeps reading a file that was deleted, or replaced by
  another (``mv new.db store.db``, a restore), and nobody writes that file any more, so a long-lived reader (the
  dashboard, ``status --watch``) would show its last state as current for ever. It raises ``StoreReplaced`` (a
  ``StoreUnavailable``: "store file missing" or "store replaced") instead; reopening the store reads the new file.
- **Threads.** One connection per ``SqliteStore`` per thread (``sqlite3`` objects are not thread-safe), opened on
  first use; Python's per-connection statement cache keeps the constant SQL below prepared.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs

from apportion.clock import SYSTEM_CLOCK, Clock
from apportion.errors import (
    ApportionError,
    Compacted,
    InvalidRequest,
    LeaseNotFound,
    NoSuchStore,
    StoreFull,
    StoreReplaced,
    StoreUnavailable,
)
from apportion.store._base import Store, Watch, lease_id
from apportion.store._types import (
    Compare,
    Delete,
    Event,
    EventType,
    Get,
    KeyValue,
    Lease,
    Op,
    Put,
    TxnResult,
)

SCHEMA_VERSION = 1
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_POLL_S = 0.010
IDLE_POLL_S = 0.050  # the longest pause between two polls of a watch that keeps finding nothing
DEFAULT_HISTORY = 200_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    compacted INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    create_revision INTEGER NOT NULL,
    mod_revision INTEGER NOT NULL,
    version INTEGER NOT NULL,
    lease INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_by_lease ON kv (lease) WHERE lease != 0;
CREATE TABLE IF NOT EXISTS leases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ttl_s REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS leases_by_expiry ON leases (expires_at);
CREATE TABLE IF NOT EXISTS events (
    revision INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    type INTEGER NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    create_revision INTEGER NOT NULL,
    version INTEGER NOT NULL,
    lease INTEGER NOT NULL,
    PRIMARY KEY (revision, idx)
) WITHOUT ROWID;
"""

_PUT, _DELETE = 0, 1

# The revision is the newest event's (every new revision logs at least one event), or the compaction point when
# compaction removed every event: no per-transaction counter row to rewrite (one WAL page less per commit).
_META = (
    "SELECT max(compacted, coalesce((SELECT max(revision) FROM events), 0)), compacted,"
    " (SELECT min(expires_at) FROM leases) FROM meta WHERE id = 0"
)
_SET_COMPACTED = "UPDATE meta SET compacted = ? WHERE id = 0"
_SELECT_KV = "SELECT key, value, create_revision, mod_revision, version, lease FROM kv"
_GET = _SELECT_KV + " WHERE key = ?"
_RANGE = (
    "SELECT key, value, create_revision, mod_revision, version, lease FROM kv WHERE key >= ? AND key < ? ORDER BY key"
)
_RANGE_LIMIT = _RANGE + " LIMIT ?"
_UPSERT = "INSERT OR REPLACE INTO kv VALUES (?, ?, ?, ?, ?, ?)"
_NTH_NEWEST_EVENT = "SELECT revision FROM events ORDER BY revision DESC, idx DESC LIMIT 1 OFFSET ?"
_EVENT = "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_EVENT_COLUMNS = "revision, type, key, value, create_revision, version, lease"
_WATCH_PREFIX = (
    f"SELECT {_EVENT_COLUMNS} FROM events WHERE revision > ? AND revision <= ? AND key >= ? AND key < ? "
    "ORDER BY revision, idx"
)
_WATCH_KEY = (
    f"SELECT {_EVENT_COLUMNS} FROM events WHERE revision > ? AND revision <= ? AND key = ? ORDER BY revision, idx"
)

T = TypeVar("T")

_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
# A read-only connection that cannot create the -wal/-shm files (a directory it cannot write) fails with these.
_CANNOT_CREATE_CODES = (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN)


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def _open_wal_index(conn: sqlite3.Connection) -> int:
    """A reader's first statement (it opens the WAL index): how many tables, indexes... the file holds."""
    return int(conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0])


def _busy(exc: sqlite3.Error) -> bool:
    """SQLite says another connection holds a lock this one needs (SQLITE_BUSY, SQLITE_LOCKED and their extended
    codes such as SQLITE_BUSY_RECOVERY): worth waiting for."""
    code = _primary_code(exc)
    if code is not None:
        return code in _BUSY_CODES
    return "locked" in str(exc) or "busy" in str(exc)


def prefix_end(prefix: str) -> str:
    """The smallest string above every key starting with ``prefix`` (keys are printable ASCII)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


@dataclass(slots=True)
class _State:
    """What one SQLite transaction knows of the store: the revision (bumped by each write) and the compaction point."""

    revision: int
    compacted: int
    event_idx: int = 0
    expired: frozenset[int] = frozenset()  # read-only: leases past their expiry, whose keys reads must hide

    def next_revision(self) -> int:
        self.revision += 1
        self.event_idx = 0
        return self.revision


@dataclass(frozen=True, slots=True)
class SqliteConfig:
    path: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    synchronous: str = "NORMAL"
    poll_s: float = DEFAULT_POLL_S
    history: int = DEFAULT_HISTORY

    @classmethod
    def parse(cls, url: str) -> SqliteConfig:
        if not isinstance(url, str) or not url.lower().startswith("sqlite:///"):
            raise InvalidRequest("url", f"{url!r} is not a sqlite URL (sqlite:///relative.db or sqlite:////abs.db)")
        rest = url[len("sqlite:///") :]
        path, _, query = rest.partition("?")
        if not path or path.endswith("/"):
            raise InvalidRequest("url", f"{url!r} names no database file")
        if path == ":memory:" or path.startswith("file:"):
            raise InvalidRequest("url", f"{url!r}: use a file path (memory:// is the in-process store)")
        params = parse_qs(query, keep_blank_values=True, strict_parsing=False) if query else {}
        known = {"timeout", "synchronous", "poll_ms", "history"}
        for name in sorted(params):
            if name not in known:
                raise InvalidRequest(
                    "url", f"unknown sqlite URL parameter {name!r} (known: {', '.join(sorted(known))})"
                )

        def number(name: str, default: float) -> float:
            if name not in params:
                return default
            text = params[name][-1]
            try:
                value = float(text)
            except ValueError:
                raise InvalidRequest("url", f"{name}={text!r} is not a number") from None
            if not (math.isfinite(value) and value > 0):
                raise InvalidRequest("url", f"{name}={text!r} must be a positive number")
            return value

        synchronous = params.get("synchronous", ["normal"])[-1].upper()
        if synchronous not in ("NORMAL", "FULL"):
            raise InvalidRequest("url", f"synchronous={synchronous.lower()!r} must be 'normal' or 'full'")
        history = number("history", DEFAULT_HISTORY)
        if history != int(history):
            raise InvalidRequest("url", f"history={history} must be a whole number of events")
        return cls(
            path=path,
            timeout_s=number("timeout", DEFAULT_TIMEOUT_S),
            synchronous=synchronous,
            poll_s=number("poll_ms", DEFAULT_POLL_S * 1000) / 1000,
            history=int(history),
        )


def _kv(row: Sequence[Any]) -> KeyValue:
    return KeyValue(row[0], row[1], row[2], row[3], row[4], row[5])


_IN_BATCH = 500  # keys per ``IN (...)`` query: well under SQLite's bound-parameter limit


def _read_keys(conn: sqlite3.Connection, keys: set[str], expired: frozenset[int]) -> dict[str, KeyValue | None]:
    """The current value of each of ``keys`` (None: absent, or bound to an ``expired`` lease that a read-only
    snapshot hides), in one query per ``_IN_BATCH`` keys."""
    found: dict[str, KeyValue | None] = dict.fromkeys(keys)
    wanted = sorted(keys)
    for i in range(0, len(wanted), _IN_BATCH):
        batch = wanted[i : i + _IN_BATCH]
        marks = ",".join("?" * len(batch))
        for row in conn.execute(f"{_SELECT_KV} WHERE key IN ({marks})", batch):
            if row[5] not in expired:
                found[row[0]] = _kv(row)
    return found


def _event(row: Sequence[Any]) -> Event:
    revision, kind, key, value, create_revision, version, lease = row
    if kind == _PUT:
        return Event(EventType.PUT, KeyValue(key, value, create_revision, revision, version, lease))
    return Event(EventType.DELETE, KeyValue(key, b"", 0, revision, 0, 0))


class SqliteStore(Store):
    """The contract on one SQLite file, shared by every process that opens it."""

    def __init__(self, url: str, config: SqliteConfig, clock: Clock = SYSTEM_CLOCK, *, read_only: bool = False) -> None:
        self.url = url
        self.read_only = read_only
        self._immutable = False  # read-only, no live writer, directory not writable: see the module docstring
        self.clock = clock
        self.config = config
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._closed = False
        self._notifier = _notifier(config.path)
        self._watches: list[_SqliteWatch] = []
        self._identity: tuple[int, int] | None = None  # read-only: (st_dev, st_ino) of the file opened
        self._refusing: str | None = None  # the StoreFull message since a write met a full disk (refusing_writes)
        if read_only:
            self._check_schema()
        else:
            self._init_schema()

    def __enter__(self) -> SqliteStore:
        return self

    # -- connections and transactions ----------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if self._closed:
            raise StoreUnavailable(f"{self.url}: the store is closed")
        if self.read_only:
            conn = self._connect_read_only()
            with self._connections_lock:
                self._connections.append(conn)
            self._local.conn = conn
            return conn
        try:
            conn = sqlite3.connect(
                self.config.path,
                timeout=self.config.timeout_s,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=256,
            )
            conn.execute(f"PRAGMA synchronous={self.config.synchronous}")
        except sqlite3.Error as exc:
            raise self._open_error(exc) from exc
        with self._connections_lock:
            self._connections.append(conn)
        self._local.conn = conn
        return conn

    def _connect_read_only(self) -> sqlite3.Connection:
        uri = Path(self.config.path).resolve().as_uri()
        for params in ("?mode=ro", "?mode=ro&immutable=1"):
            try:
                conn = sqlite3.connect(
                    uri + params,
                    uri=True,
                    timeout=self.config.timeout_s,
                    isolation_level=None,
                    check_same_thread=False,
                    cached_statements=256,
                )
            except sqlite3.Error as exc:
                raise self._open_error(exc) from exc
            try:
                self._patiently(conn, functools.partial(_open_wal_index, conn))
            except sqlite3.Error as exc:
                conn.close()
                self._local.busy_ms = None
                if (
                    params.endswith("immutable=1")
                    or _primary_code(exc) not in _CANNOT_CREATE_CODES
                    or os.path.exists(self.config.path + "-wal")
                ):
                    raise self._open_error(exc) from exc
                continue  # no live writer, and this user cannot create the -wal/-shm files
            self._immutable = "immutable" in params
            return conn
        raise AssertionError("unreachable")  # pragma: no cover

    def _check_schema(self) -> None:
        """Read-only open: the file must exist and hold an apportion store; nothing is created."""
        self._identity = self._file_identity()  # before the connection opens: a file replaced meanwhile is noticed
        if self._identity is None or not Path(self.config.path).is_file():
            raise NoSuchStore("url", f"no store file {str(Path(self.config.path).resolve())!r}")
        try:
            conn = self._connection()
            if not self._patiently(conn, functools.partial(_open_wal_index, conn)):
                # the file exists but holds no table yet: a writer is creating the store right now
                raise NoSuchStore(
                    "url", f"no store in {str(Path(self.config.path).resolve())!r} yet (the file is empty)"
                )
            version = self._read(lambda conn, state: conn.execute("SELECT version FROM schema_version").fetchone())
        except sqlite3.Error as exc:
            self.close()
            raise self._open_error(exc) from exc
        except StoreUnavailable as exc:
            self.close()
            if isinstance(exc.__cause__, sqlite3.Error) and "no such table" in str(exc.__cause__):
                raise InvalidRequest("url", f"{self.url!r} is not an apportion store") from exc
            raise
        except BaseException:
            self.close()
            raise
        if version is None or version[0] != SCHEMA_VERSION:
            self.close()
            found = "no" if version is None else version[0]
            raise InvalidRequest(
                "url", f"{self.url!r} has store schema version {found}; this apportion uses {SCHEMA_VERSION}"
            )

    def _file_identity(self) -> tuple[int, int] | None:
        """``(st_dev, st_ino)`` of the file at the store's path; None when there is none."""
        try:
            found = os.stat(self.config.path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise self._unavailable("cannot stat the store file", exc) from exc
        return found.st_dev, found.st_ino

    def _check_same_file(self) -> None:
        """Read-only: ``StoreReplaced`` when the path no longer names the file this store opened (see the module
        docstring); a writer does not check (it creates the file it writes, and a check would cost every commit)."""
        if not self.read_only:
            return
        found = self._file_identity()
        if found == self._identity:
            return
        path = str(Path(self.config.path).resolve())
        if found is None:
            raise StoreReplaced(f"store file missing: {path} was deleted or moved since it was opened")
        raise StoreReplaced(
            f"store replaced: {path} is another file than the one opened (moved or restored over it); "
            "open the store again to read it"
        )

    def _open_error(self, exc: sqlite3.Error) -> ApportionError:
        if "not a database" in str(exc):
            return InvalidRequest("url", f"{self.url!r} is not an SQLite store: {exc}")
        return self._unavailable("cannot open the store", exc)

    def _unavailable(self, what: str, exc: BaseException) -> StoreUnavailable:
        if isinstance(exc, sqlite3.Error) and self._disk_full(exc):
            # the file system is full: every write fails until space is freed ("Space" in the module docstring)
            self._refusing = (
                f"SQLite store {self.config.path} is out of space: writes are refused until space is freed on its "
                "file system"
            )
            return StoreFull(self._refusing)
        return StoreUnavailable(f"{self.url}: {what}: {exc}")

    def refusing_writes(self) -> str | None:
        return self._refusing

    def _disk_full(self, exc: sqlite3.Error) -> bool:
        """SQLITE_FULL; or an I/O error while the file system holding the store has no free block left (opening a
        store on a full disk fails to size the WAL index, ``-shm``, and SQLite says only "disk I/O error")."""
        code = _primary_code(exc)
        if code == sqlite3.SQLITE_FULL:
            return True
        if code != sqlite3.SQLITE_IOERR:
            return False
        try:
            return os.statvfs(Path(self.config.path).parent).f_bavail == 0
        except OSError:
            return False

    def _init_schema(self) -> None:
        parent = Path(self.config.path).parent
        if not parent.is_dir():
            raise InvalidRequest("url", f"directory {str(parent)!r} of {self.url!r} does not exist")
        conn = self._connection()

        def create() -> None:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreUnavailable(f"{self.url}: cannot switch to WAL mode (journal_mode={mode})")
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _SCHEMA.split(";"):  # not executescript: it would COMMIT first
                    if statement.strip():
                        conn.execute(statement)
                row = conn.execute("SELECT version FROM schema_version").fetchone()
                if row is None:
                    conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
                    conn.execute("INSERT INTO meta VALUES (0, 0)")
                elif row[0] != SCHEMA_VERSION:
                    raise InvalidRequest(
                        "url", f"{self.url!r} has store schema version {row[0]}; this apportion uses {SCHEMA_VERSION}"
                    )
                conn.execute("COMMIT")
            except BaseException:
                self._end_transaction(conn)
                raise

        try:
            self._patiently(conn, create)
        except sqlite3.Error as exc:
            self.close()
            raise self._open_error(exc) from exc
        except BaseException:
            self.close()
            raise

    def _patiently(self, conn: sqlite3.Connection, attempt: Callable[[], T]) -> T:
        """``attempt()``, again after a pause (1 ms, doubling up to 50 ms) each time SQLite says busy or locked, until
        the lock-wait budget (the busy timeout, or what is left of the caller's ``time_limit``) is spent; then the
        last error is raised. ``attempt`` must leave no transaction open when it fails (see the module docstring for
        the places where SQLite does not wait by itself)."""
        deadline = time.monotonic() + self.remaining_s(self.config.timeout_s)
        pause = 0.001
        while True:
            try:
                return attempt()
            except sqlite3.Error as exc:
                left = deadline - time.monotonic()
                if not _busy(exc) or left <= pause:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
            self._set_busy_timeout(conn, deadline - time.monotonic())  # the next attempt waits no longer than that

    def _urgently(self, conn: sqlite3.Connection, wait_s: float) -> None:
        """BEGIN IMMEDIATE, asked again every ~2 ms (1 ms in SQLite's busy handler, 1 ms here) for ``wait_s``."""
        deadline = time.monotonic() + wait_s
        self._set_busy_timeout(conn, 0.001)
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.Error as exc:
                if not _busy(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(0.001)

    def _set_busy_timeout(self, conn: sqlite3.Connection, wait_s: float) -> None:
        wait_ms = max(1, int(wait_s * 1000))
        if getattr(self._local, "busy_ms", None) != wait_ms:
            conn.execute(f"PRAGMA busy_timeout={wait_ms}")
            self._local.busy_ms = wait_ms

    def _end_transaction(self, conn: sqlite3.Connection) -> None:
        """Roll back what a failed attempt left open, keeping the connection for the next attempt."""
        with contextlib.suppress(sqlite3.Error):
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    def _drop_connection(self, conn: sqlite3.Connection) -> None:
        self._local.conn = None
        self._local.busy_ms = None
        with self._connections_lock:
            if conn in self._connections:
                self._connections.remove(conn)
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    def _rollback(self, conn: sqlite3.Connection) -> None:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            # The connection is in an unknown state: drop it; this thread opens a fresh one next time.
            self._local.conn = None
            self._local.busy_ms = None
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def _write(self, body: Callable[[sqlite3.Connection, _State], T], *, urgent: bool = False) -> T:
        """Run ``body`` in one BEGIN IMMEDIATE transaction after expiring leases; commit; wake local watches.
        ``urgent`` (lease renewals): ask for the write lock every ~2 ms instead of SQLite's busy handler, whose
        sleeps grow to 100 ms: among many writers a renewal would otherwise lose the lock to newer waiters again and
        again until its belief window ends (seen at 32 members claiming together)."""
        if self.read_only:
            raise InvalidRequest("store", f"{self.url} is open read-only")
        conn = self._connection()
        wait_s = self._bound_lock_wait(conn)
        try:
            if urgent:
                self._urgently(conn, wait_s)
            else:
                self._patiently(conn, lambda: conn.execute("BEGIN IMMEDIATE"))
        except sqlite3.Error as exc:
            raise self._unavailable(f"could not take the write lock within {wait_s:.3g} s", exc) from exc
        try:
            revision, compacted, earliest = conn.execute(_META).fetchone()
            state = _State(revision, compacted)
            if earliest is not None and earliest <= self.clock.now():
                self._expire(conn, state)
            try:
                result = body(conn, state)
            except LeaseNotFound:
                # Raised only before the body writes anything: keep the expiry work, then report.
                self._finish(conn, state, revision, compacted)
                raise
            self._finish(conn, state, revision, compacted)
            self._refusing = None  # a write was taken: space again, if there was none
            return result
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise self._unavailable("write transaction failed", exc) from exc
        except BaseException:
            self._rollback(conn)
            raise

    def _bound_lock_wait(self, conn: sqlite3.Connection) -> float:
        """Wait for the write lock at most the busy timeout, or what is left of the caller's ``time_limit`` (a
        member holding a lease never waits past its belief window for a writer that is, say, stopped mid-write)."""
        wait_s = self.remaining_s(self.config.timeout_s)
        if wait_s <= 0:
            raise StoreUnavailable(f"{self.url}: the caller's time limit has passed")
        self._set_busy_timeout(conn, wait_s)
        return wait_s

    def _finish(self, conn: sqlite3.Connection, state: _State, revision: int, compacted: int) -> None:
        keep = self.config.history
        slack = max(1, keep // 16)
        if state.revision - state.compacted > keep + slack:
            state.compacted = state.revision - keep
        step = max(1, min(256, keep // 4))
        if state.revision // step != revision // step:
            # a bound on events, not only revisions: a commit transaction of 120 partitions is one revision and 120
            # events, and 200,000 such revisions were ~3.6 GB (measured growth: 33 MB/min at 3,149 commits/s). Every
            # `step` revisions, the revision of the `keep`-th newest event (one indexed scan of `keep` rows).
            over = conn.execute(_NTH_NEWEST_EVENT, (keep + slack,)).fetchone()
            if over is not None:
                state.compacted = max(state.compacted, conn.execute(_NTH_NEWEST_EVENT, (keep,)).fetchone()[0])
        if state.compacted != compacted:
            conn.execute("DELETE FROM events WHERE revision <= ?", (state.compacted,))
        if state.compacted != compacted:
            conn.execute(_SET_COMPACTED, (state.compacted,))
        conn.execute("COMMIT")
        if state.revision != revision:
            self._notifier.changed()

    def _read(self, body: Callable[[sqlite3.Connection, _State], T]) -> T:
        """Run ``body`` on one snapshot; if a lease has expired, run it in a write transaction that expires it
        (read-only: hide the keys of the expired leases instead)."""
        conn = self._connection()

        def begin() -> tuple[int, int, float | None]:
            conn.execute("BEGIN")
            try:  # the first statement takes the snapshot: the one that may meet a busy lock
                row: tuple[int, int, float | None] = conn.execute(_META).fetchone()
            except BaseException:
                self._end_transaction(conn)
                raise
            return row

        try:
            revision, compacted, earliest = self._patiently(conn, begin)
            state = _State(revision, compacted)
            if earliest is not None and earliest <= self.clock.now():
                if not self.read_only:
                    conn.execute("ROLLBACK")
                    return self._write(body)
                rows = conn.execute("SELECT id FROM leases WHERE expires_at <= ?", (self.clock.now(),)).fetchall()
                state.expired = frozenset(row[0] for row in rows)
            result = body(conn, state)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise self._unavailable("read transaction failed", exc) from exc
        except BaseException:
            self._rollback(conn)
            raise
        if self._immutable and os.path.exists(self.config.path + "-wal"):
            self._drop_connection(conn)  # a writer started during the read: read again through the WAL
            return self._read(body)
        self._check_same_file()
        return result

    # -- reads ---------------------------------------------------------------------------------------------

    def revision(self) -> int:
        return self._read(lambda conn, state: state.revision)

    def _get(self, key: str) -> KeyValue | None:
        def body(conn: sqlite3.Connection, state: _State) -> KeyValue | None:
            row = conn.execute(_GET, (key,)).fetchone()
            return None if row is None or row[5] in state.expired else _kv(row)

        return self._read(body)

    def _range(self, prefix: str, limit: int | None) -> list[KeyValue]:
        def body(conn: sqlite3.Connection, state: _State) -> list[KeyValue]:
            if limit is None:
                rows = conn.execute(_RANGE, (prefix, prefix_end(prefix))).fetchall()
            else:
                rows = conn.execute(_RANGE_LIMIT, (prefix, prefix_end(prefix), limit)).fetchall()
            return [_kv(row) for row in rows if row[5] not in state.expired]

        return self._read(body)

    # -- transactions --------------------------------------------------------------------------------------

    def _txn(self, compares: Sequence[Compare], on_success: Sequence[Op], on_failure: Sequence[Op]) -> TxnResult:
        writes = any(not isinstance(op, Get) for op in (*on_success, *on_failure))

        def body(conn: sqlite3.Connection, state: _State) -> TxnResult:
            # a few statements per transaction, not several per key: every statement gives up the GIL and takes it
            # back, and while another thread of the process runs Python (a watch, a plan) each take-back can wait a
            # switch interval, all of it with the write lock held (a 60-partition claim held it ~60 ms, and other
            # members' lease renewals starved behind a crowd of them)
            puts = [op for op in (*on_success, *on_failure) if isinstance(op, Put)]
            known = _read_keys(conn, {c.key for c in compares} | {op.key for op in puts}, state.expired)
            succeeded = all(compare.holds(known[compare.key]) for compare in compares)
            ops = on_success if succeeded else on_failure
            for lease in sorted({op.lease for op in ops if isinstance(op, Put) and op.lease}):
                if conn.execute("SELECT 1 FROM leases WHERE id = ?", (lease,)).fetchone() is None:
                    raise LeaseNotFound(f"lease {lease} not found")
            base = state.revision
            revision = base + 1
            wrote = False
            responses: list[list[KeyValue] | int | None] = []
            pending: list[KeyValue] = []  # puts not yet written: flushed before a Get or Delete reads the table
            for op in ops:
                if isinstance(op, Put):
                    old = known[op.key]
                    if old is None:
                        kv = KeyValue(op.key, op.value, revision, revision, 1, op.lease)
                    else:
                        kv = KeyValue(op.key, op.value, old.create_revision, revision, old.version + 1, op.lease)
                    pending.append(kv)
                    known[op.key] = kv
                    wrote = True
                    responses.append(None)
                    continue
                self._write_puts(conn, state, pending)
                if isinstance(op, Get):
                    if op.prefix:
                        rows = conn.execute(_RANGE, (op.key, prefix_end(op.key))).fetchall()
                    else:
                        rows = conn.execute(_GET, (op.key,)).fetchall()
                    responses.append([_kv(row) for row in rows if row[5] not in state.expired])
                else:
                    count = self._delete(conn, state, op, revision, known)
                    wrote = wrote or count > 0
                    responses.append(count)
            self._write_puts(conn, state, pending)
            state.revision = revision if wrote else base
            return TxnResult(succeeded, tuple(responses), state.revision)

        return self._write(body) if writes else self._read(body)

    def _write_puts(self, conn: sqlite3.Connection, state: _State, pending: list[KeyValue]) -> None:
        """Write ``pending`` puts (in order: a key put twice keeps its last value) and their events; empty it."""
        if not pending:
            return
        conn.executemany(_UPSERT, [(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease)
                                   for kv in pending])  # fmt: skip
        first = state.event_idx
        conn.executemany(
            _EVENT,
            [(kv.mod_revision, first + i, _PUT, kv.key, kv.value, kv.create_revision, kv.version, kv.lease)
             for i, kv in enumerate(pending)],
        )  # fmt: skip
        state.event_idx += len(pending)
        pending.clear()

    def _log(self, conn: sqlite3.Connection, state: _State, kind: int, kv: KeyValue) -> None:
        conn.execute(
            _EVENT,
            (kv.mod_revision, state.event_idx, kind, kv.key, kv.value, kv.create_revision, kv.version, kv.lease),
        )
        state.event_idx += 1

    def _delete(
        self, conn: sqlite3.Connection, state: _State, op: Delete, revision: int, known: dict[str, KeyValue | None]
    ) -> int:
        if op.prefix:
            end = prefix_end(op.key)
            keys = [
                row[0]
                for row in conn.execute("SELECT key FROM kv WHERE key >= ? AND key < ? ORDER BY key", (op.key, end))
            ]
            if keys:
                conn.execute("DELETE FROM kv WHERE key >= ? AND key < ?", (op.key, end))
        else:
            keys = [op.key] if conn.execute("DELETE FROM kv WHERE key = ?", (op.key,)).rowcount else []
        for key in keys:
            self._log(conn, state, _DELETE, KeyValue(key, b"", 0, revision, 0, 0))
            known[key] = None
        return len(keys)

    # -- leases --------------------------------------------------------------------------------------------

    def _expire(self, conn: sqlite3.Connection, state: _State) -> None:
        now = self.clock.now()
        for (lid,) in conn.execute("SELECT id FROM leases WHERE expires_at <= ? ORDER BY id", (now,)).fetchall():
            self._end_lease(conn, state, lid)

    def _end_lease(self, conn: sqlite3.Connection, state: _State, lid: int) -> None:
        if not conn.execute("DELETE FROM leases WHERE id = ?", (lid,)).rowcount:
            return
        keys = [row[0] for row in conn.execute("SELECT key FROM kv WHERE lease = ? ORDER BY key", (lid,))]
        if not keys:
            return
        revision = state.next_revision()
        conn.execute("DELETE FROM kv WHERE lease = ?", (lid,))
        for key in keys:
            self._log(conn, state, _DELETE, KeyValue(key, b"", 0, revision, 0, 0))

    def _grant(self, ttl_s: float) -> Lease:
        ttl = ttl_s

        def body(conn: sqlite3.Connection, state: _State) -> Lease:
            cursor = conn.execute("INSERT INTO leases (ttl_s, expires_at) VALUES (?, ?)", (ttl, self.clock.now() + ttl))
            return Lease(int(cursor.lastrowid or 0), ttl)

        return self._write(body)

    def keepalive(self, lease: Lease | int) -> float:
        lid = lease_id(lease)

        def body(conn: sqlite3.Connection, state: _State) -> float:
            row = conn.execute("SELECT ttl_s FROM leases WHERE id = ?", (lid,)).fetchone()
            if row is None:
                raise LeaseNotFound(f"lease {lid} not found")
            conn.execute("UPDATE leases SET expires_at = ? WHERE id = ?", (self.clock.now() + row[0], lid))
            return float(row[0])

        return self._write(body, urgent=True)

    def time_to_live(self, lease: Lease | int) -> float:
        lid = lease_id(lease)

        def body(conn: sqlite3.Connection, state: _State) -> float:
            row = conn.execute("SELECT expires_at FROM leases WHERE id = ?", (lid,)).fetchone()
            if row is None:
                raise LeaseNotFound(f"lease {lid} not found")
            return max(0.0, float(row[0]) - self.clock.now())

        return self._read(body)

    def revoke(self, lease: Lease | int) -> None:
        lid = lease_id(lease)
        self._write(lambda conn, state: self._end_lease(conn, state, lid))

    # -- watches and history -------------------------------------------------------------------------------

    def _watch(self, key: str, start_revision: int | None, *, prefix: bool, deletes_only: bool) -> Watch:
        def body(conn: sqlite3.Connection, state: _State) -> int:
            if start_revision is None:
                return state.revision
            if start_revision <= state.compacted:
                raise Compacted(start_revision, state.compacted)
            return start_revision - 1

        watch = _SqliteWatch(self, key, prefix, self._read(body), deletes_only)
        with self._connections_lock:
            self._watches.append(watch)
        return watch

    def _fetch(self, watch: _SqliteWatch) -> list[Event]:
        conn = self._connection()
        try:  # fast path, one statement outside a transaction: nothing new and nothing to expire
            revision, _, earliest = self._patiently(conn, lambda: conn.execute(_META).fetchone())
        except sqlite3.Error as exc:
            raise self._unavailable("watch poll failed", exc) from exc
        if revision <= watch.position and (earliest is None or earliest > self.clock.now()):
            self._check_same_file()
            return []

        def body(conn: sqlite3.Connection, state: _State) -> list[Event]:
            if state.revision <= watch.position:
                return []
            if watch.position < state.compacted:
                raise Compacted(watch.position + 1, state.compacted)
            if watch.prefix:
                args: tuple[object, ...] = (watch.position, state.revision, watch.key, prefix_end(watch.key))
                rows = conn.execute(_WATCH_PREFIX, args).fetchall()
            else:
                rows = conn.execute(_WATCH_KEY, (watch.position, state.revision, watch.key)).fetchall()
            watch.position = state.revision
            events = [_event(row) for row in rows]
            return [e for e in events if e.type is EventType.DELETE] if watch.deletes_only else events

        return self._read(body)

    def _forget(self, watch: _SqliteWatch) -> None:
        with self._connections_lock:
            if watch in self._watches:
                self._watches.remove(watch)
        self._notifier.changed()

    def _compact(self, revision: int) -> None:
        def body(conn: sqlite3.Connection, state: _State) -> None:
            if revision > state.revision:
                raise InvalidRequest("revision", f"{revision} is in the future (current {state.revision})")
            if revision > state.compacted:
                conn.execute("DELETE FROM events WHERE revision <= ?", (revision,))
                state.compacted = revision

        self._write(body)

    def close(self) -> None:
        with self._connections_lock:
            self._closed = True
            connections, self._connections = self._connections, []
            watches, self._watches = self._watches, []
        for watch in watches:
            watch.close()
        for conn in connections:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()


class _Notifier:
    """Wakes the watches of this process when a store object of this process commits to the same file (other
    processes' commits are seen by polling)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self.generation = 0
        self._waiters = 0

    def changed(self) -> None:
        if self._waiters:
            with self._cond:
                self.generation += 1
                self._cond.notify_all()

    def wait(self, generation: int, timeout_s: float) -> None:
        with self._cond:
            if self.generation == generation:
                self._waiters += 1
                try:
                    self._cond.wait(timeout_s)
                finally:
                    self._waiters -= 1


_NOTIFIERS: dict[str, _Notifier] = {}
_NOTIFIERS_LOCK = threading.Lock()


def _notifier(path: str) -> _Notifier:
    key = str(Path(path).resolve())
    with _NOTIFIERS_LOCK:
        return _NOTIFIERS.setdefault(key, _Notifier())


class _SqliteWatch(Watch):
    def __init__(self, store: SqliteStore, key: str, prefix: bool, position: int, deletes_only: bool) -> None:
        self._store = store
        self.key = key
        self.prefix = prefix
        self.deletes_only = deletes_only
        self.position = position  # every event at or below this revision has been delivered
        self._lock = threading.Lock()
        self.closed = False
        self._quiet = 0  # polls in a row that found nothing (the pause between polls grows with it)

    def poll(self) -> list[Event]:
        with self._lock:
            if self.closed:
                return []
            return self._store._fetch(self)

    def wait(self, timeout_s: float) -> list[Event]:
        deadline = time.monotonic() + max(0.0, timeout_s)
        notifier = self._store._notifier
        fastest = self._store.config.poll_s
        while True:
            generation = notifier.generation
            events = self.poll()
            self._quiet = 0 if events else min(self._quiet + 1, 16)
            remaining = deadline - time.monotonic()
            if events or self.closed or remaining <= 0:
                return events
            pause = min(fastest * 2 ** (self._quiet - 1), max(fastest, IDLE_POLL_S))
            notifier.wait(generation, min(pause, remaining))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._store._forget(self)


def open_sqlite(url: str, clock: Clock | None = None, *, read_only: bool = False) -> SqliteStore:
    """Open (creating if needed, unless ``read_only``) the SQLite store named by ``url``; ``clock`` drives lease
    expiry."""
    try:
        return SqliteStore(url, SqliteConfig.parse(url), clock or SYSTEM_CLOCK, read_only=read_only)
    except ApportionError:
        raise
    except sqlite3.Error as exc:  # pragma: no cover - every sqlite3 call above maps its own errors
        raise StoreUnavailable(f"{url}: {exc}") from exc


__all__ = ["SqliteConfig", "SqliteStore", "open_sqlite", "prefix_end"]
