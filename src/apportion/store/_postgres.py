"""``postgresql://`` / ``postgres://`` — the store contract in a PostgreSQL database (psycopg 3: the ``postgres``
extra).

URL: ``postgresql://[user[:password]@]host[:port]/database[?schema=apportion&timeout=5&history=200000]``; every
other query parameter is libpq's (``sslmode``, ``sslrootcert``, ``host=/run/postgresql`` for a socket, ...) and is
passed through. One store is one *schema* (default ``apportion``): its tables ``meta``, ``kv``, ``leases`` and
``events`` live there, so several groups or applications share one database with a schema each, and a role that has
only ``USAGE, CREATE`` on its schema (not ``CREATE`` on the database) runs everything once its schema exists.
Opening creates the schema and tables unless they exist (``CREATE`` on the database is needed only then).

How the contract is kept:

- **Transactions: one row lock on the revision counter, READ COMMITTED.** Every write (a ``txn`` that may write, a
  lease operation, ``compact``) first locks ``meta``'s one row (``SELECT ... FOR UPDATE``) and then reads the
  compared keys, so writers are serialised by that lock and each of them sees every earlier commit (READ COMMITTED
  takes a new snapshot per statement, after the lock was granted). Why not SERIALIZABLE + retry: every write bumps
  the one global revision, so any two concurrent writers conflict by construction; SERIALIZABLE would abort and
  redo all but one of them (wasted round trips, a retry storm under the 32 members of a group renewing and
  claiming together), where the lock queues them and each does its work once. The lock also makes the commit order
  the revision order, which the watches rely on (revision N is committed before N+1 is even assigned). Reads
  (``get``, ``range``, a txn of Gets) take no lock: one ``REPEATABLE READ READ ONLY`` snapshot (or one statement).
- **Revisions.** ``meta.revision`` is the global revision; a write takes the next one and appends its changes to
  ``events`` (the watch history, keyed by revision) in the same transaction, etcd-like ``create_revision``,
  ``mod_revision`` and ``version`` on every key.
- **Leases** have an absolute ``expires_at`` on **the database server's clock** (``clock_timestamp()``); the
  client's clock is never read, so members on machines whose clocks disagree share one notion of expiry. There is
  no daemon: every operation reads the expired leases together with the revision (one indexed query); when some
  have expired, a writable store removes them and their keys (one revision and one DELETE event per lease with keys,
  in lease-id order, as SQLite and memory do) inside a write transaction before the operation itself; a read-only
  store hides their keys instead. Watches poll when the earliest lease is due, so expiry is noticed within
  milliseconds even when nobody writes. **Server down or restarted**: the expiry is absolute, so a lease whose
  ttl passed while the server was unreachable is expired on the first operation after it is back (its holder's
  belief ended meanwhile: it could not renew); a lease still within its ttl lives on. (etcd instead extends every
  lease on a leader change; here the database clock is the one authority, and the downtime counts.)
- **Watches.** The ``events`` table, read by revision, is the truth: a watch remembers the revision up to which it
  has delivered and reads ``revision > position`` each time, so it misses and repeats nothing. ``LISTEN/NOTIFY``
  is the wake-up only: every commit that takes a revision sends ``NOTIFY`` on the schema's channel. One reader
  thread per store object (one connection, which also LISTENs) reads the new events of every watch into the
  watch's queue, so ``poll`` and ``wait`` never wait for the network (a member steps on a thread that must not
  hang on a frozen server; etcd's watches are streams read by a thread too); the history a watch asks for
  (``start_revision``) is read by ``watch()`` itself. A lost notification costs at most the idle poll (``poll_ms``,
  default 500 ms); the reader also wakes when the next lease is due, and expires it. When the server does not
  answer, the reader retries from the positions reached: the watches deliver nothing meanwhile and miss nothing.
- **Compaction by retention.** ``compact(revision)`` deletes the events at or below it; a write also compacts by
  itself once more than ``history`` revisions (plus 1/16) are kept. A watch that starts at or below the compaction
  point, or that fell behind it, raises ``Compacted``.
- **Time limits and failures.** Every call runs under the request ``timeout`` (default 5 s) or what is left of the
  caller's ``time_limit``: a watchdog thread shuts the connection's socket down when the deadline passes (a server
  that is frozen or a network that drops packets answers nothing; ``statement_timeout`` would need the server to
  act), and the call raises ``StoreUnavailable``; the connection is dropped and the next call opens a new one
  (connecting is bounded by libpq's ``connect_timeout``, at least 2 s). A write whose outcome is unknown (the
  connection broke before ``COMMIT`` answered) raises ``StoreUnavailable``: re-check with a compare, as on etcd.
  A wrong password, an unknown database or a missing privilege is a user mistake: ``InvalidRequest`` (CLI exit 2),
  one line, the password never shown (``_redact``).
- **A client frozen inside a write.** Every write holds the revision lock for its round trips (milliseconds); a client
  process frozen between them (SIGSTOP, a swap storm, a stop-the-world pause) would hold it until it wakes: its
  watchdog is frozen with it, and PostgreSQL does not end a *pipelined* transaction at
  ``idle_in_transaction_session_timeout`` (its backend waits for the rest of the pipeline in state ``active``, on
  ``ClientRead``; that timeout is armed only at a pipeline's end: measured on 15). So a writer waits for the lock
  ``stuck_writer_s`` at most (URL ``stuck_writer_ms``, default 500; ``lock_timeout``, set for its transaction only),
  then ends (``pg_terminate_backend``) every session that (1) is apportion's (``application_name`` 'apportion', set on
  every connection of this module), (2) holds the lock (a granted ``RowShareLock`` or ``RowExclusiveLock`` on this
  schema's ``meta``, which only writes take, and no wait for a lock) and (3) has waited for its client for more than
  ``stuck_writer_s`` (``idle in transaction``, ``idle in transaction (aborted)``, or ``active`` on ``ClientRead``: a
  pipeline half sent); then it waits again. A frozen writer stalls the group's writes for 2 x ``stuck_writer_s`` at
  most (a first look may find it idle for less than the bound: it went idle after the waiter queued). When the frozen
  client wakes, its connection is gone: its write raises ``StoreUnavailable`` and nothing of it was committed (the
  server rolled it back); a lease that lapsed meanwhile ends through the member's usual path. Another application's
  session is never ended: a write waiting for it fails at its time limit, ``StoreUnavailable`` naming the holder (pid,
  application, role, state). *Privilege*: ``pg_terminate_backend`` ends a session of a role the caller is a member of
  (so the role the fleet's workers share is enough: no superuser), or any non-superuser's session for a member of
  ``pg_signal_backend``; a superuser's session only for a superuser. A session the role may not end is named in the
  error. *Why 0.5 s*: two orders of magnitude above a healthy write's pause between its round trips (one network round
  trip), and below what a freeze leaves a healthy member: it renews every ttl/4 and believes until 0.8 ttl after its
  last renewal's request, so its next renewal (itself a writer that waits, looks, ends the frozen session and goes on)
  must pass within 0.55 ttl: 1.65 s with the group's default ttl of 3 s, 1.1 s with 2 s; the worst case, 1 s, fits
  both.
- **Failover.** A call is never re-sent: after a failover (a standby promoted behind the same host name or a
  proxy), the next call reconnects. What the group sees is what it sees of any store outage: members whose belief
  window passes without a renewal end their belief; leases (absolute times on the new primary's clock) carry
  over with the data when the replication was synchronous. An asynchronous standby may lack the last commits:
  revisions would then go back, which apportion's fencing does not survive; use synchronous replication.
- **Read-only** (``connect(url, read_only=True)``: ``status``, ``explain``, the dashboard): sessions run with
  ``default_transaction_read_only``; nothing is created, and a schema without apportion's tables (a group that does
  not exist) raises ``NoSuchStore``, as does a database that does not exist.
- **Threads and connections.** One connection per ``PostgresStore`` per thread that uses it, opened on first use,
  autocommit (transactions are begun explicitly, in the same round trip as their first statements), plus one for
  the watches' reader: a worker process holds ~3-5 (size ``max_connections`` for the fleet, or put PgBouncer in
  session mode in front; transaction mode would break LISTEN).
- **Lease ttl.** No ``default_ttl_s`` of its own (the group's 3 s): a renewal is one short transaction; what stalls
  it is a failover or an overloaded server, and no lease shorter than a failover rides one out.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import logging
import math
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors

from apportion.errors import (
    ApportionError,
    Compacted,
    InvalidRequest,
    LeaseNotFound,
    NoSuchStore,
    StoreUnavailable,
)
from apportion.store._base import Store, Watch, lease_id
from apportion.store._redact import redact, redact_url, url_secrets
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
DEFAULT_SCHEMA = "apportion"
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_POLL_S = 0.5
DEFAULT_HISTORY = 200_000
DEFAULT_STUCK_WRITER_S = 0.5  # why 0.5 s: the module docstring ("A client frozen inside a write")
APPLICATION_NAME = "apportion"  # every connection's; the only sessions a writer ever ends
_LOOK_S = 0.1  # of a write's time limit, kept for looking at the lock's holders after its last wait
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_OWN_PARAMS = {"schema", "timeout", "history", "poll_ms", "stuck_writer_ms"}
_PUT, _DELETE = 0, 1
_NOTIFIED = ("revision", "compacted", "channel", "payload")  # upsert_one_finish's parameters after the put's

T = TypeVar("T")

log = logging.getLogger(__name__)


def _prefix_end(prefix: str) -> str:
    """The smallest string above every key starting with ``prefix`` (keys are printable ASCII, compared bytewise)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


@dataclass(frozen=True, slots=True)
class PostgresConfig:
    """A parsed URL: ``conninfo`` is what libpq gets (the URL without apportion's own parameters)."""

    conninfo: str
    schema: str = DEFAULT_SCHEMA
    timeout_s: float = DEFAULT_TIMEOUT_S
    history: int = DEFAULT_HISTORY
    poll_s: float = DEFAULT_POLL_S
    stuck_writer_s: float = DEFAULT_STUCK_WRITER_S

    @classmethod
    def parse(cls, url: str) -> PostgresConfig:
        shown = redact_url(url)
        scheme = url.split("://", 1)[0].lower()
        if scheme not in ("postgresql", "postgres"):
            raise InvalidRequest("url", f"{shown!r} is not a postgresql:// URL")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError as exc:
            raise InvalidRequest("url", f"{shown!r} is not a valid URL: {redact(str(exc), url_secrets(url))}") from None
        if parts.fragment:
            raise InvalidRequest("url", f"{shown!r}: a postgresql URL has no '#' part")
        database = parts.path.lstrip("/")
        if not database or "/" in database:
            raise InvalidRequest("url", f"{shown!r} names no database (postgresql://user@host:port/DATABASE)")
        params = parse_qsl(parts.query, keep_blank_values=True)
        own = {name: value for name, value in params if name in _OWN_PARAMS}
        passed = [(name, value) for name, value in params if name not in _OWN_PARAMS]

        def number(name: str, default: float) -> float:
            if name not in own:
                return default
            try:
                value = float(own[name])
            except ValueError:
                raise InvalidRequest("url", f"{name}={own[name]!r} is not a number") from None
            if not (math.isfinite(value) and value > 0):
                raise InvalidRequest("url", f"{name}={own[name]!r} must be a positive number")
            return value

        schema = own.get("schema", DEFAULT_SCHEMA)
        if not _SCHEMA_NAME.fullmatch(schema):
            raise InvalidRequest(
                "url", f"schema={schema!r} must be a lower-case name: letters, digits and '_', at most 63"
            )
        history = number("history", DEFAULT_HISTORY)
        if history != int(history):
            raise InvalidRequest("url", f"history={own['history']!r} must be a whole number of revisions")
        conninfo = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(passed), ""))
        return cls(
            conninfo=conninfo,
            schema=schema,
            timeout_s=min(number("timeout", DEFAULT_TIMEOUT_S), 86_400.0),
            history=int(history),
            poll_s=number("poll_ms", DEFAULT_POLL_S * 1000) / 1000,
            stuck_writer_s=min(number("stuck_writer_ms", DEFAULT_STUCK_WRITER_S * 1000) / 1000, 86_400.0),
        )


def _schema_sql(schema: str) -> str:
    s = f'"{schema}"'
    return f"""
CREATE TABLE IF NOT EXISTS {s}.meta (
    id integer PRIMARY KEY CHECK (id = 0),
    revision bigint NOT NULL,
    compacted bigint NOT NULL,
    schema_version integer NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.kv (
    key text COLLATE "C" PRIMARY KEY,
    value bytea NOT NULL,
    create_revision bigint NOT NULL,
    mod_revision bigint NOT NULL,
    version bigint NOT NULL,
    lease bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS kv_by_lease ON {s}.kv (lease) WHERE lease <> 0;
CREATE TABLE IF NOT EXISTS {s}.leases (
    id bigserial PRIMARY KEY,
    ttl_s double precision NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS leases_by_expiry ON {s}.leases (expires_at);
CREATE TABLE IF NOT EXISTS {s}.events (
    revision bigint NOT NULL,
    idx integer NOT NULL,
    type smallint NOT NULL,
    key text COLLATE "C" NOT NULL,
    value bytea NOT NULL,
    create_revision bigint NOT NULL,
    version bigint NOT NULL,
    lease bigint NOT NULL,
    PRIMARY KEY (revision, idx)
);
INSERT INTO {s}.meta VALUES (0, 0, 0, {SCHEMA_VERSION}) ON CONFLICT (id) DO NOTHING
"""


class _Sql:
    """The statements of one schema (identifiers are validated names, quoted: nothing of the user's is spliced in)."""

    def __init__(self, schema: str) -> None:
        s = f'"{schema}"'
        self.schema = s
        self.channel = f'"apportion_{schema}"'
        expired = f"SELECT id FROM {s}.leases WHERE expires_at <= clock_timestamp() ORDER BY id"
        # revision, compacted, the expired leases, seconds until the next lease is due (None: no lease)
        self.meta = (
            f"SELECT revision, compacted, ARRAY({expired}),"
            f" extract(epoch FROM (SELECT min(expires_at) FROM {s}.leases) - clock_timestamp())::float8"
            f" FROM {s}.meta WHERE id = 0"
        )
        # The lock and the state in one statement: revision and compacted come from the row as locked (READ
        # COMMITTED re-reads a row updated while it waited); the expired leases from the statement's snapshot,
        # which may predate the wait: a candidate only, each is expired by a DELETE that checks its expiry again.
        # Its wait for the lock is bounded by lock_timeout, set for the transaction (%s: '500ms') by the statement
        # itself: its WHERE is evaluated before the row is locked (the server reads lock_timeout when a wait
        # begins); a statement of its own cost each put ~9% (measured: psycopg's work per statement).
        self.lock_meta = self.meta + " AND set_config('lock_timeout', %s, true) IS NOT NULL FOR UPDATE"
        # The sessions holding the revision lock (a granted RowShareLock or RowExclusiveLock on meta: only writes
        # take those; a writer queued for the row holds one too, but waits for a Lock), and whether each is a stuck
        # apportion writer: waiting for its client (idle in a transaction, or a pipeline half sent: active on
        # ClientRead) for longer than the bound (%s: application, seconds).
        waiting = (
            "(a.state IN ('idle in transaction', 'idle in transaction (aborted)')"
            " OR (a.state = 'active' AND a.wait_event = 'ClientRead'))"
        )
        self.lock_holders = (
            "SELECT a.pid, a.usename, a.application_name, a.state, a.state_change,"
            " extract(epoch FROM clock_timestamp() - a.state_change)::float8,"
            f" a.application_name = %s AND {waiting} AND clock_timestamp() - a.state_change > %s * interval '1 second'"
            " FROM pg_stat_activity a WHERE a.pid <> pg_backend_pid() AND a.wait_event_type IS DISTINCT FROM 'Lock'"
            " AND a.pid IN (SELECT l.pid FROM pg_locks l"
            f" WHERE l.locktype = 'relation' AND l.granted AND l.relation = '{s}.meta'::regclass"
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND l.mode IN ('RowShareLock', 'RowExclusiveLock')) ORDER BY a.pid"
        )
        # ends a holder found stuck, unless it moved since (its state_change and state as seen)
        self.terminate = (
            "SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a"
            " WHERE a.pid = %s AND a.state_change = %s AND a.state = %s"
        )
        self.update_meta = f"UPDATE {s}.meta SET revision = %s, compacted = %s WHERE id = 0"
        self.notify = "SELECT pg_notify(%s, %s)"
        self.channel_name = f"apportion_{schema}"
        self.delete_events = f"DELETE FROM {s}.events WHERE revision <= %s"
        columns = "key, value, create_revision, mod_revision, version, lease"
        self.select_kv = f"SELECT {columns} FROM {s}.kv"
        self.get_many = self.select_kv + " WHERE key = ANY(%s)"
        self.get = self.select_kv + " WHERE key = %s"
        self.range = self.select_kv + " WHERE key >= %s AND key < %s ORDER BY key"
        self.range_limit = self.range + " LIMIT %s"
        self.upsert = (
            f"WITH put AS (INSERT INTO {s}.kv ({columns})"
            " SELECT * FROM unnest(%s::text[], %s::bytea[], %s::int8[], %s::int8[], %s::int8[], %s::int8[])"
            " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, create_revision = EXCLUDED.create_revision,"
            " mod_revision = EXCLUDED.mod_revision, version = EXCLUDED.version, lease = EXCLUDED.lease)"
            f" INSERT INTO {s}.events SELECT * FROM unnest(%s::int8[], %s::int4[], %s::int2[], %s::text[],"
            " %s::bytea[], %s::int8[], %s::int8[], %s::int8[])"
        )
        # one put (a CAS's usual write): the same with scalar parameters, named (each is sent once); psycopg dumps
        # a list parameter element by element in Python, which cost more than the server's work for one key
        self.upsert_one = (
            f"WITH put AS (INSERT INTO {s}.kv ({columns}) VALUES (%(key)s, %(value)s, %(create)s::int8,"
            " %(mod)s::int8, %(version)s::int8, %(lease)s::int8)"
            " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, create_revision = EXCLUDED.create_revision,"
            " mod_revision = EXCLUDED.mod_revision, version = EXCLUDED.version, lease = EXCLUDED.lease)"
            f" INSERT INTO {s}.events VALUES (%(mod)s::int8, %(idx)s::int4, {_PUT}, %(key)s, %(value)s,"
            " %(create)s::int8, %(version)s::int8, %(lease)s::int8)"
        )
        # a CAS's usual end in one statement: its puts, their events, the new revision and the notification
        logged = f", logged AS (INSERT INTO {s}.events"
        bump = f"), bumped AS (UPDATE {s}.meta SET revision = %s, compacted = %s WHERE id = 0) SELECT pg_notify(%s, %s)"
        self.upsert_finish = self.upsert.replace(f" INSERT INTO {s}.events", logged) + bump
        named = bump.replace("%s", "%({})s").format(*_NOTIFIED)
        self.upsert_one_finish = self.upsert_one.replace(f" INSERT INTO {s}.events", logged) + named
        self.log_deletes = (
            f"INSERT INTO {s}.events SELECT %s, generate_subscripts(%s::text[], 1) + %s - 1, {_DELETE},"
            " unnest(%s::text[]), ''::bytea, 0, 0, 0"
        )
        self.delete_one = f"DELETE FROM {s}.kv WHERE key = %s RETURNING key"
        self.delete_range = f"DELETE FROM {s}.kv WHERE key >= %s AND key < %s RETURNING key"
        self.leases_exist = f"SELECT id FROM {s}.leases WHERE id = ANY(%s)"
        self.lease_exists = f"SELECT id FROM {s}.leases WHERE id = %s"
        self.end_lease = (
            f"WITH gone AS (DELETE FROM {s}.leases WHERE id = %s RETURNING id)"
            f" DELETE FROM {s}.kv WHERE lease IN (SELECT id FROM gone) RETURNING key"
        )
        self.expire_lease = self.end_lease.replace("WHERE id = %s", "WHERE id = %s AND expires_at <= clock_timestamp()")
        self.grant = (
            f"INSERT INTO {s}.leases (ttl_s, expires_at)"
            " VALUES (%s, clock_timestamp() + %s * interval '1 second') RETURNING id"
        )
        self.keepalive = (
            f"UPDATE {s}.leases SET expires_at = clock_timestamp() + ttl_s * interval '1 second'"
            " WHERE id = %s RETURNING ttl_s"
        )
        self.time_to_live = (
            f"SELECT greatest(0, extract(epoch FROM expires_at - clock_timestamp()))::float8 FROM {s}.leases"
            " WHERE id = %s"
        )
        events = "revision, type, key, value, create_revision, version, lease"
        self.watch_prefix = (
            f"SELECT {events} FROM {s}.events WHERE revision > %s AND revision <= %s AND key >= %s AND key < %s"
            " ORDER BY revision, idx"
        )
        self.watch_key = (
            f"SELECT {events} FROM {s}.events WHERE revision > %s AND revision <= %s AND key = %s"
            " ORDER BY revision, idx"
        )
        self.watch_prefix_deletes = self.watch_prefix.replace("ORDER BY", f"AND type = {_DELETE} ORDER BY")
        self.watch_key_deletes = self.watch_key.replace("ORDER BY", f"AND type = {_DELETE} ORDER BY")


def _kv(row: Sequence[Any]) -> KeyValue:
    return KeyValue(row[0], bytes(row[1]), row[2], row[3], row[4], row[5])


def _event(row: Sequence[Any]) -> Event:
    revision, kind, key, value, create_revision, version, lease = row
    if kind == _PUT:
        return Event(EventType.PUT, KeyValue(key, bytes(value), create_revision, revision, version, lease))
    return Event(EventType.DELETE, KeyValue(key, b"", 0, revision, 0, 0))


@dataclass(slots=True)
class _State:
    """What one write transaction knows of the store: the revision (bumped by each change) and the compaction point."""

    revision: int
    compacted: int
    expired: tuple[int, ...] = ()  # leases past their expiry (read-only: whose keys reads must hide)
    event_idx: int = 0
    # writes not sent yet (statement, arguments): sent before the next read of the tables, or with the COMMIT
    queued: list[tuple[str, tuple[Any, ...] | dict[str, Any]]] = field(default_factory=list)
    prefetched: dict[str, KeyValue | None] | None = None  # the keys a txn named, read with the lock (None: not read)
    leases_found: set[int] | None = None  # which of the leases a txn's puts name exist (None: not read)

    def next_revision(self) -> int:
        self.revision += 1
        self.event_idx = 0
        return self.revision


class _Watchdog:
    """Shuts a connection's socket down when the call using it passes its deadline (one thread per process).

    A blocked ``recv`` then returns at once and psycopg raises; closing the connection from this thread instead would
    free libpq's state under the thread using it. The shutdown happens under the lock that ``disarm`` takes, so a
    call that finished meanwhile learns that its connection was shut (and drops it) before it can close the fd."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, psycopg.Connection[Any]] = {}
        self._fired: set[int] = set()
        self._tokens = itertools.count(1)
        self._thread: threading.Thread | None = None

    def arm(self, deadline: float, conn: psycopg.Connection[Any]) -> int:
        with self._cond:
            token = next(self._tokens)
            self._armed[token] = conn
            heapq.heappush(self._heap, (deadline, token))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="apportion-pg-watchdog", daemon=True)
                self._thread.start()
            elif self._heap[0][1] == token:
                self._cond.notify()
            return token

    def disarm(self, token: int) -> bool:
        """Forget ``token``; True when its deadline passed and its connection was shut down."""
        with self._cond:
            if self._armed.pop(token, None) is not None:
                return False
            self._fired.discard(token)
            return True

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, token = self._heap[0]
                delay = deadline - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
                conn = self._armed.pop(token)
                self._fired.add(token)
                _shut(conn)


def _shut(conn: psycopg.Connection[Any]) -> None:
    with contextlib.suppress(Exception):
        fd = conn.pgconn.socket
        sock = socket.socket(fileno=os.dup(fd))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()


_WATCHDOG = _Watchdog()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


class PostgresStore(Store):
    """The contract in one schema of a PostgreSQL database, shared by every process that opens it."""

    def __init__(self, url: str, config: PostgresConfig, *, read_only: bool = False) -> None:
        self.url = redact_url(url)
        self._secrets = url_secrets(url)
        self.config = config
        self.read_only = read_only
        self._sql = _Sql(config.schema)
        self._local = threading.local()
        self._connections: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._dispatcher: _Dispatcher | None = None
        self._watches: list[_PgWatch] = []
        try:
            if read_only:
                self._check_schema()
            else:
                self._init_schema()
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r}, schema={self.config.schema!r}, read_only={self.read_only})"

    def __enter__(self) -> PostgresStore:
        return self

    # -- connections, errors -------------------------------------------------------------------------------

    def _open(self, timeout_s: float | None = None) -> psycopg.Connection[Any]:
        """A new connection within the request timeout, or what is left of the caller's ``time_limit``. libpq's
        ``connect_timeout`` counts whole seconds, 2 at least: under a shorter limit the connection is made in a
        helper thread and abandoned (closed when it completes) once the limit passes, so a renewal that must
        reconnect to a server that does not answer never holds its member past the belief window."""
        if self._closed:
            raise StoreUnavailable(f"{self.url}: the store is closed")
        budget = self.remaining_s(self.config.timeout_s) if timeout_s is None else timeout_s
        if budget <= 0:
            raise StoreUnavailable(f"{self.url}: the caller's time limit has passed")
        if budget >= 2:
            return self._connect(budget)
        done = threading.Event()
        box: list[psycopg.Connection[Any] | BaseException] = []
        abandoned = threading.Event()

        def attempt() -> None:
            try:
                conn = self._connect(2.0)
            except BaseException as exc:
                box.append(exc)
            else:
                box.append(conn)
                if abandoned.is_set():
                    conn.close()
            finally:
                done.set()

        threading.Thread(target=attempt, name="apportion-pg-connect", daemon=True).start()
        if not done.wait(budget):
            abandoned.set()
            if not done.is_set():
                raise StoreUnavailable(f"{self.url}: cannot connect: no answer within {budget:.3g} s")
        found = box[0]
        if isinstance(found, BaseException):
            raise found
        return found

    def _connect(self, budget: float) -> psycopg.Connection[Any]:
        options = "-c default_transaction_read_only=on" if self.read_only else ""
        try:
            return psycopg.connect(
                self.config.conninfo,
                autocommit=True,
                connect_timeout=max(2, math.ceil(budget)),
                application_name=APPLICATION_NAME,
                keepalives=1,
                keepalives_idle=5,
                keepalives_interval=2,
                keepalives_count=3,
                options=options,
            )
        except psycopg.Error as exc:
            raise self._error("cannot connect", exc, connecting=True) from exc

    def _connection(self) -> tuple[psycopg.Connection[Any], bool]:
        """This thread's connection, and whether it was used before (it may have broken while idle)."""
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed:
            return conn, True
        conn = self._open()
        with self._lock:
            self._connections.append(conn)
        self._local.conn = conn
        return conn, False

    def _drop(self, conn: psycopg.Connection[Any]) -> None:
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)
        with contextlib.suppress(Exception):
            conn.close()

    def _error(self, what: str, exc: BaseException, *, connecting: bool = False) -> ApportionError:
        """A psycopg error as apportion's: the user's mistakes ``InvalidRequest``, the rest ``StoreUnavailable``."""
        text = redact(_first_line(exc), self._secrets)
        sqlstate = getattr(exc, "sqlstate", None) or ""
        where = f"{self.url} (schema {self.config.schema})"
        if isinstance(exc, pg_errors.InsufficientPrivilege) or sqlstate == "42501":
            return InvalidRequest(
                "url",
                f"{where}: permission denied: {text} (the role needs USAGE and CREATE on the schema, "
                "or CREATE on the database to create the schema)",
            )
        if sqlstate.startswith("28") or "authentication failed" in text or "no password supplied" in text:
            return InvalidRequest("url", f"{self.url}: PostgreSQL authentication failed: {text}")
        if sqlstate == "3D000" or re.search(r'database ".*" does not exist', text):
            kind = NoSuchStore if self.read_only else InvalidRequest
            return kind("url", f"{self.url}: {text}")
        if connecting and isinstance(exc, psycopg.ProgrammingError):  # libpq refused the URL (an unknown option)
            return InvalidRequest("url", f"{self.url}: {text}")
        return StoreUnavailable(f"{where}: {what}: {text}")

    @contextlib.contextmanager
    def _session(
        self, what: str, first: Callable[[psycopg.Connection[Any]], Any] | None = None
    ) -> Iterator[tuple[psycopg.Connection[Any], Any]]:
        """This thread's connection for one call and what its ``first`` round trip (a transaction's start)
        returned, under the call's deadline; psycopg errors mapped; a connection in doubt (an error, a deadline)
        dropped, so the next call starts from a fresh one. A connection that broke while idle (the server restarted,
        a proxy closed it) fails its first statement before anything is applied: that statement is sent again, once,
        on a fresh connection, so a restart costs the next call nothing."""
        budget = self.remaining_s(self.config.timeout_s)
        if budget <= 0:
            raise StoreUnavailable(f"{self.url}: the caller's time limit has passed")
        deadline = time.monotonic() + budget
        conn, reused = self._connection()
        token = _WATCHDOG.arm(deadline, conn)
        row: Any = None
        pending = first
        if first is not None and reused:
            try:
                row = first(conn)
                pending = None
            except psycopg.OperationalError as exc:
                if not (conn.broken or conn.closed) or _WATCHDOG.disarm(token):
                    raise self._failed(conn, token, exc, what, budget) from exc
                self._drop(conn)
                conn, _ = self._connection()
                token = _WATCHDOG.arm(deadline, conn)
            except BaseException as exc:  # the server's answer, or not the server's (a write whose time ran out)
                mapped = self._failed(conn, token, exc, what, budget)
                if mapped is exc:
                    raise
                raise mapped from exc
        try:
            if pending is not None:
                row = pending(conn)
            yield conn, row
        except BaseException as exc:
            mapped = self._failed(conn, token, exc, what, budget)
            if mapped is exc:
                raise
            raise mapped from exc
        if _WATCHDOG.disarm(token):
            self._drop(conn)  # the answer came, but the socket was shut just after: useless now

    def _failed(
        self, conn: psycopg.Connection[Any], token: int, exc: BaseException, what: str, budget: float
    ) -> BaseException:
        """What a call that ``exc`` ended raises (``exc`` itself unless it is psycopg's); a connection in doubt (a
        psycopg error, a deadline passed, a transaction left open) dropped or rolled back. ``token``: its watchdog's
        (disarmed here: a token that was disarmed already counts as fired)."""
        fired = _WATCHDOG.disarm(token)
        if isinstance(exc, psycopg.Error):
            self._drop(conn)
            if fired:
                return StoreUnavailable(f"{self.url}: {what}: no answer within {budget:.3g} s")
            return self._error(what, exc)
        if fired or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self._rollback_or_drop(conn, fired)
        return exc

    def _rollback_or_drop(self, conn: psycopg.Connection[Any], fired: bool) -> None:
        if fired:
            self._drop(conn)
            return
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error:
            self._drop(conn)

    # -- schema ---------------------------------------------------------------------------------------------

    def _tables_present(self, conn: psycopg.Connection[Any]) -> bool:
        row = conn.execute("SELECT to_regclass(%s)", (f'"{self.config.schema}".meta',)).fetchone()
        return row is not None and row[0] is not None

    def _check_version(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute(f"SELECT schema_version FROM {self._sql.schema}.meta WHERE id = 0").fetchone()
        if row is None or row[0] != SCHEMA_VERSION:
            found = "no" if row is None else row[0]
            raise InvalidRequest(
                "url",
                f"{self.url} schema {self.config.schema!r} has store schema version {found}; "
                f"this apportion uses {SCHEMA_VERSION}",
            )

    def _init_schema(self) -> None:
        with self._session("cannot create the store") as (conn, _):
            if not self._tables_present(conn):
                # several workers starting together: one creates, the others wait on the lock and find it done
                conn.execute("BEGIN")
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"apportion.schema.{self.config.schema}",))
                exists = conn.execute("SELECT to_regnamespace(%s)", (f'"{self.config.schema}"',)).fetchone()
                if exists is None or exists[0] is None:
                    conn.execute(f"CREATE SCHEMA {self._sql.schema}")
                conn.execute(_schema_sql(self.config.schema))
                conn.execute("COMMIT")
            self._check_version(conn)

    def _check_schema(self) -> None:
        """Read-only open: the schema must hold an apportion store; nothing is created."""
        with self._session("cannot open the store") as (conn, _):
            if not self._tables_present(conn):
                raise NoSuchStore(
                    "url", f"no apportion store in schema {self.config.schema!r} of {self.url} (nothing created)"
                )
            self._check_version(conn)

    # -- transactions ---------------------------------------------------------------------------------------

    def _meta(self, conn: psycopg.Connection[Any]) -> Any:
        """Revision, compaction point, expired leases, seconds to the next expiry: one statement, no transaction."""
        return conn.execute(self._sql.meta, prepare=True).fetchone()

    def _begin_read(self, conn: psycopg.Connection[Any]) -> Any:
        with conn.pipeline():  # one round trip
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            cursor = conn.execute(self._sql.meta, prepare=True)
        return cursor.fetchone()

    def _read(self, body: Callable[[psycopg.Connection[Any], _State], T]) -> T:
        """``body`` on one snapshot; if a lease has expired, in a write transaction that expires it first (read-only:
        the body hides the keys of the expired leases instead)."""
        with self._session("read failed", self._begin_read) as (conn, row):
            revision, compacted, expired, _ = row
            upgrade = bool(expired) and not self.read_only
            if upgrade:
                conn.execute("ROLLBACK")
            else:
                result = body(conn, _State(revision, compacted, tuple(expired)))
                conn.execute("COMMIT")
        return self._write(body) if upgrade else result

    def _write(
        self,
        body: Callable[[psycopg.Connection[Any], _State], T],
        keys: Sequence[str] = (),
        leases: Sequence[int] = (),
    ) -> T:
        """``body`` in one transaction holding the revision lock, after expiring the leases that are due; commit
        (taking the revisions the body and the expiry used, and notifying the watches). ``keys`` and ``leases``:
        what the body will read (a txn's compared and put keys, its puts' leases), read in the same round trip as
        the lock. Round trips of a CAS: BEGIN + lock + reads; the writes + COMMIT (psycopg's pipeline mode). The
        lock is waited for ``stuck_writer_s`` at a time, the stuck writers ended in between (``_end_stuck_writers``),
        until the call's time limit."""
        if self.read_only:
            raise InvalidRequest("store", f"{self.url} is open read-only")
        deadline = time.monotonic() + self.remaining_s(self.config.timeout_s)  # the session's, or just before it

        def begin(conn: psycopg.Connection[Any]) -> tuple[Any, Any, Any]:
            while True:  # until the lock is granted: each wait bounded, then the stuck writers ended
                left = deadline - time.monotonic()
                wait_s = min(self.config.stuck_writer_s, left - min(_LOOK_S, left / 2))
                found = existing = None
                try:
                    with conn.pipeline():
                        conn.execute("BEGIN")
                        meta = conn.execute(self._sql.lock_meta, (f"{max(1, round(wait_s * 1000))}ms",), prepare=True)
                        if keys:  # one key (a CAS): a scalar parameter, cheaper to send than a list (see upsert_one)
                            one = len(keys) == 1
                            get, key_args = (self._sql.get, keys[0]) if one else (self._sql.get_many, list(keys))
                            found = conn.execute(get, (key_args,), prepare=True)
                        if leases:
                            one = len(leases) == 1
                            exists = self._sql.lease_exists if one else self._sql.leases_exist
                            existing = conn.execute(exists, (leases[0] if one else list(leases),), prepare=True)
                    break
                except pg_errors.LockNotAvailable:
                    conn.execute("ROLLBACK")
                self._end_stuck_writers(conn, deadline)
            return (
                meta.fetchone(),
                None if found is None else found.fetchall(),
                None if existing is None else existing.fetchall(),
            )

        with self._session("write failed", begin) as (conn, (row, found, existing)):
            revision, compacted, expired, _ = row
            state = _State(revision, compacted)
            for lid in expired:
                self._end_lease(conn, state, lid, expired_only=True)
            self._flush(conn, state)  # the body may read the events (a watch's read that expired the leases)
            if not expired:  # an expiry may have deleted some of them: the body reads them again then
                if found is not None:
                    state.prefetched = dict.fromkeys(keys)
                    state.prefetched.update((row[0], _kv(row)) for row in found)
                if existing is not None:
                    state.leases_found = {row[0] for row in existing}
            try:
                result = body(conn, state)
            except LeaseNotFound:
                state.queued.clear()  # raised before the body wrote: keep the expiry only
                self._finish(conn, state, revision, compacted)
                raise
            self._finish(conn, state, revision, compacted)
            return result

    def _end_stuck_writers(self, conn: psycopg.Connection[Any], deadline: float) -> None:
        """After a wait for the revision lock ran out: end the apportion sessions that hold it and have waited for
        their client longer than ``stuck_writer_s`` (the module docstring: "A client frozen inside a write"); raise
        ``StoreUnavailable`` naming the holders when the write's time is up."""
        bound = self.config.stuck_writer_s
        holders = conn.execute(self._sql.lock_holders, (APPLICATION_NAME, bound), prepare=True).fetchall()
        shown: list[str] = []
        for pid, role, application, state, since, idle_s, stuck in holders:
            what = f"pid {pid} (application {application!r}, role {role!r}"
            if state is None:
                shown.append(f"{what}: its state is hidden from this role, so it is not ended)")
                continue
            what += f", {state} for {idle_s:.1f} s"
            if application != APPLICATION_NAME:
                shown.append(f"{what}: not an apportion session, never ended by apportion)")
            elif not stuck:
                shown.append(f"{what})")
            else:
                try:
                    ended = conn.execute(self._sql.terminate, (pid, since, state)).fetchone()
                except pg_errors.InsufficientPrivilege as exc:
                    shown.append(f"{what}: this role may not end it: {_first_line(exc)})")
                    continue
                if ended is not None and ended[0]:
                    log.warning("%s: ended session %s): a writer stuck holding the revision lock", self.url, what)
                    shown.append(f"{what}: ended)")
        if time.monotonic() >= deadline - _LOOK_S / 2:
            held = "; ".join(shown) or "a session that ended meanwhile"
            raise StoreUnavailable(
                f"{self.url} (schema {self.config.schema}): write failed: the revision lock was not granted in time:"
                f" held by {held}"
            )

    def _flush(self, conn: psycopg.Connection[Any], state: _State) -> None:
        """Send the queued writes (before a statement that reads the tables they change)."""
        if state.queued:
            with conn.pipeline():
                for sql, args in state.queued:
                    conn.execute(sql, args, prepare=True)
            state.queued.clear()

    def _finish(self, conn: psycopg.Connection[Any], state: _State, revision: int, compacted: int) -> None:
        """The queued writes, the new revision, the notification and the COMMIT: one round trip."""
        keep = self.config.history
        if state.revision - state.compacted > keep + max(1, keep // 16):
            state.compacted = state.revision - keep
        if len(state.queued) == 1 and state.revision != revision and state.compacted == compacted:
            sql, args = state.queued[0]
            finish: tuple[str, tuple[Any, ...] | dict[str, Any]] | None = None
            notified = (state.revision, state.compacted, self._sql.channel_name, str(state.revision))
            if isinstance(args, dict):  # upsert_one
                finish = (self._sql.upsert_one_finish, {**args, **dict(zip(_NOTIFIED, notified, strict=True))})
            elif sql is self._sql.upsert:
                finish = (self._sql.upsert_finish, (*args, *notified))
            if finish is not None:
                with conn.pipeline():
                    conn.execute(*finish, prepare=True)
                    conn.execute("COMMIT")
                state.queued.clear()
                return
        with conn.pipeline():
            for sql, args in state.queued:
                conn.execute(sql, args, prepare=True)
            if state.compacted != compacted:
                conn.execute(self._sql.delete_events, (state.compacted,), prepare=True)
            if state.revision != revision or state.compacted != compacted:
                conn.execute(self._sql.update_meta, (state.revision, state.compacted), prepare=True)
            if state.revision != revision:
                conn.execute(self._sql.notify, (self._sql.channel_name, str(state.revision)), prepare=True)
            conn.execute("COMMIT")
        state.queued.clear()

    # -- reads ----------------------------------------------------------------------------------------------

    def revision(self) -> int:
        return self._read(lambda conn, state: state.revision)

    def _get(self, key: str) -> KeyValue | None:
        def body(conn: psycopg.Connection[Any], state: _State) -> KeyValue | None:
            row = conn.execute(self._sql.get, (key,)).fetchone()
            return None if row is None or row[5] in state.expired else _kv(row)

        return self._read(body)

    def _range(self, prefix: str, limit: int | None) -> list[KeyValue]:
        def body(conn: psycopg.Connection[Any], state: _State) -> list[KeyValue]:
            if limit is None or state.expired:
                rows = conn.execute(self._sql.range, (prefix, _prefix_end(prefix))).fetchall()
            else:
                args = (prefix, _prefix_end(prefix), limit)
                rows = conn.execute(self._sql.range_limit, args).fetchall()
            found = [_kv(row) for row in rows if row[5] not in state.expired]
            return found if limit is None else found[:limit]

        return self._read(body)

    def _txn(self, compares: Sequence[Compare], on_success: Sequence[Op], on_failure: Sequence[Op]) -> TxnResult:
        writes = any(not isinstance(op, Get) for op in (*on_success, *on_failure))

        def body(conn: psycopg.Connection[Any], state: _State) -> TxnResult:
            puts = [op for op in (*on_success, *on_failure) if isinstance(op, Put)]
            keys = sorted({c.key for c in compares} | {op.key for op in puts})
            known: dict[str, KeyValue | None] = dict.fromkeys(keys)
            if state.prefetched is not None:
                known.update(state.prefetched)
            elif keys:
                for row in conn.execute(self._sql.get_many, (keys,), prepare=True):
                    if row[5] not in state.expired:
                        known[row[0]] = _kv(row)
            succeeded = all(compare.holds(known[compare.key]) for compare in compares)
            ops = on_success if succeeded else on_failure
            leases = sorted({op.lease for op in ops if isinstance(op, Put) and op.lease})
            if leases:
                found = state.leases_found
                if found is None:
                    found = {row[0] for row in conn.execute(self._sql.leases_exist, (leases,), prepare=True)}
                for lease in leases:
                    if lease not in found:
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
                self._write_puts(state, pending)
                self._flush(conn, state)
                if isinstance(op, Get):
                    if op.prefix:
                        args: tuple[str, ...] = (op.key, _prefix_end(op.key))
                        rows = conn.execute(self._sql.range, args).fetchall()
                    else:
                        rows = conn.execute(self._sql.get, (op.key,)).fetchall()
                    responses.append([_kv(row) for row in rows if row[5] not in state.expired])
                else:
                    count = self._delete(conn, state, op, revision, known)
                    wrote = wrote or count > 0
                    responses.append(count)
            self._write_puts(state, pending)
            state.revision = revision if wrote else base
            return TxnResult(succeeded, tuple(responses), state.revision)

        if not writes:
            return self._read(body)
        puts = [op for op in (*on_success, *on_failure) if isinstance(op, Put)]
        keys = sorted({c.key for c in compares} | {op.key for op in puts})
        return self._write(body, keys, sorted({op.lease for op in puts if op.lease}))

    def _write_puts(self, state: _State, pending: list[KeyValue]) -> None:
        """Queue ``pending`` puts (a key put twice keeps its last value) and their events: one statement."""
        if not pending:
            return
        first = state.event_idx
        if len(pending) == 1:
            kv = pending.pop()
            state.queued.append((
                self._sql.upsert_one,
                {"key": kv.key, "value": kv.value, "create": kv.create_revision, "mod": kv.mod_revision,
                 "version": kv.version, "lease": kv.lease, "idx": first},
            ))  # fmt: skip
            state.event_idx += 1
            return
        last = list({kv.key: kv for kv in pending}.values())
        state.queued.append((
            self._sql.upsert,
            (
                [kv.key for kv in last], [kv.value for kv in last], [kv.create_revision for kv in last],
                [kv.mod_revision for kv in last], [kv.version for kv in last], [kv.lease for kv in last],
                [kv.mod_revision for kv in pending], list(range(first, first + len(pending))), [_PUT] * len(pending),
                [kv.key for kv in pending], [kv.value for kv in pending], [kv.create_revision for kv in pending],
                [kv.version for kv in pending], [kv.lease for kv in pending],
            ),
        ))  # fmt: skip
        state.event_idx += len(pending)
        pending.clear()

    def _log_deletes(self, state: _State, revision: int, keys: list[str]) -> None:
        """Queue the DELETE events of ``keys`` at ``revision``."""
        if keys:
            state.queued.append((self._sql.log_deletes, (revision, keys, state.event_idx, keys)))
            state.event_idx += len(keys)

    def _delete(
        self,
        conn: psycopg.Connection[Any],
        state: _State,
        op: Delete,
        revision: int,
        known: dict[str, KeyValue | None],
    ) -> int:
        if op.prefix:
            args: tuple[str, ...] = (op.key, _prefix_end(op.key))
            rows = conn.execute(self._sql.delete_range, args).fetchall()
        else:
            rows = conn.execute(self._sql.delete_one, (op.key,)).fetchall()
        keys = sorted(row[0] for row in rows)
        self._log_deletes(state, revision, keys)
        for key in keys:
            known[key] = None
        return len(keys)

    # -- leases ---------------------------------------------------------------------------------------------

    def _end_lease(self, conn: psycopg.Connection[Any], state: _State, lid: int, *, expired_only: bool = False) -> None:
        """Delete lease ``lid`` and its keys (one new revision when it had keys); ``expired_only``: only if its
        expiry has passed now (the candidates come from a snapshot that may predate a renewal)."""
        self._flush(conn, state)
        sql = self._sql.expire_lease if expired_only else self._sql.end_lease
        keys = sorted(row[0] for row in conn.execute(sql, (lid,), prepare=True))
        if keys:
            self._log_deletes(state, state.next_revision(), keys)

    def _grant(self, ttl_s: float) -> Lease:
        def body(conn: psycopg.Connection[Any], state: _State) -> Lease:
            row = conn.execute(self._sql.grant, (ttl_s, ttl_s)).fetchone()
            assert row is not None
            return Lease(int(row[0]), ttl_s)

        return self._write(body)

    def keepalive(self, lease: Lease | int) -> float:
        lid = lease_id(lease)

        def body(conn: psycopg.Connection[Any], state: _State) -> float:
            row = conn.execute(self._sql.keepalive, (lid,)).fetchone()
            if row is None:
                raise LeaseNotFound(f"lease {lid} not found")
            return float(row[0])

        return self._write(body)

    def time_to_live(self, lease: Lease | int) -> float:
        lid = lease_id(lease)

        def body(conn: psycopg.Connection[Any], state: _State) -> float:
            row = conn.execute(self._sql.time_to_live, (lid,)).fetchone()
            if row is None or lid in state.expired:
                raise LeaseNotFound(f"lease {lid} not found")
            return float(row[0])

        return self._read(body)

    def revoke(self, lease: Lease | int) -> None:
        lid = lease_id(lease)
        self._write(lambda conn, state: self._end_lease(conn, state, lid))

    # -- watches, compaction ---------------------------------------------------------------------------------

    def _watch(self, key: str, start_revision: int | None, *, prefix: bool, deletes_only: bool) -> Watch:
        watch = _PgWatch(self, key, prefix, -1, deletes_only)

        def body(conn: psycopg.Connection[Any], state: _State) -> tuple[list[Event], int]:
            if start_revision is None:
                return [], state.revision
            if start_revision <= state.compacted:
                raise Compacted(start_revision, state.compacted)
            return self._events(conn, state, watch, start_revision - 1)

        events, watch.position = self._read(body)  # the history it asks for, read by the caller (its time limit)
        watch._deliver(events)
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"{self.url}: the store is closed")
            if self._dispatcher is None:
                self._dispatcher = _Dispatcher(self)
            self._watches.append(watch)
        return watch

    def _events(
        self, conn: psycopg.Connection[Any], state: _State, watch: _PgWatch, position: int | None = None
    ) -> tuple[list[Event], int]:
        """The watch's events after ``position`` (default: its own) up to the snapshot's revision, and that revision.
        The caller moves the watch's position there once the read has ended well: a read whose COMMIT fails (the
        server killed under it) would otherwise have moved it past events nobody received (the one way found for a CI
        run where the event of the write in flight at a kill -9 was never delivered, about 1 run in 25)."""
        after = watch.position if position is None else position
        if state.revision <= after:
            return [], after
        if after < state.compacted:
            raise Compacted(after + 1, state.compacted)
        if watch.prefix:
            sql = self._sql.watch_prefix_deletes if watch.deletes_only else self._sql.watch_prefix
            args: tuple[object, ...] = (after, state.revision, watch.key, _prefix_end(watch.key))
        else:
            sql = self._sql.watch_key_deletes if watch.deletes_only else self._sql.watch_key
            args = (after, state.revision, watch.key)
        rows = conn.execute(sql, args).fetchall()
        return [_event(row) for row in rows], state.revision

    def _forget(self, watch: _PgWatch) -> None:
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def _compact(self, revision: int) -> None:
        def body(conn: psycopg.Connection[Any], state: _State) -> None:
            if revision > state.revision:
                raise InvalidRequest("revision", f"{revision} is in the future (current {state.revision})")
            state.compacted = max(state.compacted, revision)

        self._write(body)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
            watches, self._watches = self._watches, []
            dispatcher, self._dispatcher = self._dispatcher, None
        for watch in watches:
            watch.close()
        if dispatcher is not None:
            dispatcher.stop()
        for conn in connections:
            with contextlib.suppress(Exception):
                conn.close()
        self._local = threading.local()


class _Dispatcher:
    """The watches' reader: one daemon thread and one connection per store object, ``LISTEN``-ing on the schema's
    channel. Each round reads the revision and the next lease expiry (one statement); when the revision passed a
    watch's position (or a lease is due: expired by a writable store, which takes revisions), it reads each such
    watch's events and queues them on the watch; then it waits for a notification, the next lease expiry or the
    idle poll, whichever comes first. So ``Watch.poll`` never touches the network (a server that hangs cannot hold
    a member's stepping thread), and a broken connection is retried here, silently, from the positions reached."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._stopped = False
        self._listening: psycopg.Connection[Any] | None = None
        self._thread = threading.Thread(target=self._run, name="apportion-pg-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped = True

    def _run(self) -> None:
        pause = 0.05
        while not self._stopped:
            try:
                wait_s = self._round()
                pause = 0.05
            except StoreUnavailable:
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            except ApportionError:  # the store was closed, or the schema dropped under us: nothing more to read
                time.sleep(pause)
                continue
            conn = self._listening
            if conn is None or self._stopped:
                continue
            try:
                for _ in conn.notifies(timeout=wait_s, stop_after=1):
                    pass
            except psycopg.Error:
                self._listening = None

    def _round(self) -> float:
        """Deliver what is new to every watch; return how long to wait for a notification."""
        store = self._store
        with store._session("watch poll failed", store._meta) as (conn, row):
            if conn is not self._listening:
                conn.execute(f"LISTEN {store._sql.channel}")
                self._listening = conn
                row = store._meta(conn)  # what was committed before LISTEN took effect
        revision, _, expired, due_s = row
        with store._lock:
            watches = list(store._watches)
        due = bool(expired) and not store.read_only
        for watch in watches:
            if (revision > watch.position or due) and not self._stopped:
                try:
                    events, watch.position = store._read(functools.partial(store._events, watch=watch))
                    watch._deliver(events)
                except Compacted as exc:
                    watch._fail(exc)
                    store._forget(watch)
                due = False  # the first read expired them (a writable store): the revision now covers it
        wait_s = store.config.poll_s
        if due_s is not None:
            wait_s = min(wait_s, max(0.0, due_s) + 0.002)
        return wait_s


class _PgWatch(Watch):
    """Events queued by the store's dispatcher; ``poll`` and ``wait`` read the queue only."""

    def __init__(self, store: PostgresStore, key: str, prefix: bool, position: int, deletes_only: bool) -> None:
        self._store = store
        self.key = key
        self.prefix = prefix
        self.deletes_only = deletes_only
        self.position = position  # every event at or below this revision has been queued (dispatcher's thread)
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[Event] = []
        self._error: ApportionError | None = None
        self.closed = False

    def _deliver(self, events: list[Event]) -> None:
        if events:
            with self._cond:
                self._queue.extend(events)
                self._cond.notify_all()

    def _fail(self, exc: ApportionError) -> None:
        with self._cond:
            self._error = exc
            self._cond.notify_all()

    def _take(self) -> list[Event]:
        if self.closed:
            return []
        if self._error is not None and not self._queue:
            raise self._error
        events, self._queue = self._queue, []
        return events

    def poll(self) -> list[Event]:
        with self._cond:
            return self._take()

    def wait(self, timeout_s: float) -> list[Event]:
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            while not self._queue and self._error is None and not self.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            return self._take()

    def close(self) -> None:
        with self._cond:
            if self.closed:
                return
            self.closed = True
            self._cond.notify_all()
        self._store._forget(self)


def open_postgres(url: str, *, read_only: bool = False) -> PostgresStore:
    """Open (creating the schema and tables if needed, unless ``read_only``) the PostgreSQL store named by ``url``."""
    return PostgresStore(url, PostgresConfig.parse(url), read_only=read_only)


__all__ = ["PostgresConfig", "PostgresStore", "open_postgres"]
