"""The coordinator's partition table (``_coordinator``'s module doc: its entries, their states, who writes them):
the records, reading them, and planning them — pure functions of the live members and the table, kept apart from the
member that runs them (``CoordinatorMember``) so that ``status``, ``route``, ``rebalance --dry-run`` and the tests
use the same ones.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from apportion.errors import CorruptRecord, InvalidRequest
from apportion.group._config import GroupConfig
from apportion.group._keys import Keys, PartitionId, decode, encode, pid_of_key, sorted_pids, subscribed
from apportion.group._mode import Coordinator
from apportion.group._moves import departed_moves
from apportion.group._ownership import Planner, default_planner
from apportion.group._round_plan import Checker
from apportion.model import AssignRequest, Member, Partition
from apportion.store import KeyValue, Put, Store

log = logging.getLogger("apportion.group._coordinator")  # the coordinator's log, as before

FIRST_TABLE_MAX_SETTLES = 10
"""The first table waits at most this many of its settle times (``Coordinator.first_table_settle_s``) after
``min_members`` are first live, however often members keep registering (a crash-looping member must not hold the
group back for good): 100 s with the defaults, 5 s with ``--min-members`` above 1 and the default RST."""


class TableState(enum.Enum):
    ASSIGNED = "ASSIGNED"
    MIGRATING = "MIGRATING"
    ONLINE = "ONLINE"


@dataclass(frozen=True, slots=True)
class Entry:
    """One row of the partition table."""

    owner: str | None
    target: str | None
    state: TableState

    @property
    def holder(self) -> str | None:
        """Who will hold the partition once the entry settles."""
        return self.target if self.target is not None else self.owner

    def holds(self, member: str) -> bool:
        """Whether ``member`` should hold the partition now."""
        if self.owner == member and self.state is not TableState.MIGRATING:
            return True
        if self.target == member:
            return self.state is TableState.MIGRATING or (self.state is TableState.ASSIGNED and self.owner is None)
        return False

    def to_json(self) -> dict[str, Any]:
        return {"owner": self.owner, "target": self.target, "state": self.state.value}

    @classmethod
    def from_json(cls, value: Mapping[str, Any], key: str | None = None) -> Entry:
        """A stored entry; :class:`CorruptRecord` naming ``key`` when it is not one the coordinator writes."""
        owner, target, state = value.get("owner"), value.get("target"), value.get("state")
        for name, member in (("owner", owner), ("target", target)):
            if member is not None and not isinstance(member, str):
                raise CorruptRecord(key, f"{name!r} must be a member id or null, got {member!r:.80}")
        states = _STATES
        if not isinstance(state, str) or state not in states:
            raise CorruptRecord(key, f"'state' must be one of {', '.join(states)}, got {state!r:.80}")
        return cls(owner, target, states[state])


_STATES = {s.value: s for s in TableState}


@dataclass(frozen=True, slots=True)
class TableMove:
    """A planned move of the partition table (for ``apportion rebalance --dry-run``)."""

    partition: PartitionId
    source: str | None
    target: str


def read_table(store: Store, group: str) -> dict[PartitionId, tuple[Entry, int]]:
    """The stored partition table: partition -> (entry, mod_revision)."""
    keys = Keys(group)
    return table_of(keys, store.range(keys.tables))


def table_of(keys: Keys, kvs: Sequence[KeyValue]) -> dict[PartitionId, tuple[Entry, int]]:
    """The table's entries; each distinct stored value decoded once (a table of P partitions holds a few values per
    member: the coordinator read it at every step, and decoding every entry was a third of its CPU)."""
    out: dict[PartitionId, tuple[Entry, int]] = {}
    entries: dict[bytes, Entry] = {}
    for kv in kvs:
        p = pid_of_key(kv.key[len(keys.tables) :])
        if p is not None:
            entry = entries.get(kv.value)
            if entry is None:
                entry = entries[kv.value] = Entry.from_json(decode(kv.value, kv.key), kv.key)
            out[p] = (entry, kv.mod_revision)
    return out


def live_members(store: Store, group: str) -> list[str]:
    keys = Keys(group)
    return members_of(keys, store.range(keys.members))


def members_of(keys: Keys, kvs: Sequence[KeyValue]) -> list[str]:
    return sorted(kv.key[len(keys.members) :] for kv in kvs)


def registrations(keys: Keys, kvs: Sequence[KeyValue]) -> dict[str, int]:
    """Each registered member's registration revision (``create_revision`` of its ``members/<id>``): the order in
    which the live members registered, seed 1's ``membership.getLiveMembers()``."""
    return {kv.key[len(keys.members) :]: kv.create_revision for kv in kvs}


def live_subscriptions(keys: Keys, kvs: Sequence[KeyValue]) -> dict[str, frozenset[str] | None]:
    """Each registered member's subscriptions (None: every resource); a corrupt registration subscribes to all."""
    out: dict[str, frozenset[str] | None] = {}
    for kv in kvs:
        try:
            subs = decode(kv.value, kv.key).get("subscriptions")
        except CorruptRecord:
            subs = None
        out[kv.key[len(keys.members) :]] = frozenset(map(str, subs)) if isinstance(subs, list) else None
    return out


def replan_strategy(config: GroupConfig, table: Mapping[PartitionId, Entry]) -> tuple[str, Mapping[str, object]]:
    """The strategy (and its options) that plans the table: the group's for the first table, and for every later
    change too, except that a ``round_robin`` table is re-planned by ``sticky`` (seed 1: round-robin first, then move
    only the surplus; see the module docstring)."""
    if table and config.strategy == "round_robin":
        return "sticky", {}
    return config.strategy, config.options


def table_request(
    group: str,
    config: GroupConfig,
    members: Sequence[str],
    table: Mapping[PartitionId, Entry],
    subscriptions: SubscriptionsOf | None = None,
    registered: Mapping[str, int] | None = None,
) -> AssignRequest:
    """The request a full re-plan of ``table`` over the live ``members`` makes: current holders as ``owned``, each
    member's ``subscriptions`` (from its registration; absent: every resource) and, when ``registered`` gives every
    member's registration revision (the ``create_revision`` of its ``members/<id>``), that revision as its
    ``join_revision``: ``round_robin`` then deals in registration order, as seed 1's coordinator deals its live
    members list (issue 45.6; without it, in id order)."""
    live = sorted(set(members))
    subs = subscriptions or {}
    joined = registered if registered is not None and all(m in registered for m in live) else {}
    holders = {p: e.holder for p, e in table.items()}
    owned: dict[str, list[Partition]] = {m: [] for m in live}
    for p, h in holders.items():
        if h in owned:
            owned[h].append(config.partition(group, p))
    strategy, options = replan_strategy(config, table)
    return AssignRequest(
        strategy,
        config.resources_of(group),
        tuple(
            Member(m, subscriptions=subs.get(m), owned=tuple(sorted(owned[m])), join_revision=joined.get(m))
            for m in live
        ),
        options,
    )


SubscriptionsOf = Mapping[str, frozenset[str] | None]
"""member id -> the resources it consumes (None: every one), from its ``members/<id>`` registration."""


def _subscribes(subscriptions: SubscriptionsOf, member: str, pid: PartitionId) -> bool:
    return subscribed(subscriptions.get(member), pid)


@dataclass(frozen=True, slots=True)
class TablePlan:
    """The desired holder of every partition, with the plan's moves (partitions taken from a live holder; a dead
    member's partitions are placed, not moved) and the lower bound of those moves (the strategy's ``min_moves``)."""

    desired: Mapping[PartitionId, str]
    moves: int
    min_moves: int
    violations: tuple[str, ...] = ()


def plan_table(
    group: str,
    config: GroupConfig,
    members: Sequence[str],
    table: Mapping[PartitionId, Entry],
    *,
    full: bool,
    planner: Planner = default_planner,
    subscriptions: SubscriptionsOf | None = None,
    checker: Checker | None = None,
    registered: Mapping[str, int] | None = None,
) -> TablePlan:
    """A full strategy run (holders as ``owned``; ``replan_strategy``), or, when not ``full``, the current holders with
    only the partitions of dead members (or of members that no longer subscribe to their resource) moved to the least
    loaded live holders that subscribe to it. Either way the moves and their bound count the partitions of dead holders
    that get a live one (``_moves``: a strategy sees them as unowned). A partition nobody subscribes to gets no holder.
    ``registered`` (member -> registration revision) orders ``round_robin``'s members (``table_request``).
    ``checker`` (the coordinator's: ``assign.check``) checks a full run's plan; a violation is logged and returned
    in ``TablePlan.violations`` (never expected: the strategies are property-tested against it)."""
    live = sorted(set(members))
    subs = subscriptions or {}
    if not live:
        return TablePlan({}, 0, 0)
    holders = {p: e.holder for p, e in table.items()}
    if full or not table:
        request = table_request(group, config, live, table, subs, registered)
        plan = planner(request)
        violations = () if checker is None else tuple(checker(request, plan)[:10])
        if violations:
            log.error("group %s: the table's plan breaks its strategy's invariants: %s", group, "; ".join(violations))
        placed = {config.pid(p): mid for mid, parts in sorted(plan.assignment.items()) for p in parts}
        gone = _gone(holders, live, placed)
        return TablePlan(placed, plan.stats.moved + gone, plan.stats.min_moves + gone, violations)
    desired: dict[PartitionId, str] = {}
    load: dict[str, int] = {}
    ids = config.partition_ids()
    for p in ids:
        h = holders.get(p)
        if h is not None and h in live and _subscribes(subs, h, p):
            desired[p] = h
            load[h] = load.get(h, 0) + 1
    hosts = sorted(load) or live
    for p in ids:
        if p not in desired:
            able = [m for m in hosts if _subscribes(subs, m, p)] or [m for m in live if _subscribes(subs, m, p)]
            if able:
                pick = min(able, key=lambda m: (load.get(m, 0), m))
                desired[p] = pick
                load[pick] = load.get(pick, 0) + 1
    gone = _gone(holders, live, desired)
    return TablePlan(desired, gone, gone)


def _gone(holders: Mapping[PartitionId, str | None], live: Sequence[str], placed: Mapping[PartitionId, str]) -> int:
    """The partitions whose table holder is not live any more and that ``placed`` gives to someone: moves the
    strategy does not count (its request has no such member; ``_moves``)."""
    previous: dict[str, list[PartitionId]] = {}
    for p, h in holders.items():
        if h is not None:
            previous.setdefault(h, []).append(p)
    return departed_moves(previous, set(live), (), placed)


def table_changes(
    table: Mapping[PartitionId, Entry], desired: Mapping[PartitionId, str], live: Sequence[str], max_in_flight: int
) -> dict[PartitionId, Entry]:
    """The entries to write so the table heads for ``desired``, with at most ``max_in_flight`` MIGRATING."""
    alive = set(live)
    changes: dict[PartitionId, Entry] = {}
    for p, d in sorted(desired.items()):
        e = table.get(p)
        if e is None:
            changes[p] = Entry(None, d, TableState.ASSIGNED)
            continue
        owner = e.owner if e.owner in alive else None
        if d == owner:
            new = Entry(owner, None, TableState.ONLINE) if e.target is not None else Entry(owner, None, e.state)
        elif d == e.target:
            new = Entry(owner, d, e.state)
        else:
            new = Entry(owner, d, TableState.MIGRATING if e.state is TableState.MIGRATING else TableState.ASSIGNED)
        if new != e:
            changes[p] = new
    merged = {**table, **changes}
    flying = sum(1 for e in merged.values() if e.state is TableState.MIGRATING)
    for p in sorted_pids(merged):
        e = merged[p]
        if flying >= max_in_flight:
            break
        if e.state is TableState.ASSIGNED and e.owner is not None and e.target is not None:
            changes[p] = Entry(e.owner, e.target, TableState.MIGRATING)
            flying += 1
    return changes


def planned_moves(store: Store, group: str, planner: Planner = default_planner) -> list[TableMove]:
    """What a full re-plan (``apportion rebalance``) would move now: partitions whose holder changes. InvalidRequest
    for a group of another mode (it has no partition table to re-plan) and while the group is ``waiting`` (below its
    minimum cluster size, or before its first table: "waiting for 3 members (have 1)")."""
    config = GroupConfig.load(store, group)
    config.require_mode(group, "coordinator", "rebalance", "only a coordinator group has a partition table to re-plan")
    table = {p: e for p, (e, _) in read_table(store, group).items()}
    _refuse_while_waiting(store, group, config, bool(table))
    keys = Keys(group)
    registered = store.range(keys.members)
    subscriptions = live_subscriptions(keys, registered)
    desired = plan_table(
        group, config, members_of(keys, registered), table, full=True, planner=planner, subscriptions=subscriptions,
        registered=registrations(keys, registered),
    ).desired  # fmt: skip
    return [
        TableMove(p, table[p].holder if p in table else None, d)
        for p, d in sorted(desired.items())
        if p not in table or table[p].holder != d
    ]


def waiting(config: GroupConfig, live: int, has_table: bool) -> dict[str, Any] | None:
    """Why a coordinator group has no usable table yet, or None: ``{"min_members", "live", "reason"}`` with the reason
    ``waiting for N members (have M)`` while fewer than ``min_members`` are live (the seed's minimum cluster size;
    ``Router`` raises ``NotEnoughMembers`` then too), or ``settling`` while they are but the first table is not laid
    out yet (see "The first table" in the module docstring). None for a group of another mode."""
    mode = config.mode
    if not isinstance(mode, Coordinator):
        return None
    if live < mode.min_members:
        reason = f"waiting for {mode.min_members} members (have {live})"
    elif not has_table:
        reason = (
            "settling: the first table follows once no member has joined for "
            f"{mode.first_table_settle_s(config.settle_s):g} s"
        )
    else:
        return None
    return {"min_members": mode.min_members, "live": live, "reason": reason}


def _refuse_while_waiting(store: Store, group: str, config: GroupConfig, has_table: bool) -> None:
    """InvalidRequest (exit 2) naming ``waiting``'s reason: nothing to re-plan below the minimum or before the first
    table (``apportion rebalance`` said "0 planned moves", exit 0)."""
    found = waiting(config, len(live_members(store, group)), has_table)
    if found is not None:
        raise InvalidRequest(
            "", f"group {group!r} is {found['reason']}: no partition table to re-plan yet (apportion status shows it)"
        )


def in_flight(table: Mapping[PartitionId, Entry]) -> list[PartitionId]:
    """The partitions whose last planned change is not finished: every entry that is not ONLINE (MIGRATING, or
    ASSIGNED to a holder that has not claimed it yet)."""
    return [p for p, e in sorted(table.items()) if e.state is not TableState.ONLINE]


def request_rebalance(store: Store, group: str, now: float) -> None:
    """Ask the coordinator for one full re-plan (manual policy). Refused (``InvalidRequest``) while the group is
    ``waiting`` (below its minimum size, or before its first table), and while moves of the last plan are in
    flight: a re-plan over them would redirect migrations half done; wait until every partition is ONLINE. A
    request that races with a new plan anyway is queued by the coordinator until the table is ONLINE.
    Refused for a group of another mode, as ``planned_moves`` is."""
    config = GroupConfig.find(store, group)
    table = {p: e for p, (e, _) in read_table(store, group).items()}
    if config is not None:
        config.require_mode(group, "coordinator", "rebalance", "only a coordinator group rebalances on request")
        _refuse_while_waiting(store, group, config, bool(table))
    pending = in_flight(table)
    if pending:
        shown = ", ".join(map(str, pending[:10])) + (", ..." if len(pending) > 10 else "")
        raise InvalidRequest(
            "rebalance",
            f"{len(pending)} partition(s) of group {group!r} are still moving (partitions {shown}): run it again "
            "once every partition is ONLINE (apportion status shows the table)",
        )
    store.txn([], [Put(Keys(group).rebalance, encode({"requested_at": now}))])


__all__ = [
    "FIRST_TABLE_MAX_SETTLES",
    "Entry",
    "SubscriptionsOf",
    "TableMove",
    "TablePlan",
    "TableState",
    "in_flight",
    "live_members",
    "live_subscriptions",
    "members_of",
    "plan_table",
    "planned_moves",
    "read_table",
    "registrations",
    "replan_strategy",
    "request_rebalance",
    "table_changes",
    "table_of",
    "table_request",
    "waiting",
]
