"""Seed 1's Fixed Partitions on a consistent core: an elected coordinator keeps the partition table in the store.

Every member registers ``members/<id>`` bound to its lease and heartbeats by renewing it: the store's lease expiry
is the timeout failure detector (a member that stops heartbeating is dead ttl later). Any member can become the
coordinator: ``txn([absent(coordinator)], [put coordinator (my lease)])``; one at a time, and when it dies its key
expires with its lease, so another member takes over within ttl. The coordinator's decisions live in the store
(``table/<p>``, ``migrations/<p>``): a successor reads them and continues the migrations in flight. Every write of
the coordinator compares its own ``coordinator`` record, so a deposed coordinator cannot write.

The partition table (``Entry`` per partition: ``owner``, ``target``, ``state``; ``TableState``)::

    (no table) --coordinator: live members >= min_members, then no registration for settle_s--> table created
               with the group's strategy (round_robin by default, as in the seed, dealing the members in the
               order they registered: seed 1's live members list): every entry
               ASSIGNED(owner=None, target=m)
    ONLINE(owner=A) --member joins/dies (automatic) or `apportion rebalance` (manual) moves p to B-->
        ASSIGNED(owner=A, target=B) --coordinator, fewer than max_in_flight MIGRATING--> MIGRATING(A -> B)
    MIGRATING(A -> B) --A: on_revoked, release owner/p (or A's lease expires)--> (owner record free)
        --B: claim owner/p (new epoch e), on_assigned; [stateful: restored(p, e)]; ack: txn [table/p unchanged,
          owner/p == (B, e)] -> ONLINE(owner=B)--> ONLINE(owner=B)
    ASSIGNED(owner=None, target=B) --B claims, [restores,] acks--> ONLINE(owner=B)   (nothing to migrate: no throttle)
    any entry whose owner or target died --coordinator--> re-planned (even in manual mode: nothing is lost)

Seed 1's migration moves the partition's data: the source "sends the entire partition data to the target node",
which acks, and only then does the table say ONLINE. apportion's data is a stateful pipeline's per-partition state
(``apportion.spark.pipeline._stateful``): its truth is the fenced changelog in the shared log, so nothing is sent
from A to B; B *restores* it, replaying the committed changelog ranges named by the checkpoint it reads under its
new epoch (complete: no other member can commit under that epoch). A member given ``restored(partition, epoch) -> bool``
(``Group.join(..., restored=...)``; the pipeline's ``Pipeline.restored``) acks a partition it claimed as a target
only once ``restored`` says its state is restored under the epoch it holds, so ONLINE in the table means the new
owner has the state, as in the seed. Why the gate and not a restore inside ``on_assigned``: a restore replays up to
the whole changelog, and on the stepping thread it would hold back the member's revocations, claims and acks of
every other partition (and the coordinator's decisions) for that long; the pipeline restores on its own thread
before its first batch of the epoch, as in every mode, and the member only waits to ack. Until then the entry stays
MIGRATING (or ASSIGNED): ``stable()`` is false, ``apportion rebalance`` is refused, ``max_in_flight`` counts it. The
ack also compares B's owner record at that epoch, so a member that lost the partition meanwhile (lapsed, frozen)
never writes ONLINE for it. Without ``restored`` (a stateless member) the ack follows the claim at once, as before.
An owner that claims again a partition the table already has ONLINE for it (after a lapse of its own) does not ack;
its pipeline restores the (short) tail it lacks before its first batch of the new epoch, as in every mode.

The first table (seed 1: "it might map partitions too early until the cluster reaches a stable state"): the
coordinator lays it out once ``min_members`` are live AND the live members have not changed for the first table's
settle time (``Coordinator.first_table_settle_s``): ``--first-settle`` when given; RST (``settle_s``) when
``--min-members`` above 1 declares the fleet's size; else 10 s. Each registration restarts the wait, which ends at
the latest ``FIRST_TABLE_MAX_SETTLES`` of those settle times after ``min_members`` were first live. Why: with the
default ``min_members`` of 1 the first member to register got every partition and the next ones took most of them
back, which is the over-eager mapping the seed's minimum cluster size exists to prevent. A wait of RST (0.5 s)
protected members started 0.3 s apart but not a Deployment's pods, which start seconds apart: three members started
0.6 s apart moved 25 of 30 partitions after the first table, six moved 43 (issue 45.2;
``tests/sim/test_first_table_simulator.py`` measures 0, 0.6, 2 and 5 s apart). A minimum the group cannot know (how
many workers a deployment starts) is no default, a settle time is; where the operator declares it (``--min-members
N``) the table waits for N and then only RST. It costs the first table 10 s once in the group's life (the table
stays in the store across restarts). Fleets whose members start further apart raise ``--first-settle`` or set
``--min-members``. While held back the coordinator traces ``waiting_for_members`` (below the minimum) or
``settling``, and ``status`` says ``waiting for N members (have M)`` or ``settling``.

A member M holds p when the entry says so: ``owner == M`` and state ONLINE or ASSIGNED, or ``target == M`` and state
MIGRATING (or ASSIGNED with no owner). It revokes anything else it holds, claims what it should hold once the owner
record is free, and acks what it claimed as a target. Ownership itself is ``FencedMember``'s: epochs fence commits,
so the table only steers who claims; exclusivity never depends on it.

Member phases (``CoordinatorPhase``)::

    STARTING --lease granted, members/<id> put--> FOLLOWING
    FOLLOWING --coordinator key absent: txn [absent(coordinator)] wins--> COORDINATING
    COORDINATING --my coordinator record gone (lease lapse)--> STARTING (via the lapse) or FOLLOWING
    FOLLOWING/COORDINATING --each step: follow the table (revoke, claim, ack)--> same
    any --local lease deadline passed, or lease gone--> on_lost(all), lease revoked --> STARTING
    any --leave()--> on_revoked(all), release, lease revoked --> STOPPED

Which strategy plans what (``replan_strategy``): the first table is laid out by the group's strategy; every later
change starts from the current table. Seed 1 does exactly this with its default: round-robin for the first table,
then "move only the surplus" to the new or underloaded nodes. A ``round_robin`` group (the coordinator's default)
therefore re-plans with ``sticky`` (seed 4's constrained assignor: each holder keeps its partitions up to the
floor/ceil quota, only the surplus moves; moves = the lower bound), since ``round_robin`` itself ignores the table
and would move most partitions on every join (21 of 30 where 7 suffice, in the seed's own example). Any other
strategy was chosen for its own placement (capacities, hashing, ranges) and plans every change itself.

Rebalancing policy: ``automatic`` re-plans (full strategy run with the current holders as ``owned``) whenever the
set of live members changes; ``manual`` only re-plans the partitions of dead members (to live members that already
hold partitions) until an operator writes ``rebalance`` (``apportion rebalance``), then runs one full re-plan.
``request_rebalance`` refuses while moves are in flight (``in_flight``: an entry not ONLINE), and a request that
arrives anyway (a race with a join) waits in the store until every entry is ONLINE: a re-plan never redirects a
migration that an operator's previous request started.

Failed members (seed 1 keeps live and failed member lists): a member whose ``members/<id>`` is deleted without
having said ``"left": true`` (what a graceful leave writes just before revoking its lease) failed: its lease
expired, it lapsed, or ``--replace`` fenced it. Every member notes such a deletion with the partitions the table
gave it (as of its last step); the coordinator writes ``failed/<id>`` ``{failed_at, partitions, detected_by}``
(fenced like its other writes) bound to a lease of ``FAILED_RETENTION_S``, so a successor elected because the
coordinator itself failed records that failure too. ``status`` lists them.

Reads: a step runs on every watched event and at least every ttl/4, so it reads nothing the watch tells: the
``coordinator`` and ``rebalance`` keys and the ``members/`` and ``table/`` prefixes are tracked copies
(``_tracked``), read at start and after a lapse, after this member's own writes to them, after a transaction
comparing them failed, or after the watch lost events (compacted history: ``_resync``), and otherwise kept current
by their events.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, Unpack

from apportion.errors import CorruptRecord, InvalidRequest
from apportion.group._config import GroupConfig
from apportion.group._history import HistoryType
from apportion.group._keys import PartitionId, decode, encode, sorted_pids
from apportion.group._mode import Coordinator
from apportion.group._ownership import (
    FencedMember,
    MemberOptions,
    Planner,
    chunks,
    default_planner,
)
from apportion.group._round_plan import Checker, check_plan
from apportion.group._subscriptions import Subscriptions
from apportion.group._table import (
    FIRST_TABLE_MAX_SETTLES,
    Entry,
    TableState,
    in_flight,
    live_subscriptions,
    members_of,
    plan_table,
    registrations,
    table_changes,
    table_of,
)
from apportion.group._trace import TraceKind
from apportion.group._tracked import TrackedKey, TrackedPrefix
from apportion.store import (
    Compare,
    Delete,
    Event,
    EventType,
    KeyValue,
    Op,
    Put,
    Store,
    absent,
    mod_revision_is,
    renew_interval_s,
    value_is,
)

log = logging.getLogger(__name__)

FAILED_RETENTION_S = 3600.0
"""How long ``failed/<id>`` records stay (the lease they are bound to): an hour, the history's default retention, so
``apportion report`` and ``explain`` still hold what a failed member did for as long as ``status`` lists it; long
enough for an operator paged by a failure to look, and bounded so that a crash-looping fleet does not fill the store
(one record per member id: a member that fails again replaces its record). The store drops them on time even when
no coordinator is left."""


class CoordinatorPhase(enum.Enum):
    STARTING = "starting"
    FOLLOWING = "following"
    COORDINATING = "coordinating"
    STOPPED = "stopped"


Restored = Callable[[Any, int], bool]
"""``restored(partition, epoch)``: whether the member's application has restored the partition's state under that
epoch (a stateful pipeline: its changelog replayed up to the checkpoint read under the epoch). A coordinator member
given one acks a migration to it only once it says so (see the module docstring); called on the stepping thread."""


class CoordinatorMember(FencedMember):
    """One member of a coordinator-mode group; any member may be elected coordinator."""

    def __init__(
        self,
        store: Store,
        group: str,
        member_id: str,
        config: GroupConfig,
        *,
        planner: Planner = default_planner,
        subscriptions: Sequence[str] | None = None,
        checker: Checker | None = check_plan,
        restored: Restored | None = None,
        **options: Unpack[MemberOptions],
    ) -> None:
        if not isinstance(config.mode, Coordinator):
            raise InvalidRequest("mode", f"a coordinator member needs Coordinator(...), got {config.mode!r}")
        self._requested_mode = config.mode
        super().__init__(store, group, member_id, config, **options)
        self._subs = Subscriptions(config, self.keys, member_id, subscriptions)
        self._planner = planner
        self._checker = checker
        self.phase = CoordinatorPhase.STARTING
        self._coord_rev = 0  # mod_revision of my coordinator record while COORDINATING
        self._planned_for: tuple[tuple[str, tuple[str, ...] | None], ...] | None = None  # members, subscriptions
        self._table: dict[PartitionId, tuple[Entry, int]] = {}
        self._coordinator = TrackedKey(self.keys.coordinator)
        self._rebalance = TrackedKey(self.keys.rebalance)
        self._members = TrackedPrefix(self.keys.members)
        self._tables = TrackedPrefix(self.keys.tables)
        self._left: set[str] = set()  # members whose registration says they are leaving gracefully
        # the first table's settle (``first_table_due``): the live members last seen, since when, and the deadline
        self._quiet: tuple[tuple[str, ...], float, float] | None = None
        self._settle_until: float | None = None
        self._failed: dict[str, dict[str, Any]] = {}  # failures noticed and not recorded yet: id -> record
        self._restored = restored  # the ack's gate (see the module docstring); None: ack at once
        self._awaiting_restore: set[PartitionId] = set()  # claimed as a target, not acked: state not restored yet

    @property
    def settings(self) -> Coordinator:
        """The group's coordinator settings: the stored definition's (effective), or the requested ones while the
        stored definition records no mode (written by an older version)."""
        mode = self.config.mode
        return mode if isinstance(mode, Coordinator) else self._requested_mode

    @property
    def min_members(self) -> int:
        return self.settings.min_members

    @property
    def rebalance(self) -> str:
        return self.settings.rebalance

    @property
    def max_in_flight(self) -> int:
        return self.settings.max_in_flight

    @property
    def is_coordinator(self) -> bool:
        return self.phase is CoordinatorPhase.COORDINATING

    @property
    def table(self) -> dict[PartitionId, Entry]:
        """The partition table as of the last step."""
        return {p: e for p, (e, _) in self._table.items()}

    def stable(self) -> bool:
        with self._belief.lock:
            table = self.table
            mine = {p for p, e in table.items() if e.holds(self.id) and self._subs.allows(p)}
            return (
                self.phase in (CoordinatorPhase.FOLLOWING, CoordinatorPhase.COORDINATING)
                and bool(table)
                and all(e.state is TableState.ONLINE for e in table.values())
                and not self._claims.wanted
                and set(self._belief.owned) == mine
                and self._clock.now() < self._belief.deadline
            )

    def _started(self, now: float, revision: int) -> None:
        self._forget()
        self.phase = CoordinatorPhase.FOLLOWING
        kv = self.store.get(self._subs.key)
        if kv is not None:
            self._subs.on_record(self.config, kv)

    def _registration(self) -> dict[str, Any]:
        return self._subs.record()

    @property
    def subscriptions(self) -> frozenset[str] | None:
        """The resources this member consumes now (None: every one)."""
        return self._subs.current

    def subscribe(self, subscriptions: Sequence[str] | None) -> None:
        """Consume ``subscriptions`` (None: every resource) from now on. Thread-safe: the stepping thread revokes
        at once what no longer fits and announces them in ``members/<id>``; the coordinator re-plans (automatic
        policy) or places only what this member gave up (manual)."""
        self._subs.subscribe(self.config, subscriptions)

    def _registered_as_subscribed(self) -> bool:
        """False when this member's registration names other subscriptions than it has (the coordinator plans by
        the registration); True when it is not registered (a new registration writes them)."""
        mine = self.keys.member(self.id)
        for kv in self._members.items(self.store):
            if kv.key == mine:
                return live_subscriptions(self.keys, [kv]).get(self.id) == self._subs.current
        return True

    def _forget(self) -> None:
        for tracked in (self._coordinator, self._rebalance, self._members, self._tables):
            tracked.forget()

    def _resync_keys(self) -> list[str]:
        return [self._subs.key]

    def _resync(self) -> dict[str, KeyValue | None]:
        """After a watch lost events: every copy is read again at the next step (failures noticed from lost
        deletes are not recorded: the record is for operators, the table and the leases decide)."""
        self._forget()
        found = super()._resync()
        if found[self._subs.key] is None:
            self._subs.on_record(self.config, None)
        return found

    def _on_event(self, event: Event) -> None:
        if event.kv.key == self.keys.resource and event.kv.mod_revision > self._config_revision:
            self.config, self._config_revision = GroupConfig.from_record(event.kv), event.kv.mod_revision
        if event.kv.key == self._subs.key:
            self._subs.on_record(self.config, event.kv if event.type is EventType.PUT else None)
        if event.kv.key.startswith(self.keys.members):
            self._membership_event(event)
        elif event.kv.key.startswith(self.keys.failures) and event.type is EventType.PUT:
            self._failed.pop(event.kv.key[len(self.keys.failures) :], None)  # recorded (by me or a coordinator)
        for tracked in (self._coordinator, self._rebalance, self._members, self._tables):
            if tracked.on_event(event):
                return

    def _membership_event(self, event: Event) -> None:
        """Note a member whose registration went without a graceful leave (see the module docstring)."""
        mid = event.kv.key[len(self.keys.members) :]
        if event.type is EventType.PUT:
            try:
                left = decode(event.kv.value, event.kv.key).get("left") is True
            except CorruptRecord:  # a registration only informs: a corrupt one is not a leave
                left = False
            if left:
                self._left.add(mid)
            else:
                self._left.discard(mid)
            return
        if mid in self._left or mid == self.id:
            self._left.discard(mid)
            return
        now = self._clock.now()
        held = [p for p, (e, _) in sorted(self._table.items()) if e.owner == mid or e.holds(mid)]
        self._failed[mid] = {"failed_at": now, "partitions": held}
        for old in [m for m, f in self._failed.items() if f["failed_at"] < now - FAILED_RETENTION_S]:
            del self._failed[old]  # a follower's notes: never older than the records themselves would be

    def _record_failures(self) -> None:
        """Coordinator: write the failures noticed (one lease of FAILED_RETENTION_S for them), fenced."""
        if not self._failed:
            return
        lease = self.store.grant(FAILED_RETENTION_S)
        ops: list[Op] = [
            Put(self.keys.failed(mid), encode({**record, "detected_by": self.id}), lease.id)
            for mid, record in sorted(self._failed.items())
        ]
        if self.store.txn([mod_revision_is(self.keys.coordinator, self._coord_rev)], ops).succeeded:
            self._trace(TraceKind.FAILED, members=sorted(self._failed))
            self._failed.clear()
        else:
            self.store.revoke(lease)

    def _advance(self, now: float) -> float:
        self._recorder.prune(self.store, now)  # at most once a minute: the history's retention
        deadlines = [self._lapse_at(), now + renew_interval_s(self.config.ttl_s)]
        changed = self._subs.take()
        if changed is not None:
            self._trace(TraceKind.SUBSCRIBED, subscriptions=Subscriptions.shown(changed[0]))
        if changed is not None or not self._registered_as_subscribed():  # an announce the store did not take: again
            self._announce(revoking=False)
            self._members.forget()
        self._elect(now)
        self._settle_until = None  # set again by a coordinator still settling its first table
        if self.phase is CoordinatorPhase.COORDINATING:
            self._coordinate(now)
        self._table = table_of(self.keys, self._tables.items(self.store))
        self._follow(now)
        if self.busy_until is not None:
            return self.busy_until
        if self._claims.wanted or self._claims.to_release or self._awaiting_restore:
            deadlines.append(now + self.claim_retry_s)
        if self._settle_until is not None:
            deadlines.append(self._settle_until)
        return min(deadlines)

    # -- coordinator ---------------------------------------------------------------------------------------

    def _settings(self) -> dict[str, Any]:
        return {
            "member": self.id,
            "min_members": self.min_members,
            "rebalance": self.rebalance,
            "max_in_flight": self.max_in_flight,
        }

    def _elect(self, now: float) -> None:
        kv = self._coordinator.get(self.store)
        if kv is not None:
            if self.phase is CoordinatorPhase.COORDINATING and kv.mod_revision != self._coord_rev:
                self.phase = CoordinatorPhase.FOLLOWING
            return
        lease = self._belief.lease
        if lease is None:
            return
        if self.phase is CoordinatorPhase.COORDINATING:
            self.phase = CoordinatorPhase.FOLLOWING
        ops: list[Op] = [Put(self.keys.coordinator, encode(self._settings()), lease.id)]
        result = self.store.txn([absent(self.keys.coordinator)], ops)
        self._coordinator.forget()  # mine now, or another's: read it once
        if result.succeeded:
            self._coord_rev = result.revision
            self._planned_for = None
            self._quiet = None
            self.phase = CoordinatorPhase.COORDINATING
            self._trace(TraceKind.COORDINATOR, member=self.id)

    def _first_table_due(self, now: float, live: Sequence[str]) -> bool:
        """Whether the coordinator may lay out the first table now (see "The first table" in the module docstring):
        at least ``min_members`` live, and no member registered or went for the first table's settle time
        (``Coordinator.first_table_settle_s``), or ``FIRST_TABLE_MAX_SETTLES`` of them passed since ``min_members``
        were first live. Traces ``waiting_for_members``
        or ``settling`` when the table is held back, each once per change of the live members."""
        roster = tuple(sorted(live))
        if len(roster) < self.min_members:
            if self._quiet is None or self._quiet[0] != roster:
                self._trace(TraceKind.WAITING_FOR_MEMBERS, live=len(roster), min_members=self.min_members)
            self._quiet = (roster, now, math.inf)
            return False
        settle = self.settings.first_table_settle_s(self.config.settle_s)
        if self._quiet is None or self._quiet[0] != roster:
            first = now if self._quiet is None or self._quiet[2] == math.inf else self._quiet[2]
            self._quiet = (roster, now, first)
            until = min(now + settle, first + FIRST_TABLE_MAX_SETTLES * settle)
            self._trace(TraceKind.SETTLING, live=len(roster), until=until)
        _, since, first = self._quiet
        due = min(since + settle, first + FIRST_TABLE_MAX_SETTLES * settle)
        if now < due:
            self._settle_until = due
            return False
        return True

    def _coordinate(self, now: float) -> None:
        self._record_failures()
        registered = self._members.items(self.store)
        live = members_of(self.keys, registered)
        subscriptions = live_subscriptions(self.keys, registered)
        roster = tuple((m, None if s is None else tuple(sorted(s))) for m, s in sorted(subscriptions.items()))
        stored = table_of(self.keys, self._tables.items(self.store))
        table = {p: e for p, (e, _) in stored.items()}
        request = self._rebalance.get(self.store)
        if request is not None and in_flight(table):
            request = None  # queued: the operator's re-plan starts once the moves in flight are done
        if not table and not self._first_table_due(now, live):
            return
        changed = roster != self._planned_for  # a member came, went or changed its subscriptions
        full = not table or request is not None or (self.rebalance == "automatic" and changed)
        planned = plan_table(
            self.group,
            self.config,
            live,
            table,
            full=full,
            planner=self._planner,
            subscriptions=subscriptions,
            checker=self._checker,
            registered=registrations(self.keys, registered),
        )
        changes = table_changes(table, planned.desired, live, self.max_in_flight)
        extra: list[Op] = []
        extra_compares: list[Compare] = []
        if request is not None:
            extra_compares.append(mod_revision_is(self.keys.rebalance, request.mod_revision))
            extra.append(Delete(self.keys.rebalance))
        if not changes and not extra:
            self._planned_for = roster
            return
        fence = mod_revision_is(self.keys.coordinator, self._coord_rev)
        ok = True
        parts = sorted_pids(changes)
        batches = list(chunks(parts)) or [[]]
        for i, batch in enumerate(batches):
            compares: list[Compare] = [fence]
            ops: list[Op] = []
            for p in batch:
                key = self.keys.table(p)
                compares.append(mod_revision_is(key, stored[p][1]) if p in stored else absent(key))
                entry = changes[p]
                ops.append(Put(key, encode(entry.to_json())))
                if entry.state is TableState.MIGRATING:
                    move = {"from": entry.owner, "to": entry.target, "state": entry.state.value}
                    ops.append(Put(self.keys.migration(p), encode(move)))
                elif entry.state is TableState.ONLINE:
                    ops.append(Delete(self.keys.migration(p)))
            if i == len(batches) - 1:
                compares += extra_compares
                ops += extra
            self._tables.forget()  # my own writes (or a stale compare): read the table once, not wait for events
            self._rebalance.forget()
            if not self.store.txn(compares, ops).succeeded:
                ok = False
                break
        if ok:
            self._planned_for = roster
            moving = [p for p in parts if changes[p].state is TableState.MIGRATING]
            self._trace(
                TraceKind.TABLE,
                full=full,
                changed=parts,
                migrating=moving,
                moves=planned.moves,
                min_moves=planned.min_moves,
            )

    # -- following -----------------------------------------------------------------------------------------

    def _follow(self, now: float) -> None:
        should: set[PartitionId] = {p for p, (e, _) in self._table.items() if e.holds(self.id) and self._subs.allows(p)}
        with self._belief.lock:
            owned = set(self._belief.owned)
        revoke = sorted_pids(owned - should)
        if revoke:
            self._revoke(revoke)
            if self.busy_until is not None:
                return
        self._claims.wanted = should - owned
        if self._claims.wanted:
            self._claim(now)
        with self._belief.lock:
            epochs = dict(self._belief.owned)
        awaiting: set[PartitionId] = set()
        for p, (entry, rev) in sorted(self._table.items()):
            if p in epochs and entry.target == self.id and entry.state is not TableState.ONLINE:
                epoch = epochs[p]
                if self._restored is not None and not self._restored(p, epoch):
                    awaiting.add(p)  # the ack waits for the state (module docstring): asked again next step
                    continue
                online = Entry(self.id, None, TableState.ONLINE)
                ops: list[Op] = [Put(self.keys.table(p), encode(online.to_json())), Delete(self.keys.migration(p))]
                # the time of the ack itself (a restore may have ended during this step): after the restore's
                ops += self._recorder.put(
                    HistoryType.MIGRATED, self._clock.now(), partitions=[p], epochs=[epoch], source=entry.owner
                )
                compares = [
                    mod_revision_is(self.keys.table(p), rev),
                    value_is(self.keys.owner(p), self._owner_value(epoch)),
                ]
                self._tables.forget()
                if self.store.txn(compares, ops).succeeded:
                    self._trace(TraceKind.ACK, partition=p, source=entry.owner, epoch=epoch)
        self._awaiting_restore = awaiting

    def _reset(self) -> None:
        self.phase = CoordinatorPhase.STARTING
        self._table = {}
        self._awaiting_restore = set()
        self._forget()

    def _stop(self) -> None:
        super()._stop()
        self.phase = CoordinatorPhase.STOPPED


__all__ = ["FAILED_RETENTION_S", "CoordinatorMember", "CoordinatorPhase", "Restored"]
