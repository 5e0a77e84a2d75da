"""A read-only snapshot of a group for operators: members, partitions (owner, epoch, checkpoint) and the round.

``group_status`` is the whole snapshot (a ``GroupStatus``, ``_status_records``); ``owners`` (who owns what),
``owned_by`` (is everything owned by these members) and ``settled`` (is the group at rest on exactly these members)
are what the demo, the benches and the process tests ask of it."""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec

from apportion.assign import replica_tags
from apportion.errors import CorruptRecord
from apportion.group._commits import checkpoint_of, latest_commits, read_commits
from apportion.group._config import GroupConfig
from apportion.group._keys import (
    Keys,
    PartitionId,
    PlanRecord,
    decode,
    decode_epoch,
    decode_owner,
    field,
    pid_of_key,
    pid_of_text,
    pid_order,
    sorted_pids,
)
from apportion.group._static import static_block
from apportion.group._status_records import (
    NOTHING,
    FailedMember,
    GroupStatus,
    MemberStatus,
    PartitionStatus,
    Waiting,
)
from apportion.group._table import Entry, TableState, waiting
from apportion.store import KeyValue, Store

log = logging.getLogger("apportion.status")


def group_status(store: Store, group: str) -> GroupStatus:
    """The group's snapshot (``GroupStatus``; ``to_json`` gives it as ``{"members": {id: {"alive", "partitions",
    ...}}, "partitions": {p: {"owner", "epoch", "checkpoint"}}, "round": R, "plan_round": R', "resource": {...},
    "mode": "rounds", "table": {p: {owner, target, state}}, "failed": {...}}`` plus ``coordinator`` and ``replicas``
    when those modes run): ``mode`` is the stored definition's (None for one stored before modes were, or no
    definition); partition ids are strings (JSON object keys): ``"7"`` in a one-resource group, ``"orders-7"`` in a
    group over named resources (whose members list their ``subscriptions``). A partition's ``checkpoint`` is that of
    its commit record written last, in either key layout (``_keys``).

    An owner record is ``lapsing`` when it outlives its owner's belief: the member it names is gone or has
    registered again under a new lease (it gave up that ownership and the record waits for its old lease to be
    revoked or to expire). Nobody processes such a partition; it is not counted in the member's ``partitions``.

    A record that decides ownership (``resource``, ``latest``, the latest plan, ``owner/<p>``, ``epoch/<p>``,
    a commit record, ``table/<p>``, ``coordinator``, ``replicas``) and is not what apportion writes raises
    ``CorruptRecord`` naming its key; a corrupt registration or participation record is skipped with a warning.

    In static mode (a ``replicas`` record), an unowned partition says which ordinal it is ``waiting_for``: the one
    whose range block holds it under the stored count (its pod is down or not started yet).

    ``waiting`` (coordinator mode, only while it applies): ``min_members``, ``live`` and the ``reason``, ``waiting
    for N members (have M)`` below the minimum cluster size, or ``settling: ...`` before the first table
    (``_coordinator.waiting``).

    ``failed`` (coordinator mode; seed 1's failed member list): the members whose lease ended without a graceful
    leave within the last ``FAILED_RETENTION_S`` (an hour), newest first: when the coordinator saw it go (its clock)
    and what the partition table gave it then. A member that came back is listed both here and as alive. A corrupt
    record is skipped with a warning (it only informs).

    Stateful groups (seed 2) also list, per partition, its ``standby`` and ``learners`` holders of the latest plan
    with the lag each reported in that round (``{member: lag or None}``), and a ``high_availability`` group the
    seed's task ``tags`` of every holder of the partition in that plan: ``{member: {"role", "isLearner",
    "beingLearned", "isReady"}}`` (``plan_tags``).

    In a group that plans rounds, a partition whose latest plan gives it to another member than its owner (or gives
    an unowned one to a member) says ``moving_to`` that member: a handoff in flight, or a plan naming a member that
    is gone (the next round re-plans).

    Cost: a range of the group's prefix (owner and epoch per partition) and one of its commit records; each distinct
    owner, epoch or table value is decoded once. 100,000 partitions on SQLite: about 1.5 s of CPU, 0.9 s of it the range
    (bench/README.md, "status and dashboard at 100,000 partitions")."""
    keys = Keys(group)
    # two ranges, the group's prefix and the commit records beside it (``_keys``), not one txn: a range is what etcd
    # reads in pages (one answer of 100,000 partitions did not come back in time) and what the dashboard's copy of
    # the prefix answers; a commit landing between the two reads only shows a newer checkpoint
    kvs = store.range(keys.prefix)
    own_kvs = store.range(keys.ownership)  # a layout-2 group's owner and epoch records (``_keys``); layout 1: none
    commit_kvs = store.range(keys.commits)
    registered: dict[str, MemberStatus] = {}
    owners: dict[PartitionId, tuple[str, int]] = {}  # (member, epoch)
    owner_kvs: dict[PartitionId, KeyValue] = {}
    member_leases: dict[str, int] = {}
    epochs: dict[PartitionId, int] = {}
    # Owner and epoch values repeat (a member's claims share one owner value per epoch): each distinct value is
    # decoded once. A record bound to no lease is always decoded, to raise its CorruptRecord.
    owner_values: dict[bytes, tuple[str, int]] = {}
    epoch_values: dict[bytes, int] = {}
    table_values: dict[bytes, Entry] = {}
    checkpoints: dict[PartitionId, str] = {}
    config: GroupConfig | None = None
    current_round = 0
    latest_round = 0
    plan_kvs: dict[int, KeyValue] = {}
    record_kvs: dict[int, dict[str, KeyValue]] = {}  # round -> member -> participation record
    table: dict[str, Entry] = {}
    failed: dict[str, FailedMember] = {}
    coordinator: dict[str, Any] | None = None
    replicas: int | None = None
    prefix, own = keys.prefix, keys.ownership
    for kv in itertools.chain(kvs, own_kvs):
        rest = kv.key[len(own) :] if kv.key.startswith(own) else kv.key[len(prefix) :]
        kind, _, name = rest.partition("/")
        if rest == "resource":
            config = GroupConfig.from_record(kv)
        elif rest == "current":
            current_round = kv.mod_revision
        elif rest == "latest":
            latest_round = field(decode(kv.value, kv.key), kv.key, "round", int, minimum=0)
        elif kind == "members":
            subscriptions = _subscriptions(kv)
            registered[name] = MemberStatus(
                True, capacity=_capacity(kv), subscriptions=None if subscriptions is None else tuple(subscriptions)
            )
            member_leases[name] = kv.lease
        elif kind == "owner" and (p := pid_of_key(name)) is not None:
            owner = owner_values.get(kv.value) if kv.lease else None
            if owner is None:
                owner = owner_values[kv.value] = decode_owner(kv)
            owners[p] = owner
            owner_kvs[p] = kv
        elif kind == "epoch" and (p := pid_of_key(name)) is not None:
            epoch = epoch_values.get(kv.value)
            if epoch is None:
                epoch = epoch_values[kv.value] = decode_epoch(kv.value, kv.key)
            epochs[p] = epoch
        elif kind == "table" and pid_of_key(name) is not None:
            entry = table_values.get(kv.value)
            if entry is None:
                entry = table_values[kv.value] = table_entry(kv)
            table[name] = entry
        elif kind == "failed" and name:
            failure = _failure(kv)
            if failure is not None:
                failed[name] = failure
        elif rest == "coordinator":
            coordinator = decode(kv.value, kv.key)
            field(coordinator, kv.key, "member", str)
        elif rest == "replicas":
            replicas = field(decode(kv.value, kv.key), kv.key, "replicas", int, minimum=1)
        elif kind == "round" and name.endswith("/plan") and name.split("/", 1)[0].isdigit():
            plan_kvs[int(name.split("/", 1)[0])] = kv
        elif kind == "round" and name.count("/") == 1 and not name.endswith("/joined"):
            head, _, mid = name.partition("/")
            if head.isdigit():
                record_kvs.setdefault(int(head), {})[mid] = kv
    for p, kv in latest_commits(keys, [*kvs, *commit_kvs]).items():  # either layout: the one written last
        checkpoints[p] = field(decode(kv.value, kv.key), kv.key, "checkpoint", str)
    for p, kv in owner_kvs.items():  # a claim writes owner/p and epoch/p together, with the same epoch
        if p not in epochs or owners[p][1] > epochs[p]:
            last = "none" if p not in epochs else str(epochs[p])
            raise CorruptRecord(kv.key, f"epoch {owners[p][1]} is above the last one handed out ({last})")
    plan = None if latest_round not in plan_kvs else _plan(plan_kvs[latest_round])
    records = _records(record_kvs.get(latest_round, {}))
    # no definition (deleted by hand): what the records name
    ids = config.partition_ids() if config is not None else sorted_pids({*owners, *epochs, *checkpoints})
    named = {str(p): owners[p][0] if p in owners else None for p in ids}  # each partition's owner, by its text
    # what the latest plan and the static mode's blocks say of the partitions, by text: built first, so that each
    # PartitionStatus is made once (100,000 of them)
    waiting_for: dict[str, int] = {}
    if replicas is not None and config is not None:  # static mode: an unowned partition waits for its block's ordinal
        for ordinal in range(min(replicas, len(ids))):
            for p in static_block(config, ordinal, replicas):
                if named[str(p)] is None:
                    waiting_for[str(p)] = ordinal
    holders: dict[str, dict[str, dict[str, int | None]]] = {"standby": {}, "learners": {}}
    moving_to: dict[str, str] = {}
    tags: dict[str, dict[str, dict[str, Any]]] = {}
    if plan is not None:
        lags = {mid: record.get("lag") or {} for mid, record in records.items()}
        for kind, held in (("standby", plan.standby), ("learners", plan.learners)):
            for mid, parts in sorted(held.items()):
                for p in parts:
                    if str(p) in named:
                        holders[kind].setdefault(str(p), {})[mid] = lags.get(mid, {}).get(str(p))
        for mid, parts in plan.assignment.items():
            for p in parts:
                if str(p) in named and named[str(p)] != mid:
                    moving_to[str(p)] = mid
        if config is not None and config.strategy == "high_availability":
            tags = {str(p): found for p, found in plan_tags(plan).items() if str(p) in named}
    partitions: dict[str, PartitionStatus] = {}
    owned: dict[str, list[str]] = {}
    lapsed: dict[str, list[str]] = {}
    for p in ids:
        text = str(p)
        owner = owners.get(p)
        lapsing = owner is not None and member_leases.get(owner[0]) != owner_kvs[p].lease
        if owner is not None:
            (lapsed if lapsing else owned).setdefault(owner[0], []).append(text)
        partitions[text] = PartitionStatus(
            None if owner is None else owner[0],
            owner[1] if owner is not None else epochs.get(p),
            checkpoints.get(p),
            lapsing,
            waiting_for.get(text),
            holders["standby"].get(text, NOTHING),
            holders["learners"].get(text, NOTHING),
            moving_to.get(text),
            tags.get(text, NOTHING),
        )
    # members: the registered ones, and the dead ones that owner records or the latest plan still name
    ids_of_members = {*registered, *owned, *lapsed, *(plan.participants if plan is not None else ())}
    members = {
        mid: msgspec.structs.replace(
            registered.get(mid) or MemberStatus(False),
            partitions=tuple(owned.get(mid, ())),
            lapsing=tuple(lapsed.get(mid, ())),
        )
        for mid in sorted(ids_of_members)
    }
    held_back = None if config is None else waiting(config, len(member_leases), bool(table))
    return GroupStatus(
        members=members,
        partitions=partitions,
        round=current_round,
        plan_round=latest_round,
        resource=config,
        table=dict(sorted(table.items(), key=lambda item: pid_order(item[0]))),
        failed=dict(sorted(failed.items(), key=lambda item: (-item[1].failed_at, item[0]))),
        coordinator=coordinator,
        replicas=replicas,
        waiting=None if held_back is None else Waiting(**held_back),
    )


def owners(store: Store, group: str) -> dict[Any, str | None]:
    """Every partition of ``group`` with the member its owner record names (None: unowned). Keys are partition ids:
    ints in a one-resource group, ``<resource>-<index>`` strings otherwise (``Any``: callers know their kind)."""
    found = group_status(store, group).partitions.items()
    return {pid_of_text(name): info.owner for name, info in found}


def _subscriptions(kv: KeyValue) -> list[str] | None:
    try:
        subs = decode(kv.value, kv.key).get("subscriptions")
    except CorruptRecord:
        return None
    return [str(s) for s in subs] if isinstance(subs, list) else None


def owned_by(store: Store, group: str, members: Iterable[str]) -> bool:
    """True when every partition of ``group`` is owned by one of ``members`` (False while the group is undefined)."""
    found = owners(store, group)
    return bool(found) and set(found.values()) <= set(members)


def settled(store: Store, group: str, members: Iterable[str]) -> bool:
    """True when ``group`` is at rest on exactly ``members``: every partition is owned by one of them, their counts
    are within one of each other and, in a group that plans rounds, the latest plan names exactly them, keeps no
    learner (every warm-up is done) and is what the owner records say (no handoff left in flight). With mixed
    subscriptions the counts may differ by more: the plan's balance is then Kafka's, which its closer checked (a plan
    with ``violations`` is not at rest); unsubscribed resources may be unowned."""
    wanted = set(members)
    found = owners(store, group)
    if not found or not {o for o in found.values() if o is not None} <= wanted:  # owned_by, on the same snapshot
        return False
    found_plan = latest_plan(store, group)
    if found_plan is False:
        return False
    plan = found_plan[0] if found_plan is not None else None
    if plan is None or not plan.subscriptions:
        counts = [sum(1 for o in found.values() if o == m) for m in wanted]
        if None in found.values() or max(counts) - min(counts) > 1:
            return False
    if plan is None:
        return True
    if set(plan.participants) != wanted or any(plan.learners.values()) or plan.violations:
        return False
    placed = {p: m for m, parts in plan.assignment.items() for p in parts}
    return placed == {p: o for p, o in found.items() if o is not None}


def latest_plan(store: Store, group: str) -> tuple[PlanRecord, str] | Literal[False] | None:
    """The latest round's plan record (``_plan``'s value) and its key; None in a group that plans no rounds
    (coordinator and static modes, or no round closed yet), False while ``latest`` names a plan not there (yet)."""
    keys = Keys(group)
    latest = store.get(keys.latest)
    if latest is None:
        return None
    kv = store.get(keys.plan(field(decode(latest.value, latest.key), latest.key, "round", int, minimum=0)))
    return False if kv is None else (_plan(kv), kv.key)


def not_at_rest(info: PartitionStatus, entry: Entry | None = None) -> list[str]:
    """Why a partition of a ``group_status`` snapshot (``info``, and ``entry``: its partition table entry in
    coordinator mode) is not at rest; empty when it is. ``waiting for ordinal N``, ``unowned`` (``(planned for M)``
    when the latest plan gives it to M), ``lapsing``, ``moving to M`` (the latest plan), the table entry's state when
    it is not ONLINE on its owner (``MIGRATING → M``), ``learners warming up``. What ``status`` and the dashboard
    show of a large group."""
    why: list[str] = []
    moving_to = info.moving_to
    if info.waiting_for is not None:
        why.append(f"waiting for ordinal {info.waiting_for}")
    elif info.owner is None:
        why.append("unowned" + (f" (planned for {moving_to})" if moving_to else ""))
    elif info.lapsing:
        why.append("lapsing")
    if moving_to and info.owner is not None:
        why.append(f"moving to {moving_to}")
    if entry is not None and (entry.state is not TableState.ONLINE or entry.target not in (None, entry.owner)):
        target = entry.target
        why.append(entry.state.value + (f" → {target}" if target not in (None, entry.owner) else ""))
    if info.learners:
        why.append("learners warming up")
    return why


def checkpoint_offset(checkpoint: object) -> int | None:
    """The integer ``"offset"`` of a checkpoint that is a JSON object (the pipeline's ``{"offset": N, ...}``), else
    None (the store does not know what a checkpoint means; ``status`` and the dashboard show this one)."""
    if not isinstance(checkpoint, str) or not checkpoint.startswith("{"):
        return None
    try:
        value: Any = json.loads(checkpoint)
    except ValueError:
        return None
    offset = value.get("offset") if isinstance(value, dict) else None
    return offset if isinstance(offset, int) and not isinstance(offset, bool) else None


def _capacity(kv: KeyValue) -> object:
    """A registration's capacity; a corrupt registration only loses it (the key's lease is what makes a member)."""
    try:
        return decode(kv.value, kv.key).get("capacity")
    except CorruptRecord as exc:
        log.warning("%s (skipped)", exc)
        return None


def _failure(kv: KeyValue) -> FailedMember | None:
    """A ``failed/<id>`` record ``{failed_at, partitions, detected_by}``; None (and a warning) when corrupt."""
    try:
        record = decode(kv.value, kv.key)
        at = record.get("failed_at")
        if isinstance(at, bool) or not isinstance(at, int | float):
            raise CorruptRecord(kv.key, f"'failed_at' must be a time, got {at!r:.80}")
        parts = field(record, kv.key, "partitions", list)
        if not all(isinstance(p, int | str) and not isinstance(p, bool) for p in parts):
            raise CorruptRecord(kv.key, "'partitions' must be a list of partition ids")
        return FailedMember(float(at), tuple(parts), record.get("detected_by"))
    except CorruptRecord as exc:
        log.warning("%s (skipped)", exc)
        return None


def table_entry(kv: KeyValue) -> Entry:
    """A partition table entry (coordinator mode), checked; CorruptRecord naming it."""
    return Entry.from_json(decode(kv.value, kv.key), kv.key)


def owner_of(store: Store, group: str, partition: int) -> tuple[str, int] | None:
    """``(member, epoch)`` of ``partition``'s owner record (None while nobody holds it); CorruptRecord naming it."""
    config = GroupConfig.find(store, group)
    kv = store.get((Keys(group) if config is None else config.keys(group)).owner(partition))
    return None if kv is None else decode_owner(kv)


def table_entry_of(store: Store, group: str, partition: int) -> Entry | None:
    """``partition``'s partition table entry (coordinator mode; None in the other modes)."""
    kv = store.get(Keys(group).table(partition))
    return None if kv is None else table_entry(kv)


def committed(store: Store, group: str) -> dict[Any, str]:
    """Every partition's last committed checkpoint (what ``commit`` stored), by partition; partitions that never
    committed are absent. CorruptRecord naming a commit record that is not one."""
    found = {p: checkpoint_of(kv) for p, kv in read_commits(store, Keys(group)).items()}
    return dict(sorted(found.items(), key=lambda item: pid_order(item[0])))


def _plan(kv: KeyValue) -> PlanRecord:
    """The latest round's plan (CorruptRecord naming its key)."""
    return PlanRecord.from_json(decode(kv.value, kv.key), kv.key)


TAG_NAMES = ("isLearner", "beingLearned", "isReady")
"""Seed 2's task tags, in the seed's order (its ``isStateful`` is the resource's ``stateful``, one per group)."""


def plan_tags(plan: PlanRecord) -> dict[Any, dict[str, dict[str, Any]]]:
    """Seed 2's task tags of a stored plan (``_plan``'s value), per partition id and member holding a replica of it:
    ``{"role": "active" | "standby" | "learner", "isLearner", "beingLearned", "isReady"}`` — the three flags by
    ``assign.replica_tags`` (the strategy's own rule), the role from the plan's table that names the member."""
    tables = [plan.assignment, plan.standby, plan.learners, plan.ready]
    found: dict[Any, dict[str, dict[str, Any]]] = replica_tags(*tables)
    for role, table in (("active", tables[0]), ("standby", tables[1]), ("learner", tables[2])):
        for mid, parts in table.items():
            for p in parts:
                found[p][mid] = {"role": role, **found[p][mid]}
    return found


def tags_text(holders: Mapping[str, Mapping[str, Any]]) -> str:
    """One line of a partition's tags (``plan_tags``): each holder, its role and the tags that hold, e.g.
    ``w1 active: beingLearned isReady · w2 standby: isReady · w3 learner: isLearner``."""
    return " · ".join(
        f"{mid} {flags['role']}: " + (" ".join(t for t in TAG_NAMES if flags.get(t)) or "-")
        for mid, flags in holders.items()
    )


def _records(kvs: dict[str, KeyValue]) -> dict[str, dict[str, Any]]:
    """Participation records of one round; a corrupt one is skipped with a warning (it only reports lags)."""
    out: dict[str, dict[str, Any]] = {}
    for mid, kv in kvs.items():
        try:
            record = decode(kv.value, kv.key)
            if not isinstance(record.get("lag") or {}, dict):
                raise CorruptRecord(kv.key, f"'lag' must be an object, got {record.get('lag')!r:.80}")
        except CorruptRecord as exc:
            log.warning("%s (skipped)", exc)
            continue
        out[mid] = record
    return out


__all__ = [
    "checkpoint_offset",
    "group_status",
    "latest_plan",
    "not_at_rest",
    "owned_by",
    "owners",
    "plan_tags",
    "tags_text",
    "settled",
    "table_entry",
]
