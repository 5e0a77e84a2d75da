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
    JOINED(R) --local seen(R) + RST passed, plan absent--> close R (first closer wins) --> SETTLED(R)
    JOINED(R) --plan of R read--> SETTLED(R)         (every member reads the same plan)
    SETTLED(R) --current changes to R2--> join R2 --> JOINED(R2)
    SETTLED(R) --a plan participant's members/<id> deleted (lease expiry), resource changed (ext. 2),
                 or seen(R) + HBI passed--> open a new round at max(now, seen(R) + MRI)
    any --local lease deadline passed, or lease gone--> on_lost(all), lease revoked --> STARTING
    any --leave()--> on_revoked(all), release, lease revoked --> STOPPED

Opening is ``txn([current.mod_revision == R], [put current])``: of many members racing, one wins and the others join
its round. Joining is ``txn([absent(round/R/plan)], [put round/R/<id> (lease-bound), put round/R/joined])``.
Closing reads ``round/R/``, computes the plan with the group's strategy from the cut, and writes it in ONE txn
``[absent(plan), round/R/joined.mod_revision unchanged, current == R] -> [put plan, put latest, delete older
rounds]``: the cut is exactly the participation records written before the close revision (a later join fails on
``absent(plan)``; a join between the read and the write changes ``joined`` and the close retries). Participation
records are lease-bound, so members that died before the close are not in the cut. Extension 1: when the cut has the
same participants as the previous plan and the resource definition is unchanged, the previous assignment is kept.

Ownership (epochs are fencing tokens)
-------------------------------------
Per partition, from this member's point of view (``Ownership``)::

    (planned to me) CLAIMING --txn [absent(owner/p), epoch/p unchanged] -> [owner/p (my lease), epoch/p = e+1]-->
        OWNED --on_assigned--> (believed)
    OWNED --next plan moves p--> REVOKING --on_revoked returns--> release txn [owner/p is mine] -> delete
    OWNED --commit fails (owner/p not mine+epoch): Fenced--> on_lost(p)
    OWNED --local lease deadline passes / lease gone--> on_lost(p)

Partitions kept across rounds are not revoked (cooperative, KIP-429). The belief "I own p" lasts from on_assigned
until on_revoked returns or on_lost is called, and never beyond the local lease deadline: last successful keepalive
*request* time + ttl x ``safety`` (0.8), which is earlier than the store can expire the lease. ``commit`` compares
the owner record's value (member and epoch), so a frozen zombie can never commit after losing a partition.
A revocation that overruns ``revoke_timeout_s`` stops lease renewal: the lease lapses and others take over.
"""

from __future__ import annotations

import contextlib
import enum
import math
import os
import socket
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from apportion.clock import Clock
from apportion.errors import Fenced, InvalidRequest, LeaseNotFound, StoreUnavailable
from apportion.group._config import GroupConfig
from apportion.group._history import Recorder
from apportion.group._keys import Keys, decode, encode, owner_value, validate_member_id
from apportion.model import AssignRequest, Member, Partition, Plan, Resource
from apportion.store import Delete, Event, EventType, Get, KeyValue, Op, Put, Store, Watch, absent
from apportion.store import Lease as StoreLease
from apportion.store._types import mod_revision_is, value_is

INF = math.inf
CHUNK = 30  # partitions per claim/release txn (etcd allows 128 ops per txn by default)

Callback = Callable[[list[int]], None]
Planner = Callable[[AssignRequest], Plan]
Tracer = Callable[[str, Mapping[str, Any]], None]
DelayHook = Callable[[str, list[int]], float]


class Phase(enum.Enum):
    STARTING = "starting"
    WAITING = "waiting"
    JOINED = "joined"
    SETTLED = "settled"
    STOPPED = "stopped"


class Ownership(enum.Enum):
    CLAIMING = "claiming"
    OWNED = "owned"
    REVOKING = "revoking"


@dataclass(frozen=True, slots=True)
class Lease:
    """A partition this worker believes it owns, with the epoch that fences its commits."""

    partition: int
    epoch: int
    member: str


def default_planner(request: AssignRequest) -> Plan:
    from apportion.assign import plan

    return plan(request)


_PLAN_CACHE: weakref.WeakKeyDictionary[Store, dict[tuple[str, int], dict[str, Any]]] = weakref.WeakKeyDictionary()
_PLAN_CACHE_LOCK = threading.Lock()


def read_plan(kv: KeyValue, store: Store) -> dict[str, Any]:
    """Decode a plan value once per process and store (a plan is immutable per key and mod_revision), so many
    simulated members reading one large plan decode it once."""
    owner = getattr(store, "shared_store", store)  # a per-member proxy (simulator) shares its store's cache
    with _PLAN_CACHE_LOCK:
        per_store = _PLAN_CACHE.setdefault(owner, {})
        cached = per_store.get((kv.key, kv.mod_revision))
    if cached is None:
        cached = decode(kv.value)
        with _PLAN_CACHE_LOCK:
            if len(per_store) > 8:
                per_store.clear()
            per_store[(kv.key, kv.mod_revision)] = cached
    return cached


def _chunks(items: Sequence[int], size: int = CHUNK) -> Iterable[Sequence[int]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class RoundsMember:
    """One member of one group. Not thread-safe except for ``keepalive``, ``commit``, ``owned``, ``lease``,
    ``checkpoint`` and ``stable`` (guarded by an internal lock); everything else runs on one stepping thread."""

    def __init__(
        self,
        store: Store,
        group: str,
        member_id: str,
        config: GroupConfig,
        *,
        clock: Clock,
        on_assigned: Callback | None = None,
        on_revoked: Callback | None = None,
        on_lost: Callback | None = None,
        capacity: float = 1.0,
        rack: str | None = None,
        update: bool = False,
        planner: Planner = default_planner,
        watch: Watch | None = None,
        safety: float = 0.8,
        claim_retry_s: float = 0.05,
        revoke_timeout_s: float = 10.0,
        history_size: int = 1000,
        tracer: Tracer | None = None,
        delay: DelayHook | None = None,
    ) -> None:
        validate_member_id(member_id)
        if isinstance(capacity, bool) or not isinstance(capacity, int | float) or not capacity > 0:
            raise InvalidRequest("capacity", f"must be a positive number, got {capacity!r}")
        if not 0 < safety < 2:
            raise InvalidRequest("safety", "must be in (0, 1) (values >= 1 are unsafe: for testing the checker)")
        if not revoke_timeout_s > 0:
            raise InvalidRequest("revoke_timeout_s", "must be > 0")
        self.store = store
        self.keys = Keys(group)
        self.group = group
        self.id = member_id
        self.config = config
        self._wanted = config
        self._update = update
        self._clock = clock
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._on_lost = on_lost
        self.capacity = float(capacity)
        self.rack = rack
        self._planner = planner
        self._watch = watch
        self._own_watch = watch is None
        self._inbox: list[Event] = []
        self.safety = safety
        self.claim_retry_s = claim_retry_s
        self.revoke_timeout_s = revoke_timeout_s
        self._tracer = tracer
        self._delay = delay
        self._recorder = Recorder(self.keys, member_id, history_size)
        self._lock = threading.Lock()
        # lease state (shared with the keepalive thread)
        self._lease: StoreLease | None = None
        self._deadline = -INF
        self._lease_lost = False
        self._revoke_started: float | None = None
        # ownership state
        self._owned: dict[int, int] = {}  # believed: partition -> epoch
        self._claiming: set[int] = set()
        self._epochs: dict[int, tuple[int, int]] = {}  # partition -> (last epoch, epoch key mod_revision)
        self._to_release: dict[int, int] = {}
        self._fenced: list[int] = []  # partitions fenced by commit, awaiting on_lost on the stepping thread
        # round state
        self.phase = Phase.STARTING
        self._start_revision = 0
        self._config_revision = 0
        self._round = 0
        self._opened_at = 0.0
        self._first_seen = 0.0
        self._joined_round = 0
        self._plan_round = 0
        self._participants: tuple[str, ...] = ()
        self._assignment: frozenset[int] = frozenset()
        self._in_plan = False
        self._need_since: int | None = None
        self._alive: dict[str, bool] = {}
        self._busy_until: float | None = None
        self._continuation: Callable[[], None] | None = None
        self.error: BaseException | None = None

    # -- public, thread-safe -------------------------------------------------------------------------------

    def owned(self) -> list[int]:
        """Partitions currently believed owned (empty once the local lease deadline has passed)."""
        now = self._clock.now()
        with self._lock:
            if now >= self._deadline:
                return []
            return sorted(self._owned)

    def lease(self, partition: int) -> Lease:
        now = self._clock.now()
        with self._lock:
            epoch = self._owned.get(partition)
            if epoch is None or now >= self._deadline:
                raise Fenced(f"partition {partition} is not owned by {self.id}")
            return Lease(partition, epoch, self.id)

    def stable(self) -> bool:
        """True when the member applied the plan of the current round, holds exactly its planned partitions and
        does not want a new round (no departed participant, no resource change pending)."""
        with self._lock:
            return (
                self.phase is Phase.SETTLED
                and self._in_plan
                and self._need_since is None
                and self._plan_round == self._round
                and not self._claiming
                and set(self._owned) == set(self._assignment)
                and self._clock.now() < self._deadline
            )

    @property
    def round(self) -> int:
        return self._round

    @property
    def plan_round(self) -> int:
        return self._plan_round

    @property
    def assignment(self) -> list[int]:
        return sorted(self._assignment)

    @property
    def local_deadline(self) -> float:
        with self._lock:
            return self._deadline

    @property
    def store_lease(self) -> StoreLease | None:
        return self._lease

    def may_renew(self, now: float) -> bool:
        """False while a revocation overruns ``revoke_timeout_s`` (bounded revocation: let the lease lapse)."""
        started = self._revoke_started
        return started is None or now - started <= self.revoke_timeout_s

    def keepalive(self, now: float) -> None:
        """Renew the member lease; ``now`` is the local time of the request. Called by the keepalive thread / sim."""
        lease = self._lease
        if lease is None or self.phase is Phase.STOPPED or not self.may_renew(now):
            return
        try:
            self.store.keepalive(lease)
        except LeaseNotFound:
            with self._lock:
                if self._lease is lease:
                    self._lease_lost = True
            return
        except StoreUnavailable:
            return
        with self._lock:
            if self._lease is lease and now < self._deadline:
                self._deadline = now + lease.ttl_s * self.safety
                deadline = self._deadline
            else:
                return
        self._trace("renew", deadline=deadline)

    def commit(self, partition: int, checkpoint: str, *, epoch: int | None = None) -> None:
        """Record ``checkpoint`` for ``partition`` if this member still owns it with ``epoch``; else raise Fenced."""
        if not isinstance(checkpoint, str):
            raise InvalidRequest("checkpoint", "must be a string")
        now = self._clock.now()
        with self._lock:
            current = self._owned.get(partition)
            lapsed = now >= self._deadline
        use = current if epoch is None else epoch
        if use is None:
            raise Fenced(f"partition {partition} is not owned by {self.id}")
        if not lapsed and self.commit_txn(partition, checkpoint, use, now):
            return
        with self._lock:
            if self._owned.get(partition) == use:
                del self._owned[partition]
                self._fenced.append(partition)
        self._trace("fenced", partition=partition, epoch=use)
        with contextlib.suppress(StoreUnavailable):
            self._put_event("fenced", now, partitions=[partition], epochs=[use])
        raise Fenced(f"partition {partition}: epoch {use} of {self.id} is no longer the owner's")

    def commit_txn(self, partition: int, checkpoint: str, epoch: int, now: float) -> bool:
        """The fence itself, without the local-deadline check: ``txn([owner/p == (me, epoch)], [put commit/p])``.
        True when the store accepted the commit."""
        record = encode({"checkpoint": checkpoint, "epoch": epoch, "member": self.id})
        ops: list[Op] = [Put(self.keys.commit(partition), record)]
        ops += self._recorder.put("commit", now, partitions=[partition], epochs=[epoch], checkpoint=checkpoint)
        result = self.store.txn([value_is(self.keys.owner(partition), owner_value(self.id, epoch))], ops)
        if result.succeeded:
            self._trace("commit", partition=partition, epoch=epoch)
        return result.succeeded

    @property
    def claiming(self) -> int:
        """How many planned partitions still wait for their previous owner's release."""
        return len(self._claiming)

    def checkpoint(self, partition: int) -> str | None:
        kv = self.store.get(self.keys.commit(partition))
        return None if kv is None else str(decode(kv.value)["checkpoint"])

    # -- stepping ------------------------------------------------------------------------------------------

    def wait_events(self, timeout_s: float) -> None:
        """Block (real time) until the watch has events or ``timeout_s`` passes; keep them for the next step."""
        if self._watch is None:
            return
        self._inbox.extend(self._watch.wait(max(0.0, timeout_s)))

    def step(self, now: float | None = None) -> float:
        """Advance the protocol; return the local time by which it wants to be stepped again."""
        if self.phase is Phase.STOPPED:
            return INF
        now = self._clock.now() if now is None else now
        try:
            if self._busy_until is not None:
                if now < self._busy_until:
                    return self._busy_until
                continuation, self._continuation, self._busy_until = self._continuation, None, None
                if continuation is not None:
                    continuation()
                now = self._clock.now()
            return self._step(now)
        except LeaseNotFound:
            with self._lock:
                self._lease_lost = True
            return now
        except StoreUnavailable:
            self._trace("store_unavailable")
            return min(now + max(self.claim_retry_s, 0.05) * 2, self._lapse_at())

    def _lapse_at(self) -> float:
        with self._lock:
            return self._deadline if (self._owned or self._lease is not None) else INF

    def _step(self, now: float) -> float:
        self._drain_events()
        with self._lock:
            lapsed = self._lease is not None and (self._lease_lost or now >= self._deadline)
        if lapsed:
            self._lapse(now, "lease lost" if self._lease_lost else "lease deadline passed")
        if self._lease is None:
            self._start(now)
            now = self._clock.now()
        if self._fenced:
            with self._lock:
                fenced, self._fenced = sorted(self._fenced), []
            self._trace("lost", partitions=fenced, reason="fenced")
            self._call(self._on_lost, fenced)
        if self._to_release:
            self._release(now, dict(self._to_release))
        if self._busy_until is not None:
            return self._busy_until

        cur = self.store.get(self.keys.current)
        if cur is None:
            self._open(now, 0)
            return now
        if cur.mod_revision != self._round:
            value = decode(cur.value)
            self._round = cur.mod_revision
            self._opened_at = float(value.get("opened_at", now))
            self._first_seen = now
            if self.phase is Phase.SETTLED:
                self.phase = Phase.WAITING
        rnd = self._round
        deadlines: list[float] = [self._lapse_at()]
        if self._plan_round != rnd:
            plan_kv = self.store.get(self.keys.plan(rnd))
            if plan_kv is not None:
                self._apply_plan(now, rnd, read_plan(plan_kv, self.store))
                return self._clock.now() if self._busy_until is None else self._busy_until
            if self._joined_round != rnd:
                if self._should_join(now):
                    self._join(now, rnd)
                    return self._clock.now()
            elif now >= self._first_seen + self.config.settle_s:
                if self._close(now, rnd):
                    return self._clock.now()
                deadlines.append(now + self.claim_retry_s)
            else:
                deadlines.append(self._first_seen + self.config.settle_s)
        if self._claiming:
            self._claim(now)
            if self._busy_until is not None:
                return self._busy_until
            if self._claiming:
                deadlines.append(now + self.claim_retry_s)
        open_at = self._open_at(rnd)
        if open_at is not None:
            if now >= open_at:
                self._open(now, rnd)
                return self._clock.now()
            deadlines.append(open_at)
        if self._to_release:
            deadlines.append(now + self.claim_retry_s)
        return min(deadlines)

    def _drain_events(self) -> None:
        events = self._inbox
        self._inbox = []
        if self._watch is not None:
            events.extend(self._watch.poll())
        members = self.keys.members
        for event in events:
            key = event.kv.key
            if key == self.keys.resource:
                if event.type is EventType.PUT and event.kv.mod_revision > self._config_revision:
                    self._config_revision = event.kv.mod_revision
                    self.config = GroupConfig.from_json(decode(event.kv.value))
                    self._need(event.revision)
            elif key.startswith(members):
                mid = key[len(members) :]
                alive = event.type is EventType.PUT
                self._alive[mid] = alive
                if not alive and mid != self.id and mid in self._participants:
                    self._need(event.revision)

    def _need(self, revision: int) -> None:
        self._need_since = revision if self._need_since is None else min(self._need_since, revision)

    def _should_join(self, now: float) -> bool:
        if self._round > self._start_revision or self._in_plan:
            return True
        return now - self._opened_at < self.config.settle_s

    def _open_at(self, rnd: int) -> float | None:
        """When this member wants a new round opened (None: it does not)."""
        if self._need_since is not None and rnd > self._need_since:
            self._need_since = None  # the open round's cut already reflects the change
        base = self._first_seen if rnd > self._start_revision else min(self._first_seen, self._opened_at)
        if self._plan_round == rnd:
            if not self._in_plan or self._need_since is not None:
                return base + self.config.min_interval_s
            return self._first_seen + self.config.heartbeat_s
        if self._joined_round != rnd:  # a round I did not join (too old to join as a newcomer)
            return base + self.config.min_interval_s
        return None

    # -- membership ----------------------------------------------------------------------------------------

    def _start(self, now: float) -> None:
        if self._watch is None:
            self._watch = self.store.watch(self.keys.prefix)
        self._load_config(now)
        lease = self.store.grant(self.config.ttl_s)
        with self._lock:
            self._lease = lease
            self._lease_lost = False
            self._deadline = now + lease.ttl_s * self.safety
        self._trace("renew", deadline=self._deadline)
        info = {"capacity": self.capacity, "rack": self.rack, "pid": os.getpid(), "host": socket.gethostname()}
        ops: list[Op] = [Put(self.keys.member(self.id), encode(info), lease.id)]
        ops += self._recorder.put("registered", now)
        result = self.store.txn([], ops)
        self._start_revision = result.revision
        self._alive[self.id] = True
        self.phase = Phase.WAITING
        self._trace("registered", lease=lease.id)

    def _load_config(self, now: float) -> None:
        wanted = encode(self._wanted.to_json())
        kv = self.store.get(self.keys.resource)
        if kv is None:
            result = self.store.txn([absent(self.keys.resource)], [Put(self.keys.resource, wanted)])
            if result.succeeded:
                self.config, self._config_revision = self._wanted, result.revision
                return
            kv = self.store.get(self.keys.resource)
            if kv is None:
                raise StoreUnavailable("resource definition vanished while being created")
        if self._update and kv.value != wanted:
            result = self.store.txn(
                [mod_revision_is(self.keys.resource, kv.mod_revision)], [Put(self.keys.resource, wanted)]
            )
            self._update = False
            if result.succeeded:
                self.config, self._config_revision = self._wanted, result.revision
                self._need(result.revision)
                return
            kv = self.store.get(self.keys.resource) or kv
        self._update = False
        self.config = GroupConfig.from_json(decode(kv.value))
        self._config_revision = kv.mod_revision

    def _lapse(self, now: float, reason: str) -> None:
        """The belief ended (local deadline or lease gone): on_lost for everything, drop the lease, start over."""
        with self._lock:
            lost = sorted(self._owned)
            self._owned.clear()
            lease, self._lease = self._lease, None
            self._deadline = -INF
        self._claiming.clear()
        self._to_release.clear()
        self._assignment = frozenset()
        self._in_plan = False
        self._joined_round = 0
        self._revoke_started = None
        self.phase = Phase.STARTING
        self._trace("lost", partitions=lost, reason=reason)
        with contextlib.suppress(StoreUnavailable):
            if lease is not None:
                self.store.revoke(lease)  # frees owner records now instead of at expiry
            if lost:
                self._put_event("lost", now, partitions=lost, reason=reason)
        if lost:
            self._call(self._on_lost, lost)

    def leave(self) -> None:
        """Graceful leave: on_revoked for everything, commit is the callback's job, release, drop membership."""
        if self.phase is Phase.STOPPED:
            return
        now = self._clock.now()
        with self._lock:
            owned = sorted(self._owned)
        self._claiming.clear()
        try:
            if owned and self._lease is not None and now < self._deadline:
                self._revoke_started = now
                self._trace("revoking", partitions=owned)
                try:
                    self._call(self._on_revoked, owned)
                finally:
                    self._revoke_started = None
                    self._finish_revoke(owned)
            elif owned:
                self._lapse(now, "lease deadline passed")
            lease = self._lease
            if lease is not None:
                with contextlib.suppress(StoreUnavailable):
                    self._put_event("left", self._clock.now())
                    self.store.revoke(lease)
        finally:
            self._stop()

    def abandon(self) -> None:
        """Stop without callbacks (after a callback error): beliefs end, the lease is revoked (best effort)."""
        lease = self._lease
        self._stop()
        if lease is not None:
            with contextlib.suppress(Exception):
                self.store.revoke(lease)

    def _stop(self) -> None:
        with self._lock:
            self._owned.clear()
            self._lease = None
            self._deadline = -INF
        self.phase = Phase.STOPPED
        if self._watch is not None and self._own_watch:
            self._watch.close()
        self._trace("stopped")

    # -- rounds --------------------------------------------------------------------------------------------

    def _open(self, now: float, known: int) -> None:
        compare = absent(self.keys.current) if known == 0 else mod_revision_is(self.keys.current, known)
        ops: list[Op] = [Put(self.keys.current, encode({"opened_at": now, "opener": self.id, "prev": known}))]
        ops += self._recorder.put("round_opened", now, prev=known)
        result = self.store.txn([compare], ops)
        if result.succeeded:
            self._trace("round_opened", round=result.revision)

    def _join(self, now: float, rnd: int) -> None:
        lease = self._lease
        if lease is None:
            return
        owned = sorted(self._assignment) if self._in_plan else []
        record = {
            "owned": owned,
            "generation": self._plan_round if owned else 0,
            "capacity": self.capacity,
            "rack": self.rack,
        }
        ops: list[Op] = [
            Put(self.keys.participation(rnd, self.id), encode(record), lease.id),
            Put(self.keys.joined(rnd), b"1"),
        ]
        ops += self._recorder.put("round_joined", now, round=rnd)
        result = self.store.txn([absent(self.keys.plan(rnd))], ops)
        if result.succeeded:
            self._joined_round = rnd
            self.phase = Phase.JOINED
            self._trace("round_joined", round=rnd)

    def _close(self, now: float, rnd: int) -> bool:
        """Try to write the cut and plan of ``rnd``; True when the round has a plan now (mine or another's)."""
        participants: dict[str, dict[str, Any]] = {}
        joined_rev = 0
        older: set[int] = set()
        for kv in self.store.range(self.keys.rounds):
            rest = kv.key[len(self.keys.rounds) :]
            head, _, name = rest.partition("/")
            if not head.isdigit():
                continue
            other = int(head)
            if other == rnd:
                if name == "joined":
                    joined_rev = kv.mod_revision
                elif name == "plan":
                    return True
                else:
                    participants[name] = decode(kv.value)
            elif other < rnd:
                older.add(other)
        if not participants:
            return False
        ids = sorted(participants)
        config_kv = self.store.get(self.keys.resource)
        if config_kv is not None and config_kv.mod_revision != self._config_revision:
            self.config = GroupConfig.from_json(decode(config_kv.value))
            self._config_revision = config_kv.mod_revision
        config = self.config
        previous = self._previous_plan()
        kept = (
            previous is not None
            and previous.get("participants") == ids
            and previous.get("resource_revision") == self._config_revision
        )
        if kept and previous is not None:
            assignment = {mid: list(previous["assignment"].get(mid, [])) for mid in ids}
            moves = min_moves = 0
            strategy = str(previous.get("strategy", config.strategy))
        else:
            members = tuple(
                Member(
                    mid,
                    owned=tuple(Partition(self.group, p) for p in participants[mid].get("owned", [])),
                    generation=int(participants[mid].get("generation", 0)),
                    capacity=float(participants[mid].get("capacity", 1.0)),
                    rack=participants[mid].get("rack"),
                )
                for mid in ids
            )
            request = AssignRequest(
                config.strategy, (Resource(self.group, config.partitions),), members, config.options
            )
            plan = self._planner(request)
            assignment = {mid: sorted(p.index for p in plan.assignment.get(mid, ())) for mid in ids}
            moves, min_moves, strategy = plan.stats.moved, plan.stats.min_moves, plan.strategy
        value = {
            "round": rnd,
            "participants": ids,
            "assignment": assignment,
            "strategy": strategy,
            "kept": kept,
            "moves": moves,
            "min_moves": min_moves,
            "closer": self.id,
            "closed_at": now,
            "resource_revision": self._config_revision,
            "partitions": config.partitions,
        }
        ops: list[Op] = [Put(self.keys.plan(rnd), encode(value)), Put(self.keys.latest, encode({"round": rnd}))]
        ops += [Delete(self.keys.round(old), prefix=True) for old in sorted(older)]
        ops += self._recorder.put("round_closed", now, round=rnd, participants=ids, moves=moves, kept=kept)
        compares = [
            absent(self.keys.plan(rnd)),
            mod_revision_is(self.keys.joined(rnd), joined_rev),
            mod_revision_is(self.keys.current, rnd),
        ]
        result = self.store.txn(compares, ops)
        if result.succeeded:
            self._trace("round_closed", round=rnd, participants=len(ids), moves=moves, min_moves=min_moves, kept=kept)
        return True  # closed by me, or the txn lost a race: re-read at once

    def _previous_plan(self) -> dict[str, Any] | None:
        latest = self.store.get(self.keys.latest)
        if latest is None:
            return None
        kv = self.store.get(self.keys.plan(int(decode(latest.value)["round"])))
        return None if kv is None else read_plan(kv, self.store)

    def _apply_plan(self, now: float, rnd: int, plan: Mapping[str, Any]) -> None:
        participants = tuple(plan["participants"])
        mine = frozenset(int(p) for p in plan["assignment"].get(self.id, ()))
        self._plan_round = rnd
        self._participants = participants
        in_plan = self.id in participants and self._joined_round == rnd
        self._in_plan = in_plan
        self._assignment = mine if in_plan else frozenset()
        self.phase = Phase.SETTLED if in_plan else Phase.WAITING
        for mid in participants:
            if self._alive.get(mid) is False:
                self._need(rnd)
        with self._lock:
            revoke = sorted(p for p in self._owned if p not in self._assignment)
            self._claiming = {p for p in self._assignment if p not in self._owned}
        self._trace(
            "plan", round=rnd, in_plan=in_plan, assigned=sorted(self._assignment), revoke=revoke, kept=plan.get("kept")
        )
        if revoke:
            self._revoke(revoke)

    # -- ownership -----------------------------------------------------------------------------------------

    def _revoke(self, parts: list[int]) -> None:
        self._revoke_started = self._clock.now()
        self._trace("revoking", partitions=parts)
        delay = self._delay("revoked", parts) if self._delay is not None else 0.0
        if delay > 0:  # the simulator's slow callback: the member is busy until the callback "returns"
            self._busy_until = self._revoke_started + delay
            self._continuation = lambda: self._finish_revoke(parts, call=True)
            return
        try:
            self._call(self._on_revoked, parts)
        finally:
            self._revoke_started = None
        self._finish_revoke(parts)

    def _finish_revoke(self, parts: list[int], *, call: bool = False) -> None:
        if call:
            try:
                self._call(self._on_revoked, parts)
            finally:
                self._revoke_started = None
        with self._lock:
            releasing = {p: self._owned.pop(p) for p in parts if p in self._owned}
        self._trace("revoked", partitions=parts)
        self._release(self._clock.now(), releasing)

    def _release(self, now: float, parts: Mapping[int, int]) -> None:
        lease = self._lease
        if lease is None:
            self._to_release.clear()
            return
        self._to_release.update(parts)
        for chunk in _chunks(sorted(parts)):
            compares = [value_is(self.keys.owner(p), owner_value(self.id, parts[p])) for p in chunk]
            ops: list[Op] = [Delete(self.keys.owner(p)) for p in chunk]
            ops += self._recorder.put("release", now, partitions=list(chunk), epochs=[parts[p] for p in chunk])
            if not self.store.txn(compares, ops).succeeded:
                for p in chunk:  # some record is not ours any more: release the others one by one
                    self.store.txn([compares[chunk.index(p)]], [Delete(self.keys.owner(p))])
            for p in chunk:
                self._to_release.pop(p, None)
        self._trace("released", partitions=sorted(parts))

    def _claim(self, now: float) -> None:
        lease = self._lease
        with self._lock:
            if lease is None or now >= self._deadline:
                return
        claimed: dict[int, int] = {}
        try:
            for chunk in _chunks(sorted(self._claiming)):
                claimed.update(self._claim_chunk(now, lease, list(chunk), retry=True))
        except LeaseNotFound:
            with self._lock:
                self._lease_lost = True
        if not claimed:
            return
        parts = sorted(claimed)
        self._claiming.difference_update(parts)
        now = self._clock.now()
        with self._lock:
            if now >= self._deadline or self._lease is not lease:
                return  # the claims die with the lease; the lapse path runs at the next step
            self._owned.update(claimed)
        self._trace("assigned", partitions=parts, epochs=[claimed[p] for p in parts])
        self._call(self._on_assigned, parts)

    def _claim_chunk(self, now: float, lease: StoreLease, chunk: list[int], *, retry: bool) -> dict[int, int]:
        compares = []
        success: list[Op] = []
        failure: list[Op] = []
        for p in chunk:
            epoch, rev = self._epochs.get(p, (0, 0))
            compares += [absent(self.keys.owner(p)), mod_revision_is(self.keys.epoch(p), rev)]
            success += [
                Put(self.keys.owner(p), owner_value(self.id, epoch + 1), lease.id),
                Put(self.keys.epoch(p), str(epoch + 1).encode()),
            ]
            failure += [Get(self.keys.owner(p)), Get(self.keys.epoch(p))]
        epochs = [self._epochs.get(p, (0, 0))[0] + 1 for p in chunk]
        success += self._recorder.put("claim", now, partitions=chunk, epochs=epochs)
        result = self.store.txn(compares, success, failure)
        if result.succeeded:
            for p, epoch in zip(chunk, epochs, strict=True):
                self._epochs[p] = (epoch, result.revision)
            self._trace("claim", partitions=chunk, epochs=epochs)
            return dict(zip(chunk, epochs, strict=True))
        free: list[int] = []
        for i, p in enumerate(chunk):
            owner_kvs, epoch_kvs = result.responses[2 * i], result.responses[2 * i + 1]
            assert isinstance(owner_kvs, list) and isinstance(epoch_kvs, list)
            if epoch_kvs:
                self._epochs[p] = (int(epoch_kvs[0].value), epoch_kvs[0].mod_revision)
            else:
                self._epochs[p] = (0, 0)
            if not owner_kvs:
                free.append(p)
        if free and retry:
            return self._claim_chunk(now, lease, free, retry=False)
        return {}

    # -- helpers -------------------------------------------------------------------------------------------

    def _call(self, callback: Callback | None, parts: list[int]) -> None:
        if callback is not None and parts:
            callback(list(parts))

    def _put_event(self, kind: str, now: float, **fields: Any) -> None:
        ops = self._recorder.put(kind, now, **fields)
        if ops:
            self.store.txn([], ops)

    def _trace(self, kind: str, **fields: Any) -> None:
        if self._tracer is not None:
            self._tracer(kind, fields)


__all__ = ["INF", "Lease", "Ownership", "Phase", "RoundsMember", "default_planner", "read_plan"]
