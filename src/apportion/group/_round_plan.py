"""The plan of a round (``_rounds``): made from the round's cut by a pure function, and read back once per process.

``close_plan`` is what a round's closer computes between reading the cut and writing the plan (``RoundsMember._close``,
the module doc of ``_rounds``, "Rounds"): a pure function of the participation records, the previous plan and the
definition, so that any member — or a test — verifying a plan from the round's records recomputes the same one.
Extension 1 (the previous assignment kept when nothing changed) is decided here too. ``read_plan`` decodes a stored
plan once per process and store (a plan is immutable per key and revision: many simulated members reading one large
plan decode it once).
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from apportion.assign import check as check_plan
from apportion.errors import CorruptRecord
from apportion.group._config import GroupConfig
from apportion.group._keys import PartitionId, PlanRecord, decode, pid_of_text
from apportion.group._moves import departed_moves
from apportion.group._ownership import Planner, default_planner
from apportion.model import AssignRequest, Member, Partition, PartitionColumn, Plan, partition_of
from apportion.store import KeyValue, Store

Checker = Callable[[AssignRequest, Plan], list[str]]
"""``check(request, plan)``: the violations of the strategy's invariants (``apportion.assign.check``), run on every
plan a round's closer writes; a violation is logged and kept in the plan (``violations``), never expected."""

log = logging.getLogger(__name__)

_PLAN_CACHE: weakref.WeakKeyDictionary[Store, dict[tuple[str, int], PlanRecord]] = weakref.WeakKeyDictionary()
_PLAN_CACHE_LOCK = threading.Lock()


class _Partitions(dict[PartitionId, Partition]):
    """The ``Partition`` of each id of one group, made once (closing a round builds one per owned partition):
    ``Partition(group, p)`` for an int (a one-resource group), parsed ``<resource>-<index>`` for a str."""

    def __init__(self, group: str) -> None:
        super().__init__()
        self.group = group

    def __missing__(self, pid: PartitionId) -> Partition:
        part = self[pid] = partition_of(pid, self.group)
        return part


_PARTITIONS: dict[str, _Partitions] = {}


def _partitions(group: str) -> _Partitions:
    cache = _PARTITIONS.get(group)
    if cache is None:
        if len(_PARTITIONS) >= 16:
            _PARTITIONS.clear()
        cache = _PARTITIONS[group] = _Partitions(group)
    return cache


def read_plan(kv: KeyValue, store: Store) -> PlanRecord:
    """Decode a plan value once per process and store (a plan is immutable per key and mod_revision), so many
    simulated members reading one large plan decode it once."""
    owner = getattr(store, "shared_store", store)  # a per-member proxy (simulator) shares its store's cache
    with _PLAN_CACHE_LOCK:
        per_store = _PLAN_CACHE.setdefault(owner, {})
        cached = per_store.get((kv.key, kv.mod_revision))
    if cached is None:
        cached = PlanRecord.from_json(decode(kv.value, kv.key), kv.key)
        with _PLAN_CACHE_LOCK:
            if len(per_store) > 8:
                per_store.clear()
            per_store[(kv.key, kv.mod_revision)] = cached
    return cached


def close_plan(
    records: Mapping[str, KeyValue],
    previous: PlanRecord | None,
    config: GroupConfig,
    *,
    group: str,
    rnd: int,
    closer: str,
    closed_at: float,
    resource_revision: int,
    planner: Planner = default_planner,
    checker: Checker = check_plan,
) -> PlanRecord | None:
    """The plan of round ``rnd`` of ``group`` from its cut: ``records`` are the round's participation records
    (member id -> its ``round/<rnd>/<id>``; the revision that created one is that member's join revision), ``previous``
    the last plan written (None: none yet), ``config`` the definition in force (of ``resource_revision``). A pure
    function: the closer reads its inputs and writes the result (``RoundsMember._close``).

    Extension 1: the previous assignment is kept when the participants, their subscriptions and the definition are
    the previous plan's and it wants no probing round; otherwise ``planner`` plans the cut (each member's holdings
    and lags from its record, the replicas the previous plan found ready) and ``checker`` checks the plan (a violation
    is logged and kept in the record, never expected). A participation record that is not JSON is left out of the cut
    with a warning; None when none is left. The plan's ``moves`` and ``min_moves`` add the partitions the previous plan
    gave members that are not in the cut (they left or crashed) and that this plan places (``_moves``)."""
    participants: dict[str, dict[str, Any]] = {}
    for name, record in records.items():
        try:
            participants[name] = decode(record.value, record.key)
        except CorruptRecord as exc:  # it only informs the cut: that member takes no part in this round
            log.warning("round %d: %s; member %s left out of the cut", rnd, exc, name)
    if not participants:
        return None
    ids = sorted(participants)
    subscriptions = {m: participants[m]["subscriptions"] for m in ids if "subscriptions" in participants[m]}
    planned = functools.partial(
        PlanRecord,
        round=rnd,
        participants=tuple(ids),
        closer=closer,
        closed_at=closed_at,
        resource_revision=resource_revision,
        partitions=config.partitions,
        subscriptions=subscriptions,
    )
    if (
        previous is not None
        and list(previous.participants) == ids
        and previous.subscriptions == subscriptions
        and previous.resource_revision == resource_revision
        and previous.probe_after_s is None
    ):
        return planned(
            assignment={mid: list(previous.assignment.get(mid, [])) for mid in ids},
            strategy=str(previous.strategy or config.strategy),
            kept=True,
            moves=0,
            min_moves=0,
            deferred=0,
            standby=previous.standby,
            learners=previous.learners,
            ready=previous.ready,
        )
    part = _partitions(group).__getitem__
    was_ready = {} if previous is None else previous.ready  # the hysteresis of high_availability's readiness
    members = tuple(
        _member(mid, participants[mid], part, records[mid].create_revision, was_ready.get(mid, ())) for mid in ids
    )
    request = AssignRequest(config.strategy, config.resources_of(group), members, config.options)
    plan = planner(request)
    violations = checker(request, plan)
    if violations:  # never expected: the strategies are property-tested against this very check
        log.error("round %d: the plan breaks its strategy's invariants: %s", rnd, "; ".join(violations[:5]))
    pid = config.pid

    def ids_of(table: Mapping[str, Sequence[Partition]]) -> dict[str, list[PartitionId]]:
        """A replica table of the plan in partition ids, members with none left out."""
        return {mid: [pid(p) for p in parts] for mid, parts in table.items() if parts}

    def pids(parts: Sequence[Partition]) -> list[PartitionId]:
        """A member's partitions as ids: a one-resource group's column is its indices (no tuple made)."""
        if isinstance(parts, PartitionColumn) and not config.resources:
            return list(parts.indices)
        return [pid(p) for p in parts]

    assignment = {mid: pids(plan.assignment.get(mid, ())) for mid in ids}
    gone = 0  # the partitions of previous participants that are not in this cut (left, crashed): moves too
    if previous is not None:
        held = {p for mid in ids for p in participants[mid].get("owned", ())}
        placed = {p for parts in assignment.values() for p in parts}
        gone = departed_moves(previous.assignment, participants, held, placed)
    return planned(
        assignment=assignment,
        strategy=plan.strategy,
        kept=False,
        moves=plan.stats.moved + gone,
        min_moves=plan.stats.min_moves + gone,
        deferred=plan.stats.deferred,
        standby=ids_of(plan.standby),
        learners=ids_of(plan.learners),
        ready=ids_of(plan.ready),
        probe_after_s=plan.probe_after_s,
        violations=tuple(violations[:10]),
    )


def _member(
    mid: str,
    record: Mapping[str, Any],
    part: Callable[[PartitionId], Partition],
    joined: int,
    was_ready: Sequence[PartitionId] = (),
) -> Member:
    """A strategy's view of one participation record, created at revision ``joined``; ``was_ready`` are the replicas
    the previous plan called ready for this member (``Member.ready``: high_availability's hysteresis).

    ``joined`` is the member's join revision (``round_robin`` deals in that order): seed 0 numbers a round's
    participants by the versionstamps of their participation writes in the round's subspace ("if you wrote the lowest
    versionstamp, you're participant 1"), and ``round/<R>/<id>`` is that subspace with the store revision as the
    versionstamp. Not the ``members/<id>`` registration: the seed has none (it is apportion's lease), and it is not
    part of the cut (a second read, re-created after a lapse), so a member verifying the plan from the round's
    records could not recompute it. The order is thus per round, as in the seed: whoever joined a round first deals
    first (a re-planned round may reorder members; ``sticky`` is the strategy that keeps partitions in place).
    """
    lag = record.get("lag") or {}
    subscriptions = record.get("subscriptions")
    return Member(
        mid,
        subscriptions=frozenset(map(str, subscriptions)) if isinstance(subscriptions, list) else None,
        owned=tuple(map(part, record.get("owned", []))),
        generation=int(record.get("generation", 0)),
        capacity=float(record.get("capacity", 1.0)),
        rack=record.get("rack"),
        standby=tuple(map(part, record.get("standby", []))),
        learners=tuple(map(part, record.get("learners", []))),
        lag={part(pid_of_text(p)): int(n) for p, n in lag.items()},  # JSON keys are strings
        join_revision=joined,
        ready=tuple(map(part, was_ready)),
    )


__all__ = ["Checker", "check_plan", "close_plan", "read_plan"]
