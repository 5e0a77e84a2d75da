"""``round_robin`` and ``range``: stateless layouts that ignore previous ownership (moves are reported, not avoided).

Resources are grouped by identical subscriber sets (with equal subscriptions there is one group: every partition of
every subscribed resource, in (resource, index) order). Within a group of ``P`` partitions and ``N`` subscribers:

- ``round_robin`` [seed 1's partition table; seed 0's order]: the group's i-th partition goes to subscriber
  ``i mod N`` in join order — by ``Member.join_revision``, ties (impossible for store revisions, possible in a
  hand-written request) by id — when the request gives every member a join revision: seed 0 numbers the
  participants of a round by the versionstamps of their participation records ("if you wrote the lowest
  versionstamp, you're participant 1"), and the rounds mode passes those records' creation revisions. A request
  without join revisions (``apportion assign``, the coordinator's table) is dealt in id order, as deterministic; one
  with revisions for some members only is an ``InvalidRequest``.
- ``range`` [the static mode's formula; seed 3 differs]: subscriber ``k`` (0-based ordinal, in id order) takes the
  contiguous block starting at ``k * (P // N) + min(k, P % N)`` of length ``P // N + (1 if k < P % N else 0)`` — the
  first ``P % N`` ordinals take one extra, so sizes differ by at most one (10 over 4: 3,3,2,2), where seed 3 gives
  the whole remainder to the last ordinal (2,2,2,4: up to N - 1 extra on one member).

Both give max - min <= 1 within each group. ``stats.min_moves`` is the fewest moves any plan balanced that way
needs (``balanced_min_moves``); these layouts do not try to reach it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from apportion.assign._core import Problem, balanced_min_moves, to_plan
from apportion.assign._options import StrategyOptions
from apportion.errors import InvalidRequest
from apportion.model import AssignRequest, Plan


@dataclass(frozen=True, slots=True)
class RoundRobinOptions(StrategyOptions):
    """``round_robin`` takes no options."""

    STRATEGY: ClassVar[str] = "round_robin"


@dataclass(frozen=True, slots=True)
class RangeOptions(StrategyOptions):
    """``range`` takes no options."""

    STRATEGY: ClassVar[str] = "range"


def range_block(ordinal: int, members: int, partitions: int) -> range:
    """The partitions of ``ordinal`` out of ``members`` (the balanced StatefulSet formula)."""
    q, r = divmod(partitions, members)
    start = ordinal * q + min(ordinal, r)
    return range(start, start + q + (1 if ordinal < r else 0))


def join_order(problem: Problem) -> Callable[[int], tuple[int, int]] | None:
    """The sort key of member positions in join order (join revision, then id: positions are in id order); None when
    no member has a join revision (id order). ``InvalidRequest`` when only some members have one."""
    revisions = [m.join_revision for m in problem.members]
    missing = [problem.ids[k] for k, rev in enumerate(revisions) if rev is None]
    if len(missing) == len(revisions):
        return None
    if missing:
        raise InvalidRequest(
            f"members.{missing[0]}.join_revision", "give a join revision to every member or to none (round_robin)"
        )
    known = [rev for rev in revisions if rev is not None]
    return lambda m: (known[m], m)


def round_robin(request: AssignRequest) -> Plan:
    problem = Problem.of(request)
    order = join_order(problem)
    assignment: list[list[int]] = [[] for _ in problem.members]
    for resources, members in problem.groups():
        ints = problem.ints_of(resources)
        subscribers = members if order is None else sorted(members, key=order)
        n = len(subscribers)
        for k, m in enumerate(subscribers):
            assignment[m].extend(ints[k::n])
    for ints in assignment:
        ints.sort()
    return to_plan(problem, assignment, None, balanced_min_moves(problem, problem.groups()))


def layout_min_moves(request: AssignRequest) -> int:
    """The lower bound of ``round_robin`` and ``range`` (the registry's): max - min <= 1 within each group."""
    problem = Problem.of(request)
    return balanced_min_moves(problem, problem.groups())


def range_(request: AssignRequest) -> Plan:
    problem = Problem.of(request)
    assignment: list[list[int]] = [[] for _ in problem.members]
    for resources, subscribers in problem.groups():
        ints = problem.ints_of(resources)
        for k, m in enumerate(subscribers):
            block = range_block(k, len(subscribers), len(ints))
            assignment[m].extend(ints[block.start : block.stop])
    for ints in assignment:
        ints.sort()
    return to_plan(problem, assignment, None, balanced_min_moves(problem, problem.groups()))
