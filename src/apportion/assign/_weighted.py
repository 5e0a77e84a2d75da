"""``weighted``: each member's load follows its capacity, within a tolerance, moving as little as possible.

Per group of resources with the same subscribers (one group with equal subscriptions): with ``W`` the group's total
weight (its partition count when no weights are given), member ``i``'s *share* is ``s_i = W * c_i / sum(c)``
(``c`` = capacity) and ``t`` is the ``tolerance`` option (default 0, at most 1).

Without per-partition weights every member ends within ``[floor(s_i (1 - t)), ceil(s_i (1 + t))]`` partitions — the
integer *band* (seed 2: capacities 5, 10, 10, 15 and 80 tasks give exactly 10, 20, 20, 30; with ``t = 0.2`` a
previous 12, 18, 23, 27 lies inside every band and is kept, zero moves). The algorithm: each member keeps its previous
partitions up to the top of its band; members below the bottom are filled from the free partitions (unowned or
shed), taking from the members furthest above their share only when the free ones do not suffice; what is left goes
one by one to the member with the lowest ``(load + 1) / c`` that is below the top of its band. That is the least
number of moves: ``max(E, D - U)`` per group, where ``E`` counts previous partitions above band tops, ``D`` the
missing partitions below band bottoms and ``U`` the group's partitions without a keeping previous owner.

With per-partition weights the band widens by the heaviest partition ``w``: ``[s_i (1 - t) - w, s_i (1 + t) + w]``.
Members keep previous partitions while under the top, free partitions go heaviest first to the member whose relative
load after taking it is lowest, then members under the bottom take the lightest partitions of the members furthest
above their share. ``stats.min_moves`` is then only the forced moves (a lower bound, not computed exactly).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar, Self

from apportion.assign._core import Problem, exact, forced_moves, to_plan
from apportion.assign._options import StrategyOptions, number_option
from apportion.errors import InvalidRequest
from apportion.model import AssignRequest, Plan

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class WeightedOptions(StrategyOptions):
    """The options of ``weighted``: ``tolerance``, how far (a fraction of its share) a member's load may stray."""

    STRATEGY: ClassVar[str] = "weighted"
    tolerance: float = 0.0

    @classmethod
    def _read(cls, options: Mapping[str, object]) -> Self:
        return cls(number_option(options, "tolerance", "must be a number in [0, 1]", lambda x: 0 <= x <= 1))


def shares(problem: Problem, subscribers: list[int], total: Fraction) -> list[Fraction]:
    caps = [exact(problem.members[m].capacity) for m in subscribers]
    if any(c < 0 for c in caps) or sum(caps) <= 0:
        raise InvalidRequest("members", "capacities must be >= 0 with a positive sum among subscribers")
    whole = sum(caps)
    return [total * c / whole for c in caps]


def unit_bands(share_list: list[Fraction], tolerance: Fraction) -> list[tuple[int, int]]:
    return [(math.floor(s * (1 - tolerance)), math.ceil(s * (1 + tolerance))) for s in share_list]


def weighted(request: AssignRequest) -> Plan:
    problem = Problem.of(request)
    tolerance = exact(WeightedOptions.parse(request.options).tolerance)
    n = len(problem.members)
    holdings: list[list[int]] = [[] for _ in range(n)]
    unit = problem.unit_weights()
    for resources, subscribers in problem.groups():
        ints = problem.ints_of(resources)
        if unit:
            _unit_group(problem, ints, subscribers, tolerance, holdings)
        else:
            _weighted_group(problem, ints, subscribers, float(tolerance), holdings)
    return to_plan(problem, [sorted(h) for h in holdings], None, problem_min_moves(problem, tolerance))


def weighted_min_moves(request: AssignRequest) -> int:
    """The lower bound of ``weighted`` (the registry's): see :func:`problem_min_moves`."""
    return problem_min_moves(Problem.of(request), exact(WeightedOptions.parse(request.options).tolerance))


def problem_min_moves(problem: Problem, tolerance: Fraction) -> int:
    """The forced moves plus, with unit weights, ``max(E, D - U)`` per group (exact, see the module docstring); with
    partition weights the forced moves alone (a lower bound)."""
    total = forced_moves(problem)
    if not problem.unit_weights():
        return total
    for resources, subscribers in problem.groups():
        ints = set(problem.ints_of(resources))
        if not ints:
            continue
        bands = unit_bands(shares(problem, subscribers, Fraction(len(ints))), tolerance)
        owned = [sum(1 for p in problem.kept_claims(m) if p in ints) for m in subscribers]
        excess = sum(max(0, o - b[1]) for o, b in zip(owned, bands, strict=True))
        deficit = sum(max(0, b[0] - min(o, b[1])) for o, b in zip(owned, bands, strict=True))
        unclaimed = len(ints) - sum(owned)
        total += max(excess, deficit - unclaimed)
    return total


def group_claims(problem: Problem, ints: list[int], subscribers: list[int]) -> dict[int, list[int]]:
    lo, hi = ints[0], ints[-1]
    in_group = set(ints)
    return {m: [p for p in problem.kept_claims(m) if lo <= p <= hi and p in in_group] for m in subscribers}


def _unit_group(
    problem: Problem, ints: list[int], subscribers: list[int], tolerance: Fraction, holdings: list[list[int]]
) -> None:
    """Place one group with unit weights, moving the group's least number of moves (max(E, D - U))."""
    if not ints:
        return
    bands = unit_bands(shares(problem, subscribers, Fraction(len(ints))), tolerance)
    claims = group_claims(problem, ints, subscribers)
    kept: dict[int, list[int]] = {}
    taken: set[int] = set()
    for k, m in enumerate(subscribers):
        kept[m] = claims[m][: bands[k][1]]
        taken.update(kept[m])
    free = [p for p in ints if p not in taken]
    deficit = sum(max(0, bands[k][0] - len(kept[m])) for k, m in enumerate(subscribers))
    # Take from the members furthest above their share when the free partitions cannot fill every band bottom.
    shortfall = deficit - len(free)
    if shortfall > 0:
        share_list = shares(problem, subscribers, Fraction(len(ints)))
        heap = [(-(len(kept[m]) - share_list[k]), k) for k, m in enumerate(subscribers)]
        heapq.heapify(heap)
        stolen: list[int] = []
        for _ in range(shortfall):
            while True:
                _, k = heapq.heappop(heap)
                m = subscribers[k]
                if len(kept[m]) > bands[k][0]:
                    break
            stolen.append(kept[m].pop())
            heapq.heappush(heap, (-(len(kept[m]) - share_list[k]), k))
        free = sorted(free + stolen)
    pos = 0
    for k, m in enumerate(subscribers):
        need = bands[k][0] - len(kept[m])
        if need > 0:
            kept[m] = kept[m] + free[pos : pos + need]
            pos += need
    caps = [exact(problem.members[m].capacity) for m in subscribers]
    heap2 = [((len(kept[m]) + 1) / caps[k] if caps[k] else Fraction(10**18), k) for k, m in enumerate(subscribers)]
    heap2 = [e for e in heap2 if len(kept[subscribers[e[1]]]) < bands[e[1]][1]]
    heapq.heapify(heap2)
    for p in free[pos:]:
        _, k = heapq.heappop(heap2)
        m = subscribers[k]
        kept[m].append(p)
        if len(kept[m]) < bands[k][1]:
            heapq.heappush(heap2, ((len(kept[m]) + 1) / caps[k], k))
    for m in subscribers:
        holdings[m].extend(kept[m])


def _weighted_group(
    problem: Problem, ints: list[int], subscribers: list[int], tolerance: float, holdings: list[list[int]]
) -> None:
    if not ints:
        return
    weight = {p: problem.weight(p) for p in ints}
    wmax = max(weight.values())
    share_list = [float(s) for s in shares(problem, subscribers, Fraction(sum(weight.values())))]
    caps = [float(problem.members[m].capacity) for m in subscribers]
    claims = group_claims(problem, ints, subscribers)
    load = [0.0] * len(subscribers)
    kept: list[list[int]] = [[] for _ in subscribers]
    taken: set[int] = set()
    for k, m in enumerate(subscribers):
        top = share_list[k] * (1 + tolerance)
        for p in claims[m]:
            if load[k] + weight[p] <= top + EPS:
                kept[k].append(p)
                load[k] += weight[p]
                taken.add(p)
    free = sorted((p for p in ints if p not in taken), key=lambda p: (-weight[p], p))
    for p in free:
        w = weight[p]
        # Lowest relative load first, among the members that stay inside their band's top (share x (1 + t) + wmax):
        # a big member's relative load can stay lowest while its absolute load passes the top. One always fits: a
        # member whose load is at most its share (there is one while partitions are left) takes any w <= wmax.
        k = min(
            (k for k in range(len(subscribers)) if caps[k] > 0),
            key=lambda k: (load[k] + w > share_list[k] * (1 + tolerance) + wmax + EPS, (load[k] + w) / caps[k], k),
        )
        kept[k].append(p)
        load[k] += w
    # Repair: members under the bottom take the lightest partitions of the members furthest above their share.
    for _ in range(len(ints)):
        low = [k for k in range(len(subscribers)) if load[k] < share_list[k] * (1 - tolerance) - wmax - EPS]
        if not low:
            break
        i = low[0]
        j = max(range(len(subscribers)), key=lambda k: (load[k] - share_list[k], -k))
        if j == i or not kept[j]:
            break
        p = min(kept[j], key=lambda p: (weight[p], p))
        kept[j].remove(p)
        load[j] -= weight[p]
        kept[i].append(p)
        load[i] += weight[p]
    for k, m in enumerate(subscribers):
        holdings[m].extend(kept[k])
