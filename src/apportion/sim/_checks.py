"""The simulator's checks: invariants over a recorded trace, and the end state's liveness and balance.

A trace record is ``(global time, member id, kind, fields)``, as the members' tracers report them.

Checks (``SimResult.violations``), the first two from the trace alone (:func:`check_trace`), the third on the
members' state at the end (:func:`check_liveness`):
1. exclusivity at the callback level: per partition, the belief intervals of all members never overlap. A belief
   runs from on_assigned to on_revoked's return, on_lost, a fenced commit, a crash, or the member's local lease
   deadline (renewals move it; a renewal after it passed does not revive the belief), whichever comes first;
2. fencing: every commit the store accepted carries the latest epoch claimed for that partition, by its claimer,
   and no member has a commit it sent after reporting that belief lost (on_lost) accepted for that (partition,
   epoch) (a zombie's commits sent before its freeze may land later: the store's fence is what bounds those);
3. liveness: once churn and faults stop at ``T``, by ``T + RST + MRI + ttl + 1 s`` every partition is believed
   owned by exactly one live member and (count-balanced strategies) owned counts differ by at most one; in static
   mode every partition is owned by a member whose ordinal's range block (under the stored replica count) holds it.
4. static mode (:func:`check_static`, from the trace): every replica count a member follows (its ``static``
   records) was published before by a ``scale`` record (the operator's ``apportion scale``, or a member whose
   ordinal was at or above the count), and a member raising it raised it to its ordinal + 1 from a lower count;
   every partition a member is assigned lies in its ordinal's range block under the count it follows then (so after
   a scale down the leaving ordinals' partitions go only to the remaining ones, and after a scale up only to the
   ordinals the formula names).
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from apportion.assign import check, range_block
from apportion.group import PartitionId, TraceKind
from apportion.group.internals import subscribed
from apportion.model import AssignRequest, Member, Move, Partition, Plan, PlanStats, Resource

BALANCED_STRATEGIES = ("round_robin", "range", "sticky", "high_availability")


class SimKind(enum.StrEnum):
    """What the simulator records of its own beside its members' traces (``TraceKind``): what it did to them."""

    SPAWN = "spawn"  # subscriptions (a group over named resources)
    CRASH = "crash"
    FREEZE = "freeze"  # until
    HANG = "hang"  # until: the member's store calls get no answer
    SUBSCRIBE = "subscribe"  # subscriptions: asked of the member
    LEAVE = "leave"
    REBALANCE = "rebalance"  # an operator's apportion rebalance (coordinator mode, manual policy)


Record = tuple[float, str, TraceKind | SimKind, Mapping[str, Any]]
"""One line of a simulation's trace: (time, member id or ``operator``, kind, fields). An operator's ``apportion
scale`` is a ``TraceKind.SCALE`` record, as a member's raise of the count is."""


def check_liveness(
    owned: Mapping[str, Sequence[PartitionId]],
    partitions: int | Sequence[PartitionId],
    now: float,
    strategy: str,
    blocks: Mapping[str, range] | None = None,
    *,
    mixed: bool = False,
) -> list[str]:
    """Check 3 at ``now``: ``owned`` holds what every live, unfrozen member believes it owns; ``partitions`` the
    count (or the ids, of a group over named resources) that must all be owned; ``blocks``, in static mode, each
    one's range block; ``mixed``: subscriptions differ, so balance is :func:`check_subscribed`'s (Kafka's)."""
    believed: dict[PartitionId, list[str]] = {}
    for mid, parts in owned.items():
        for p in parts:
            believed.setdefault(p, []).append(mid)
    problems: list[str] = []
    unowned = [p for p in (range(partitions) if isinstance(partitions, int) else partitions) if p not in believed]
    if unowned:
        problems.append(f"liveness: at t={now:.3f} partitions {unowned[:10]} are not owned ({len(unowned)} total)")
    doubled = {p: ids for p, ids in believed.items() if len(ids) > 1}
    if doubled:
        problems.append(f"exclusivity: at t={now:.3f} {dict(list(doubled.items())[:5])}")
    if blocks is not None:
        for p, ids in sorted(believed.items()):
            wrong = [m for m in ids if p not in blocks[m]]
            if wrong:
                problems.append(f"static: partition {p} owned by {wrong}, outside their range blocks")
                break
    elif owned and strategy in BALANCED_STRATEGIES and not unowned and not mixed:
        counts = [len(parts) for parts in owned.values()]
        if max(counts) - min(counts) > 1:
            problems.append(f"balance: owned counts {sorted(counts)} differ by more than one")
    return problems


def check_subscribed(
    owned: Mapping[str, Sequence[PartitionId]],
    subscriptions: Mapping[str, frozenset[str] | None],
    resources: tuple[Resource, ...],
    now: float,
) -> list[str]:
    """Nobody holds a partition of a resource it does not subscribe to, and the holdings are balanced as Kafka
    defines it for mixed subscriptions (no member could take a partition it subscribes to from one holding at least
    two more): ``apportion.assign.check`` of the holdings as a ``sticky`` plan (first placements, no moves)."""
    problems = [
        f"subscriptions: at t={now:.3f} {mid} holds {p}, subscribed to {sorted(subscriptions.get(mid) or ())}"
        for mid, parts in sorted(owned.items())
        for p in parts
        if not subscribed(subscriptions.get(mid), p)
    ]
    members = tuple(Member(mid, subscriptions=subscriptions.get(mid)) for mid in sorted(owned))
    if problems or not members:
        return problems[:10]
    assignment = {mid: tuple(sorted(Partition.parse(str(p)) for p in parts)) for mid, parts in owned.items()}
    placed = tuple(sorted(Move(p, None, mid) for mid, parts in assignment.items() for p in parts))
    counts = [len(parts) for parts in assignment.values()]
    stats = PlanStats(sum(r.partitions for r in resources), len(members), min(counts), max(counts), 0, 0)
    request = AssignRequest("sticky", resources, members)
    return [f"balance: at t={now:.3f} {v}" for v in check(request, Plan("sticky", assignment, placed, stats))][:10]


def check_subscribed_trace(records: Sequence[Record]) -> list[str]:
    """No member is ever assigned a partition outside the subscriptions it has at that moment (its ``spawn`` and
    ``subscribed`` records say which: absent, every resource)."""
    problems: list[str] = []
    subs: dict[str, frozenset[str] | None] = {}
    for t, mid, kind, fields in _in_time_order(records):
        if kind in (SimKind.SPAWN, TraceKind.SUBSCRIBED):
            given = fields.get("subscriptions")
            subs[mid] = None if given is None else frozenset(given)
        elif kind == TraceKind.ASSIGNED:
            outside = [p for p in fields["partitions"] if not subscribed(subs.get(mid), p)]
            if outside:
                problems.append(f"subscriptions: t={t:.3f} {mid} assigned {outside}, subscribed to {subs.get(mid)}")
    return problems[:20]


def _pid(p: object) -> PartitionId:
    """A partition id from a trace record: a str (``orders-3``) as it is, anything else as an int."""
    return p if isinstance(p, str) else int(p)  # type: ignore[call-overload]


def belief_intervals(records: Sequence[Record], end: float) -> dict[PartitionId, list[tuple[float, float, str]]]:
    """Per partition, the belief intervals [start, end) of every member, reconstructed from the trace alone."""
    intervals: dict[PartitionId, list[tuple[float, float, str]]] = {}
    holding: dict[str, dict[PartitionId, float]] = {}
    deadline: dict[str, float] = {}
    records = _in_time_order(records)

    def close(mid: str, parts: Sequence[PartitionId] | None, t: float) -> None:
        held = holding.get(mid, {})
        for p in list(held) if parts is None else parts:
            start = held.pop(p, None)
            if start is not None:
                intervals.setdefault(p, []).append((start, t, mid))

    for t, mid, kind, fields in records:
        d = deadline.get(mid, math.inf)
        if t >= d and holding.get(mid):
            close(mid, None, d)
        if kind == TraceKind.RENEW:
            if t < d or not holding.get(mid):
                deadline[mid] = float(fields["deadline"])
        elif kind == TraceKind.ASSIGNED:
            for p in fields["partitions"]:
                holding.setdefault(mid, {})[_pid(p)] = t
        elif kind in (TraceKind.REVOKED, TraceKind.LOST):
            close(mid, [_pid(p) for p in fields["partitions"]], t)
        elif kind == TraceKind.FENCED:
            close(mid, [_pid(fields["partition"])], t)
        elif kind in (SimKind.CRASH, TraceKind.STOPPED):
            close(mid, None, t)
    for mid in list(holding):
        close(mid, None, min(end, deadline.get(mid, math.inf)))
    return intervals


def _in_time_order(
    records: Sequence[Record],
) -> Sequence[Record]:
    """Records sorted by time (stable): a thread that waited for a hanging call records its next events at the
    time the call returned, which may be later than events the rest of the group recorded meanwhile."""
    if all(a[0] <= b[0] for a, b in itertools.pairwise(records)):
        return records
    return sorted(records, key=lambda record: record[0])


def check_trace(
    records: Sequence[Record],
    end: float,
    beliefs: Mapping[PartitionId, list[tuple[float, float, str]]] | None = None,
) -> list[str]:
    """Exclusivity of beliefs and fencing of accepted commits, from the trace alone."""
    problems: list[str] = []
    records = _in_time_order(records)
    for p, spans in sorted((beliefs if beliefs is not None else belief_intervals(records, end)).items()):
        spans.sort()
        for (s1, e1, m1), (s2, _e2, m2) in itertools.pairwise(spans):
            if s2 < e1:
                problems.append(
                    f"exclusivity: partition {p} believed by {m1} [{s1:.3f},{e1:.3f}) and {m2} from {s2:.3f}"
                )
    latest: dict[PartitionId, tuple[int, str]] = {}
    # (member, partition, epoch) -> when on_lost/fenced said so
    given_up: dict[tuple[str, PartitionId, int], float] = {}
    for t, mid, kind, fields in records:
        if kind == TraceKind.CLAIM:
            for p, e in zip(fields["partitions"], fields["epochs"], strict=True):
                latest[_pid(p)] = (int(e), mid)
        elif kind == TraceKind.LOST and "epochs" in fields:
            for p, e in zip(fields["partitions"], fields["epochs"], strict=True):
                given_up.setdefault((mid, _pid(p), int(e)), t)
        elif kind == TraceKind.FENCED:
            given_up.setdefault((mid, _pid(fields["partition"]), int(fields["epoch"])), t)
        elif kind == TraceKind.COMMIT:
            p, e = _pid(fields["partition"]), int(fields["epoch"])
            if latest.get(p) != (e, mid):
                problems.append(f"fencing: t={t:.3f} {mid} committed {p} with epoch {e}; latest claim {latest.get(p)}")
            lost_at = given_up.get((mid, p, e))
            if lost_at is not None and t >= lost_at and not fields.get("in_flight"):  # sent after on_lost
                problems.append(f"fencing: t={t:.3f} {mid} committed {p} with epoch {e} after on_lost at {lost_at:.3f}")
    return problems[:20]


def check_static(records: Sequence[Record], partitions: int) -> list[str]:
    """Check 4 over a static-mode trace: the counts members follow were published, and each assignment is inside
    the member's range block under the count it follows."""
    problems: list[str] = []
    published: set[int] = set()
    follows: dict[str, tuple[int, int]] = {}  # member -> (ordinal, replica count)
    for t, mid, kind, fields in _in_time_order(records):
        if kind == TraceKind.SCALE:
            count, previous = int(fields["replicas"]), fields.get("previous")
            if previous is not None and not int(previous) <= int(fields["ordinal"]) == count - 1:
                problems.append(f"scale: t={t:.3f} {mid} (ordinal {fields['ordinal']}) raised {previous} to {count}")
            published.add(count)
        elif kind == TraceKind.STATIC:
            ordinal, count = int(fields["ordinal"]), int(fields["replicas"])
            if count not in published:
                problems.append(f"scale: t={t:.3f} {mid} follows a replica count {count} nobody published")
            follows[mid] = (ordinal, count)
        elif kind == TraceKind.ASSIGNED and fields["partitions"]:
            ordinal, count = follows.get(mid, (-1, 0))
            block = range_block(ordinal, count, partitions) if 0 <= ordinal < count else range(0)
            outside = [p for p in fields["partitions"] if int(p) not in block]
            if outside:
                problems.append(
                    f"static: t={t:.3f} {mid} (ordinal {ordinal} of {count}) assigned {outside} outside its block"
                )
    return problems[:20]


def unowned_seconds(
    beliefs: Mapping[PartitionId, Sequence[tuple[float, float, str]]],
    partitions: int | Sequence[PartitionId],
    end: float,
) -> float:
    """Partition-seconds during which nobody believed owning a partition (from its first assignment on)."""
    total = 0.0
    for p in range(partitions) if isinstance(partitions, int) else partitions:
        spans = sorted(beliefs.get(p, []))
        if not spans:
            continue
        covered_to = spans[0][0]
        for s, e, _ in spans:
            if s > covered_to:
                total += s - covered_to
            covered_to = max(covered_to, e)
        total += max(0.0, end - covered_to)
    return total


__all__ = [
    "BALANCED_STRATEGIES",
    "Record",
    "SimKind",
    "belief_intervals",
    "check_liveness",
    "check_subscribed",
    "check_subscribed_trace",
    "check_static",
    "check_trace",
    "unowned_seconds",
]
