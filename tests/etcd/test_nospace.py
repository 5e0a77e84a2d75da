"""etcd out of space (the NOSPACE alarm) on a real server started with a 16 MiB ``--quota-backend-bytes``.

Filled by writes until etcd raises the alarm, then repaired as an operator would (compact, defragment, disarm). The
store must refuse writes at once with ``StoreFull`` (not retry them for the request timeout), apply none of them,
keep reads, lease renewals, revocations and deletes working (what etcd 3.4 still accepts under the alarm) and take
writes again once the alarm is disarmed. Then what a worker makes of it (an ``apportion worker`` process committing
every 0.2 s: one log line per outage, partitions kept, no acknowledged commit lost, commits again after the repair)
and the commands that write (worker start-up, ``scale``, ``subscribe``: one line, exit 1).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.errors import StoreFull, StoreUnavailable
from apportion.group import GroupConfig, Static
from apportion.group.internals import Keys, decode, encode
from apportion.model import Resource
from apportion.store import Put, Store, connect, value_is
from apportion.waiting import wait_for
from tests.cli.run import cli
from tests.etcd.processes import WorkerProcess
from tests.etcd_server import EtcdServer

pytestmark = pytest.mark.etcd

QUOTA_BYTES = 16 * 1024 * 1024
FILLER = 1_000_000  # bytes per filler value (etcd takes requests up to 1.5 MiB): 16 MiB fills in ~17 writes


@pytest.fixture
def small_etcd(etcd_bin: str, tmp_path: Path) -> Iterator[EtcdServer]:
    """A single etcd member whose database may grow to 16 MiB."""
    with EtcdServer.single(etcd_bin, tmp_path / "etcd", args=("--quota-backend-bytes", str(QUOTA_BYTES))) as server:
        yield server


def fill(store: Store, deadline_s: float = 60.0) -> StoreFull:
    """Write 1 MB values (8 keys, rewritten: old revisions fill the database as they do without compaction)
    until etcd refuses one; return that refusal."""
    deadline = time.monotonic() + deadline_s
    i = 0
    while time.monotonic() < deadline:
        try:
            store.put(f"/filler/{i % 8}", os.urandom(FILLER))
        except StoreFull as exc:
            return exc
        i += 1
    raise AssertionError(f"etcd with a {QUOTA_BYTES} B quota took {i} writes of {FILLER} B without NOSPACE")


def repair(server: EtcdServer) -> None:
    """What README "Running etcd for apportion" tells the operator: delete what fills it (here), compact, defragment,
    disarm."""
    server.compact()
    server.defragment()
    server.disarm()


def test_a_full_etcd_refuses_writes_at_once_and_applies_none(small_etcd: EtcdServer) -> None:
    with connect(small_etcd.url) as store:
        store.put("/apportion/g/commit/0", b"before")
        refused = fill(store)
        assert small_etcd.alarms() == ["NOSPACE"]
        message = str(refused)
        assert message.startswith(f"etcd at etcd://{small_etcd.endpoint} is out of space (NOSPACE alarm):")
        assert 'README "Running etcd for apportion"' in message and "\n" not in message
        assert isinstance(refused, StoreUnavailable)  # every caller that waits for a store waits for this one
        assert store.refusing_writes() == message

        started = time.monotonic()
        with pytest.raises(StoreFull):  # a fenced commit, as a worker sends it
            store.txn([value_is("/apportion/g/commit/0", b"before")], [Put("/apportion/g/commit/0", b"after")])
        assert time.monotonic() - started < 1.0, "NOSPACE must not be retried until the request timeout"
        with pytest.raises(StoreFull):
            store.grant(5)
        kv = store.get("/apportion/g/commit/0")  # reads still work, and the refused commit was not applied
        assert kv is not None and kv.value == b"before"


def test_under_nospace_leases_renew_and_deletes_pass_so_a_worker_keeps_its_beliefs(small_etcd: EtcdServer) -> None:
    """etcd 3.4 refuses puts, transactions that put and lease grants under the alarm, but takes keepalives,
    revocations and deletes: a registered worker keeps its lease (and so its partitions) through the outage."""
    with connect(small_etcd.url) as store:
        lease = store.grant(60)  # outlives the filling
        store.put("/apportion/g/members/a", b"{}", lease)
        fill(store)
        for _ in range(3):
            assert store.keepalive(lease) == 60.0
        fillers = len(store.range("/filler/"))
        assert fillers > 0 and store.delete("/filler/", prefix=True) == fillers
        with pytest.raises(StoreFull):  # deleting is not enough: the alarm stays until it is disarmed
            store.put("/apportion/g/commit/0", b"x")
        store.revoke(lease)
        assert store.get("/apportion/g/members/a") is None


def test_writes_are_taken_again_once_the_operator_compacts_defragments_and_disarms(small_etcd: EtcdServer) -> None:
    with connect(small_etcd.url) as store:
        fill(store)
        size = small_etcd.db_size()
        store.delete("/filler/", prefix=True)
        small_etcd.compact()
        small_etcd.defragment()
        assert small_etcd.db_size() < size / 2, "defragmentation gives the compacted space back"
        with pytest.raises(StoreFull):  # compacted and defragmented, but the alarm is still raised
            store.put("/apportion/g/commit/0", b"x")
        assert store.refusing_writes() is not None
        small_etcd.disarm()
        assert small_etcd.alarms() == []
        store.put("/apportion/g/commit/0", b"x")
        assert store.refusing_writes() is None
        lease = store.grant(5)
        store.revoke(lease)


# -- a worker and the commands that write ----------------------------------------------------------------------

FULL = "is out of space (NOSPACE alarm)"


@pytest.mark.slow
def test_a_running_worker_says_once_that_etcd_is_full_keeps_its_partitions_and_commits_again_after_the_repair(
    small_etcd: EtcdServer, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    w = WorkerProcess(small_etcd.url, tmp_path / "w1.log", "--commit-every", "0.2")
    workers.append(w)
    wait_for(f"the worker to own every partition; its log:\n{w.text()}", w.owns_everything, 30)

    def count(kind: str) -> int:
        return sum(1 for e in list(w.events) if e["event"] == kind)

    with connect(small_etcd.url) as store:
        fill(store)
        wait_for(f"the worker to say etcd is full; its log:\n{w.text()}", lambda: FULL in w.text(), 10)
        refused = count("commit_failed")
        wait_for("40 more refused commits (2 s of outage)", lambda: count("commit_failed") >= refused + 40, 30)
        assert w.owns_everything(), "renewals work under NOSPACE: no partition may be lost"

        accepted = count("commit")
        store.delete("/filler/", prefix=True)
        repair(small_etcd)
        wait_for(f"commits accepted again; its log:\n{w.text()}", lambda: count("commit") >= accepted + 8, 30)
        wait_for("the worker to say writes are taken again", lambda: "takes writes again" in w.text(), 10)
        running = list(w.events)  # a commit racing the leave's revocation is fenced: that is the stop, not NOSPACE
        assert w.stop() == 0, w.text()

        text = w.text()
        assert [line for line in text.splitlines() if FULL in line] == [
            next(line for line in text.splitlines() if FULL in line)
        ], text  # one line for the whole outage
        line = next(line for line in text.splitlines() if FULL in line)
        said = f"worker w1: etcd at {small_etcd.url} {FULL}: writes are refused until an operator compacts, "
        assert line.endswith(said + 'defragments and disarms it (README "Running etcd for apportion")'), line
        assert text.count("takes writes again") == 1 and "Traceback" not in text and "apportion: error" not in text
        assert not [e for e in running if e["event"] in ("lost", "fenced")], "nothing was lost or fenced"
        # every acknowledged commit is what the store holds: the refused ones were neither applied nor lost
        last = {e["partitions"][0]: e["checkpoint"] for e in w.events if e["event"] == "commit"}
        for p, checkpoint in last.items():
            kv = store.get(Keys("g").commit(p))
            assert kv is not None and decode(kv.value, kv.key)["checkpoint"] == checkpoint


def test_commands_that_write_say_etcd_is_full_in_one_line_and_exit_1(small_etcd: EtcdServer) -> None:
    url = small_etcd.url
    with connect(url) as store:
        store.put(Keys("g").resource, encode(GroupConfig(partitions=4).to_json()))
        store.put(Keys("s").resource, encode(GroupConfig(partitions=4, mode=Static()).to_json()))  # scale's
        resources = (Resource("a", 2), Resource("b", 2))
        store.put(Keys("r").resource, encode(GroupConfig(resources=resources).to_json()))
        fill(store)
    expected = f"apportion: error: etcd at {url} {FULL}: writes are refused until an operator"

    scaled = cli("scale", "--store", url, "--group", "s", "--replicas", "3")
    assert scaled.code == 1 and scaled.one_error_line().startswith(expected), scaled.stderr
    subscribed = cli("subscribe", "--store", url, "--group", "r", "--id", "w1", "a")
    assert subscribed.code == 1 and subscribed.one_error_line().startswith(expected), subscribed.stderr

    started = time.monotonic()  # a worker process: its registration is refused, it says so and exits 1 at once
    worker = subprocess.run(
        [sys.executable, "-m", "apportion.cli", "worker", "--store", url, "--group", "g", "--id", "w1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert worker.returncode == 1, worker.stderr
    assert worker.stderr.splitlines() == [worker.stderr.splitlines()[-1]], worker.stderr
    assert worker.stderr.startswith(expected), worker.stderr
    assert time.monotonic() - started < 20, "the worker must not wait out --connect-timeout (30 s) for space"
