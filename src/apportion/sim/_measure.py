"""What a simulated run moved, per plan and per change, in every mode (issue 30.5).

A **plan** is one decision of the mode's protocol, read from its records:

    rounds       a ``round_closed``: its ``moves``, and ``round_lower_bound(min_moves, deferred)``
    coordinator  a full re-plan of the table (``table`` with ``full``), or a write that places a dead member's
                 partitions (manual policy): its ``moves`` and ``min_moves``; the writes that only carry a plan on
                 (throttled migrations) move nothing
    static       a change of the replica count (a ``scale`` record, the operator's or a pod's that raised it): the
                 range blocks under the old count against those under the new one, measured as the ``range``
                 strategy measures them (``moved``: partitions whose block changes owner; ``min_moves``: the fewest
                 moves of any balanced assignment from the old blocks) — the static formula's price, which its
                 fixed blocks pay on every count change

Moves and their bound are the one definition of ``_core`` (a partition that had an owner and gets another is a move; a
partition whose holder left or crashed counts too, in the moves and in the bound: issue 45.5,
``apportion.group._moves``). A **change** is what the scenario did (the start, each churn or fault event); each plan
belongs to the last change before it, and a change's ``settle_s`` is the time from it to the last ownership change
(``assigned``, ``revoked``, ``lost``) before the next change: exact for a change the group had time to absorb, a lower
bound for one the next change interrupted. A change's lower bound is the sum of its plans' bounds, except the
**start**'s, which is 0: nothing was owned before it, so a plan laid out over the whole fleet moves nothing, and every
move of a fleet's start (``SimConfig.start_gap_s``: members arriving one by one) is one a plan laid out too early made
necessary (issue 45.2: the coordinator's first table).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from apportion.assign import plan as plan_of
from apportion.assign import range_block
from apportion.group import GroupConfig, TraceKind
from apportion.model import AssignRequest, Member, partition_name, round_lower_bound
from apportion.sim._checks import Record

OWNERSHIP = frozenset((TraceKind.ASSIGNED, TraceKind.REVOKED, TraceKind.LOST))


@dataclass(frozen=True, slots=True)
class PlanMoves:
    """One plan: when, what it moved and the fewest moves it could have made."""

    at: float
    moves: int
    bound: int


def plans(records: Sequence[Record], config: GroupConfig, group: str, replicas: int) -> list[PlanMoves]:
    """Every plan of the run (the module docstring), in time order; ``replicas`` is a static group's first count."""
    found: list[PlanMoves] = []
    count = replicas
    for t, _, kind, fields in records:
        if kind == TraceKind.ROUND_CLOSED:
            bound = round_lower_bound(int(fields.get("min_moves", 0)), int(fields.get("deferred", 0)))
            found.append(PlanMoves(t, int(fields.get("moves", 0)), bound))
        elif kind == TraceKind.TABLE and (fields.get("full") or fields.get("moves")):
            found.append(PlanMoves(t, int(fields.get("moves", 0)), int(fields.get("min_moves", 0))))
        elif kind == TraceKind.SCALE and int(fields["replicas"]) != count:
            moves, bound = static_moves(config, group, count, int(fields["replicas"]))
            found.append(PlanMoves(t, moves, bound))
            count = int(fields["replicas"])
    return found


def static_moves(config: GroupConfig, group: str, before: int, after: int) -> tuple[int, int]:
    """(moves, lower bound) of a static group's count going from ``before`` to ``after``: ordinal o held
    ``range_block(o, before, n)`` of every resource and holds ``range_block(o, after, n)`` (``range``'s plan)."""
    resources = config.resources_of(group)
    members = []
    for o in range(after):  # zero-padded ids: range deals its blocks in id order, which is then the ordinal order
        owned = []
        if o < before:
            for r in resources:
                owned += [
                    config.partition(group, p) for p in _pids(config, r.name, range_block(o, before, r.partitions))
                ]
        members.append(Member(f"{o:07d}", owned=tuple(owned)))
    stats = plan_of(AssignRequest("range", resources, tuple(members))).stats
    leaving = sum(
        len(range_block(o, before, r.partitions)) for o in range(after, before) for r in resources
    )  # a scale-down: the leaving ordinals' blocks move too (they still run when the count drops)
    return stats.moved + leaving, stats.min_moves + leaving


def _pids(config: GroupConfig, resource: str, block: range) -> list[Any]:
    return [partition_name(resource, i) for i in block] if config.named else list(block)


@dataclass(slots=True)
class _Change:
    at: float
    kind: str
    plans: int = 0
    moves: int = 0
    bound: int = 0
    last: float = 0.0


def per_change(
    changes: Sequence[tuple[float, str]], found: Sequence[PlanMoves], records: Sequence[Record], end: float
) -> list[dict[str, Any]]:
    """One row per change: ``{"at", "kind", "plans", "moves", "moves_lower_bound", "settle_s"}`` (``at``: virtual
    seconds since the start; ``settle_s`` as the module docstring says)."""
    if not changes:
        return []
    starts = [t for t, _ in changes]
    rows = [_Change(t, kind, last=t) for t, kind in changes]

    def of(t: float) -> _Change:
        return rows[max(0, bisect.bisect_right(starts, t) - 1)]

    for p in found:
        row = of(p.at)
        row.plans += 1
        row.moves += p.moves
        row.bound += p.bound
    for t, _, kind, _ in records:
        if kind in OWNERSHIP and t <= end:
            row = of(t)
            row.last = max(row.last, t)
    return [
        {
            "at": round(r.at - starts[0], 3),
            "kind": r.kind,
            "plans": r.plans,
            "moves": r.moves,
            "moves_lower_bound": 0 if i == 0 and r.kind == "start" else r.bound,
            "settle_s": round(r.last - r.at, 3),
        }
        for i, r in enumerate(rows)
    ]


__all__ = ["PlanMoves", "per_change", "plans", "static_moves"]
