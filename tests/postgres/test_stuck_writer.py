"""A client frozen inside a write: the writers waiting for the revision lock end its session (the module docstring of
``apportion.store._postgres``, "A client frozen inside a write"), never another application's.

The frozen client is a real process running a real store, stopped (SIGSTOP, sent to itself) in the middle of a put:
between its two round trips (its session idle in the transaction) or half-way through its last pipeline (its session
``active``, waiting for the pipeline's end: PostgreSQL's ``idle_in_transaction_session_timeout`` never ends that one).
It runs as a role that is not a superuser, as does the writer that ends it: the same role is the privilege needed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from apportion.errors import StoreUnavailable
from apportion.store import connect
from apportion.store._postgres import DEFAULT_STUCK_WRITER_S, PostgresConfig
from apportion.waiting import wait_for
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.postgres

PW = "s3cr3t-PW"
BOUND_S = 2 * DEFAULT_STUCK_WRITER_S  # the longest a frozen writer stalls the others (the docstring's worst case)
SLACK_S = 1.0  # connecting, the look at pg_stat_activity, a loaded machine

# A store client that stops itself inside ``put("/frozen")``: "between" its round trips (before the writes and the
# COMMIT are sent), or inside the last "pipeline" (the writes sent, not the COMMIT). Once continued, it prints what the
# put did.
FROZEN_WRITER = """
import os, signal, sys
import psycopg
from apportion.errors import StoreUnavailable
from apportion.store import connect
from apportion.store._postgres import PostgresStore

url, where = sys.argv[1], sys.argv[2]
store = connect(url)
store.put("/warm", b"w")  # the connection is open: the put below starts with its lock
finish, execute, armed = PostgresStore._finish, psycopg.Connection.execute, []

def stop():
    print("stopping", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)

def frozen_finish(self, *args):
    armed.append(True)
    if where == "between":
        stop()
    return finish(self, *args)

def frozen_execute(self, query, *args, **kwargs):
    if armed and where == "pipeline" and query == "COMMIT":
        stop()
    return execute(self, query, *args, **kwargs)

PostgresStore._finish, psycopg.Connection.execute = frozen_finish, frozen_execute
try:
    store.put("/frozen", b"f")
except StoreUnavailable as exc:
    print("unavailable:", exc, flush=True)
else:
    print("committed", flush=True)
"""


@pytest.fixture
def role_url(postgres_server: PostgresServer, postgres_url: str) -> str:
    """``postgres_url`` as a role that is not a superuser, limited to its schema ``mine``."""
    database = postgres_url.rsplit("/", 1)[1]
    role = f"w_{database[-8:]}"
    postgres_server.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{PW}'")
    postgres_server.execute(f"CREATE SCHEMA mine; GRANT USAGE, CREATE ON SCHEMA mine TO {role}", database)
    return postgres_server.url(database, user=role, password=PW, query="schema=mine")


def _stopped_or_exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether ``process`` is stopped (SIGSTOP, from /proc) or has exited."""
    if process.poll() is not None:
        return True
    stat = Path(f"/proc/{process.pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()[0] == "T"


def _lock_holders(admin: psycopg.Connection[tuple[object, ...]], schema: str) -> list[tuple[object, ...]]:
    """(pid, application, state) of the sessions holding a write's lock on ``schema``'s meta."""
    return admin.execute(
        "SELECT DISTINCT a.pid, a.application_name, a.state FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid"
        " WHERE l.locktype = 'relation' AND l.granted AND l.relation = to_regclass(%s)"
        " AND l.mode IN ('RowShareLock', 'RowExclusiveLock') ORDER BY a.pid",
        (f"{schema}.meta",),
    ).fetchall()


@pytest.fixture
def admin(postgres_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(postgres_url, autocommit=True, application_name="test-admin") as conn:
        yield conn


@pytest.mark.parametrize(
    ("where", "state"), [("between", "idle in transaction"), ("pipeline", "active")], ids=["between", "pipeline"]
)
def test_a_writer_frozen_inside_a_write_is_ended_and_the_others_write_within_the_bound(
    role_url: str, admin: psycopg.Connection[tuple[object, ...]], where: str, state: str
) -> None:
    with connect(role_url) as store:
        store.put("/k", b"0")
        frozen = subprocess.Popen(
            [sys.executable, "-c", FROZEN_WRITER, role_url, where], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            wait_for(f"the writer to stop itself {where}", lambda: _stopped_or_exited(frozen), 30)
            assert frozen.poll() is None, f"the writer exited: {frozen.communicate()[0].decode()}"
            holders = _lock_holders(admin, "mine")
            assert [(application, found) for _, application, found in holders] == [("apportion", state)], holders
            stuck_pid = holders[0][0]

            started = time.monotonic()
            store.put("/k", b"1")  # waits for the lock, ends the frozen writer's session, gets the lock
            took = time.monotonic() - started
            assert took <= BOUND_S + SLACK_S, f"the write took {took:.2f} s (bound {BOUND_S} s)"
            gone = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (stuck_pid,)).fetchone()
            assert gone == (0,), f"the frozen writer's session {stuck_pid} is still there"
        finally:
            frozen.send_signal(signal.SIGCONT)
            out, _ = frozen.communicate(timeout=30)
        # woken, it finds its connection gone: its write failed, nothing of it committed
        assert frozen.returncode == 0, out.decode()
        assert "unavailable:" in out.decode(), out.decode()
        assert store.get("/frozen") is None
        kv = store.get("/k")
        assert kv is not None and kv.value == b"1"


def test_a_session_of_another_application_holding_the_lock_is_never_ended_and_named_in_the_error(
    postgres_url: str, admin: psycopg.Connection[tuple[object, ...]]
) -> None:
    with connect(postgres_url + "?timeout=2") as store:
        store.put("/k", b"0")
        with psycopg.connect(postgres_url, autocommit=True, application_name="psql") as other:
            other.execute("BEGIN")
            other.execute('SELECT revision FROM "apportion".meta WHERE id = 0 FOR UPDATE')
            other_pid = other.info.backend_pid
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match="revision lock was not granted in time") as info:
                store.put("/k", b"1")
            took = time.monotonic() - started
            assert 1.5 <= took <= 2.0 + SLACK_S, f"gave up after {took:.2f} s (time limit 2 s)"
            message = str(info.value)
            assert f"pid {other_pid} (application 'psql'" in message and "not an apportion session" in message
            assert "idle in transaction" in message and "\n" not in message
            # still there, still in its transaction: its COMMIT goes through, then the store writes again
            other.execute("COMMIT")
        store.put("/k", b"2")
        kv = store.get("/k")
        assert kv is not None and kv.value == b"2"


def test_the_stuck_writer_bound_is_a_url_parameter_in_milliseconds() -> None:
    assert PostgresConfig.parse("postgresql://h/db").stuck_writer_s == DEFAULT_STUCK_WRITER_S == 0.5
    config = PostgresConfig.parse("postgresql://h/db?stuck_writer_ms=250&sslmode=disable")
    assert config.stuck_writer_s == 0.25 and "stuck_writer" not in config.conninfo
