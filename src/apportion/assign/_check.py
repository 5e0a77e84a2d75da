"""The invariant checker every test uses, and the movement lower bound.

:func:`check` returns human-readable violations (empty when the plan is fine):

- exclusivity: every partition of a subscribed resource has exactly one owner; no unknown or unsubscribed ones;
  every member appears in the assignment; lists sorted;
- moves: ``plan.moves`` lists exactly the partitions whose owner changed (against the previous ownership of
  :mod:`apportion.assign._core`), with the right source and target; ``stats`` agree with the assignment;
- balance, per strategy:
  ``sticky`` — equal subscriptions: max - min <= 1; mixed: no member could take a partition it subscribes to from a
  member holding >= 2 more (Kafka's definition); ``round_robin``/``range`` — max - min <= 1 within each group of
  resources with the same subscribers; ``weighted`` — each member within its band (see ``_weighted``);
  ``bounded_load`` — no member above ``ceil(load_factor * P / N)`` (equal subscriptions); ``rendezvous`` — none;
- movement: ``stats.min_moves`` == :func:`min_moves` (the strategy's bound); ``stats.moved`` >= that bound less
  ``stats.deferred`` (0 except for ``high_availability``); ``sticky`` with equal subscriptions and unit-weight
  ``weighted`` — moves == :func:`min_moves`.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from fractions import Fraction

from apportion.assign._core import Problem, exact
from apportion.assign._hashing import BoundedLoadOptions, problem_capacity
from apportion.assign._registry import strategy_named
from apportion.assign._weighted import EPS, WeightedOptions, shares, unit_bands
from apportion.errors import InvalidRequest, PlanViolation
from apportion.model import AssignRequest, PartitionColumn, Plan, round_lower_bound


def min_moves(request: AssignRequest) -> int:
    """The fewest moves (owner changes between live members) any plan within the strategy's balance needs, given the
    previous owners: the strategy's own bound from the registry, which its plans report as ``stats.min_moves``.

    Exact for ``sticky`` with equal subscriptions, ``round_robin``, ``range``, unit-weight ``weighted``,
    ``bounded_load`` with equal subscriptions and ``high_availability`` with equal subscriptions; a lower bound for
    the others (see ``_core`` and each strategy's docstring).
    """
    return strategy_named(request.strategy).min_moves(request)


def check(request: AssignRequest, plan: Plan) -> list[str]:
    """Every violation of the strategy's invariants by ``plan`` (empty list: the plan is fine)."""
    try:
        problem = Problem.of(request)
    except InvalidRequest as exc:
        return [f"invalid request: {exc}"]
    out: list[str] = []
    ids = problem.ids
    position = {m: k for k, m in enumerate(ids)}
    owner: dict[int, int] = {}
    counts = [0] * len(ids)
    missing = [m for m in ids if m not in plan.assignment]
    if missing:
        out.append(f"members missing from the assignment: {missing[:5]}")
    for member, parts in plan.assignment.items():
        k = position.get(member)
        if k is None:
            out.append(f"unknown member {member!r} in the assignment")
            continue
        counts[k] = len(parts)
        if _mark_column(problem, k, parts, owner):
            continue
        if list(parts) != sorted(parts):
            out.append(f"{member}: partitions not sorted")
        for part in parts:
            r = problem.rindex.get(part.resource)
            if r is None or not 0 <= part.index < problem.resources[r].partitions:
                out.append(f"{member}: unknown partition {part}")
                continue
            if r not in problem.subs[k]:
                out.append(f"{member}: owns {part} without subscribing to {part.resource}")
            p = problem.start[r] + part.index
            if p in owner:
                out.append(f"{part} owned by both {ids[owner[p]]} and {member}")
            owner[p] = k
    for resources, _ in problem.groups():
        for p in problem.ints_of(resources):
            if p not in owner:
                out.append(f"{problem.partitions([p])[0]} has no owner")
                break
    if out:
        return out
    out += _check_moves(problem, _previous(problem, request), plan, owner)
    out += _check_balance(problem, request, plan, counts)
    out += _check_bound(problem, request, plan)
    return out


def _mark_column(problem: Problem, k: int, parts: object, owner: dict[int, int]) -> bool:
    """Mark a well-formed column's partitions as owned by member ``k`` from its indices (no Partition tuple made,
    none sorted); True when done. A column that would give a violation (unknown resource, an index out of range, not
    increasing, unsubscribed, a partition owned twice) returns False before marking anything: the general loop words
    it. Why: at 100,000 partitions the check of a rounds close took 4-5x the plan itself (0.23 of 0.28 s), most of it
    making each member's tuples and sorting them."""
    if not isinstance(parts, PartitionColumn):
        return False
    r = problem.rindex.get(parts.resource)
    if r is None or r not in problem.subs[k]:
        return False
    indices = parts.indices
    if not indices:
        return True
    if isinstance(indices, range):
        increasing = indices.step > 0
    else:
        increasing = all(map(operator.lt, indices, itertools.islice(indices, 1, None)))
    if not increasing or indices[0] < 0 or indices[-1] >= problem.resources[r].partitions:
        return False
    base = problem.start[r]
    keys: Sequence[int]
    if isinstance(indices, range):
        keys = range(base + indices.start, base + indices.stop, indices.step)
    else:
        keys = [base + i for i in indices]
    if not owner.keys().isdisjoint(keys):
        return False
    owner.update(zip(keys, itertools.repeat(k)))
    return True


def _check_bound(problem: Problem, request: AssignRequest, plan: Plan) -> list[str]:
    stats = plan.stats
    least = min_moves(request)
    if stats.min_moves != least:
        return [f"stats.min_moves {stats.min_moves} != the strategy's lower bound {least}"]
    if stats.deferred and request.strategy != "high_availability":
        return [f"stats.deferred {stats.deferred}: only high_availability leaves moves for later"]
    if stats.moved < round_lower_bound(least, stats.deferred):
        return [f"moves {stats.moved} < the lower bound {least} (deferred {stats.deferred})"]
    exact = (request.strategy == "sticky" and problem.equal_subscriptions()) or (
        request.strategy == "weighted" and problem.unit_weights()
    )
    if exact and stats.moved != least:
        return [f"moves {stats.moved} != the least possible {least}"]
    return []


def _previous(problem: Problem, request: AssignRequest) -> list[int]:
    """Previous owner (member position) of every partition, -1 for none: ``_core``'s rule, except that for
    ``high_availability`` a stale claim no newer claim contradicts still counts (see that strategy's docstring)."""
    if request.strategy != "high_availability":
        return problem.prev()
    prev = [-1] * problem.total
    position = {m: k for k, m in enumerate(problem.ids)}
    for member in sorted(request.members, key=lambda m: (-m.generation, m.id)):
        for part in member.owned:
            r = problem.rindex.get(part.resource)
            if r is not None and 0 <= part.index < problem.resources[r].partitions:
                p = problem.start[r] + part.index
                if prev[p] < 0:
                    prev[p] = position[member.id]
    return prev


def _check_moves(problem: Problem, prev: list[int], plan: Plan, owner: dict[int, int]) -> list[str]:
    out: list[str] = []
    expected = {}
    for p, m in owner.items():
        if prev[p] != m:
            expected[p] = (None if prev[p] < 0 else problem.ids[prev[p]], problem.ids[m])
    got = {}
    for move in plan.moves:
        r = problem.rindex[move.partition.resource]
        got[problem.start[r] + move.partition.index] = (move.source, move.target)
    if got != expected:
        diff = sorted(set(got.items()) ^ set(expected.items()), key=str)[:3]
        out.append(f"moves disagree with the owner changes, e.g. {diff}")
    if [m.partition for m in plan.moves] != sorted(m.partition for m in plan.moves):
        out.append("moves not sorted by partition")
    moved = sum(1 for s, _ in expected.values() if s is not None)
    sizes = [len(v) for v in plan.assignment.values()]
    stats = plan.stats
    want = (problem.total, len(problem.ids), min(sizes, default=0), max(sizes, default=0), moved)
    have = (stats.partitions, stats.members, stats.min, stats.max, stats.moved)
    if want != have:
        out.append(f"stats {have} != {want} (partitions, members, min, max, moved)")
    return out


def _check_balance(problem: Problem, request: AssignRequest, plan: Plan, counts: list[int]) -> list[str]:
    strategy = request.strategy
    out: list[str] = []
    if strategy == "sticky":
        if problem.equal_subscriptions():
            if counts and max(counts) - min(counts) > 1:
                out.append(f"unbalanced: max {max(counts)} - min {min(counts)} > 1")
        else:
            out += _kafka_balance(problem, plan, counts)
    elif strategy in ("round_robin", "range"):
        for resources, subscribers in problem.groups():
            group = {problem.resources[r].name for r in resources}
            sizes = [sum(1 for p in plan.assignment[problem.ids[m]] if p.resource in group) for m in subscribers]
            if max(sizes) - min(sizes) > 1:
                out.append(f"unbalanced within {sorted(group)}: {sizes}")
    elif strategy == "weighted":
        out += _weighted_balance(problem, request, plan)
    elif strategy == "bounded_load" and problem.equal_subscriptions() and counts:
        cap = problem_capacity(problem, BoundedLoadOptions.parse(request.options).load_factor)
        if max(counts) > cap:
            out.append(f"a member holds {max(counts)} > the bound {cap}")
    return out


def _kafka_balance(problem: Problem, plan: Plan, counts: list[int]) -> list[str]:
    holds = [{p.resource for p in plan.assignment[m]} for m in problem.ids]
    names = [{problem.resources[r].name for r in s} for s in problem.subs]
    for i in range(len(counts)):
        for j in range(len(counts)):
            if counts[j] - counts[i] >= 2 and holds[j] & names[i]:
                return [
                    f"{problem.ids[i]} ({counts[i]}) could take one of {sorted(holds[j] & names[i])} "
                    f"from {problem.ids[j]} ({counts[j]})"
                ]
    return []


def _weighted_balance(problem: Problem, request: AssignRequest, plan: Plan) -> list[str]:
    tolerance = exact(WeightedOptions.parse(request.options).tolerance)
    unit = problem.unit_weights()
    out: list[str] = []
    for resources, subscribers in problem.groups():
        ints = problem.ints_of(resources)
        if not ints:
            continue
        group = {problem.resources[r].name for r in resources}
        weight: dict[tuple[str, int], float] = {}
        for r in resources:
            res = problem.resources[r]
            for i in range(res.partitions):
                weight[(res.name, i)] = res.weight(i)
        loads = [sum(weight[p] for p in plan.assignment[problem.ids[m]] if p.resource in group) for m in subscribers]
        if unit:
            bands = unit_bands(shares(problem, subscribers, Fraction(len(ints))), tolerance)
            for m, load, (lo, hi) in zip(subscribers, loads, bands, strict=True):
                if not lo <= load <= hi:
                    out.append(f"{problem.ids[m]} holds {load:g} outside its band [{lo}, {hi}]")
        else:
            wmax = max(weight.values())
            share_list = shares(problem, subscribers, Fraction(sum(weight.values())))
            for m, load, s in zip(subscribers, loads, share_list, strict=True):
                low = float(s * (1 - tolerance)) - wmax - EPS
                high = float(s * (1 + tolerance)) + wmax + EPS
                if not low <= load <= high:
                    out.append(f"{problem.ids[m]} carries {load:g} outside [{low:g}, {high:g}]")
    return out


def check_or_raise(request: AssignRequest, plan: Plan) -> None:
    """Raise :class:`PlanViolation` listing the violations, if any."""
    problems = check(request, plan)
    if problems:
        raise PlanViolation("; ".join(problems[:5]))
