"""Workers on a real etcd whose history is compacted under them (issue 27: etcd must be compacted, by its own
``--auto-compaction-*`` or by whoever runs it, and apportion must survive that).

A watch only needs history when its stream breaks (a member restart, a stream idle for ``WATCH_IDLE_S``): it resumes
from the revision after its last event. On a quiet group prefix that revision stays behind while other writers (other
applications sharing the etcd, the group's own history records) move the store on, so a compaction passes it and the
resumed watch gets ``Compacted``. The member must then open a new watch and read the group again, never crash or hang:
here after an explicit compaction and an etcd restart, and under etcd's own periodic compaction every second with
watches re-opened every second. Real time is unavoidable; every wait polls a condition with a deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from apportion.store import _etcd as etcd_backend
from apportion.store import connect
from apportion.waiting import wait_for
from apportion.worker import Group, Worker
from tests.etcd_server import EtcdServer

pytestmark = [pytest.mark.etcd, pytest.mark.slow]

PARTITIONS = 8


class Fleet:
    """In-process workers of group ``g``, each on its own etcd client, with every trace kind they emitted."""

    def __init__(self, url: str, stack: ExitStack) -> None:
        self.url = url
        self.stack = stack
        self.workers: dict[str, Worker] = {}
        self.kinds: dict[str, list[str]] = {}

    def join(self, member: str) -> Worker:
        store = self.stack.enter_context(connect(self.url))
        kinds = self.kinds.setdefault(member, [])

        def tracer(kind: str, fields: Mapping[str, Any]) -> None:
            kinds.append(kind)

        worker = Group(store, "g", PARTITIONS).join(member, tracer=tracer)
        self.stack.callback(self._stop, worker)
        self.workers[member] = worker
        return worker

    @staticmethod
    def _stop(worker: Worker) -> None:
        if not worker.stopped:
            worker.stop(30)

    def balanced(self) -> bool:
        live = [w for w in self.workers.values() if not w.stopped]
        sizes = sorted(len(w.owned()) for w in live)
        owned = sorted(p for w in live for p in w.owned())
        return owned == list(range(PARTITIONS)) and sizes[-1] - sizes[0] <= 1 and all(w.member.stable() for w in live)

    def check(self) -> None:
        """No worker stopped by an error, and no belief ended other than by a planned handoff."""
        for member, worker in self.workers.items():
            assert worker.error is None, f"{member} stopped: {worker.error!r}"
            assert "lost" not in self.kinds[member], f"{member}'s belief ended: {self.kinds[member]}"

    def state(self) -> str:
        return "; ".join(f"{m}: owns {w.owned()}, stopped={w.stopped}" for m, w in self.workers.items())


@pytest.fixture
def fleet(etcd_bin: str, tmp_path: Path) -> Iterator[tuple[EtcdServer, Fleet]]:
    with ExitStack() as stack:
        server = stack.enter_context(EtcdServer.single(etcd_bin, tmp_path / "etcd"))
        yield server, Fleet(server.url, stack)


def test_watches_resumed_below_an_explicit_compaction_are_replaced_and_the_group_goes_on(
    fleet: tuple[EtcdServer, Fleet],
) -> None:
    server, workers = fleet
    workers.join("w1")
    workers.join("w2")
    wait_for(f"w1 and w2 to share the partitions: {workers.state()}", workers.balanced, 30)
    with connect(server.url) as other:  # another application moves the store on; the group is quiet
        for i in range(20):
            other.put(f"/other/{i}", b"x")
    server.compact()
    server.restart()  # every watch stream breaks and resumes from its last revision + 1: compacted
    wait_for(
        f"both watches to be replaced: {workers.kinds}",
        lambda: all("watch_lost" in workers.kinds[m] for m in ("w1", "w2")),
        30,
    )
    workers.join("w3")  # heard only through the new watches: w1 and w2 must give partitions up
    wait_for(f"three workers to share the partitions: {workers.state()}", workers.balanced, 30)
    workers.check()
    w1 = workers.workers["w1"]
    p = w1.owned()[0]
    assert w1.commit(p, "after compaction") > 0


def test_a_group_runs_on_under_etcd_periodic_auto_compaction_every_second(
    etcd_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """etcd compacts to the revision of 1 s ago, every second; idle watch streams re-open every 0.5 s (30 s in
    production); another writer moves the store on every 10 ms. Two workers, a third joins, one leaves."""
    monkeypatch.setattr(etcd_backend, "WATCH_IDLE_S", 0.5)
    args = ("--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1s")
    stop = threading.Event()
    with ExitStack() as stack:
        server = stack.enter_context(EtcdServer.single(etcd_bin, tmp_path / "etcd", args=args))
        other = stack.enter_context(connect(server.url))

        def write() -> None:
            i = 0
            while not stop.wait(0.01):
                i += 1
                other.put(f"/other/{i % 10}", b"x")

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        stack.callback(writer.join, 10)
        stack.callback(stop.set)
        workers = Fleet(server.url, stack)
        workers.join("w1")
        workers.join("w2")
        wait_for(f"w1 and w2 to share the partitions: {workers.state()}", workers.balanced, 30)
        wait_for(
            f"etcd's compaction to overtake a resumed watch of each worker: {workers.kinds}",
            lambda: all("watch_lost" in workers.kinds[m] for m in ("w1", "w2")),
            30,
        )
        workers.join("w3")
        wait_for(f"three workers to share the partitions: {workers.state()}", workers.balanced, 30)
        workers.workers["w2"].stop(30)
        wait_for(f"w1 and w3 to share the partitions: {workers.state()}", workers.balanced, 30)
        time.sleep(2.0)  # two more compactions and re-opened watches: still settled
        assert workers.balanced(), workers.state()
        workers.check()
        w3 = workers.workers["w3"]
        assert w3.commit(w3.owned()[0], "after compactions") > 0
