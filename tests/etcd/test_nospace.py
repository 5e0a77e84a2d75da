"""etcd out of space (the NOSPACE alarm) on a real server started with a 16 MiB ``--quota-backend-bytes``.

Filled by writes until etcd raises the alarm, then repaired as an operator would (compact, defragment, disarm). The
store must refuse writes at once with ``StoreFull`` (not retry them for the request timeout), apply none of them,
keep reads, lease renewals, revocations and deletes working (what etcd 3.4 still accepts under the alarm) and take
writes again once the alarm is disarmed. What a worker and the CLI make of it is in test_nospace_worker.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.errors import StoreFull, StoreUnavailable
from apportion.store import Put, Store, connect, value_is
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
        assert store.delete("/filler/", prefix=True) == 8
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
