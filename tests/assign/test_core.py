"""The plan builder of apportion.assign._core: moves kept as columns until read."""

from __future__ import annotations

import gc
import pickle
import threading

from apportion.assign import plan
from apportion.assign._core import LazyMoves
from apportion.model import Member, Move, Partition, Plan

from .helpers import parts, request


def _two_topic_plan_with_moves() -> tuple[Plan, tuple[Move, ...]]:
    """C0 held everything of t0 and t1; C1 and C2 join: partitions of both topics move (few moves: the Partition
    values of the moves are made from the columns, not taken from a prebuilt list)."""
    owned = parts(" ".join([f"t0-{i}" for i in range(6)] + [f"t1-{i}" for i in range(6)]))
    members = [Member("C0", owned=owned), Member("C1"), Member("C2")]
    result = plan(request("sticky", {"t0": 6, "t1": 6}, members))
    owner = result.owner_of()
    expected = tuple(Move(p, "C0", owner[p]) for p in owned if owner[p] != "C0")
    return result, expected


def test_plan_moves_equal_the_tuple_of_the_moves_of_every_resource() -> None:
    result, expected = _two_topic_plan_with_moves()
    moves = result.moves
    assert isinstance(moves, LazyMoves)
    assert len(moves) == len(expected) == 8
    assert moves == expected and expected == moves and not moves != expected  # noqa: SIM202
    assert hash(moves) == hash(expected) and repr(moves) == repr(expected)
    assert moves[0] == expected[0] and moves[-2:] == expected[-2:] and expected[3] in moves
    assert {m.partition.resource for m in moves} == {"t0", "t1"}
    assert moves != list(expected)  # like a tuple: never equal to a list


def test_plan_moves_pickle_as_a_plain_tuple() -> None:
    result, expected = _two_topic_plan_with_moves()
    copy = pickle.loads(pickle.dumps(result.moves))
    assert type(copy) is tuple and copy == expected


def test_plan_moves_from_scratch_are_placements_counted_without_building_them() -> None:
    result = plan(request("sticky", {"t": 1000}, [Member(f"m{i}") for i in range(7)]))
    moves = result.moves
    assert isinstance(moves, LazyMoves)
    assert len(moves) == 1000 and result.stats.moved == 0 and not isinstance(moves._state, tuple)
    assert [m.partition for m in moves] == [Partition("t", i) for i in range(1000)]
    assert all(m.source is None and m.partition in set(result.assignment[m.target]) for m in moves)


def test_plan_moves_read_by_many_threads_at_once_are_the_same_tuple() -> None:
    result, expected = _two_topic_plan_with_moves()
    seen: list[tuple[Move, ...]] = []
    start = threading.Barrier(8)

    def read() -> None:
        start.wait()
        seen.append(tuple(result.moves))

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [expected] * 8


def test_planning_leaves_the_callers_gc_switch_and_frozen_objects_as_they_were() -> None:
    def big_plan() -> Plan:
        return plan(request("sticky", {"t": 20_000}, [Member(f"m{i}") for i in range(10)]))

    assert gc.isenabled()
    frozen_before = gc.get_freeze_count()
    try:
        gc.disable()
        tuple(big_plan().moves)
        assert not gc.isenabled()
    finally:
        gc.enable()
    tuple(big_plan().moves)
    assert gc.isenabled() and gc.get_freeze_count() == frozen_before
    gc.freeze()  # a pre-fork server froze its objects: planning must not unfreeze them
    try:
        frozen = gc.get_freeze_count()
        tuple(big_plan().moves)
        # unfrozen, the count would be 0; not compared exactly: a frozen object another thread frees meanwhile
        # (xdist's execnet thread) leaves the permanent generation (seen: 230,041 -> 230,040)
        assert gc.get_freeze_count() > frozen // 2
    finally:
        gc.unfreeze()
