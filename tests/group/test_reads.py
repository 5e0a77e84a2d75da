"""Watch handling reads only what changed: a step after other members' commits reads nothing from the store.

Every change under the group's prefix wakes every member's watch (commits did too until they moved beside the prefix,
``apportion.group._keys``; tests/group/test_commits.py checks that they wake nobody now); the members keep
``current``, the plan, the coordinator record and the partition table from those events instead of reading them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

from apportion.group import FencedMember
from apportion.group.internals import Keys
from apportion.store import Get, KeyValue, MemoryStore, Op, TxnResult
from apportion.store._types import Compare
from tests.group.modes_harness import ModeHarness


class CountingStore(MemoryStore):
    """A memory store that counts reads per key or prefix (``get``, ``range`` and the Get ops of a txn)."""

    def __init__(self, url: str, **kwargs: object) -> None:
        super().__init__(url, **kwargs)  # type: ignore[arg-type]
        self.reads: Counter[str] = Counter()

    def get(self, key: str) -> KeyValue | None:
        self.reads[key] += 1
        return super().get(key)

    def range(self, prefix: str, limit: int | None = None) -> list[KeyValue]:
        self.reads[prefix] += 1
        return super().range(prefix, limit)

    def txn(self, compares: Sequence[Compare], on_success: Sequence[Op], on_failure: Sequence[Op] = ()) -> TxnResult:
        result = super().txn(compares, on_success, on_failure)
        for op in on_success if result.succeeded else on_failure:
            if isinstance(op, Get):
                self.reads[op.key] += 1
        return result


def _harness(mode: str) -> ModeHarness:
    h = ModeHarness()
    h.store = CountingStore(h.store.url + "-counted", clock=h.clock)
    for i, mid in enumerate(("a", "b", "c")):
        if mode == "rounds":
            h.add(mid)
        elif mode == "coordinator":
            h.add_coordinated(mid)
        else:
            h.add_static(mid, ordinal=i, replicas=3)
    h.run(5.0)
    assert all(m.stable() for m in h.members.values()), h.assignment()
    return h


def _commits_woken(h: ModeHarness, commits: int) -> Counter[str]:
    """``commits`` commits by b and c, each followed by a step of every member (as its watch wakes it); the reads."""
    h.store.reads.clear()  # type: ignore[attr-defined]
    writers: list[FencedMember] = [h.members["b"], h.members["c"]]
    for n in range(commits):
        writer = writers[n % 2]
        writer.commit(writer.owned()[0], str(n))
        h.clock.advance(0.001)
        for member in h.members.values():
            member.step()
    return Counter(h.store.reads)  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["rounds", "coordinator", "static"])
def test_steps_woken_by_other_members_commits_read_nothing(mode: str) -> None:
    h = _harness(mode)
    few = _commits_woken(h, 20)
    many = _commits_woken(h, 200)
    keys = Keys(h.group)
    assert many[keys.current] == few[keys.current] == 0
    assert sum(many.values()) == sum(few.values()) == 0, many  # nothing at all grows with the commits


def test_a_new_round_is_still_seen_and_joined_by_every_member() -> None:
    h = _harness("rounds")
    before = {m.id: m.round for m in h.members.values()}  # type: ignore[attr-defined]
    h.add("d")
    h.run(5.0)
    assert all(m.stable() for m in h.members.values()), h.assignment()
    rounds = {m.round for m in h.members.values()}  # type: ignore[attr-defined]
    assert len(rounds) == 1 and rounds.pop() > max(before.values())
    assert sorted(len(p) for p in h.assignment().values()) == [3, 3, 3, 3]
