"""A member whose watch lost events (``Compacted``: an etcd watch that broke and resumed below the compaction point)
replaces it and reads again what the lost events told, in every mode, in virtual time on the memory store.

The lost event is always one the member needs: a crashed member's registration going (rounds, coordinator) or a new
replica count (static). Heartbeat rounds are 30 s apart, so nothing but the re-read can make the member notice within
the test. The same recovery on a real etcd whose history is compacted under the workers: tests/etcd/test_compaction.py.
"""

from __future__ import annotations

from typing import Any

from apportion.errors import Compacted
from apportion.group import FencedMember, GroupConfig, set_replicas
from apportion.store import Event, Watch
from tests.group.harness import FAST
from tests.group.modes_harness import ModeHarness


class LosingWatch(Watch):
    """A member's watch that, once told to ``lose()``, swallows every event, and once told to ``fail()`` raises
    Compacted from then on — as an etcd watch that resumed below the compaction point after a broken stream."""

    def __init__(self, inner: Watch) -> None:
        self.inner = inner
        self.losing = False
        self.failing = False
        self.closed = False

    def poll(self) -> list[Event]:
        events = self.inner.poll()
        if self.failing:
            raise Compacted(1, 2)
        return [] if self.losing else events

    def wait(self, timeout_s: float) -> list[Event]:
        return self.poll()

    def close(self) -> None:
        self.closed = True
        self.inner.close()


def losing(member: FencedMember) -> LosingWatch:
    """Put a LosingWatch around ``member``'s own watch (the member must have started)."""
    assert member._inbox.watch is not None
    wrapped = LosingWatch(member._inbox.watch)
    member._inbox.watch = wrapped
    return wrapped


def traced(h: ModeHarness, member_id: str) -> list[str]:
    kinds: list[str] = []

    def tracer(kind: str, fields: Any) -> None:
        kinds.append(kind)

    h.members[member_id]._ctx.tracer = tracer
    return kinds


def crash_unheard(h: ModeHarness, survivor: str, crashed: str) -> tuple[LosingWatch, list[str]]:
    """Two members sharing 12 partitions: ``crashed`` crashes while ``survivor``'s watch loses every event, and its
    lease (ttl 3 s) expires in the store unheard: ``survivor`` still holds only its half."""
    assert sorted(len(p) for p in h.assignment().values()) == [6, 6]
    kinds = traced(h, survivor)
    watch = losing(h.members[survivor])
    watch.losing = True
    h.crash(crashed)
    h.run(6.0)
    assert len(h.members[survivor].owned()) == 6
    return watch, kinds


def recover(h: ModeHarness, member_id: str, watch: LosingWatch, kinds: list[str]) -> None:
    """Make the watch fail and run 3 s: the member replaced it (a new watch) and said so once."""
    watch.failing = True
    h.run(3.0)
    member = h.members[member_id]
    assert watch.closed and member._inbox.watch is not watch and not isinstance(member._inbox.watch, LosingWatch)
    assert kinds.count("watch_lost") == 1, kinds
    assert not [c for c in h.log.calls if c[0] == "lost" and c[1] == member_id], "no belief may end for it"


def test_rounds_member_notices_the_crash_whose_event_it_lost_and_takes_everything() -> None:
    h = ModeHarness(FAST)
    h.add("a")
    h.add("b")
    h.run(3.0)
    recover(h, "a", *crash_unheard(h, "a", "b"))
    assert h.members["a"].owned() == list(range(12))


def test_coordinator_notices_the_crash_whose_event_it_lost_and_places_its_partitions() -> None:
    h = ModeHarness()
    h.add_coordinated("a")
    h.run(1.0)
    h.add_coordinated("b")
    h.run(5.0)
    recover(h, "a", *crash_unheard(h, "a", "b"))
    h.run(5.0)
    assert h.members["a"].owned() == list(range(12))


def test_static_member_follows_the_replica_count_whose_event_it_lost() -> None:
    h = ModeHarness(GroupConfig(partitions=12, ttl_s=3.0))
    h.add_static("c-0", 0, 2)
    h.add_static("c-1", 1, 2)
    h.run(1.0)
    kinds = traced(h, "c-0")
    watch = losing(h.members["c-0"])
    watch.losing = True
    set_replicas(h.store, "g", 1)  # c-1 hears it and gives its half up; c-0 does not hear it
    h.run(3.0)
    assert h.members["c-1"].owned() == [] and len(h.members["c-0"].owned()) == 6
    recover(h, "c-0", watch, kinds)
    assert h.members["c-0"].owned() == list(range(12))
