"""The simulator's scenario and event loop: many members of a group on one memory store in virtual time, faults.

``SimConfig.mode`` picks the protocol: ``rounds`` (``RoundsMember``), ``coordinator`` (``CoordinatorMember``,
``max_in_flight`` migrations at once) or ``static`` (``StaticMember``: ordinals 0..members-1, every pod started
with the template's ``--replicas members``, as a StatefulSet's pod template never changes on scale). Static churn:

    scale_up    (a ``join``) the next ordinal's pod starts; either it raises the count itself (its ordinal is the
                evidence) or the operator runs ``apportion scale`` first, and its block waits for it until it starts
    scale_down  (half the ``leave``s) the operator publishes count - 1 and the highest ordinal's pod leaves, in
                either order
    restart     (the other ``leave``s) a graceful stop; a replacement with the same ordinal starts at once
    crash D     the pod dies; its replacement starts D seconds later (a StatefulSet's restart), unless the count
                dropped below its ordinal meanwhile: its block waits for it, and duplicate ordinals coexist until the
                old lease expires

Every change of the count is a ``scale`` record (``operator`` or the member that raised it); ``check_static``
checks the static trace against them.

Everything random comes from one ``random.Random(seed)``; members are stepped from one event queue ordered by
(virtual time, seeded tie-break, sequence); no wall clock and no threads. The same seed gives the same trace, so a
failing seed replays exactly (``apportion simulate --seed N``).

The fleet starts at once, or (``start_gap_s``) one member every ``start_gap_s`` seconds, as a Deployment's pods
start seconds apart; churn begins once the fleet has arrived (in coordinator mode: after the first table's settle
time too), and everything before it is the ``start`` change (``_measure``).

Events: ``step`` (a member's protocol step, scheduled at the deadline it returned or when a watched key it acts on
changed: a broadcast key, a registration's deletion, or, for a member waiting to claim a partition, that partition's
owner record deleted; a registration's PUT reaches every inbox without a step in the rounds mode, where it changes
nothing a step acts on before its next one),
``keepalive`` (every ``store.renew_every_s(ttl)``, a quarter ttl, per member: the keepalive thread), ``work`` (a
member commits a checkpoint for up to two owned partitions), and churn/faults drawn from the seed::

    join          a new member starts
    leave         graceful leave (on_revoked, release, lease revoked); with ``planned_leave`` that share of them
                  is planned first (``leaving``: begin_leave, steps until leave_ready, then the leave)
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
    subscribe     (groups over named resources only) the member subscribes to another random subset of resources

A group over named resources (``SimConfig.resources``, "orders:6,payments:4"; rounds and coordinator modes) gives
each member random subscriptions (every resource, or a non-empty subset) and adds ``subscribe`` to the churn; every
run then also checks that nobody is ever assigned a partition of a resource it does not subscribe to and that the
final holdings are balanced as Kafka defines it for mixed subscriptions (``check_subscribed``). Without resources
no draw is added, so existing seeds replay exactly as before.

The clock and store doubles that carry out drift, unavailable and hang are in ``_faults``; what is checked on every
run (``SimResult.violations``) is in ``_checks``.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apportion.assign import HighAvailabilityOptions, range_block, validate_options
from apportion.assign import check as check_plan
from apportion.clock import VirtualClock
from apportion.errors import Fenced, InvalidRequest, StoreUnavailable
from apportion.group import (
    Coordinator,
    CoordinatorMember,
    FencedMember,
    GroupConfig,
    PartitionId,
    RoundsMember,
    Static,
    TraceKind,
    Tracer,
    new_member,
    parse_resources,
    request_rebalance,
    set_replicas,
    stored_replicas,
)
from apportion.group.internals import DelayHook, Keys, mode_named, pid_of_text, read_table
from apportion.model import AssignRequest, Plan, resource_of
from apportion.sim._checks import (
    Record,
    SimKind,
    belief_intervals,
    check_liveness,
    check_static,
    check_subscribed,
    check_subscribed_trace,
    check_trace,
    unowned_seconds,
)
from apportion.sim._faults import DriftClock, FlakyStore, SimClock
from apportion.sim._measure import per_change, plans
from apportion.store import Event, EventType, MemoryStore, Store, Watch

FAULTS = ("crash", "freeze", "slow", "unavailable", "drift", "hang")
STATIC_CHURN = ("scale_up", "scale_down", "restart", "return")  # a script's static-mode kinds (the docstring)
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
    mode: str = "rounds"  # the group's mode (``group_config``): rounds, coordinator or static
    max_in_flight: int = Coordinator.DEFAULT_MAX_IN_FLIGHT  # coordinator mode's
    min_members: int = Coordinator.DEFAULT_MIN_MEMBERS  # coordinator mode's
    rebalance: str = Coordinator.DEFAULT_REBALANCE  # coordinator mode's; manual: the simulated operator rebalances
    replicas: int | None = None  # static mode: the count the group starts with (None: ``members``)
    # stateful groups (seed 2): strategy options, and the replica model (a replica restores ``restore_rate``
    # changelog records per virtual second from the moment a plan gives it, of ``state_records`` per partition)
    stateful: bool = False
    options: Mapping[str, object] = field(default_factory=dict)
    state_records: int = 10_000
    restore_rate: float = 5_000.0
    # lag noise: each reported lag is what is left to restore plus a draw in [0, lag_noise] (a changelog that keeps
    # growing between restores), from a generator seeded by (seed, member): 0 draws nothing and changes no trace
    lag_noise: int = 0
    # the share of (random) graceful leaves that are planned: ``begin_leave``, steps until ``leave_ready``, then
    # ``leave`` (what a stopping ``Worker`` does); 0 draws nothing and changes no trace
    planned_leave: float = 0.0
    # fixed churn instead of random events: (seconds after start, kind) or (seconds after start, kind, duration)
    script: tuple[tuple[float, str] | tuple[float, str, float], ...] = ()
    # a group over named resources ("orders:6,payments:4"; ``partitions`` is then ignored) with random subscriptions
    resources: str = ""
    # the fleet's start: member k starts k * start_gap_s after the first (a Deployment's pods start seconds apart);
    # 0 starts them at once and changes no trace
    start_gap_s: float = 0.0
    first_settle_s: float | None = None  # coordinator mode's --first-settle (None: Coordinator's default rule)

    def group_config(self) -> GroupConfig:
        """The group's definition, its mode included (static: ``members`` is the pod template's replica count);
        InvalidRequest for an unknown mode, ``max_in_flight`` < 1 or ``stateful`` outside the rounds mode (standby
        and learner replicas exist only there)."""
        mode = mode_named(self.mode)
        if isinstance(mode, Coordinator):
            mode = Coordinator(self.min_members, self.rebalance, self.max_in_flight, self.first_settle_s)
        elif isinstance(mode, Static):
            mode = Static(replicas=self.replicas or self.members or 1)
        if self.replicas is not None and (self.mode != "static" or self.replicas < self.members):
            raise InvalidRequest(
                "replicas", "a static group's first count, at least --members (a pod above the count raises it)"
            )
        if self.stateful and self.mode != "rounds":
            raise InvalidRequest("stateful", "standby and learner replicas exist only in the rounds mode")
        if not 0.0 <= self.planned_leave <= 1.0:
            raise InvalidRequest("planned_leave", "must be a share in [0, 1]")
        if not (math.isfinite(self.start_gap_s) and self.start_gap_s >= 0):
            raise InvalidRequest("start_gap_s", f"must be a finite number of seconds >= 0, got {self.start_gap_s!r}")
        if self.resources and self.mode == "static":
            raise InvalidRequest(
                "resources", "the simulator's groups over named resources run the rounds or coordinator mode"
            )
        return GroupConfig(
            partitions=0 if self.resources else self.partitions,
            resources=parse_resources(self.resources) if self.resources else (),
            strategy=self.strategy,
            settle_s=self.settle_s,
            min_interval_s=self.min_interval_s,
            heartbeat_s=self.heartbeat_s,
            ttl_s=self.ttl_s,
            options=self.options,
            stateful=self.stateful,
            mode=mode,
        )

    def arrival_s(self) -> float:
        """Virtual seconds from the first member's start to the end of the fleet's start: the last member's start,
        plus, in coordinator mode, the first table's settle time (it is laid out that long after the last arrival)."""
        arrival = max(0, self.members - 1) * self.start_gap_s
        mode = self.group_config().mode
        if isinstance(mode, Coordinator):
            arrival += mode.first_table_settle_s(self.settle_s)
        return arrival

    def convergence_s(self) -> float:
        """Extra virtual time a stateful group may need after the last event: its probing rounds (seed 2)."""
        if not self.stateful:
            return 0.0
        options = validate_options(self.strategy, self.options)
        # another strategy has no probing rounds; the bound then is high_availability's default one, as it was
        ha = options if isinstance(options, HighAvailabilityOptions) else HighAvailabilityOptions()
        probing = ha.probing_rebalance_interval_s + self.settle_s
        return (math.ceil(self.partitions / ha.max_warmup_replicas) + 1) * probing + self.state_records / max(
            self.restore_rate, 1e-9
        )


class _ReplicaModel:
    """A member's standby/learner replicas in virtual time: each restores at ``rate`` records/s from the moment a
    plan gives it; its lag is what is left of ``records``, plus a seeded draw in [0, ``noise``] per report."""

    def __init__(self, clock: VirtualClock, records: int, rate: float, noise: int = 0, seed: str = "") -> None:
        self._clock, self._records, self._rate, self._noise = clock, records, rate, noise
        self._rng = random.Random(seed)
        self._since: dict[int, float] = {}

    def on_replicas(self, standby: list[int], learners: list[int]) -> None:
        now = self._clock.now()
        self._since = {p: self._since.get(p, now) for p in sorted({*standby, *learners})}

    def lags(self) -> dict[int, int]:
        now = self._clock.now()
        lags = {p: max(0, self._records - int(self._rate * (now - t))) for p, t in self._since.items()}
        if self._noise:
            lags = {p: lag + self._rng.randint(0, self._noise) for p, lag in lags.items()}
        return lags


@dataclass
class SimResult:
    config: SimConfig
    trace: list[tuple[float, str, str, str]]
    violations: list[str]
    rounds: int
    moves: int
    min_moves: int  # the lower bound on ``moves``: model.round_lower_bound summed over the rounds
    unowned_s: float
    end_s: float
    settle_by_s: float
    steps: int
    faults: dict[str, int] = field(default_factory=dict)
    plans: int = 0  # the protocol's decisions in every mode (``_measure``): rounds, full table plans, count changes
    changes: list[dict[str, Any]] = field(default_factory=list)  # ``_measure.per_change``: one row per change

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.config.seed,
            "mode": self.config.mode,
            "members": self.config.members,
            "partitions": self.config.group_config().partitions if self.config.resources else self.config.partitions,
            **({"resources": self.config.resources} if self.config.resources else {}),
            "events": self.config.events,
            **({"start_gap_s": self.config.start_gap_s} if self.config.start_gap_s else {}),
            "strategy": self.config.strategy,
            "rounds": self.rounds,
            "plans": self.plans,
            "moves": self.moves,
            "moves_lower_bound": self.min_moves,
            "settle_s_max": max((c["settle_s"] for c in self.changes), default=0.0),
            "changes": self.changes,
            "unowned_partition_s": round(self.unowned_s, 3),
            "virtual_s": round(self.end_s, 3),
            "steps": self.steps,
            "faults": dict(sorted(self.faults.items())),
            "violations": self.violations,
            "ok": self.ok,
        }


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
    clock: DriftClock
    store: FlakyStore
    inbox: _Inbox
    next_step: float = math.inf
    crashed: bool = False
    left: bool = False
    leaving: bool = False  # a planned leave has begun: it leaves at the first step where leave_ready says so
    frozen_until: float = -math.inf
    slow_next: float = 0.0
    frozen_owned: dict[PartitionId, int] = field(default_factory=dict)
    in_flight: bool = False  # the member's commits now are ones it sent before a freeze (a zombie's)

    @property
    def live(self) -> bool:
        return not self.crashed and not self.left


# the records a simulation's ``trace`` shows (its result's replayable summary)
_SHOWN = frozenset(
    (
        TraceKind.ASSIGNED,
        TraceKind.REVOKED,
        TraceKind.LOST,
        TraceKind.FENCED,
        TraceKind.ROUND_CLOSED,
        TraceKind.SCALE,
        TraceKind.LEAVING,
        SimKind.SPAWN,
        SimKind.CRASH,
        SimKind.FREEZE,
        SimKind.LEAVE,
    )
)


class Simulation:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.clock = SimClock(1000.0)
        self.store = MemoryStore(f"memory://sim-{uuid.uuid4().hex}", clock=self.clock, history=1_000_000)
        self.group = "sim"
        self.gconfig = config.group_config()
        self.members: dict[str, _Sim] = {}
        self._queue: list[tuple[float, float, int, str, str, float]] = []
        self._seq = itertools.count()
        self._ids = itertools.count()
        self.trace: list[tuple[float, str, str, str]] = []
        self.records: list[Record] = []
        self.steps = 0
        self.faults: dict[str, int] = {}
        keys = Keys(self.group)
        self._dispatch = self.store.watch(keys.prefix)
        self._prefix = keys.prefix
        # the owner records' deletions (beside the prefix: ``_keys``), routed to the members waiting to claim
        self._freed = self.store.watch(keys.owners, deletes_only=True)
        self._owners = keys.owners
        self.replicas = config.replicas or config.members  # static mode: the replica count the operator set
        self.changes: list[tuple[float, str]] = []  # (virtual time, kind): the start, then each churn event
        self._ordinals: dict[str, int] = {}
        self._subscriptions: dict[str, list[str] | None] = {}  # named resources: each member's, as last set
        self._live_cache: list[_Sim] | None = None

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
        clock: DriftClock,
        inbox: _Inbox,
        tracer: Tracer,
        delay: DelayHook,
        ordinal: int | None,
    ) -> FencedMember:
        cfg = self.config
        subscriptions = None
        if cfg.mode == "static":
            ordinal = len(self._ordinals) if ordinal is None else ordinal
            self._ordinals[mid] = ordinal
        elif self.gconfig.named:
            subscriptions = self._subscriptions[mid] = self._draw_subscriptions()
        model = None
        if cfg.mode == "rounds":
            model = _ReplicaModel(self.clock, cfg.state_records, cfg.restore_rate, cfg.lag_noise, f"{cfg.seed}:{mid}")
        return new_member(
            store, self.group, mid, self.gconfig, ordinal=ordinal, subscriptions=subscriptions,
            # its own checks cover a one-resource group; assign.check would double a plan's cost
            checker=check_plan if self.gconfig.named else _unchecked,
            replica_lags=None if model is None else model.lags,
            on_replicas=None if model is None else model.on_replicas,
            clock=clock, watch=inbox, revoke_timeout_s=cfg.revoke_timeout_s, safety=cfg.safety,
            history_retention_s=0.0, tracer=tracer, delay=delay,
        )  # fmt: skip

    def _draw_subscriptions(self) -> list[str] | None:
        """Every resource (a third of the draws) or a random non-empty subset of them, sorted."""
        names = self.gconfig.resource_names()
        if self.rng.random() < 1 / 3:
            return None
        return sorted(self.rng.sample(names, self.rng.randint(1, len(names))))

    def _add_member(self, ordinal: int | None = None) -> _Sim:
        mid = f"m{next(self._ids)}"
        clock = DriftClock(self.clock)
        store = FlakyStore(self.store, clock)
        inbox = _Inbox()
        sim_holder: list[_Sim] = []

        def tracer(kind: TraceKind, fields: Mapping[str, Any]) -> None:
            if kind == TraceKind.COMMIT and sim_holder and sim_holder[0].in_flight:
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
        self._live_cache = None
        now = self.clock.now()
        self._schedule_step(sim, now)
        self._push(now + self.store.renew_every_s(self.gconfig.ttl_s), "keepalive", mid)
        self._push(now + self.config.commit_every_s * (0.5 + self.rng.random()), "work", mid)
        self._record(
            mid, SimKind.SPAWN, {"subscriptions": self._subscriptions[mid]} if self.gconfig.named else {}, clock
        )
        return sim

    def _record(self, mid: str, kind: TraceKind | SimKind, fields: Mapping[str, Any], clock: DriftClock) -> None:
        t = clock.global_now()
        if kind == TraceKind.RENEW:
            fields = {"deadline": clock.to_global(float(fields["deadline"]))}
        self.records.append((t, mid, kind, dict(fields)))
        if kind in _SHOWN:
            detail = ",".join(f"{k}={fields[k]}" for k in sorted(fields) if k != "prefix")
            self.trace.append((round(t, 6), mid, kind, detail))

    def _live(self) -> list[_Sim]:
        """The live members in their fixed (creation) order; kept until one is added, crashes or leaves."""
        if self._live_cache is None:
            self._live_cache = [s for s in self.members.values() if s.live]
        return self._live_cache

    # -- running -------------------------------------------------------------------------------------------

    def run(self) -> SimResult:
        cfg = self.config
        start = self.clock.now()
        for k in range(cfg.members):
            if k and cfg.start_gap_s:
                self._push(start + k * cfg.start_gap_s, "spawn")
            else:
                self._add_member()
        self.changes.append((start, "start"))
        t = start + cfg.arrival_s() + 2.0 * (cfg.settle_s + cfg.min_interval_s)
        last_effect = t
        for entry in cfg.script:
            at, kind, length = entry[0], entry[1], float(entry[2]) if len(entry) > 2 else 0.0
            self._push(t + at, "churn:" + kind, "", length)
            last_effect = max(last_effect, t + at + length)
        for _ in range(0 if cfg.script else cfg.events):
            t += self.rng.expovariate(1.0 / cfg.event_gap_s)
            kinds = ["join", "leave"] + (list(FAULTS) if cfg.faults else ["crash"])
            if self.gconfig.named:
                kinds.append("subscribe")
            kind = self.rng.choice(kinds)
            duration = 0.0
            if kind == "freeze":
                duration = self.rng.uniform(0.2, 2.0 * cfg.ttl_s)
            elif kind == "slow":
                duration = self.rng.uniform(0.1, 2.0 * cfg.revoke_timeout_s)
            elif kind in ("unavailable", "hang"):
                duration = self.rng.uniform(0.1, cfg.ttl_s)
            elif kind == "crash" and cfg.mode == "static":  # the pod's restart comes after this long
                duration = self.rng.uniform(0.0, 2.0 * cfg.ttl_s)
            self._push(t, "churn:" + kind, "", duration)
            last_effect = max(last_effect, t + duration)
        settle_by = last_effect + cfg.settle_s + cfg.min_interval_s + cfg.ttl_s + 1.0 + cfg.convergence_s()
        self._push(settle_by, "check", "")
        self._loop(settle_by)
        violations = self._check_liveness()
        beliefs = belief_intervals(self.records, self.clock.now())
        violations += check_trace(self.records, self.clock.now(), beliefs)
        if cfg.mode == "static":
            violations += check_static(self.records, cfg.partitions)
        if self.gconfig.named:
            violations += check_subscribed_trace(self.records)
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
            if kind == "rebalance":
                self._operator_rebalance(end)
                continue
            if kind == "spawn":  # a member of the fleet's start (``start_gap_s``): part of the "start" change
                self._add_member()
                continue
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
                    self._push(t + self.store.renew_every_s(self.gconfig.ttl_s), "keepalive", mid)
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
        if sim.leaving and sim.member.leave_ready(sim.clock.now()):
            self._leave(sim)
            return
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

    def _operator_rebalance(self, end: float) -> None:
        """Coordinator mode, manual policy: the operator runs ``apportion rebalance`` after a change, and again half
        a second later while it is refused (moves in flight, or a group still waiting)."""
        now = self.clock.now()
        try:
            request_rebalance(self.store, self.group, now)
        except InvalidRequest:
            if now + 0.5 < end:
                self._push(now + 0.5, "rebalance")
            return
        self.records.append((now, "operator", SimKind.REBALANCE, {}))

    def _churn(self, kind: str, duration: float) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1
        self.changes.append((self.clock.now(), kind))
        if self.config.mode == "coordinator" and self.config.rebalance == "manual":
            self._push(self.clock.now() + self.config.settle_s + self.config.min_interval_s, "rebalance")
        for member in self.members.values():
            member.clock.thread = "churn"  # the fault itself happens now, whatever a member's threads wait for
        if self.config.mode == "static" and kind in ("join", "leave", "crash", *STATIC_CHURN):
            self._static_churn(kind, duration)
            return
        live = self._live()
        now = self.clock.now()
        if self.config.mode == "static" and not live:
            return  # every pod is down: the StatefulSet brings them back (``return``), no fault to apply
        if kind == "join" or not live:
            if self.config.max_members is None or len(live) < self.config.max_members:
                self._add_member()
            return
        if kind in ("leave", "crash") and len(live) <= 1:
            self._add_member()
            return
        sim = self.rng.choice(live)
        if kind == "leave":
            if now < sim.frozen_until or sim.member.busy_until is not None or now < sim.clock.blocked_until("step"):
                return
            sim.clock.thread = "step"
            if self.config.planned_leave and not sim.leaving and self.rng.random() < self.config.planned_leave:
                with contextlib.suppress(StoreUnavailable):
                    sim.member.begin_leave(sim.clock.now())  # traced by the member ("leaving")
                sim.leaving = True
                self._schedule_step(sim, now)
                return
            self._leave(sim)
        elif kind == "crash":
            self._record(sim.id, SimKind.CRASH, {}, sim.clock)
            sim.crashed = True
            self._live_cache = None
        elif kind == "freeze":
            if now < sim.frozen_until:
                return
            sim.frozen_owned = {p: sim.member.lease(p).epoch for p in sim.member.owned()}
            sim.frozen_until = now + duration
            self._record(sim.id, SimKind.FREEZE, {"until": sim.frozen_until}, sim.clock)
            self._push(sim.frozen_until, "resume", sim.id)
        elif kind == "slow":
            sim.slow_next = duration
        elif kind == "unavailable":
            sim.store.down_until = now + duration
        elif kind == "hang":
            sim.store.hang_until = now + duration
            self._record(sim.id, SimKind.HANG, {"until": sim.store.hang_until}, sim.clock)
        elif kind == "drift":
            sim.clock.set_rate(1.0 + self.rng.uniform(-0.05, 0.05))
        elif kind == "subscribe" and isinstance(sim.member, RoundsMember | CoordinatorMember):
            wanted = self._subscriptions[sim.id] = self._draw_subscriptions()
            self._record(sim.id, SimKind.SUBSCRIBE, {"subscriptions": wanted}, sim.clock)
            sim.member.subscribe(wanted)
            self._schedule_step(sim, now)

    def _static_churn(self, kind: str, duration: float) -> None:
        """StatefulSet churn (the module docstring): scale up or down by one, restart or crash a pod."""
        now = self.clock.now()
        live = [
            s
            for s in self._live()
            if now >= s.frozen_until and s.member.busy_until is None and now >= s.clock.blocked_until("step")
        ]
        for sim in live:
            sim.clock.thread = "step"  # a leave runs on the stepping thread
        if kind == "join":
            kind = "scale_up"
        elif kind == "leave":
            kind = "scale_down" if self.replicas > 1 and self.rng.random() < 0.5 else "restart"
        if kind == "scale_up":
            limit = self.config.max_members
            if limit is None or len(self._live()) < limit:
                self.replicas += 1
                if self.rng.random() < 0.5:  # apportion scale before the pod starts; else the pod raises it
                    self._scale(self.replicas)
                self._add_member(self.replicas - 1)
            return
        if kind == "scale_down":
            if self.replicas <= 1:
                return
            self.replicas -= 1
            leaving = [s for s in live if self._ordinals[s.id] == self.replicas]
            first = self.rng.random() < 0.5  # the operator's command before or after the pod's termination
            if first:
                self._scale(self.replicas)
            for sim in leaving:
                self._leave(sim)
            if not first:
                self._scale(self.replicas)
            return
        if kind == "return":  # ``duration`` carries the crashed ordinal here
            if int(duration) < self.replicas:
                self._add_member(int(duration))
            return
        if not live:
            return
        sim = self.rng.choice(live)
        if kind == "restart":
            self._leave(sim)
            if self._ordinals[sim.id] < self.replicas:
                self._add_member(self._ordinals[sim.id])
        elif kind == "crash":
            self._record(sim.id, SimKind.CRASH, {}, sim.clock)
            sim.crashed = True
            self._live_cache = None
            self._push(now + duration, "churn:return", "", self._ordinals[sim.id])

    def _leave(self, sim: _Sim) -> None:
        self._record(sim.id, SimKind.LEAVE, {}, sim.clock)
        with contextlib.suppress(StoreUnavailable):
            sim.member.leave()
        sim.left = True
        self._live_cache = None

    def _scale(self, replicas: int) -> None:
        """``apportion scale --replicas N``: the operator's record in the trace, then the store's."""
        self.records.append((self.clock.now(), "operator", TraceKind.SCALE, {"replicas": replicas}))
        self.trace.append((round(self.clock.now(), 6), "operator", "scale", f"replicas={replicas}"))
        set_replicas(self.store, self.group, replicas)

    def _route(self) -> None:
        events = self._dispatch.poll()
        freed = {pid_of_text(e.kv.key[len(self._owners) :]): e for e in self._freed.poll()}
        if not events and not freed:
            return
        n = len(self._prefix)
        broadcast: list[Event] = []
        wake = False
        quiet_registrations = self.config.mode == "rounds"
        for event in events:
            rest = event.kv.key[n:]
            if rest.startswith("members/"):
                broadcast.append(event)
                # a registration's PUT (start, ``revoking`` flag, ``left``) only updates what the next step reads
                # (RoundsMember._on_event: the id is no longer dead); its DELETE (the lease ended) wakes, and so does
                # any PUT that mentions "leaving" (a planned leave announced: members then want a new round)
                quiet = quiet_registrations and event.type is EventType.PUT and b'"leaving"' not in event.kv.value
                wake = wake or not quiet
            elif rest in _BROADCAST or rest.startswith("table/"):
                broadcast.append(event)
                wake = True
            elif rest.startswith("owner/") and event.type is EventType.DELETE:  # a layout-1 group's (``_keys``)
                freed[pid_of_text(rest[6:])] = event
        if broadcast or freed:
            # One pass over the members (in their fixed order, so the pushes and their seeded tie-breaks are the same
            # as delivering event by event): every live member gets the broadcast events, in order, and a step; a
            # freed owner record wakes only the members waiting to claim that partition.
            now = self.clock.now()
            push = self._push
            for sim in self._live():
                if broadcast:
                    sim.inbox.events.extend(broadcast)
                waiting = [e for p, e in freed.items() if p in sim.member.wanted] if freed else []
                if waiting:  # the deletion is what a member waiting for that partition claims it at
                    sim.inbox.events.extend(waiting)
                elif not wake:
                    continue
                if now < sim.next_step:  # _schedule_step, inline: this loop runs for every member
                    sim.next_step = now
                    push(now, "step", sim.id)

    # -- checks --------------------------------------------------------------------------------------------

    def _check_liveness(self) -> list[str]:
        now = self.clock.now()
        live = [s for s in self._live() if now >= s.frozen_until]
        owned = {s.id: s.member.owned() for s in live}
        blocks = None
        problems: list[str] = []
        required: int | list[PartitionId] = self.config.partitions
        if (
            self.config.mode == "coordinator"
            and len(live) < self.config.min_members
            and not read_table(self.store, self.group)
        ):
            required = []  # waiting for the minimum cluster size: nothing has to be owned yet
        if self.config.mode == "static":
            stored = stored_replicas(self.store, self.group)
            if stored != self.replicas:
                problems.append(f"scale: the stored replica count is {stored}, the scale events say {self.replicas}")
            blocks = {s.id: range_block(self._ordinals[s.id], self.replicas, self.config.partitions) for s in live}
            started = set(self._ordinals.values())
            never = [o for o in range(self.replicas) if o not in started]  # --replicas above --members: they wait
            if never:
                waiting = {p for o in never for p in range_block(o, self.replicas, self.config.partitions)}
                required = [p for p in range(self.config.partitions) if p not in waiting]
        if not self.gconfig.named:
            return problems + check_liveness(owned, required, now, self.config.strategy, blocks)
        subs = {s.id: _frozen(self._subscriptions[s.id]) for s in live}
        covered = {r for s in subs.values() for r in (s or self.gconfig.resource_names())}
        ids = [p for p in self.gconfig.partition_ids() if resource_of(p) in covered]
        problems += check_liveness(owned, ids, now, self.config.strategy, mixed=True)
        return problems + check_subscribed(owned, subs, self.gconfig.resources, now)

    def _result(
        self, violations: list[str], settle_by: float, beliefs: Mapping[PartitionId, list[tuple[float, float, str]]]
    ) -> SimResult:
        rounds = sum(1 for _, _, kind, _ in self.records if kind == TraceKind.ROUND_CLOSED)
        replicas = self.config.replicas or self.config.members
        found = plans(self.records, self.gconfig, self.group, replicas)
        moves = sum(p.moves for p in found)
        min_moves = sum(p.bound for p in found)
        return SimResult(
            config=self.config,
            trace=self.trace,
            violations=violations,
            rounds=rounds,
            moves=moves,
            min_moves=min_moves,
            unowned_s=unowned_seconds(beliefs, self.gconfig.partition_ids(), self.clock.now())
            if self.gconfig.named
            else unowned_seconds(beliefs, self.config.partitions, self.clock.now()),
            end_s=self.clock.now() - 1000.0,
            settle_by_s=settle_by,
            steps=self.steps,
            faults=self.faults,
            plans=len(found),
            changes=per_change(self.changes, found, self.records, self.clock.now()),
        )


def _unchecked(request: AssignRequest, plan: Plan) -> list[str]:
    """The closers' plan check of a simulated one-resource group: none (``check_liveness`` checks its balance)."""
    return []


def _frozen(names: list[str] | None) -> frozenset[str] | None:
    return None if names is None else frozenset(names)


def simulate(config: SimConfig) -> SimResult:
    """Run one seeded scenario and check it."""
    return Simulation(config).run()


__all__ = ["FAULTS", "STATIC_CHURN", "SimConfig", "SimResult", "Simulation", "check_trace", "simulate"]
