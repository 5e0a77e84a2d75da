"""Seed 0's continuous assignment rounds plus fenced ownership, as one stepped state machine per member.

``RoundsMember`` is pure protocol logic: ``step(now) -> next_deadline`` drains its watch without blocking, runs store
transactions synchronously, invokes callbacks and never sleeps. The real worker (``apportion.worker``) runs it in a
thread next to a keepalive thread; the simulator (``apportion.sim``) steps the same class in virtual time.

Rounds (the store revision is the versionstamp)
-----------------------------------------------
A round ``R`` is the ``mod_revision`` of the ``current`` key written by its opener (value: ``opened_at`` on the
opener's clock). Member phases (``Phase``)::

    STARTING --lease granted, members/<id> put, resource read or created--> WAITING
    WAITING  --current R open, (R opened after I started) or (age < RST)--> join R --> JOINED(R)
    WAITING  --R closed without me, or open and older than RST--> open a new round at max(now, seen(R) + MRI)
    JOINED(R) --local seen(R) + RST passed (R's opener; each other member, a backup, up to max(RST, ttl/2) later:
                ``_close_at``), plan absent, no live member of the previous plan missing (registered, not
                leaving: inside on_revoked, or busy; ``_awaited``), or seen(R) + RST + ttl passed--> close R
                (first closer wins) --> SETTLED(R)
    JOINED(R) --plan of R read--> SETTLED(R)         (every member reads the same plan)
    SETTLED(R) --current changes to R2--> join R2 --> JOINED(R2)
    SETTLED(R) --a plan participant's members/<id> deleted (lease expiry), resource changed (ext. 2),
                 or seen(R) + HBI passed--> open a new round at max(now, seen(R) + MRI)
    any      --its subscriptions changed (``subscribe``, the operator's ``subscriptions/<id>``: ``_subscriptions``)-->
                 revoke what no longer fits at once, then open a new round at max(now, seen(R) + MRI)
    any --local lease deadline passed, or lease gone--> on_lost(all), lease revoked --> STARTING
    any --begin_leave() (planned leave)--> members/<id> says "leaving"; no more joins; a round is wanted (by every
                 member whose plan names the leaver) --> the plan of a round without me: on_revoked, release as it
                 says; leave_ready() --> leave()
    any --leave()--> on_revoked(all), release, lease revoked --> STOPPED

Opening is ``txn([current.mod_revision == R], [put current])``: of many members racing, one wins and the others join
its round. Joining is ``txn([absent(round/R/plan)], [put round/R/<id> (lease-bound), put round/R/joined])``.
Closing reads ``round/R/``, computes the plan with the group's strategy from the cut (``close_plan``, a pure function
of the cut, the previous plan and the definition; each participant's join revision is its record's creation
revision: ``round_robin`` deals in that order, seed 0's), and writes it (a ``PlanRecord``) in ONE txn
``[absent(plan), round/R/joined.mod_revision unchanged, current == R] -> [put plan, put latest, delete older
rounds]``: the cut is exactly the participation records written before the close revision (a later join fails on
``absent(plan)``; a join between the read and the write changes ``joined`` and the close retries). Participation
records are lease-bound, so members that died before the close are not in the cut. Extension 1: when the cut has the
same participants as the previous plan and the resource definition is unchanged, the previous assignment is kept
(unless learners are warming up: then the round is a probing round and is planned again).

One closer at a time: the round's opener closes it at RST, every other member is a backup whose turn comes later,
and a ``closing`` record keeps a close of a large plan from being done by many at once (``_round_close``).

Reads
-----
A step happens on every watched event (any change under the group's prefix: registrations, rounds, plans; the
release of a partition this member waits for; not claims and commits, whose records live beside it, ``_keys``), so a
step reads nothing it can learn from the watch: ``current`` is a
``TrackedKey`` (read at start and after a lapse or a failed open/close, then kept by its events), and the plan of the
open round comes from its ``round/R/plan`` event, or is read once when it may exist unseen (at start, after a lapse, a
failed join or close, a ``latest`` event). A watch that lost events (compacted history) is replaced and what they
told is read again (``_resync``: ``current`` and the plan as after a lapse, ``latest``, the subscriptions and the
registrations as their events). Closing a round still reads the round's records, as it must. A member that
joined a round but was busy while its plan came and a newer round opened reads that plan and applies it before joining
the newer one (``_catch_up``): otherwise it would report the holdings and generation of a plan before, and a strategy
reading generations would re-plan on stale claims.

Replicas (seed 2, ``high_availability``)
----------------------------------------
A plan may also give a member standby and learner (warm-up) replicas of partitions it does not own; the member hears
them through ``on_replicas(standby, learners)`` (learners include the partitions the plan gives it that it has not
claimed yet: they keep warming up until their previous owner releases them) and reports, in its next participation
record, the replicas it holds and each one's lag (``replica_lags()``: partition -> offsets behind the partition's
changelog end). The plan also lists the replicas it found ready (``ready``); the next close passes them back to the
strategy (``Member.ready``) so that a ready replica stays ready within a wider lag band (high_availability's
hysteresis: a pure function of the cut and the previous plan). While a plan has learners, every member wants a
probing round ``probe_after_s`` (the strategy's ``probing_rebalance_interval_s``) after the plan: the strategy then
moves the actives whose learners are ready.

Ownership (epochs are fencing tokens)
-------------------------------------
The ownership state machine (claim, on_assigned, revoke, release, fenced commit, lapse) is ``FencedMember``'s in
``apportion.group._ownership``; this protocol fills ``_claims.wanted`` from the plan and revokes what a plan moves away.
Partitions kept across rounds are not revoked (cooperative, KIP-429).

Planned leave
-------------
A member that releases its partitions and then leaves (``leave()``) leaves them unowned for a whole round: until
someone opens one (up to MRI after the last), RST, the close. ``begin_leave`` plans the handoff first instead: the
member announces ``leaving`` in its registration and stops joining rounds; every member whose plan names it wants a
round (as for a departed participant), whose plan gives its partitions to the others while it still processes them;
it then revokes and releases them as any plan's loser does, and the new owners, already waiting for the release,
claim each one at its delete event (revoke before assign and the fences are unchanged: the claim is still
compare-absent on the owner record). ``leave_ready`` ends the wait when the member holds nothing and is in no open
round, when every other participant of its plan is leaving or gone too (nobody to plan for: a whole fleet stopping
does not wait), or after MRI + RST + ttl (the longest a round takes to open and close, waiting for a member inside
``on_revoked``); ``leave()`` then revokes and releases whatever is left, as before.

Several resources and subscriptions (issue 20)
----------------------------------------------
In a group over named resources a participation record carries the member's ``subscriptions`` (absent: every
resource); the closer plans the group's resources with them (the strategy's general path when they differ), runs
``assign.check`` on the plan (a violation is logged and kept in the plan as ``violations``), and keeps the previous
plan (extension 1) only when the participants' subscriptions are those of the previous plan too. A member claims
only partitions of resources it subscribes to, whatever a plan says.
"""

from __future__ import annotations

import enum
import functools
import logging
from collections.abc import Sequence
from typing import Any, Unpack

from apportion.errors import CorruptRecord, InvalidRequest, LeaseNotFound, StoreUnavailable
from apportion.group._config import GroupConfig
from apportion.group._history import HistoryType
from apportion.group._keys import (
    PartitionId,
    PlanRecord,
    decode,
    encode,
    sorted_pids,
)
from apportion.group._mode import Rounds
from apportion.group._ownership import (
    INF,
    FencedMember,
    MemberOptions,
    Ownership,
    PartitionLease,
    Planner,
    default_planner,
)
from apportion.group._replicas import ReplicaLags, Replicas, ReplicasCallback
from apportion.group._round_close import RoundCloser, says_leaving
from apportion.group._round_plan import Checker, check_plan, read_plan
from apportion.group._subscriptions import Subscriptions
from apportion.group._trace import TraceKind
from apportion.group._tracked import TrackedKey
from apportion.store import Event, EventType, Get, KeyValue, Op, Put, Store, absent, mod_revision_is

log = logging.getLogger(__name__)


class Phase(enum.Enum):
    STARTING = "starting"
    WAITING = "waiting"
    JOINED = "joined"
    SETTLED = "settled"
    STOPPED = "stopped"


class RoundsMember(FencedMember):
    """One member of one group running the rounds protocol (ownership mechanics: ``FencedMember``)."""

    def __init__(
        self,
        store: Store,
        group: str,
        member_id: str,
        config: GroupConfig,
        *,
        capacity: float = 1.0,
        rack: str | None = None,
        planner: Planner = default_planner,
        checker: Checker = check_plan,
        replica_lags: ReplicaLags | None = None,
        on_replicas: ReplicasCallback | None = None,
        subscriptions: Sequence[str] | None = None,
        **options: Unpack[MemberOptions],
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int | float) or not capacity > 0:
            raise InvalidRequest("capacity", f"must be a positive number, got {capacity!r}")
        if not isinstance(config.mode, Rounds):
            raise InvalidRequest("mode", f"a rounds member needs Rounds(), got {config.mode!r}")
        super().__init__(store, group, member_id, config, **options)
        self.capacity = float(capacity)
        self._subs = Subscriptions(config, self.keys, member_id, subscriptions)
        self.rack = rack
        self._closer = RoundCloser(self._ctx, planner=planner, checker=checker)
        self._replicas = Replicas(self._ctx, replica_lags, on_replicas)
        self._probe_after_s: float | None = None
        # round state
        self.phase = Phase.STARTING
        self._start_revision = 0
        self._round = 0
        self._opened_at = 0.0
        self._opener: str | None = None  # who opened the current round: its closer (``_close_at``)
        self._first_seen = 0.0
        self._joined_round = 0
        self._plan_round = 0
        self._applied_plan: tuple[int, PlanRecord] | None = None  # (round, plan) last applied: the next close reads it
        self._participants: tuple[str, ...] = ()
        self._assignment: frozenset[PartitionId] = frozenset()
        self._in_plan = False
        self._need_since: int | None = None
        self._participant_set: frozenset[str] = frozenset()
        self._dead: set[str] = set()  # the ids whose members/<id> registration was deleted last
        self._leaving: set[str] = set()  # the ids whose members/<id> says "leaving" (a planned leave)
        self._leave_by: float | None = None  # this member's planned leave: leave at the latest then
        # what the watch tells (module doc, "Reads"): current, and the newest plan seen in an event
        self._current = TrackedKey(self.keys.current)
        self._plan_event: tuple[int, KeyValue] | None = None
        self._plan_unread = True  # the current round's plan may exist unseen: read it once
        self._latest_round = 0  # the newest round a ``latest`` event named

    # -- public, thread-safe -------------------------------------------------------------------------------

    def stable(self) -> bool:
        """True when the member applied the plan of the current round, holds exactly its planned partitions and
        does not want a new round (no departed participant, no resource change pending)."""
        with self._belief.lock:
            return (
                self.phase is Phase.SETTLED
                and self._in_plan
                and self._need_since is None
                and self._plan_round == self._round
                and not self._claims.wanted
                and set(self._belief.owned) == set(self._assignment)
                and self._clock.now() < self._belief.deadline
            )

    @property
    def round(self) -> int:
        return self._round

    @property
    def plan_round(self) -> int:
        return self._plan_round

    @property
    def assignment(self) -> list[PartitionId]:
        return sorted_pids(self._assignment)

    def subscribe(self, subscriptions: Sequence[str] | None) -> None:
        """Consume ``subscriptions`` (None: every resource) from now on. Thread-safe: the stepping thread revokes at
        once what this member holds of resources it no longer subscribes to (``on_revoked``, release), then wants
        a new round, as for any membership change (the plan moves as few partitions as it can)."""
        self._subs.subscribe(self.config, subscriptions)

    @property
    def subscriptions(self) -> frozenset[str] | None:
        """The resources this member consumes now (None: every one)."""
        return self._subs.current

    def subscribes(self, pid: PartitionId) -> bool:
        """True when this member consumes the resource of partition ``pid`` (always in a one-resource group)."""
        return self._subs.allows(pid)

    @property
    def replicas(self) -> tuple[list[PartitionId], list[PartitionId]]:
        """(standby, learners): the replicas the current plan gives this member."""
        return list(self._replicas.standby), list(self._replicas.learners)

    # -- stepping ------------------------------------------------------------------------------------------

    def _advance(self, now: float) -> float:
        self._recorder.prune(self.store, now)  # at most once a minute: the history's retention
        if self._subs.waiting and self._apply_subscriptions():
            return self._clock.now() if self.busy_until is None else self.busy_until
        cur = self._current.get(self.store)
        if cur is None:
            self._open(now, 0)
            return now
        if cur.mod_revision != self._round:
            value = decode(cur.value, cur.key)
            self._round = cur.mod_revision
            self._opened_at = float(value.get("opened_at", now))
            opener = value.get("opener")
            self._opener = opener if isinstance(opener, str) else None
            # the opener saw its round at the open (its own clock): busy since, it closes as soon as it has joined
            self._first_seen = min(now, self._opened_at) if self._opener == self.id else now
            if self.phase is Phase.SETTLED:
                self.phase = Phase.WAITING
        rnd = self._round
        deadlines: list[float] = [self._lapse_at()]
        if self._plan_round != rnd:
            plan_kv = self._plan_kv(rnd)
            if plan_kv is not None:
                self._apply_plan(now, rnd, read_plan(plan_kv, self.store))
                return self._clock.now() if self.busy_until is None else self.busy_until
            if self._joined_round != rnd:
                if self._should_join(now):
                    if not self._catch_up(now, rnd):
                        self._join(now, rnd)
                    return self._clock.now()
            elif now >= (close_at := self._close_at()):
                if self._close(now, rnd):
                    return self._clock.now()
                deadlines.append(now + self.claim_retry_s)
            else:
                deadlines.append(close_at)
        if (
            self._plan_round == rnd
            and self._in_plan
            and len(self._belief.owned) + len(self._claims.wanted) < len(self._assignment)
        ):
            self._reclaim()
        if self._claims.wanted:
            self._claim(now)
            self._replicas.refresh(self._claims.wanted)
            if self.busy_until is not None:
                return self.busy_until
            if self._claims.wanted:
                deadlines.append(now + self.claim_retry_s)
        open_at = self._open_at(rnd)
        if open_at is not None:
            if now >= open_at:
                self._open(now, rnd)
                return self._clock.now()
            deadlines.append(open_at)
        if self._claims.to_release:
            deadlines.append(now + self.claim_retry_s)
        if self._leave_by is not None:
            deadlines.append(self._leave_by)  # a planned leave's bound: step then, so that it ends
        return min(deadlines)

    def _catch_up(self, now: float, rnd: int) -> bool:
        """Apply the plan of the round I joined last if I missed it (busy while it was written, and a newer round
        opened meanwhile); True when there was one. Joining the newer round without it would report holdings and a
        generation a plan behind: high_availability then re-plans on stale claims (issue #18), and the partitions
        that plan moved away from me would wait for the next plan to be released."""
        joined = self._joined_round
        if not self._plan_round < joined < rnd:
            return False
        kv = self.store.get(self.keys.plan(joined))
        if kv is None:  # that round was superseded before it closed
            return False
        self._apply_plan(now, joined, read_plan(kv, self.store))
        return True

    def _plan_kv(self, rnd: int) -> KeyValue | None:
        """The plan of round ``rnd``: from its watch event, else read once when it may exist unseen (at start, after
        a lapse, a failed join or close, or a ``latest`` event — the simulator routes ``latest``, not plans)."""
        seen = self._plan_event
        if seen is not None and seen[0] == rnd:
            self._plan_unread = False  # what a ``latest`` event announced: this plan (one txn writes both)
            return seen[1]
        if not self._plan_unread:
            return None
        self._plan_unread = False
        return self.store.get(self.keys.plan(rnd))

    def _on_event(self, event: Event) -> None:
        key = event.kv.key
        keys = self.keys
        if key.startswith(keys.members):  # the most frequent: every member sees every registration
            mid = key[len(keys.members) :]
            alive = event.type is EventType.PUT
            if alive:
                self._dead.discard(mid)
            else:
                self._dead.add(mid)
            leaving = alive and says_leaving(event.kv)
            announced = leaving and mid not in self._leaving  # not its later "revoking" updates
            if leaving:
                self._leaving.add(mid)
            else:
                self._leaving.discard(mid)
            if (announced or not alive) and mid != self.id and mid in self._participant_set and not self._newer_plan():
                self._need(event.revision)  # (a newer plan is checked against _dead and _leaving when applied)
        elif key == keys.current:
            self._current.on_event(event)
        elif key == keys.closing:
            self._closer.on_record(event.kv if event.type is EventType.PUT else None)
        elif key == keys.latest:
            self._plan_unread = True
            if event.type is EventType.PUT:
                self._latest_round = max(self._latest_round, _round_of(event.kv))
        elif key.startswith(keys.rounds) and key.endswith("/plan") and event.type is EventType.PUT:
            head = key[len(keys.rounds) : -len("/plan")]
            if head.isdigit():
                self._plan_event = (int(head), event.kv)
        elif key == self._subs.key:
            self._subs.on_record(self.config, event.kv if event.type is EventType.PUT else None)
        elif key == keys.resource and event.type is EventType.PUT and event.kv.mod_revision > self._config_revision:
            self._config_revision = event.kv.mod_revision
            self.config = GroupConfig.from_record(event.kv)
            self._need(event.revision)

    def _newer_plan(self) -> bool:
        """A plan newer than the applied one has been seen (its event, or ``latest`` naming its round): a departure
        is judged against that plan's participants when it is applied (a leaver's end heard with the plan made
        without it asks for no further round)."""
        seen = self._plan_event
        return max(self._latest_round, 0 if seen is None else seen[0]) > self._plan_round

    def _need(self, revision: int) -> None:
        self._need_since = revision if self._need_since is None else min(self._need_since, revision)

    def _should_join(self, now: float) -> bool:
        if self._leave_by is not None:  # leaving: the next plan is made without this member
            return False
        if self._round > self._start_revision or self._in_plan:
            return True
        return now - self._opened_at < self.config.settle_s

    def _close_at(self) -> float:
        """When this member, joined to the open round, tries to close it (``_round_close``)."""
        rnd, dead, leaving = self._round, self._dead, self._leaving
        return self._closer.close_at(rnd, first_seen=self._first_seen, opener=self._opener, dead=dead, leaving=leaving)

    def _close(self, now: float, rnd: int) -> bool:
        """Try to write the cut and plan of ``rnd`` (``_round_close``); True when the round has a plan now."""
        lease = self._belief.lease
        if lease is None:
            return False
        closed, moved = self._closer.close(now, rnd, lease, first_seen=self._first_seen, applied=self._applied_plan)
        if closed:
            self._plan_unread = True  # mine, another's, or a race lost: read it
        if moved:
            self._current.forget()  # the race may have been a new round
        return closed

    def _open_at(self, rnd: int) -> float | None:
        """When this member wants a new round opened (None: it does not)."""
        if self._need_since is not None and rnd > self._need_since:
            self._need_since = None  # the open round's cut already reflects the change
        base = self._first_seen if rnd > self._start_revision else min(self._first_seen, self._opened_at)
        if self._leave_by is not None and not (self._plan_round == rnd and self._in_plan):
            return None  # leaving: only a plan that still names this member calls for another round
        if self._plan_round == rnd:
            if not self._in_plan or self._need_since is not None:
                return base + self.config.min_interval_s
            probe = self._probe_after_s
            if probe is not None:  # learners warm up: a probing round moves the actives whose learners are ready
                return self._first_seen + max(self.config.min_interval_s, min(probe, self.config.heartbeat_s))
            return self._first_seen + self.config.heartbeat_s
        if self._joined_round != rnd:  # a round I did not join (too old to join as a newcomer)
            return base + self.config.min_interval_s
        return None

    # -- membership ----------------------------------------------------------------------------------------

    def _registration(self) -> dict[str, Any]:
        info: dict[str, Any] = {"capacity": self.capacity, "rack": self.rack, **self._subs.record()}
        return {**info, "leaving": True} if self._leave_by is not None else info

    def begin_leave(self, now: float) -> None:
        """A planned leave: say ``leaving`` in ``members/<id>`` (every member then wants a round, and this one
        joins no more rounds), keep the partitions until a plan without this member moves them, then revoke and
        release them as that plan says, so that the new owners claim each one at its release. Bounded: at
        ``now + MRI + RST + ttl`` (the longest a round can take to open and close) ``leave_ready`` gives up waiting."""
        lease = self._belief.lease
        if self._leave_by is not None or lease is None or self.stopped:
            return
        self._leave_by = now + self.config.min_interval_s + self.config.settle_s + self.config.ttl_s
        try:
            info = encode(self._member_info(revoking=False))
            with self._within_belief():
                revision = self.store.put(self.keys.member(self.id), info, lease.id)
        except (StoreUnavailable, LeaseNotFound):
            self._leave_by = now  # unannounced, nobody plans without this member: leave at once
            return
        self._need(revision)
        self._trace(TraceKind.LEAVING, until=self._leave_by)

    def leave_ready(self, now: float) -> bool:
        """True when a planned leave may end: this member holds nothing and waits for no plan that could give it
        something, every other participant of its plan is leaving or gone too, or the time bound passed."""
        leave_by = self._leave_by
        if leave_by is None or now >= leave_by or self._belief.lease is None or self.stopped:
            return True
        with self._belief.lock:
            holds = bool(self._belief.owned)
        if not holds and not self._claims.wanted and self.phase is not Phase.JOINED and self.busy_until is None:
            return True
        others = set(self._participants) - {self.id}
        return others <= self._leaving | self._dead

    def _apply_subscriptions(self) -> bool:
        """Take up a subscription change (``subscribe``): revoke what no longer fits, announce the new subscriptions
        in ``members/<id>`` and want a new round. True when something was revoked (the step ends there)."""
        changed = self._subs.take()
        if changed is None:
            return False
        self._trace(TraceKind.SUBSCRIBED, subscriptions=Subscriptions.shown(changed[0]))
        self._announce(revoking=False)
        self._need(self._round)
        self._assignment = frozenset(p for p in self._assignment if self.subscribes(p))
        self._claims.wanted = {p for p in self._claims.wanted if self.subscribes(p)}
        with self._belief.lock:
            revoke = sorted_pids(p for p in self._belief.owned if not self.subscribes(p))
        if revoke:
            self._revoke(revoke)
        return bool(revoke)

    def _started(self, now: float, revision: int) -> None:
        self._current.forget()
        self._plan_unread = True
        self._start_revision = revision
        kv = self.store.get(self._subs.key)
        if kv is not None:
            self._subs.on_record(self.config, kv)
        self._dead.discard(self.id)
        self.phase = Phase.WAITING

    def _config_changed(self, revision: int) -> None:
        self._need(revision)

    def _resync_keys(self) -> list[str]:
        return [self.keys.latest, self._subs.key, self.keys.closing]

    def _resync(self) -> dict[str, KeyValue | None]:
        """After a watch lost events: the copies are read again when next needed, the plan of the current round
        too; ``latest``, the operator's subscriptions and every registration are applied as their events, and a
        participant of the applied plan with no registration any more as the delete that was lost."""
        self._current.forget()
        self._plan_unread = True
        found = super()._resync()
        if found[self._subs.key] is None:
            self._subs.on_record(self.config, None)
        if found[self.keys.closing] is None:
            self._closer.on_record(None)
        result = self.store.txn([], [Get(self.keys.members, prefix=True)])
        registered = result.responses[0] if isinstance(result.responses[0], list) else []
        for kv in registered:
            self._on_event(Event(EventType.PUT, kv))
        present = {kv.key for kv in registered}
        for mid in sorted((self._participant_set | self._leaving) - self._dead):
            key = self.keys.member(mid)
            if key not in present:
                self._on_event(Event(EventType.DELETE, KeyValue(key, b"", 0, result.revision, 0, 0)))
        return found

    def _reset(self) -> None:
        self._current.forget()
        self._plan_unread = True
        self._assignment = frozenset()
        self._in_plan = False
        self._joined_round = 0
        self.phase = Phase.STARTING

    def _stop(self) -> None:
        super()._stop()
        self.phase = Phase.STOPPED

    # -- rounds --------------------------------------------------------------------------------------------

    def _open(self, now: float, known: int) -> None:
        compare = absent(self.keys.current) if known == 0 else mod_revision_is(self.keys.current, known)
        ops: list[Op] = [Put(self.keys.current, encode({"opened_at": now, "opener": self.id, "prev": known}))]
        ops += self._recorder.put(HistoryType.ROUND_OPENED, now, prev=known)
        result = self.store.txn([compare], ops)
        self._current.forget()  # mine now, or it moved on: read it once instead of waiting for the event
        if result.succeeded:
            self._trace(TraceKind.ROUND_OPENED, round=result.revision)

    def _join(self, now: float, rnd: int) -> None:
        lease = self._belief.lease
        if lease is None:
            return
        owned = sorted_pids(self._assignment) if self._in_plan else []
        record: dict[str, Any] = {
            "owned": owned,
            "generation": self._plan_round if owned else 0,
            "capacity": self.capacity,
            "rack": self.rack,
        }
        record.update(self._subs.record())
        record.update(self._replicas.report(self._assignment))
        ops: list[Op] = [
            Put(self.keys.participation(rnd, self.id), encode(record), lease.id),
            Put(self.keys.joined(rnd), b"1"),
        ]
        ops += self._recorder.put(HistoryType.ROUND_JOINED, now, round=rnd)
        result = self.store.txn([absent(self.keys.plan(rnd))], ops)
        if result.succeeded:
            self._joined_round = rnd
            self.phase = Phase.JOINED
            self._trace(TraceKind.ROUND_JOINED, round=rnd)
        else:
            self._plan_unread = True  # the plan exists

    def _apply_plan(self, now: float, rnd: int, plan: PlanRecord) -> None:
        self._applied_plan = (rnd, plan)
        participants = plan.participants
        parse = functools.partial(self.config.parse_pid, field_name="plan", known=False)
        mine = frozenset(p for p in map(parse, plan.assignment.get(self.id, ())) if self.subscribes(p))
        self._plan_round = rnd
        self._participants = participants
        self._participant_set = frozenset(participants)
        in_plan = self.id in participants and self._joined_round == rnd
        self._in_plan = in_plan
        self._assignment = mine if in_plan else frozenset()
        self.phase = Phase.SETTLED if in_plan else Phase.WAITING
        probe = plan.probe_after_s
        self._probe_after_s = None if probe is None else float(probe)
        if not self._dead.isdisjoint(participants) or not self._leaving.isdisjoint(set(participants) - {self.id}):
            self._need(rnd)
        with self._belief.lock:
            revoke = sorted_pids(p for p in self._belief.owned if p not in self._assignment)
            self._claims.wanted = {p for p in self._assignment if p not in self._belief.owned}
        standby, learners = (table.get(self.id, ()) if in_plan else () for table in (plan.standby, plan.learners))
        self._replicas.planned(map(parse, standby), map(parse, learners))
        self._replicas.refresh(self._claims.wanted)
        assigned = sorted_pids(self._assignment)
        self._trace(TraceKind.PLAN, round=rnd, in_plan=in_plan, assigned=assigned, revoke=revoke, kept=plan.kept)
        if revoke:
            self._revoke(revoke)

    def _reclaim(self) -> None:
        """Claim again the partitions of my plan that I neither own nor claim: a fenced commit ended the belief in one
        (on_lost, then released) while the plan still gives it to me, and no other member will claim it before the
        next round. The claim is fenced as any other (a record someone else holds makes it wait)."""
        with self._belief.lock:
            lost = {p for p in self._assignment if p not in self._belief.owned}
        self._claims.wanted |= lost


def _round_of(kv: KeyValue) -> int:
    """The round a ``latest`` record names (0 for a corrupt one: it names nothing)."""
    try:
        value = decode(kv.value, kv.key).get("round")
    except CorruptRecord:
        return 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


__all__ = [
    "INF",
    "PartitionLease",
    "Ownership",
    "Phase",
    "RoundsMember",
    "default_planner",
]
