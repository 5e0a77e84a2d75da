"""``sticky``: balanced and as few moves as possible.

Equal subscriptions (every member subscribes to the same resources) — the two-phase constrained algorithm of
KAFKA-12464, with ``P`` partitions, ``N`` members, ``q = P // N`` (floor quota) and ``r = P % N`` (how many members
may hold ``q + 1``):

1. In member-id order, each member keeps its previous partitions (lowest first): all of them when it has at most
   ``q``; ``q + 1`` when it has more and fewer than ``r`` members kept ``q + 1`` so far; else ``q``.
2. The other partitions, in the seed's order "for data parallelism" — by index, then resource: t0-0, t1-0, t0-1,
   t1-1, ... — fill the members below ``q`` in id order (each takes the next ones off that list) — up to ``q + 1``
   while fewer than ``r`` members hold ``q + 1``, else up to ``q`` — then one each to members at ``q`` (id order)
   until none is left. So with several resources every member gets partitions of each where its quota allows
   (t0: 3 and t1: 3 over two members: t0-0, t0-1, t1-0 and t0-2, t1-1, t1-2, not all of t0 and all of t1).

Every member ends with ``q`` or ``q + 1``, and the number of moves equals the minimum over all balanced assignments::

    min_moves = sum(o_i) - (sum(min(o_i, q)) + min(r, #{i : o_i > q}))

where ``o_i`` counts the previous partitions member ``i`` may keep. (Phase 1 keeps exactly that many; phase 2 never
hands a member back a partition it dropped, because a member that dropped some is already full.) One join with an
even spread of ``P`` over ``N`` members therefore moves ``P // (N + 1)`` or one more; one leave moves exactly the
leaver's partitions.

Mixed subscriptions — the general path: each member keeps all its previous partitions it still subscribes to; free
partitions go, resource group by resource group (fewest subscribers first; within a group in the seed's order t0-0,
t1-0, t0-1, ...), to the least loaded subscriber (ties: the one holding fewest partitions of that resource, so each
resource spreads over the subscribers; then member id); then, while some member could take a partition it
subscribes to from a member holding at least two more (Kafka's definition of unbalanced), one such partition moves
from the most loaded to the least loaded member of such a pair — preferring a partition that returns to its
previous owner, then one that was not previously owned by the giver. Each step lowers the sum of squared loads, so
the loop ends, balanced by construction. ``stats.min_moves`` is then a lower bound, not always reached: the forced
moves plus the closed form above for every group of resources whose subscribers subscribe to nothing else (those
members must be balanced among themselves, max - min <= 1, in any Kafka-balanced plan); the exact minimum over all
Kafka-balanced plans is not computed.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from typing import ClassVar

from apportion.assign._core import MoveColumns, Problem, balanced_min_moves, to_plan
from apportion.assign._options import StrategyOptions
from apportion.model import AssignRequest, Plan

_INVERT = bytes([1, 0]) + bytes(254)


@dataclass(frozen=True, slots=True)
class StickyOptions(StrategyOptions):
    """``sticky`` takes no options."""

    STRATEGY: ClassVar[str] = "sticky"


def sticky(request: AssignRequest) -> Plan:
    problem = Problem.of(request)
    if problem.equal_subscriptions():
        return _constrained(problem)
    return _general(problem)


def sticky_min_moves(request: AssignRequest) -> int:
    """The lower bound of ``sticky`` (the registry's): see :func:`problem_min_moves`."""
    return problem_min_moves(Problem.of(request))


def problem_min_moves(problem: Problem) -> int:
    """The forced moves plus the closed form of the module docstring for every group of resources whose subscribers
    subscribe to nothing else (they are balanced among themselves, max - min <= 1, in every Kafka-balanced plan).

    Exact with equal subscriptions (one such group). With mixed subscriptions a lower bound: beyond the forced
    moves, nothing is counted for the members of the other groups."""
    groups = [(rs, ms) for rs, ms in problem.groups() if all(len(problem.subs[m]) == len(rs) for m in ms)]
    return balanced_min_moves(problem, groups)


def _universe_mask(problem: Problem) -> tuple[bytearray, int]:
    """A byte per partition: 1 for partitions nobody may take (resource not subscribed); and the universe size."""
    mask = bytearray(problem.total)
    size = problem.total
    subs = problem.subs[0] if problem.subs else frozenset()
    for r in range(len(problem.resources)):
        if r not in subs:
            a, b = problem.start[r], problem.start[r + 1]
            mask[a:b] = b"\x01" * (b - a)
            size -= b - a
    return mask, size


def _constrained(problem: Problem) -> Plan:
    n = len(problem.members)
    if n == 0:
        return to_plan(problem, [], [], 0)
    taken, size = _universe_mask(problem)
    q, r = divmod(size, n)
    min_moves = problem_min_moves(problem)
    at_max = 0
    assignment: list[Sequence[int]] = []
    dropped_from: dict[int, int] = {}
    setter = taken.__setitem__
    # Phase 1: keep previous partitions up to the quota, honouring how many members may hold q + 1.
    for m in range(n):
        own = problem.kept_claims(m)
        if len(own) <= q:
            keep = len(own)
        elif at_max < r:
            keep = q + 1
            at_max += 1
        else:
            keep = q
        kept = own[:keep] if keep < len(own) else own
        for p in own[keep:]:
            dropped_from[p] = m
        for _ in map(setter, kept, repeat(1)):
            pass
        assignment.append(kept)
    # From scratch (nothing kept) ``free`` is a range: no million int objects, and each member's share is a range.
    free: Sequence[int] = range(problem.total)
    if taken.find(1) >= 0:
        free = list(compress(free, taken.translate(_INVERT)))
    order = problem.interleaved(free)  # the seed's order: t0-0, t1-0, t0-1, t1-1, ...
    # Phase 2: fill members below q (up to q + 1 while allowed), then one each to members at q, popping partitions
    # off ``order``. With one resource ``order`` is ``free``: the moves, by partition, are free[:pos] with the
    # targets in hand-out order; else the targets are looked up by partition.
    pos = 0
    fresh: list[Sequence[int]] = [[] for _ in range(n)]
    targets: list[int] = []
    for m in range(n):
        have = len(assignment[m])
        if have < q:
            want = q + 1 if at_max < r else q
            if want > q:
                at_max += 1
            fresh[m] = order[pos : pos + want - have]
            targets.extend(repeat(m, len(fresh[m])))
            pos += len(fresh[m])
    for m in range(n):
        if at_max >= r or pos >= len(order):
            break
        if len(assignment[m]) + len(fresh[m]) == q:
            fresh[m] = [*fresh[m], order[pos]]
            targets.append(m)
            pos += 1
            at_max += 1
    moved = free[:pos]
    if order is not free:
        target_of = [-1] * problem.total
        target_setter = target_of.__setitem__
        for m, new in enumerate(fresh):
            for _ in map(target_setter, new, repeat(m)):
                pass
            fresh[m] = sorted(new)
        moved = free if pos == len(free) else sorted(order[:pos])
        targets = list(map(target_of.__getitem__, moved))
    for m in range(n):
        new = fresh[m]
        if new:
            assignment[m] = sorted([*assignment[m], *new]) if assignment[m] else new
    sources = list(map(dropped_from.get, moved, repeat(-1))) if dropped_from else [-1] * pos
    moves = MoveColumns(moved, sources, targets)
    return to_plan(problem, assignment, moves, min_moves)


def _general(problem: Problem) -> Plan:
    n = len(problem.members)
    nres = len(problem.resources)
    prev = problem.prev()
    # holdings[m][r]: partitions of resource r held by m, ascending
    holdings: list[list[list[int]]] = [[[] for _ in range(nres)] for _ in range(n)]
    count = [0] * n
    taken = bytearray(problem.total)
    for m in range(n):
        for p in problem.kept_claims(m):
            holdings[m][problem.resource_of(p)].append(p)
            taken[p] = 1
        count[m] = sum(map(len, holdings[m]))
    groups = sorted(problem.groups(), key=lambda g: (len(g[1]), g[0][0]))
    for resources, subscribers in groups:
        # one heap per resource of (load, partitions of that resource held, member); keys only grow, so a stale
        # entry is re-pushed when it comes to the top
        heaps = {res: [(count[m], len(holdings[m][res]), m) for m in subscribers] for res in resources}
        for heap in heaps.values():
            heapq.heapify(heap)
        for p in problem.interleaved([p for p in problem.ints_of(resources) if not taken[p]]):
            res = problem.resource_of(p)
            heap = heaps[res]
            while True:
                c, h, m = heapq.heappop(heap)
                if c == count[m] and h == len(holdings[m][res]):
                    break
                heapq.heappush(heap, (count[m], len(holdings[m][res]), m))
            holdings[m][res].append(p)
            count[m] += 1
            heapq.heappush(heap, (count[m], h + 1, m))
    _rebalance(problem, holdings, count, prev)
    assignment = [sorted(p for ps in holdings[m] for p in ps) for m in range(n)]
    return to_plan(problem, assignment, None, problem_min_moves(problem))


def _rebalance(problem: Problem, holdings: list[list[list[int]]], count: list[int], prev: list[int]) -> None:
    n = len(count)
    subs = [sorted(s) for s in problem.subs]
    while True:
        best: tuple[int, int, int, int] | None = None  # (-gap, i, j, resource)
        order = sorted(range(n), key=lambda m: (count[m], problem.ids[m]))
        for i in order:
            for j in reversed(order):
                gap = count[j] - count[i]
                if gap < 2 or (best is not None and -gap > best[0]):
                    break
                res = next((x for x in subs[i] if holdings[j][x]), None)
                if res is not None:
                    candidate = (-gap, i, j, res)
                    if best is None or candidate < best:
                        best = candidate
                    break
        if best is None:
            return
        _, i, j, res = best
        ps = holdings[j][res]
        pick = max((p for p in ps if prev[p] == i), default=None)
        if pick is None:
            pick = max((p for p in ps if prev[p] != j), default=ps[-1])
        ps.remove(pick)
        holdings[i][res].append(pick)
        holdings[i][res].sort()
        count[j] -= 1
        count[i] += 1
