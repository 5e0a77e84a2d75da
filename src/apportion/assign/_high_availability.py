"""`high_availability`: active, standby and learner (warm-up) replicas for stateful partitions [seed 2].

A pure function of the request, in three steps. Ties are always broken by member id, then partition order.

1. **Target** — the balanced, sticky assignment the group converges to. Stateful and stateless partitions are
   balanced separately. For a kind with N partitions, member m gets the band ``[floor(s*(1-x)), ceil(s*(1+x))]`` with
   ``s = N * capacity_m / total capacity`` (its weighted share; seed 2: capacities 5, 10, 10, 15 and 80 partitions
   give 10, 20, 20, 30) and ``x`` the ``imbalance`` option (0.2 keeps 12, 18, 23, 27 stable). Previous owners keep as
   many partitions as any assignment within the bands can keep: first up to their lower bound, then extra ones up to
   their upper bound while the ``N - sum(lower)`` partitions above the lower bounds last, handed out one at a time to
   the partition costliest to move (no ready replica elsewhere, then by member id) so that a partition whose learner
   is waiting is the one released in every round. An overloaded member releases first the partitions whose move is
   cheapest or already under way: a ready learner elsewhere, then any learner elsewhere (seed 2: "keep existing
   learner tasks' assignment unchanged"; a learner is the previous plan's target), then a ready standby. Released
   and unowned partitions are placed where the lower bounds still can be met, preferring a ready learner, then the
   member already learning it (the seed's "keep existing learner tasks' assignment unchanged": a learner stays the
   target, however far behind, while its member's band has room), then a ready replica (standby), then the least
   loaded member relative to capacity (new members first, standby holders on ties). Before issue 45.3 a ready
   standby came before an unready learner here, so it replaced the learner as the target and the learner's warm-up
   was dropped; now the ready standby takes the *active* meanwhile (step 2) and the learner keeps warming up.
   Partition weights are not used: the band is on partition counts.
2. **Actives** (the seed's main function) — stateless partitions go to their target at once. A stateful partition's
   active goes to its target when the target is ready (its lag <= ``acceptable_recovery_lag``; that covers the ready
   learner and the previous owner). Otherwise it stays with a ready member: the previous owner, else a ready learner,
   else the ready replica with the least lag; and its target gets a learner. Only when no eligible member is ready
   does it move to the (unready) target at once: there is nothing to wait for.
3. **Replicas** — learners (at most ``max_warmup_replicas`` in all) sit on the target of each active that still has
   to move: existing learners are kept first, then new ones for the partitions of the most loaded members (active
   count / capacity). Standbys (stateful partitions only, ``num_standby_replicas`` each, as many as the other
   eligible members allow) never share a member with the partition's active or learner; they go to members on
   another rack than the active (and than the other standbys) while such members exist, then to the previous owner
   or replica holder with the least lag, then to the least loaded member.

Lag: the previous owner of a partition has lag 0; a standby or learner replica has the lag its member reports in
``Member.lag`` (unknown: not ready); a member without a replica of a partition has an unknown (infinite) lag.

Readiness has hysteresis (issue #18): a replica is ready when its lag is <= ``acceptable_recovery_lag``; a replica
the previous plan called ready (``Plan.ready``, fed back as ``Member.ready``) stays ready until its lag exceeds
``acceptable_recovery_lag * (1 + recovery_lag_band)`` (default band 0.5). Why: a replica's lag is not a settled
number but the changelog written since its last restore, and it jumps around the threshold from one report to the
next; with one threshold a standby's readiness flipped every probing round, the release order and placements above
changed with it, and the target (so the learners, and the actives that follow them) never settled. With the band
and the learner-first release order, lags that fluctuate within the band leave every input of the target as it was,
so the plan is the same. A learner becomes ready (and takes the active) only at or below the threshold itself, so
an active still moves only to a replica within ``acceptable_recovery_lag``; it is kept as the target while it warms
up whatever its lag. The state is in the request, so the plan stays a pure function of it.
Previous ownership: the claim of the highest generation wins, and on a conflict within it the smallest member id.
Unlike ``_core`` (Kafka semantics, every other strategy), a claim of a lower generation still counts when no newer
claim names the partition (a contradicted one counts as a replica of unknown lag unless its member reports one).
Why (issue #18): in the rounds protocol a member busy in a long batch can miss a plan and join the next round with
the generation of the plan it last applied; it still holds its partitions and their state. Ignoring all its claims
made them orphans, placed on ready standbys of other old members: actives moved between old members at once, and
the target changed with whichever member was late (a scale-up test saw a minute of churn and 3 moves for 2).

Convergence bound: when every member subscribes to every resource and nothing churns after the first plan, feeding
each plan back as the next input with its learners caught up (lag 0), the plan reaches the bands with no learner left
after at most ``ceil(d / max_warmup_replicas)`` probing rounds, ``d`` being ``stats.deferred`` of the first plan (the
actives it leaves away from their target; at most ``stats.min_moves`` plus the partitions without a previous owner).
Why: each probing round moves the ``max_warmup_replicas`` actives whose learners got ready, and the target stays the
same from round to round because releases, extra keeps and placements all prefer the partitions already being
learned. That argument is not a proof; the bound is checked by hypothesis (tests, and 30,000 extra examples once).

Moves as for every strategy (``_core``): ``stats.moved`` counts this round's actives that leave a live previous
owner; a first placement is not a move. ``stats.min_moves`` = the partitions with a previous owner minus the most of
them any assignment within the bands leaves with that owner, summed over both kinds: the fewest moves of any plan
that reaches the bands (a lower bound only when members subscribe to different resources). ``stats.deferred`` counts
the actives this plan leaves away from their target (waiting for a ready replica), so this round moves at least
``stats.min_moves - stats.deferred``: the moves made now and the ones deferred reach the bands.

Tags (seed 2) are derived from the plan by :func:`tags`: ``Plan.learners`` are the isLearner replicas, an active is
beingLearned when some member holds a learner of it, and ``Plan.ready`` lists the isReady standby/learner replicas.
``Plan.probe_after_s`` is ``probing_rebalance_interval_s`` while a learner warms up, else None (the protocol then
opens a probing round after that delay).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any, ClassVar, Self, TypeVar

from apportion.assign._core import exact
from apportion.assign._options import StrategyOptions, integer_option, number_option
from apportion.errors import InvalidRequest
from apportion.model import AssignRequest, Member, Move, Partition, Plan, PlanStats

NAME = "high_availability"

P = TypeVar("P", bound=Any)  # a partition id: ``Partition``, or a stored plan's int / ``<resource>-<index>``

# preference categories of a member for a partition's active (smaller is better)
_READY_LEARNER, _READY, _LEARNER, _OTHER = 0, 1, 2, 3
# ... and for its target: an existing learner before a ready standby (seed 2 keeps learners; module docstring)
_TARGET_RANK = {_READY_LEARNER: 0, _LEARNER: 1, _READY: 2, _OTHER: 3}


@dataclass(frozen=True, slots=True)
class HighAvailabilityOptions(StrategyOptions):
    """The options of `high_availability` (``AssignRequest.options``), with their defaults."""

    STRATEGY: ClassVar[str] = NAME
    num_standby_replicas: int = 0
    max_warmup_replicas: int = 2
    acceptable_recovery_lag: int = 10_000
    probing_rebalance_interval_s: float = 600.0
    imbalance: float = 0.0
    recovery_lag_band: float = 0.5

    @classmethod
    def _read(cls, options: Mapping[str, object]) -> Self:
        return cls(
            integer_option(options, "num_standby_replicas", "must be an integer >= 0", lambda n: n >= 0),
            integer_option(options, "max_warmup_replicas", "must be an integer >= 1", lambda n: n >= 1),
            integer_option(options, "acceptable_recovery_lag", "must be an integer >= 0", lambda n: n >= 0),
            number_option(
                options, "probing_rebalance_interval_s", "must be a finite number > 0", lambda x: 0 < x < math.inf
            ),
            number_option(options, "imbalance", "must be a fraction in [0, 1] (0.2 is +-20%)", lambda x: 0 <= x <= 1),
            number_option(options, "recovery_lag_band", "must be a finite number >= 0", lambda x: 0 <= x < math.inf),
        )


class _Input:
    """The request as lookup tables: eligibility, previous owners, replicas and their lags."""

    def __init__(self, request: AssignRequest, opts: HighAvailabilityOptions) -> None:
        self.acceptable = opts.acceptable_recovery_lag
        self.still_acceptable = opts.acceptable_recovery_lag * (1 + exact(opts.recovery_lag_band))
        self.resources = sorted(request.resources, key=lambda r: r.name)
        self.size: dict[str, int] = {}
        for res in self.resources:
            if res.name in self.size:
                raise InvalidRequest(f"resources.{res.name}", "duplicate resource name")
            if res.partitions < 0:
                raise InvalidRequest(f"resources.{res.name}", "partition count must be >= 0")
            self.size[res.name] = res.partitions
        self.stateful = {res.name: res.stateful for res in self.resources}
        self.members = sorted(request.members, key=lambda m: m.id)
        self.ids = [m.id for m in self.members]
        self.capacity: dict[str, Fraction] = {}
        for m in self.members:
            _check_member(m, self.capacity)
            self.capacity[m.id] = exact(m.capacity)
        self.eligible: dict[str, list[str]] = {
            res.name: [m.id for m in self.members if m.subscribes_to(res.name)] for res in self.resources
        }
        self.rack = {m.id: m.rack for m in self.members}
        # previous owners: the highest generation's claim, the smallest id on a conflict; a stale claim (a member that
        # missed a plan) of a partition no newer claim contradicts stands: that member still holds the state
        self.owner: dict[Partition, str] = {}
        for m in sorted(self.members, key=lambda m: -m.generation):  # stable: by id within a generation
            for p in m.owned:
                if self.known(p):
                    self.owner.setdefault(p, m.id)
        # replicas of stateful partitions: partition -> member -> lag (None: unknown)
        self.lags: dict[Partition, dict[str, int | None]] = {}
        self.learning: dict[Partition, list[str]] = {}
        self.was_ready = {(m.id, p) for m in self.members for p in m.ready}
        for m in self.members:
            replicas = [p for p in (*m.owned, *m.standby, *m.learners) if self.owner.get(p) != m.id]
            for p in replicas:
                if self.known(p) and self.stateful[p.resource]:
                    self.lags.setdefault(p, {})[m.id] = m.lag.get(p)
            for p in m.learners:
                if self.known(p) and self.stateful[p.resource]:
                    self.learning.setdefault(p, []).append(m.id)

    def known(self, p: Partition) -> bool:
        return 0 <= p.index < self.size.get(p.resource, 0)

    def partitions(self) -> list[Partition]:
        return [Partition(res.name, i) for res in self.resources for i in range(res.partitions)]

    def lag(self, m: str, p: Partition) -> int | None:
        """Offsets behind the changelog end; 0 for the previous owner, None when unknown (no replica)."""
        if self.owner.get(p) == m:
            return 0
        return self.lags.get(p, {}).get(m)

    def ready(self, m: str, p: Partition) -> bool:
        """Within the acceptable lag; a replica the previous plan called ready stays so within the wider band."""
        lag = self.lag(m, p)
        if lag is None:
            return False
        return lag <= self.acceptable or ((m, p) in self.was_ready and lag <= self.still_acceptable)

    def category(self, m: str, p: Partition) -> int:
        """How well ``m`` suits as the active of ``p``: ready learner, ready replica, learner, anyone else."""
        if not self.stateful[p.resource]:
            return _OTHER
        learner = m in self.learning.get(p, ())
        if self.ready(m, p):
            return _READY_LEARNER if learner else _READY
        return _LEARNER if learner else _OTHER

    def target_rank(self, m: str, p: Partition) -> int:
        """How well ``m`` suits as the target of ``p``: ready learner, learner, ready replica, anyone else."""
        return _TARGET_RANK[self.category(m, p)]


def _check_member(m: Member, seen: Mapping[str, Fraction]) -> None:
    field = f"members.{m.id}"
    if not m.id:
        raise InvalidRequest("members", "member id must not be empty")
    if m.id in seen:
        raise InvalidRequest(field, "duplicate member id")
    if isinstance(m.capacity, bool) or not math.isfinite(m.capacity) or m.capacity <= 0:
        raise InvalidRequest(f"{field}.capacity", f"must be a finite number > 0, got {m.capacity!r}")
    held: dict[Partition, str] = {}
    for kind, parts in (("owned", m.owned), ("standby", m.standby), ("learners", m.learners)):
        for p in parts:
            if p in held:
                raise InvalidRequest(f"{field}.{kind}", f"{p} is also listed in {held[p]}")
            held[p] = kind
    for p, lag in m.lag.items():
        if isinstance(lag, bool) or not isinstance(lag, int) or lag < 0:
            raise InvalidRequest(f"{field}.lag", f"lag of {p} must be an integer >= 0, got {lag!r}")


@dataclass(frozen=True, slots=True)
class _Target:
    owner: dict[Partition, str]
    kept: int


def _bands(n: int, members: list[str], capacity: Mapping[str, Fraction], x: Fraction) -> dict[str, tuple[int, int]]:
    total = sum((capacity[m] for m in members), Fraction(0))
    bands: dict[str, tuple[int, int]] = {}
    for m in members:
        share = n * capacity[m] / total
        bands[m] = (math.floor(share * (1 - x)), math.ceil(share * (1 + x)))
    return bands


def _target(inp: _Input, parts: list[Partition], x: Fraction) -> _Target:
    """The balanced, sticky target of one kind (stateful or stateless) of partitions; see the module docstring."""
    members = [m for m in inp.ids if any(m in inp.eligible[r] for r in sorted({p.resource for p in parts}))]
    placeable = [p for p in parts if inp.eligible[p.resource]]
    if not placeable:
        return _Target({}, 0)
    bands = _bands(len(placeable), members, inp.capacity, x)
    count = dict.fromkeys(members, 0)
    owner: dict[Partition, str] = {}

    def release_rank(p: Partition, m: str) -> tuple[int, Partition]:
        """0: a ready learner elsewhere, 1: a learner elsewhere (the previous target: kept), 2: a ready standby."""
        found = {inp.category(o, p) for o in inp.eligible[p.resource] if o != m}
        return next((rank for rank, c in enumerate((_READY_LEARNER, _LEARNER, _READY)) if c in found), 3), p

    mine: dict[str, list[Partition]] = {m: [] for m in members}
    for p in placeable:
        o = inp.owner.get(p)
        if o is not None and o in inp.eligible[p.resource]:
            mine[o].append(p)
    keep: dict[str, int] = {}
    rank: dict[str, list[int]] = {}
    for m in members:
        ranked = sorted(release_rank(p, m) for p in mine[m])  # released first ... kept last
        mine[m] = [p for _, p in ranked]
        rank[m] = [r for r, _ in ranked]
        keep[m] = min(len(mine[m]), bands[m][0])
    # the partitions above the lower bounds: kept where moving costs most (no ready replica elsewhere) first, so that
    # a partition with a learner waiting for it is the one released, round after round; ties by member id
    budget = len(placeable) - sum(lo for lo, _ in bands.values())
    while budget > 0:
        offers = [
            (-rank[m][len(mine[m]) - keep[m] - 1], m)
            for m in members
            if bands[m][0] <= keep[m] < min(len(mine[m]), bands[m][1])
        ]
        if not offers:
            break
        keep[min(offers)[1]] += 1
        budget -= 1
    for m in members:
        for p in mine[m][len(mine[m]) - keep[m] :]:
            owner[p] = m
        count[m] = keep[m]
    kept = len(owner)  # the sticky phase's (``pool`` counts it); the target's own count is returned below

    pending = [p for p in placeable if p not in owner]
    deficit = sum(max(0, bands[m][0] - count[m]) for m in members)

    def pool(resource: str) -> list[str]:
        """Who may take one more partition of ``resource`` now, keeping every lower bound reachable."""
        eligible = inp.eligible[resource]
        must = [m for m in eligible if count[m] < bands[m][0]] if len(pending) - len(owner) + kept <= deficit else []
        return must or [m for m in eligible if count[m] < bands[m][1]] or eligible  # the last: uneven subscriptions

    def place(p: Partition, m: str) -> None:
        nonlocal deficit
        if count[m] < bands[m][0]:
            deficit -= 1
        count[m] += 1
        owner[p] = m

    # first the partitions with a replica (or a learner) where they may go: the best such pair at each step, so a
    # ready replica is never crowded out by a partition that had no ready holder with room anyway
    holders = {
        p: [m for m in sorted(inp.lags.get(p, {})) if inp.category(m, p) < _OTHER] for p in pending if p in inp.lags
    }
    while True:
        pools: dict[str, list[str]] = {}
        best: tuple[int, Fraction, str, Partition] | None = None
        for p, hs in holders.items():
            if p in owner or not hs:
                continue
            allowed = pools.setdefault(p.resource, pool(p.resource))
            for m in hs:
                if m in allowed:
                    key = (inp.target_rank(m, p), (count[m] + 1) / inp.capacity[m], m, p)
                    best = key if best is None or key < best else best
        if best is None:
            break
        place(best[3], best[2])
    for p in pending:
        if p in owner:
            continue

        def preference(m: str, p: Partition = p) -> tuple[int, Fraction, bool, str]:
            holds = inp.lag(m, p) is not None or m in inp.lags.get(p, {})
            return inp.target_rank(m, p), (count[m] + 1) / inp.capacity[m], not holds, m

        place(p, min(pool(p.resource), key=preference))
    # every partition the target leaves with its previous owner, not only those the sticky phase kept: with uneven
    # subscriptions the last resort of ``pool`` gives a partition back to its only subscriber (hypothesis found m1
    # subscribing r0 alone beside m0 holding all five: 3 kept here, 4 kept in fact, so min_moves 2 where 1 move
    # reaches the balance, and the checker refused the plan)
    return _Target(owner, sum(1 for p, m in owner.items() if inp.owner.get(p) == m))


def _targets(
    inp: _Input, opts: HighAvailabilityOptions, everything: list[Partition]
) -> tuple[dict[Partition, str], int]:
    """The target of both kinds of partitions, and ``stats.min_moves`` (see the module docstring)."""
    target: dict[Partition, str] = {}
    min_moves = 0
    for stateful in (True, False):
        t = _target(inp, [p for p in everything if inp.stateful[p.resource] == stateful], exact(opts.imbalance))
        target.update(t.owner)
        min_moves += sum(1 for p in t.owner if p in inp.owner) - t.kept
    return target, min_moves


_REPLICA_OPTIONS = (
    "num_standby_replicas",
    "max_warmup_replicas",
    "acceptable_recovery_lag",
    "recovery_lag_band",
    "probing_rebalance_interval_s",
)


def ignored_options(request: AssignRequest) -> list[str]:
    """What ``request`` asks of ``high_availability`` that cannot change its plan, one sentence each: the replica
    options (standbys, learners, readiness) given while no resource is stateful — replicas are kept for stateful
    partitions only (a resource's ``"stateful": true``), so a plan of stateless ones has none (issue 45.7:
    ``apportion assign`` returned no standbys without a word)."""
    given = [name for name in _REPLICA_OPTIONS if name in request.options]
    if not given or any(r.stateful for r in request.resources):
        return []
    return [
        f"{', '.join(given)} {'has' if len(given) == 1 else 'have'} no effect: high_availability keeps standby and "
        'learner replicas for stateful resources only, and none of this request\'s is ("stateful": true)'
    ]


def high_availability_min_moves(request: AssignRequest) -> int:
    """The lower bound of ``high_availability`` (the registry's): ``stats.min_moves`` of its plan."""
    opts = HighAvailabilityOptions.parse(request.options)
    inp = _Input(request, opts)
    return _targets(inp, opts, inp.partitions())[1]


def high_availability(request: AssignRequest) -> Plan:
    """Plan actives, learners and standbys for ``request``; see the module docstring for the rules."""
    opts = HighAvailabilityOptions.parse(request.options)
    inp = _Input(request, opts)
    everything = inp.partitions()
    target, min_moves = _targets(inp, opts, everything)

    # actives
    active: dict[Partition, str] = {}
    for p in everything:
        if p not in target:
            continue
        goal = target[p]
        if not inp.stateful[p.resource] or inp.ready(goal, p):
            active[p] = goal
            continue
        prev = inp.owner.get(p)
        ready = [m for m in inp.eligible[p.resource] if inp.ready(m, p)]
        if prev in ready:
            active[p] = prev
        elif ready:
            active[p] = min(ready, key=lambda m: (m not in inp.learning.get(p, ()), inp.lag(m, p), m))
        else:
            active[p] = goal
    load = dict.fromkeys(inp.ids, 0)
    for m in active.values():
        load[m] += 1

    # learners: on the target of every active still away from it, existing ones first, at most max_warmup_replicas
    waiting = [p for p in everything if p in active and active[p] != target[p]]
    existing = [p for p in waiting if target[p] in inp.learning.get(p, ())]
    fresh = [p for p in waiting if target[p] not in inp.learning.get(p, ())]
    fresh.sort(key=lambda p: (-Fraction(load[active[p]]) / inp.capacity[active[p]], active[p], p))
    learner_of = {p: target[p] for p in (existing + fresh)[: opts.max_warmup_replicas]}

    # standbys
    replicas = dict(load)  # actives + standbys + learners per member, for "resource available" ties
    for m in learner_of.values():
        replicas[m] += 1
    standby_of: dict[Partition, list[str]] = {}
    for p in everything:
        if p not in active or not inp.stateful[p.resource] or opts.num_standby_replicas == 0:
            continue
        busy = {active[p], learner_of.get(p, "")}
        candidates = [m for m in inp.eligible[p.resource] if m not in busy]
        racks = [inp.rack[active[p]]]
        chosen: list[str] = []
        for _ in range(min(opts.num_standby_replicas, len(candidates))):

            def fit(m: str, p: Partition = p, racks: list[str | None] = racks) -> tuple[int, bool, int, Fraction, str]:
                rack = inp.rack[m]
                clash = 0 if rack is None else 2 if rack == racks[0] else 1 if rack in racks else 0
                lag = inp.lag(m, p)
                return clash, lag is None, 0 if lag is None else lag, (replicas[m] + 1) / inp.capacity[m], m

            m = min(candidates, key=fit)
            candidates.remove(m)
            chosen.append(m)
            racks.append(inp.rack[m])
            replicas[m] += 1
        standby_of[p] = chosen

    return _plan(inp, opts, everything, active, learner_of, standby_of, (min_moves, len(waiting)))


def _plan(
    inp: _Input,
    opts: HighAvailabilityOptions,
    everything: list[Partition],
    active: dict[Partition, str],
    learner_of: dict[Partition, str],
    standby_of: dict[Partition, list[str]],
    bounds: tuple[int, int],
) -> Plan:
    """The Plan; ``bounds`` = (``stats.min_moves``, ``stats.deferred``)."""
    assignment: dict[str, list[Partition]] = {m: [] for m in inp.ids}
    learners: dict[str, list[Partition]] = {m: [] for m in inp.ids}
    standby: dict[str, list[Partition]] = {m: [] for m in inp.ids}
    ready: dict[str, list[Partition]] = {m: [] for m in inp.ids}
    moves: list[Move] = []
    for p in everything:  # partition order, so every list comes out sorted
        if p not in active:
            continue
        assignment[active[p]].append(p)
        prev = inp.owner.get(p)
        if prev != active[p]:
            moves.append(Move(p, prev, active[p]))
        for m in standby_of.get(p, ()):
            standby[m].append(p)
            if inp.ready(m, p):
                ready[m].append(p)
        if p in learner_of:
            m = learner_of[p]
            learners[m].append(p)
            if inp.ready(m, p):
                ready[m].append(p)
    sizes = [len(parts) for parts in assignment.values()]
    stats = PlanStats(
        partitions=len(everything),
        members=len(inp.ids),
        min=min(sizes, default=0),
        max=max(sizes, default=0),
        moved=sum(1 for move in moves if move.source is not None),
        min_moves=bounds[0],
        deferred=bounds[1],
    )

    def frozen(table: dict[str, list[Partition]]) -> Mapping[str, tuple[Partition, ...]]:
        return MappingProxyType({m: tuple(parts) for m, parts in table.items()})

    return Plan(
        strategy=NAME,
        assignment=frozen(assignment),
        moves=tuple(moves),
        stats=stats,
        standby=frozen(standby),
        learners=frozen(learners),
        ready=frozen(ready),
        probe_after_s=opts.probing_rebalance_interval_s if learner_of else None,
    )


def tags(plan: Plan) -> dict[Partition, dict[str, dict[str, bool]]]:
    """Seed 2's task tags per partition and member holding a replica of it: isLearner, beingLearned, isReady.

    An active is never a learner, is ready, and is beingLearned when a learner of it exists; a standby or learner
    replica is ready when it is within the acceptable recovery lag (``Plan.ready``). Partitions and members sorted.
    """
    return replica_tags(plan.assignment, plan.standby, plan.learners, plan.ready)


def replica_tags(
    assignment: Mapping[str, Iterable[P]],
    standby: Mapping[str, Iterable[P]],
    learners: Mapping[str, Iterable[P]],
    ready: Mapping[str, Iterable[P]],
) -> dict[P, dict[str, dict[str, bool]]]:
    """:func:`tags` of a plan given as its four tables (member -> partitions), whatever the partition ids are: a
    ``Plan``'s ``Partition`` values, or a stored plan record's ids (``group_status``, ``explain``), so that every
    place that shows the tags derives them by this one rule."""
    learned = {p for parts in learners.values() for p in parts}
    is_ready = {(m, p) for m, parts in ready.items() for p in parts}
    rows: list[tuple[P, str, dict[str, bool]]] = []
    for m, parts in assignment.items():
        rows.extend((p, m, {"isLearner": False, "beingLearned": p in learned, "isReady": True}) for p in parts)
    for table, is_learner in ((standby, False), (learners, True)):
        for m, parts in table.items():
            flags = {"isLearner": is_learner, "beingLearned": False}
            rows.extend((p, m, {**flags, "isReady": (m, p) in is_ready}) for p in parts)
    out: dict[P, dict[str, dict[str, bool]]] = {}
    for p, m, flags in sorted(rows, key=lambda row: (row[0], row[1])):
        out.setdefault(p, {})[m] = flags
    return out


__all__ = [
    "HighAvailabilityOptions",
    "high_availability",
    "high_availability_min_moves",
    "ignored_options",
    "replica_tags",
    "tags",
]
