"""Deterministic simulation of a group: many members on one memory store in virtual time, with faults.

``SimConfig.mode`` picks the protocol: ``rounds`` (``RoundsMember``), ``coordinator`` (``CoordinatorMember``,
``max_in_flight`` migrations at once) or ``static`` (``StaticMember``: ordinals 0..members-1; a ``join`` scales the
replica count up by one, a ``leave`` either scales down by one — the highest ordinal leaves and the operator
publishes the new count — or restarts the pod, and a ``crash`` is followed at once by a replacement pod with the same
ordinal, as a StatefulSet does: so duplicate ordinals coexist until the old lease expires).

Everything random comes from one ``random.Random(seed)``; members are stepped from one event queue ordered by
(virtual time, seeded tie-break, sequence); no wall clock and no threads. The same seed gives the same trace, so a
failing seed replays exactly (``apportion simulate --seed N``).

Events: ``step`` (a member's protocol step, scheduled at the deadline it returned or when a watched key changed),
``keepalive`` (every ttl/4 per member: the keepalive thread), ``work`` (a member commits a checkpoint for up to two
owned partitions), and churn/faults drawn from the seed::

    join          a new member starts
    leave         graceful leave (on_revoked, release, lease revoked)
    crash         the member stops for good (its lease expires in the store)
    freeze D      no steps and no keepalives for D seconds (a zombie), then it first tries to commit every partition
                  it held with its old epochs (store-level fence check), then resumes
    slow D        the member's next on_revoked takes D seconds (bounded by revoke_timeout_s)
    unavailable D every store call of that member raises StoreUnavailable for D seconds
    hang D        every store call of that member gets no answer for D seconds: a call blocks the calling thread
                  (stepping, keepalive or work) until the hang ends or the caller's ``time_limit`` passes, then
                  raises StoreUnavailable (the request lost); only that thread waits, the rest of the group goes on,
                  and the thread's later records carry the time its call returned
    drift         the member's clock rate changes to 1 +- 5% (continuous: no jumps)

Checks on every trace (``SimResult.violations``):
1. exclusivity at the callback level: per partition, the belief intervals of all members never overlap. A belief
   runs from on_assigned to on_revoked's return, on_lost, a fenced commit, a crash, or the member's local lease
   deadline (renewals move it; a renewal after it passed does not revive the belief), whichever comes first;
2. fencing: every commit the store accepted carries the latest epoch claimed for that partition, by its claimer,
   and no member has a commit it sent after reporting that belief lost (on_lost) accepted for that (partition,
   epoch) (a zombie's commits sent before its freeze may land later: the store's fence is what bounds those);
3. liveness: once churn and faults stop at ``T``, by ``T + RST + MRI + ttl + 1 s`` every partition is believed
   owned by exactly one live member and (count-balanced strategies) owned counts differ by at most one; in static
   mode every partition is owned by a member whose ordinal's range block (under the stored replica count) holds it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from apportion.assign import range_block
from apportion.assign._high_availability import HighAvailabilityOptions
from apportion.assign._high_availability import parse_options as high_availability_options
from apportion.clock import VirtualClock
from apportion.errors import Fenced, StoreUnavailable
from apportion.group import CoordinatorMember, FencedMember, GroupConfig, RoundsMember, StaticMember, set_replicas
from apportion.group._ownership import DelayHook, Tracer
from apportion.store import Compare, Event, EventType, Lease, MemoryStore, Op, Store, TxnResult, Watch

BALANCED_STRATEGIES = ("round_robin", "range", "sticky", "high_availability")
FAULTS = ("crash", "freeze", "slow", "unavailable", "drift", "hang")
DEFAULT_CALL_TIMEOUT_S = 5.0  # a hanging call without a time limit waits this long (etcd's default)
MODES = ("rounds", "coordinator", "static")
_THREADS = {"step": "step", "resume": "step", "keepalive": "keepalive", "work": "work"}
_BROADCAST = frozenset(("current", "latest", "resource", "coordinator", "replicas", "rebalance"))


@dataclass(frozen=True, slots=True)
class SimConfig:
    """A scenario: group size, churn, faults, timings. ``events`` churn/fault events, ~``event_gap_s`` apart."""

    members: int = 5
    partitions: int = 20
    events: int = 20
    seed: int = 1
    strategy: str = "sticky"
    settle_s: float = GroupConfig.DEFAULT_SETTLE_S
    min_interval_s: float = GroupConfig.DEFAULT_MIN_INTERVAL_S
    heartbeat_s: float = GroupConfig.DEFAULT_HEARTBEAT_S
    ttl_s: float = GroupConfig.DEFAULT_TTL_S
    event_gap_s: float = 1.0
    faults: bool = True
    revoke_timeout_s: float = 1.0
    commit_every_s: float = 0.5
    max_members: int | None = None
    safety: float = 0.8  # the member's local-deadline factor (tests raise it to prove the checker catches overlap)
    mode: str = "rounds"
    max_in_flight: int = 4
    # stateful groups (seed 2): strategy options, and the replica model (a replica restores ``restore_rate``
    # changelog records per virtual second from the moment a plan gives it, of ``state_records`` per partition)
    stateful: bool = False
    options: Mapping[str, object] = field(default_factory=dict)
    state_records: int = 10_000
    restore_rate: float = 5_000.0
    # fixed churn instead of random events: (seconds after start, kind) or (seconds after start, kind, duration)
    script: tuple[tuple[float, str] | tuple[float, str, float], ...] = ()

    def group_config(self) -> GroupConfig:
        return GroupConfig(
            partitions=self.partitions,
            strategy=self.strategy,
            settle_s=self.settle_s,
            min_interval_s=self.min_interval_s,
            heartbeat_s=self.heartbeat_s,
            ttl_s=self.ttl_s,
            options=self.options,
            stateful=self.stateful,
        )

    def convergence_s(self) -> float:
        """Extra virtual time a stateful group may need after the last event: its probing rounds (seed 2)."""
        if not self.stateful:
            return 0.0
        known = HighAvailabilityOptions.__dataclass_fields__
        ha = high_availability_options({k: v for k, v in self.options.items() if k in known})
        probing = ha.probing_rebalance_interval_s + self.settle_s
        return (math.ceil(self.partitions / ha.max_warmup_replicas) + 1) * probing + self.state_records / max(
            self.restore_rate, 1e-9
        )


class _ReplicaModel:
    """A member's standby/learner replicas in virtual time: each restores at ``rate`` records/s from the moment a
    plan gives it; its lag is what is left of ``records``."""

    def __init__(self, clock: VirtualClock, records: int, rate: float) -> None:
        self._clock, self._records, self._rate = clock, records, rate
        self._since: dict[int, float] = {}

    def on_replicas(self, standby: list[int], learners: list[int]) -> None:
        now = self._clock.now()
        self._since = {p: self._since.get(p, now) for p in sorted({*standby, *learners})}

    def lags(self) -> dict[int, int]:
        now = self._clock.now()
        return {p: max(0, self._records - int(self._rate * (now - t))) for p, t in self._since.items()}


@dataclass
class SimResult:
    config: SimConfig
    trace: list[tuple[float, str, str, str]]
    violations: list[str]
    rounds: int
    moves: int
    min_moves: int
    unowned_s: float
    end_s: float
    settle_by_s: float
    steps: int
    faults: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.config.seed,
            "members": self.config.members,
            "partitions": self.config.partitions,
            "events": self.config.events,
            "strategy": self.config.strategy,
            "rounds": self.rounds,
            "moves": self.moves,
            "moves_lower_bound": self.min_moves,
            "unowned_partition_s": round(self.unowned_s, 3),
            "virtual_s": round(self.end_s, 3),
            "steps": self.steps,
            "faults": dict(sorted(self.faults.items())),
            "violations": self.violations,
            "ok": self.ok,
        }


class _DriftClock:
    """A member's clock: local = anchor_local + (T - anchor_T) * rate, continuous when the rate changes.

    It also knows which of the member's threads is running (``thread``: step, keepalive or work) and until when
    each is blocked in a hanging store call (``blocked``): a blocked thread's time is the end of its call."""

    def __init__(self, base: VirtualClock) -> None:
        self.base = base
        self.rate = 1.0
        self._anchor_t = base.now()
        self._anchor_local = base.now()
        self.thread = "step"
        self.blocked: dict[str, float] = {}

    def global_now(self) -> float:
        """The global virtual time of the running thread (later than the simulation's while it is blocked)."""
        return max(self.base.now(), self.blocked.get(self.thread, -math.inf))

    def blocked_until(self, thread: str) -> float:
        return self.blocked.get(thread, -math.inf)

    def now(self) -> float:
        return self.local(self.global_now())

    def local(self, t: float) -> float:
        return self._anchor_local + (t - self._anchor_t) * self.rate

    def to_global(self, local: float) -> float:
        if local == math.inf or local == -math.inf:
            return local
        return self._anchor_t + (local - self._anchor_local) / self.rate

    def set_rate(self, rate: float) -> None:
        t = self.base.now()
        self._anchor_local = self.local(t)
        self._anchor_t = t
        self.rate = rate

    def sleep(self, seconds: float) -> None:  # pragma: no cover - the simulator never sleeps
        raise RuntimeError("simulated members never sleep")


class _FlakyStore(Store):
    """A member's view of the shared store that can be made unavailable (fails at once) or hang (no answer) for a
    while. ``clock`` is the member's own clock, so ``time_limit`` works in the member's time."""

    def __init__(self, inner: MemoryStore, clock: _DriftClock) -> None:
        self.inner = inner
        self.url = inner.url
        self.clock = clock
        self.member_clock = clock
        self.down_until = -math.inf
        self.hang_until = -math.inf

    @property
    def shared_store(self) -> MemoryStore:
        """Lets members share decoded plans across proxies of one store (see ``read_plan``)."""
        return self.inner

    def _check(self) -> None:
        clock = self.member_clock
        start = clock.global_now()
        if start > clock.base.now():
            # this thread already waited for an earlier call of the same step and is "ahead" of the simulation:
            # its next request cannot be applied at an earlier global time, so it is lost (a legal, pessimistic fate)
            raise StoreUnavailable("simulated: no answer from the store (request lost)")
        if start < self.hang_until:
            # no answer: the call returns (StoreUnavailable) when the hang ends or the caller's time limit passes,
            # whichever comes first; the request is lost either way (a model of a dropped connection)
            limit_s = self.remaining_s(DEFAULT_CALL_TIMEOUT_S) / clock.rate
            clock.blocked[clock.thread] = min(self.hang_until, start + max(0.0, limit_s))
            raise StoreUnavailable("simulated: no answer from the store")
        if start < self.down_until:
            raise StoreUnavailable("simulated: store unreachable from this member")

    def revision(self) -> int:
        self._check()
        return self.inner.revision()

    def txn(self, compares: Sequence[Compare], on_success: Sequence[Op], on_failure: Sequence[Op] = ()) -> TxnResult:
        self._check()
        return self.inner.txn(compares, on_success, on_failure)

    def grant(self, ttl_s: float) -> Lease:
        self._check()
        return self.inner.grant(ttl_s)

    def keepalive(self, lease: Lease | int) -> float:
        self._check()
        return self.inner.keepalive(lease)

    def revoke(self, lease: Lease | int) -> None:
        self._check()
        self.inner.revoke(lease)

    def time_to_live(self, lease: Lease | int) -> float:
        self._check()
        return self.inner.time_to_live(lease)

    def watch(self, key: str, start_revision: int | None = None, *, prefix: bool = True) -> Watch:
        self._check()
        return self.inner.watch(key, start_revision, prefix=prefix)

    def compact(self, revision: int) -> None:
        self.inner.compact(revision)

    def get(self, key: str):  # type: ignore[no-untyped-def]
        self._check()
        return self.inner.get(key)

    def range(self, prefix: str, limit: int | None = None):  # type: ignore[no-untyped-def]
        self._check()
        return self.inner.range(prefix, limit)


class _Inbox(Watch):
    """The events the dispatcher routed to one member."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def poll(self) -> list[Event]:
        events, self.events = self.events, []
        return events

    def wait(self, timeout_s: float) -> list[Event]:
        return self.poll()

    def close(self) -> None:
        self.events = []


@dataclass
class _Sim:
    id: str
    member: FencedMember
    clock: _DriftClock
    store: _FlakyStore
    inbox: _Inbox
    next_step: float = math.inf
    crashed: bool = False
    left: bool = False
    frozen_until: float = -math.inf
    slow_next: float = 0.0
    frozen_owned: dict[int, int] = field(default_factory=dict)
    in_flight: bool = False  # the member's commits now are ones it sent before a freeze (a zombie's)

    @property
    def live(self) -> bool:
        return not self.crashed and not self.left


class Simulation:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.clock = VirtualClock(1000.0)
        self.store = MemoryStore(f"memory://sim-{uuid.uuid4().hex}", clock=self.clock, history=1_000_000)
        self.group = "sim"
        self.gconfig = config.group_config()
        self.members: dict[str, _Sim] = {}
        self._queue: list[tuple[float, float, int, str, str, float]] = []
        self._seq = itertools.count()
        self._ids = itertools.count()
        self.trace: list[tuple[float, str, str, str]] = []
        self.records: list[tuple[float, str, str, Mapping[str, Any]]] = []
        self.steps = 0
        self.faults: dict[str, int] = {}
        self._dispatch = self.store.watch(f"/apportion/{self.group}/")
        self._prefix = f"/apportion/{self.group}/"
        self.replicas = config.members  # static mode: the replica count the operator set
        self._ordinals: dict[str, int] = {}

    # -- queue ---------------------------------------------------------------------------------------------

    def _push(self, t: float, kind: str, member: str = "", arg: float = 0.0) -> None:
        heapq.heappush(self._queue, (t, self.rng.random(), next(self._seq), kind, member, arg))

    def _schedule_step(self, sim: _Sim, t: float) -> None:
        if t < sim.next_step:
            sim.next_step = t
            self._push(t, "step", sim.id)

    # -- members -------------------------------------------------------------------------------------------

    def _make_member(
        self,
        mid: str,
        store: Store,
        clock: _DriftClock,
        inbox: _Inbox,
        tracer: Tracer,
        delay: DelayHook,
        ordinal: int | None,
    ) -> FencedMember:
        common: dict[str, Any] = {
            "clock": clock,
            "watch": inbox,
            "revoke_timeout_s": self.config.revoke_timeout_s,
            "safety": self.config.safety,
            "history_retention_s": 0.0,
            "tracer": tracer,
            "delay": delay,
        }
        if self.config.mode == "static":
            ordinal = len(self._ordinals) if ordinal is None else ordinal
            self._ordinals[mid] = ordinal
            replicas = max(self.replicas, ordinal + 1)
            return StaticMember(store, self.group, mid, self.gconfig, ordinal=ordinal, replicas=replicas, **common)
        if self.config.mode == "coordinator":
            return CoordinatorMember(
                store, self.group, mid, self.gconfig, max_in_flight=self.config.max_in_flight, **common
            )
        model = _ReplicaModel(self.clock, self.config.state_records, self.config.restore_rate)
        return RoundsMember(
            store, self.group, mid, self.gconfig, replica_lags=model.lags, on_replicas=model.on_replicas, **common
        )

    def _add_member(self, ordinal: int | None = None) -> _Sim:
        mid = f"m{next(self._ids)}"
        clock = _DriftClock(self.clock)
        store = _FlakyStore(self.store, clock)
        inbox = _Inbox()
        sim_holder: list[_Sim] = []

        def tracer(kind: str, fields: Mapping[str, Any]) -> None:
            if kind == "commit" and sim_holder and sim_holder[0].in_flight:
                fields = {**fields, "in_flight": True}
            self._record(mid, kind, fields, clock)

        def delay(kind: str, parts: list[int]) -> float:
            s = sim_holder[0]
            d, s.slow_next = s.slow_next, 0.0
            return d * clock.rate  # local seconds

        member = self._make_member(mid, store, clock, inbox, tracer, delay, ordinal)
        sim = _Sim(mid, member, clock, store, inbox)
        sim_holder.append(sim)
        self.members[mid] = sim
        now = self.clock.now()
        self._schedule_step(sim, now)
        self._push(now + self.gconfig.ttl_s / 4, "keepalive", mid)
        self._push(now + self.config.commit_every_s * (0.5 + self.rng.random()), "work", mid)
        self._record(mid, "spawn", {}, clock)
        return sim

    def _record(self, mid: str, kind: str, fields: Mapping[str, Any], clock: _DriftClock) -> None:
        t = clock.global_now()
        if kind == "renew":
            fields = {"deadline": clock.to_global(float(fields["deadline"]))}
        self.records.append((t, mid, kind, dict(fields)))
        if kind in ("assigned", "revoked", "lost", "fenced", "round_closed", "spawn", "crash", "freeze", "leave"):
            detail = ",".join(f"{k}={fields[k]}" for k in sorted(fields) if k != "prefix")
            self.trace.append((round(t, 6), mid, kind, detail))

    def _live(self) -> list[_Sim]:
        return [s for s in self.members.values() if s.live]

    # -- running -------------------------------------------------------------------------------------------

    def run(self) -> SimResult:
        cfg = self.config
        for _ in range(cfg.members):
            self._add_member()
        start = self.clock.now()
        t = start + 2.0 * (cfg.settle_s + cfg.min_interval_s)
        last_effect = t
        for entry in cfg.script:
            at, kind, length = entry[0], entry[1], float(entry[2]) if len(entry) > 2 else 0.0
            self._push(t + at, "churn:" + kind, "", length)
            last_effect = max(last_effect, t + at + length)
        for _ in range(0 if cfg.script else cfg.events):
            t += self.rng.expovariate(1.0 / cfg.event_gap_s)
            kinds = ["join", "leave"] + (list(FAULTS) if cfg.faults else ["crash"])
            kind = self.rng.choice(kinds)
            duration = 0.0
            if kind == "freeze":
                duration = self.rng.uniform(0.2, 2.0 * cfg.ttl_s)
            elif kind == "slow":
                duration = self.rng.uniform(0.1, 2.0 * cfg.revoke_timeout_s)
            elif kind in ("unavailable", "hang"):
                duration = self.rng.uniform(0.1, cfg.ttl_s)
            self._push(t, "churn:" + kind, "", duration)
            last_effect = max(last_effect, t + duration)
        settle_by = last_effect + cfg.settle_s + cfg.min_interval_s + cfg.ttl_s + 1.0 + cfg.convergence_s()
        self._push(settle_by, "check", "")
        self._loop(settle_by)
        violations = self._check_liveness()
        beliefs = _beliefs(self.records, self.clock.now())
        violations += check_trace(self.records, self.clock.now(), beliefs)
        return self._result(violations, settle_by - start, beliefs)

    def _loop(self, end: float) -> None:
        while self._queue:
            t, _, _, kind, mid, arg = heapq.heappop(self._queue)
            if t > end:
                break
            if t > self.clock.now():
                self.clock.set(t)
            if kind == "check":
                break
            if kind.startswith("churn:"):
                self._churn(kind[6:], arg)
            else:
                sim = self.members.get(mid)
                if sim is None or not sim.live:
                    continue
                if self.clock.now() < sim.frozen_until:
                    if kind == "step":
                        sim.next_step = math.inf
                        self._schedule_step(sim, sim.frozen_until)
                    else:
                        self._push(sim.frozen_until, kind, mid)
                    continue
                thread = _THREADS.get(kind, "step")
                busy_until = sim.clock.blocked_until(thread)
                if self.clock.now() < busy_until:  # that thread still waits for a hanging store call
                    if kind == "step":
                        if t != sim.next_step:
                            continue
                        sim.next_step = math.inf
                        self._schedule_step(sim, busy_until)
                    else:
                        self._push(busy_until, kind, mid, arg)
                    continue
                sim.clock.thread = thread
                if kind == "step":
                    if t != sim.next_step:
                        continue
                    self._step(sim)
                elif kind == "keepalive":
                    sim.member.keepalive(sim.clock.now())
                    self._push(t + self.gconfig.ttl_s / 4, "keepalive", mid)
                elif kind == "work":
                    self._work(sim)
                    self._push(t + self.config.commit_every_s, "work", mid)
                elif kind == "resume":
                    self._resume(sim)
            self._route()

    def _step(self, sim: _Sim) -> None:
        sim.next_step = math.inf
        self.steps += 1
        local_deadline = sim.member.step(sim.clock.now())
        deadline = sim.clock.to_global(local_deadline) + 1e-9  # never a hair early after the rate conversion
        now = max(self.clock.now(), sim.clock.blocked_until("step"))
        if deadline <= now:
            deadline = now  # immediate re-step, after other events of this instant
        if deadline != math.inf:
            self._schedule_step(sim, deadline)

    def _work(self, sim: _Sim) -> None:
        owned = sim.member.owned()
        if not owned:
            return
        for p in self.rng.sample(owned, min(2, len(owned))):
            with contextlib.suppress(Fenced, StoreUnavailable):
                sim.member.commit(p, f"{sim.id}@{self.clock.now():.3f}")

    def _resume(self, sim: _Sim) -> None:
        """A zombie wakes up mid-batch: it commits what it held with its old epochs before noticing anything."""
        now = self.clock.now()
        sim.in_flight = True  # these commits were sent before the freeze: the checker knows them as in flight
        for p, epoch in sorted(sim.frozen_owned.items()):
            with contextlib.suppress(StoreUnavailable):
                sim.member.commit_txn(p, f"zombie-{sim.id}", epoch, sim.clock.now())
        sim.in_flight = False
        sim.frozen_owned = {}
        self._schedule_step(sim, now)

    def _churn(self, kind: str, duration: float) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1
        for member in self.members.values():
            member.clock.thread = "churn"  # the fault itself happens now, whatever a member's threads wait for
        if self.config.mode == "static" and kind in ("join", "leave", "crash"):
            self._static_churn(kind)
            return
        live = self._live()
        now = self.clock.now()
        if kind == "join" or not live:
            if self.config.max_members is None or len(live) < self.config.max_members:
                self._add_member()
            return
        if kind in ("leave", "crash") and len(live) <= 1:
            self._add_member()
            return
        sim = self.rng.choice(live)
        if kind == "leave":
            if now < sim.frozen_until or sim.member._busy_until is not None or now < sim.clock.blocked_until("step"):
                return
            self._record(sim.id, "leave", {}, sim.clock)
            sim.clock.thread = "step"
            with contextlib.suppress(StoreUnavailable):
                sim.member.leave()
            sim.left = True
        elif kind == "crash":
            self._record(sim.id, "crash", {}, sim.clock)
            sim.crashed = True
        elif kind == "freeze":
            if now < sim.frozen_until:
                return
            sim.frozen_owned = {p: sim.member.lease(p).epoch for p in sim.member.owned()}
            sim.frozen_until = now + duration
            self._record(sim.id, "freeze", {"until": sim.frozen_until}, sim.clock)
            self._push(sim.frozen_until, "resume", sim.id)
        elif kind == "slow":
            sim.slow_next = duration
        elif kind == "unavailable":
            sim.store.down_until = now + duration
        elif kind == "hang":
            sim.store.hang_until = now + duration
            self._record(sim.id, "hang", {"until": sim.store.hang_until}, sim.clock)
        elif kind == "drift":
            sim.clock.set_rate(1.0 + self.rng.uniform(-0.05, 0.05))

    def _static_churn(self, kind: str) -> None:
        """StatefulSet churn: scale up/down by one (the operator publishes the count), restart or crash a pod (a
        replacement with the same ordinal starts at once)."""
        now = self.clock.now()
        live = [
            s
            for s in self._live()
            if now >= s.frozen_until and s.member._busy_until is None and now >= s.clock.blocked_until("step")
        ]
        for sim in live:
            sim.clock.thread = "step"  # a leave runs on the stepping thread
        limit = self.config.max_members
        if kind == "join":
            if limit is None or len(self._live()) < limit:
                self.replicas += 1
                self._add_member(self.replicas - 1)
            return
        if not live:
            return
        if kind == "leave" and self.replicas > 1 and self.rng.random() < 0.5:
            top = self.replicas - 1
            for sim in live:
                if self._ordinals[sim.id] == top:
                    self._record(sim.id, "leave", {}, sim.clock)
                    with contextlib.suppress(StoreUnavailable):
                        sim.member.leave()
                    sim.left = True
            self.replicas = top
            set_replicas(self.store, self.group, top)
            return
        sim = self.rng.choice(live)
        self._record(sim.id, kind, {}, sim.clock)
        if kind == "leave":
            with contextlib.suppress(StoreUnavailable):
                sim.member.leave()
            sim.left = True
        else:
            sim.crashed = True
        if self._ordinals[sim.id] < self.replicas:
            self._add_member(self._ordinals[sim.id])

    def _route(self) -> None:
        events = self._dispatch.poll()
        if not events:
            return
        n = len(self._prefix)
        broadcast: list[Event] = []
        owner_freed = False
        for event in events:
            rest = event.kv.key[n:]
            if rest in _BROADCAST or rest.startswith(("members/", "table/")):
                broadcast.append(event)
            elif rest.startswith("owner/") and event.type is EventType.DELETE:
                owner_freed = True
        if broadcast or owner_freed:
            # One pass over the members (in their fixed order, so the pushes and their seeded tie-breaks are the same
            # as delivering event by event): every live member gets the broadcast events, in order, and a step.
            now = self.clock.now()
            for sim in self.members.values():
                if sim.live:
                    if broadcast:
                        sim.inbox.events.extend(broadcast)
                        self._schedule_step(sim, now)
                    elif sim.member.claiming:
                        self._schedule_step(sim, now)

    # -- checks --------------------------------------------------------------------------------------------

    def _check_liveness(self) -> list[str]:
        now = self.clock.now()
        live = [s for s in self._live() if now >= s.frozen_until]
        believed: dict[int, list[str]] = {}
        for sim in live:
            for p in sim.member.owned():
                believed.setdefault(p, []).append(sim.id)
        problems: list[str] = []
        unowned = [p for p in range(self.config.partitions) if p not in believed]
        if unowned:
            problems.append(f"liveness: at t={now:.3f} partitions {unowned[:10]} are not owned ({len(unowned)} total)")
        doubled = {p: ids for p, ids in believed.items() if len(ids) > 1}
        if doubled:
            problems.append(f"exclusivity: at t={now:.3f} {dict(list(doubled.items())[:5])}")
        if self.config.mode == "static":
            for p, ids in sorted(believed.items()):
                wrong = [
                    m for m in ids if p not in range_block(self._ordinals[m], self.replicas, self.config.partitions)
                ]
                if wrong:
                    problems.append(f"static: partition {p} owned by {wrong}, outside their range blocks")
                    break
        elif live and self.config.strategy in BALANCED_STRATEGIES and not unowned:
            counts = [len(s.member.owned()) for s in live]
            if max(counts) - min(counts) > 1:
                problems.append(f"balance: owned counts {sorted(counts)} differ by more than one")
        return problems

    def _result(
        self, violations: list[str], settle_by: float, beliefs: Mapping[int, list[tuple[float, float, str]]]
    ) -> SimResult:
        rounds = moves = min_moves = 0
        for _, _, kind, fields in self.records:
            if kind == "round_closed":
                rounds += 1
                moves += int(fields.get("moves", 0))
                min_moves += int(fields.get("min_moves", 0))
        return SimResult(
            config=self.config,
            trace=self.trace,
            violations=violations,
            rounds=rounds,
            moves=moves,
            min_moves=min_moves,
            unowned_s=unowned_seconds(beliefs, self.config.partitions, self.clock.now()),
            end_s=self.clock.now() - 1000.0,
            settle_by_s=settle_by,
            steps=self.steps,
            faults=self.faults,
        )


def _beliefs(
    records: Sequence[tuple[float, str, str, Mapping[str, Any]]], end: float
) -> dict[int, list[tuple[float, float, str]]]:
    """Per partition, the belief intervals [start, end) of every member, reconstructed from the trace alone."""
    intervals: dict[int, list[tuple[float, float, str]]] = {}
    holding: dict[str, dict[int, float]] = {}
    deadline: dict[str, float] = {}
    records = _in_time_order(records)

    def close(mid: str, parts: Sequence[int] | None, t: float) -> None:
        held = holding.get(mid, {})
        for p in list(held) if parts is None else parts:
            start = held.pop(p, None)
            if start is not None:
                intervals.setdefault(p, []).append((start, t, mid))

    for t, mid, kind, fields in records:
        d = deadline.get(mid, math.inf)
        if t >= d and holding.get(mid):
            close(mid, None, d)
        if kind == "renew":
            if t < d or not holding.get(mid):
                deadline[mid] = float(fields["deadline"])
        elif kind == "assigned":
            for p in fields["partitions"]:
                holding.setdefault(mid, {})[int(p)] = t
        elif kind in ("revoked", "lost"):
            close(mid, [int(p) for p in fields["partitions"]], t)
        elif kind == "fenced":
            close(mid, [int(fields["partition"])], t)
        elif kind in ("crash", "stopped"):
            close(mid, None, t)
    for mid in list(holding):
        close(mid, None, min(end, deadline.get(mid, math.inf)))
    return intervals


def _in_time_order(
    records: Sequence[tuple[float, str, str, Mapping[str, Any]]],
) -> Sequence[tuple[float, str, str, Mapping[str, Any]]]:
    """Records sorted by time (stable): a thread that waited for a hanging call records its next events at the
    time the call returned, which may be later than events the rest of the group recorded meanwhile."""
    if all(a[0] <= b[0] for a, b in itertools.pairwise(records)):
        return records
    return sorted(records, key=lambda record: record[0])


def check_trace(
    records: Sequence[tuple[float, str, str, Mapping[str, Any]]],
    end: float,
    beliefs: Mapping[int, list[tuple[float, float, str]]] | None = None,
) -> list[str]:
    """Exclusivity of beliefs and fencing of accepted commits, from the trace alone."""
    problems: list[str] = []
    records = _in_time_order(records)
    for p, spans in sorted((beliefs if beliefs is not None else _beliefs(records, end)).items()):
        spans.sort()
        for (s1, e1, m1), (s2, _e2, m2) in itertools.pairwise(spans):
            if s2 < e1:
                problems.append(
                    f"exclusivity: partition {p} believed by {m1} [{s1:.3f},{e1:.3f}) and {m2} from {s2:.3f}"
                )
    latest: dict[int, tuple[int, str]] = {}
    given_up: dict[tuple[str, int, int], float] = {}  # (member, partition, epoch) -> when on_lost/fenced said so
    for t, mid, kind, fields in records:
        if kind == "claim":
            for p, e in zip(fields["partitions"], fields["epochs"], strict=True):
                latest[int(p)] = (int(e), mid)
        elif kind == "lost" and "epochs" in fields:
            for p, e in zip(fields["partitions"], fields["epochs"], strict=True):
                given_up.setdefault((mid, int(p), int(e)), t)
        elif kind == "fenced":
            given_up.setdefault((mid, int(fields["partition"]), int(fields["epoch"])), t)
        elif kind == "commit":
            p, e = int(fields["partition"]), int(fields["epoch"])
            if latest.get(p) != (e, mid):
                problems.append(f"fencing: t={t:.3f} {mid} committed {p} with epoch {e}; latest claim {latest.get(p)}")
            lost_at = given_up.get((mid, p, e))
            if lost_at is not None and t >= lost_at and not fields.get("in_flight"):  # sent after on_lost
                problems.append(f"fencing: t={t:.3f} {mid} committed {p} with epoch {e} after on_lost at {lost_at:.3f}")
    return problems[:20]


def unowned_seconds(beliefs: Mapping[int, Sequence[tuple[float, float, str]]], partitions: int, end: float) -> float:
    """Partition-seconds during which nobody believed owning a partition (from its first assignment on)."""
    total = 0.0
    for p in range(partitions):
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


def simulate(config: SimConfig) -> SimResult:
    """Run one seeded scenario and check it."""
    return Simulation(config).run()


__all__ = ["FAULTS", "SimConfig", "SimResult", "Simulation", "check_trace", "simulate"]
