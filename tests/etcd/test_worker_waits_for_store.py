"""`apportion worker` processes and a store they cannot reach at start-up (issue 14 item 7): an etcd port that is
closed (exit 1 after --connect-timeout, one error line, the waiting logged), an etcd that starts 2 s after the worker
(waited for, then used) and an SQLite file whose write lock another process holds while the worker opens it."""

from __future__ import annotations

import socket
import sqlite3
import time
from pathlib import Path

import pytest

from apportion._ports import free_port
from apportion.errors import StoreUnavailable
from apportion.store import connect
from apportion.waiting import wait_for
from tests.etcd.processes import WorkerProcess
from tests.etcd_server import EtcdServer

pytestmark = pytest.mark.slow


def waiting_lines(text: str, url: str) -> list[str]:
    return [line for line in text.splitlines() if f"waiting for store {url}: " in line]


def test_a_closed_etcd_port_is_waited_for_then_exit_1_with_one_error_line(
    tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    url = f"etcd://127.0.0.1:{free_port()}"  # nothing listens there
    w = WorkerProcess(url, tmp_path / "w1.log", "--connect-timeout", "2")
    workers.append(w)
    code = w.proc.wait(30)
    elapsed = time.monotonic() - w.started
    text = w.text()
    assert code == 1, text
    # slack for Python's start-up on a loaded machine; still well under the 30 s default
    assert elapsed < 20, f"exited after {elapsed:.1f} s with --connect-timeout 2"
    assert "Traceback" not in text
    assert len(waiting_lines(text, url)) >= 2, text
    errors = [line for line in text.splitlines() if line.startswith("apportion: error: ")]
    assert errors == [f"apportion: error: cannot reach the store {url} within 2 s (--connect-timeout): "
                      + errors[0].split("(--connect-timeout): ", 1)[1]], text  # fmt: skip
    assert "connection refused" in errors[0]
    assert text.splitlines()[-1] == errors[0]  # the last line: nothing after it
    assert not [e for e in w.events if e["event"] == "assigned"]


@pytest.mark.etcd
def test_an_etcd_that_starts_2_s_after_the_worker_is_waited_for_and_used(
    etcd_bin: str, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    client_port, peer_port = free_port(), free_port()
    url = f"etcd://127.0.0.1:{client_port}"
    w = WorkerProcess(url, tmp_path / "w1.log", "--connect-timeout", "30")
    workers.append(w)
    wait_for(f"the worker to log that it waits for {url}", lambda: bool(waiting_lines(w.text(), url)), 30)
    time.sleep(max(0.0, 2.0 - (time.monotonic() - w.started)))
    server = EtcdServer(etcd_bin, tmp_path / "etcd", "node0", client_port, peer_port,
                        f"node0=http://127.0.0.1:{peer_port}")  # fmt: skip
    server.start()
    try:
        server.wait_ready()
        wait_for(f"the worker to own every partition once etcd is up; its log:\n{w.text()}", w.owns_everything, 30)
        assert w.proc.poll() is None
        assert w.stop() == 0, w.text()
    finally:
        server.stop()
    text = w.text()
    assert "worker w1 registered with " + url in text
    assert "apportion: error" not in text and "Traceback" not in text


def test_an_sqlite_file_locked_by_another_process_is_waited_for(tmp_path: Path, workers: list[WorkerProcess]) -> None:
    """connect() itself fails here (the schema transaction cannot take the write lock within the URL's timeout)."""
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}?timeout=0.3"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("BEGIN IMMEDIATE")
    try:
        w = WorkerProcess(url, tmp_path / "w1.log", "--connect-timeout", "30")
        workers.append(w)
        wait_for("the worker to log that it waits for the lock", lambda: bool(waiting_lines(w.text(), url)), 30)
        assert "database is locked" in waiting_lines(w.text(), url)[0]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    wait_for(f"the worker to own every partition once the lock is free; its log:\n{w.text()}", w.owns_everything, 30)
    assert w.stop() == 0, w.text()


def test_credentials_are_sent_by_the_first_request_under_its_time_limit() -> None:
    """An endpoint that accepts connections and never answers, a URL with credentials and a 10 s request timeout:
    opening the store sends nothing, and the first request (which authenticates) ends at the caller's 1 s limit, so
    a worker's --connect-timeout is never overrun by an authentication."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"etcd://root:pw@127.0.0.1:{silent.getsockname()[1]}?timeout=10"
        started = time.monotonic()
        with connect(url) as store:
            opened = time.monotonic() - started
            with pytest.raises(StoreUnavailable), store.time_limit(1.0):
                store.revision()
        elapsed = time.monotonic() - started
    assert opened < 0.5 * 10, f"opening the store took {opened:.1f} s"
    assert elapsed < 6, f"the first request took {elapsed:.1f} s under a 1 s limit (request timeout 10 s)"
