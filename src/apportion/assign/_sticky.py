"""``sticky``: balanced and as few moves as possible.

Equal subscriptions (every member subscribes to the same resources) — the two-phase constrained algorithm of
KAFKA-12464, with ``P`` partitions, ``N`` members, ``q = P // N`` (floor quota) and ``r = P % N`` (how many members
may hold ``q + 1``):

1. In member-id order, each member keeps its previous partitions (lowest first): all of them when it has at most
   ``q``; ``q + 1`` when it has more and fewer than ``r`` members kept ``q + 1`` so far; else ``q``.
2. The other partitions, in the seed's order "for data parallelism" — by index, then resource: t0-0, t1-0, t0-1,
   t1-1, ... — fill the members below ``q`` in id order (each takes the next ones off that list) — up to ``q + 1``
   while fewer than ``r`` members hold ``q + 1``, else up to ``q`` — then one each to members at ``q`` (id order)
   until none is left. So with several resources every member gets partitions of each where its quota allows
   (t0: 3 and t1: 3 over two members: t0-0, t0-1, t1-0 and t0-2, t1-1, t1-2, not all of t0 and all of t1).

Every member ends with ``q`` or ``q + 1``, and the number of moves equals the minimum over all balanced assignments::

    min_moves = sum(o_i) - (sum(min(o_i, q)) + min(r, #{i : o_i > q}))

where ``o_i`` counts the previous partitions member ``i`` may keep. (Phase 1 keeps exactly that many; phase 2 never
hands a member back a partition it dropped, because a member that dropped some is already full.) One join with an
even spread of ``P`` over ``N`` members therefore moves ``P // (N + 1)`` or one more; one leave moves exactly the
leaver's partitions.

Mixed subscriptions — the general path: each member keeps all its previous partitions it still subscribes to; free
partitions go, resource group by resource group (fewest subscribers first; within a group in the seed's order t0-0,
t1-0, t0-1, ...), to the least loaded subscriber (ties: the one holding fewest partitions of that resource, so each
resource spreads over the subscribers; then member id); then, while some member could take a partition it
subscribes to from a member holding at least two more (Kafka's definition of unbalanced), one such partition moves
from the most loaded to the least loaded member of such a pair — preferring a partition that returns to its
previous owner, then one that was not previously owned by the giver. Each step lowers the sum of squared loads, so
the loop ends, balanced by construction. Which partitions each member ends with is then chosen again, exactly, for
the loads reached: with loads fixed, Kafka's balance only forbids some (member, resource) pairs, and keeping the
most previous partitions is a min-cost flow over resources x members (``_Keeper``); the single moves above could
give up a kept partition where another choice of partitions kept it. In groups of at most 8 members the loads
themselves are searched too: one unit of load shifts from one member to another while that keeps more (Kafka's
balance allows uneven loads: a member may hold two more than one that subscribes to none of its resources); and
the free partitions are also placed plainly (by partition, to the least loaded subscriber, ties by id), balanced
and re-chosen the same way, the plan keeping more winning — so there sticky never moves more than "keep what is
still valid, then balance by single moves" (a property test). Larger groups get the exact re-choice for the loads
reached, not the load search (each try is a min-cost flow). In every group the free partitions are also placed in
kafka-python's order (by partition, fewest subscribers first, to the least loaded subscriber, ties by id) and
balanced by its walk (``_walk``: pass over the partitions, moving one to the least loaded subscriber of its resource
when its holder holds two more, until a pass moves nothing), then re-chosen the same way: the keeper, exact for the
loads that walk reaches, keeps at least what kafka-python keeps whenever they are its loads. Without that try,
groups of more than 8 members could move more than kafka-python's StickyPartitionAssignor (issue 42: nine members,
a member owning the one partition of a topic seven others subscribe to alone, and one more of another topic spread
to it, lost the first to balance; kafka-python gives that other topic to its other subscriber and moves nothing).
Measured against kafka-python's StickyPartitionAssignor on 1,000 random churned groups
(``bench/mixed_sticky_bench.py``): never more moves, fewer in 186 of them (with up to 16 members: in 184; before
the kafka-order try 7 more), and a property test (``tests/assign/test_sticky_vs_kafka_python.py``) — evidence, not a
proof: kafka-python also swaps which partition of a topic moves and may revert its walk, which this try does not
copy. ``stats.min_moves`` is a lower bound,
not always reached: the forced moves plus the closed form above for every group of resources whose subscribers
subscribe to nothing else (those members must be balanced among themselves, max - min <= 1, in any Kafka-balanced
plan); the exact minimum over all Kafka-balanced plans is not computed.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, islice, product, repeat
from typing import ClassVar, Literal

from apportion.assign._core import MoveColumns, Problem, balanced_min_moves, mark, to_plan
from apportion.assign._options import StrategyOptions
from apportion.model import AssignRequest, Plan

_INVERT = bytes([1, 0]) + bytes(254)
_LOAD_SEARCH_MEMBERS = 8  # the general path's extra searches (second placement, other loads) up to this many members


@dataclass(frozen=True, slots=True)
class StickyOptions(StrategyOptions):
    """``sticky`` takes no options."""

    STRATEGY: ClassVar[str] = "sticky"


def sticky(request: AssignRequest) -> Plan:
    problem = Problem.of(request)
    if problem.equal_subscriptions():
        return _constrained(problem)
    return _general(problem)


def sticky_min_moves(request: AssignRequest) -> int:
    """The lower bound of ``sticky`` (the registry's): see :func:`problem_min_moves`."""
    return problem_min_moves(Problem.of(request))


def problem_min_moves(problem: Problem) -> int:
    """The forced moves plus the closed form of the module docstring for every group of resources whose subscribers
    subscribe to nothing else (they are balanced among themselves, max - min <= 1, in every Kafka-balanced plan).

    Exact with equal subscriptions (one such group). With mixed subscriptions a lower bound: beyond the forced
    moves, nothing is counted for the members of the other groups."""
    groups = [(rs, ms) for rs, ms in problem.groups() if all(len(problem.subs[m]) == len(rs) for m in ms)]
    return balanced_min_moves(problem, groups)


def _universe_mask(problem: Problem) -> tuple[bytearray, int]:
    """A byte per partition: 1 for partitions nobody may take (resource not subscribed); and the universe size."""
    mask = bytearray(problem.total)
    size = problem.total
    subs = problem.subs[0] if problem.subs else frozenset()
    for r in range(len(problem.resources)):
        if r not in subs:
            a, b = problem.start[r], problem.start[r + 1]
            mask[a:b] = b"\x01" * (b - a)
            size -= b - a
    return mask, size


def _zeros(flags: bytearray) -> list[int]:
    """The positions of the zero bytes of ``flags``, in order. When they are few (a rebalance frees little: 100 of
    1,000,000 when one member of 10,000 leaves), one C ``find`` per zero; ``compress`` would make an int for every
    byte to keep those few (~4 % of `apportion assign` at a million partitions)."""
    zeros = flags.count(0)
    if zeros * 32 > len(flags):
        return list(compress(range(len(flags)), flags.translate(_INVERT)))
    out: list[int] = []
    at = -1
    for _ in range(zeros):
        at = flags.find(0, at + 1)
        out.append(at)
    return out


def _constrained(problem: Problem) -> Plan:
    n = len(problem.members)
    if n == 0:
        return to_plan(problem, [], [], 0)
    taken, size = _universe_mask(problem)
    q, r = divmod(size, n)
    min_moves = problem_min_moves(problem)
    at_max = 0
    assignment: list[Sequence[int]] = []
    dropped_from: dict[int, int] = {}
    # Phase 1: keep previous partitions up to the quota, honouring how many members may hold q + 1.
    for m in range(n):
        own = problem.kept_claims(m)
        if len(own) <= q:
            keep = len(own)
        elif at_max < r:
            keep = q + 1
            at_max += 1
        else:
            keep = q
        kept = own[:keep] if keep < len(own) else own
        for p in own[keep:]:
            dropped_from[p] = m
        mark(taken, kept, 1)
        assignment.append(kept)
    # From scratch (nothing kept) ``free`` is a range: no million int objects, and each member's share is a range.
    free: Sequence[int] = range(problem.total)
    if taken.find(1) >= 0:
        free = _zeros(taken)
    order = problem.interleaved(free)  # the seed's order: t0-0, t1-0, t0-1, t1-1, ...
    # Phase 2: fill members below q (up to q + 1 while allowed), then one each to members at q, popping partitions
    # off ``order``. With one resource ``order`` is ``free``: the moves, by partition, are free[:pos] with the
    # targets in hand-out order; else the targets are looked up by partition.
    pos = 0
    fresh: list[Sequence[int]] = [[] for _ in range(n)]
    targets: list[int] = []
    for m in range(n):
        have = len(assignment[m])
        if have < q:
            want = q + 1 if at_max < r else q
            if want > q:
                at_max += 1
            fresh[m] = order[pos : pos + want - have]
            targets.extend(repeat(m, len(fresh[m])))
            pos += len(fresh[m])
    for m in range(n):
        if at_max >= r or pos >= len(order):
            break
        if len(assignment[m]) + len(fresh[m]) == q:
            fresh[m] = [*fresh[m], order[pos]]
            targets.append(m)
            pos += 1
            at_max += 1
    moved = free[:pos]
    if order is not free:
        target_of = [-1] * problem.total
        target_setter = target_of.__setitem__
        for m, new in enumerate(fresh):
            for _ in map(target_setter, new, repeat(m)):
                pass
            fresh[m] = sorted(new)
        moved = free if pos == len(free) else sorted(order[:pos])
        targets = list(map(target_of.__getitem__, moved))
    for m in range(n):
        new = fresh[m]
        if new:
            assignment[m] = sorted([*assignment[m], *new]) if assignment[m] else new
    sources = list(map(dropped_from.get, moved, repeat(-1))) if dropped_from else [-1] * pos
    moves = MoveColumns(moved, sources, targets)
    return to_plan(problem, assignment, moves, min_moves)


def _general(problem: Problem) -> Plan:
    """Three placement orders of the free partitions (module docstring): spread per resource, group by group; in
    groups of at most ``_LOAD_SEARCH_MEMBERS`` members plainly by partition; and kafka-python's order followed by
    its reassignment walk (:func:`_walk`). Each is balanced by single moves and re-chosen by :func:`_best_loads`;
    the one keeping the most previous partitions wins (ties: the first), and one keeping all it could ends the
    search."""
    claims = sum(map(len, map(problem.kept_claims, range(len(problem.members)))))
    orders: tuple[_Order, ...] = ("spread", "plain", "kafka")
    if len(problem.members) > _LOAD_SEARCH_MEMBERS:
        orders = ("spread", "kafka")
    tries: list[tuple[list[list[int]], int]] = []
    for order in orders:
        if tries and max(kept for _, kept in tries) == claims:
            break  # a try kept every previous partition it could
        holdings, count = _placed(problem, order)
        if order == "kafka":
            _walk(problem, holdings, count)
        _rebalance(problem, holdings, count, problem.prev())
        tries.append(_best_loads(problem, count, holdings))
    assignment, _ = max(tries, key=lambda t: t[1])  # max keeps the first of equals
    return to_plan(problem, assignment, None, problem_min_moves(problem))


_Order = Literal["spread", "plain", "kafka"]


def _kafka_order(problem: Problem) -> list[int]:
    """The resources that have subscribers, in kafka-python's order of partitions: fewest subscribers first, then by
    name (its ``partitions_comparator_key``)."""
    subscribers = [sum(1 for s in problem.subs if x in s) for x in range(len(problem.resources))]
    return sorted((x for x, k in enumerate(subscribers) if k), key=lambda x: (subscribers[x], x))


def _placed(problem: Problem, order: _Order) -> tuple[list[list[list[int]]], list[int]]:
    """Every member's previous partitions that it still subscribes to, and each other partition to the least loaded
    subscriber: ``spread``: resource group by group (fewest subscribers first, the seed's order within a group),
    ties to the member holding fewest of that resource, then id; ``plain``: by partition, ties by id; ``kafka``: by
    partition in kafka-python's order (:func:`_kafka_order`), ties by id.
    ``holdings[m][r]``: partitions of resource r held by m; and the loads."""
    spread = order == "spread"
    n = len(problem.members)
    nres = len(problem.resources)
    holdings: list[list[list[int]]] = [[[] for _ in range(nres)] for _ in range(n)]
    count = [0] * n
    taken = bytearray(problem.total)
    for m in range(n):
        for p in problem.kept_claims(m):
            holdings[m][problem.resource_of(p)].append(p)
            taken[p] = 1
        count[m] = sum(map(len, holdings[m]))
    groups = sorted(problem.groups(), key=lambda g: (len(g[1]), g[0][0]))
    if order == "plain":
        groups = [(sorted(x for rs, _ in groups for x in rs), [])]
    elif order == "kafka":
        groups = [(_kafka_order(problem), [])]
    for resources, _ in groups:
        # one heap per resource of (load, partitions of that resource held or 0, member); keys only grow, so a
        # stale entry is re-pushed when it comes to the top
        def key(m: int, res: int) -> tuple[int, int, int]:
            return (count[m], len(holdings[m][res]) if spread else 0, m)

        heaps = {res: [key(m, res) for m in range(n) if res in problem.subs[m]] for res in resources}
        for heap in heaps.values():
            heapq.heapify(heap)
        free = [p for p in problem.ints_of(resources if order == "kafka" else sorted(resources)) if not taken[p]]
        for p in problem.interleaved(free) if spread else free:
            res = problem.resource_of(p)
            heap = heaps[res]
            while True:
                entry = heapq.heappop(heap)
                m = entry[2]
                if entry == key(m, res):
                    break
                heapq.heappush(heap, key(m, res))
            holdings[m][res].append(p)
            count[m] += 1
            heapq.heappush(heap, key(m, res))
    return holdings, count


def _walk(problem: Problem, holdings: list[list[list[int]]], count: list[int]) -> None:
    """kafka-python's reassignment walk (``StickyAssignmentExecutor._perform_reassignments``), on the ``kafka``
    placement: partitions in :func:`_kafka_order`, those of resources with two subscribers or more, the placed ones
    first (unless a member held a partition it no longer subscribes to) then all of them: a partition whose holder
    holds at least two more than the least loaded subscriber of its resource goes to that subscriber (ties by id);
    passes repeat until one moves nothing. Each move lowers the sum of squared loads, so the walk ends. Balanced
    when it ends (no partition could go to a subscriber holding two fewer). Updates ``holdings`` and ``count``."""
    n, nres = len(count), len(problem.resources)
    subscribers = [[m for m in range(n) if x in problem.subs[m]] for x in range(nres)]
    owner = [-1] * problem.total
    for m, own in enumerate(holdings):
        for ps in own:
            mark(owner, ps, m)
    order = [x for x in _kafka_order(problem) if len(subscribers[x]) > 1]
    every = problem.ints_of(order)
    prev = problem.prev()
    placed = [p for p in every if prev[p] != owner[p]]
    revoked = any(len(problem.claims[m]) != len(problem.kept_claims(m)) for m in range(n))
    # per resource a heap of (load, member); a member's entry is pushed again at each change of its load, and an
    # entry whose load is not the member's current one is stale (dropped when it comes to the top)
    heaps = [[(count[m], m) for m in ms] for ms in subscribers]
    for heap in heaps:
        heapq.heapify(heap)

    def least(x: int) -> int:
        heap = heaps[x]
        while heap[0][0] != count[heap[0][1]]:
            heapq.heappop(heap)
        return heap[0][1]

    def changed(m: int) -> None:
        for x in problem.subs[m]:
            if len(subscribers[x]) > 1:
                heapq.heappush(heaps[x], (count[m], m))

    moved = False
    for ps in [every] if revoked else [placed, every]:
        while True:
            modified = False
            for p in ps:
                x = problem.resource_of(p)
                j, i = owner[p], least(x)
                if count[j] > count[i] + 1:
                    owner[p] = i
                    count[j] -= 1
                    count[i] += 1
                    changed(j)
                    changed(i)
                    modified = moved = True
            if not modified:
                break
    if moved:
        for own in holdings:
            for x in order:
                own[x].clear()
        for p in every:
            holdings[owner[p]][problem.resource_of(p)].append(p)


def _best_loads(problem: Problem, loads: list[int], holdings: list[list[list[int]]]) -> tuple[list[list[int]], int]:
    """The balancing's assignment (``holdings``, with these ``loads``), unless another Kafka-balanced one keeps more
    previous partitions: the one keeping the most for the same loads (exact for them: :class:`_Keeper`); then, in
    groups of at most ``_LOAD_SEARCH_MEMBERS`` members, one partition of load shifts from a member to another (the
    first such pair in member order) while that keeps more, until no shift does. Bounded: each shift keeps at least
    one more partition; a try is one min-cost flow on resources x members. Returns the assignment and how many
    previous partitions it keeps."""
    keeper = _Keeper(problem, holdings)
    prev = problem.prev()
    kept = sum(1 for m, own in enumerate(holdings) for ps in own for p in ps if prev[p] == m)
    best: tuple[dict[tuple[int, int], int], int] | None = None
    if kept < keeper.claims:
        found = keeper.solve(loads)
        if found is not None and found[1] > kept:
            best, kept = found, found[1]
    n = len(loads)
    while n <= _LOAD_SEARCH_MEMBERS and kept < keeper.claims:
        for a, b in product(range(n), repeat=2):
            if a != b and loads[b] > 0:
                trial = loads.copy()
                trial[a] += 1
                trial[b] -= 1
                found = keeper.solve(trial, above=kept)
                if found is not None and found[1] > kept:
                    best, kept, loads = found, found[1], trial
                    break
        else:
            break
    if best is None:
        return [sorted(p for ps in own for p in ps) for own in holdings], kept
    return keeper.assignment(best[0]), kept


class _Keeper:
    """Which previous partitions can stay for given member loads, the plan being Kafka-balanced.

    With the loads fixed, Kafka's balance is a rule on edges: member ``j`` may hold resource ``x`` only when no
    subscriber of ``x`` holds two or more fewer (``loads[j] <= min load of x's subscribers + 1``). Which partitions
    stay then is a transportation problem — resources supply their partitions, members take exactly their load
    over allowed edges, an edge carrying one of the member's kept partitions costs 0, any other 1 — solved exactly
    by a min-cost flow (:func:`_min_cost_flow`). Per edge the member keeps first its kept partitions that the
    balancing left it (``holdings``), then its other kept ones, then takes partitions the balancing gave it, then
    what is left of the resource, lowest first, in member id order.
    """

    def __init__(self, problem: Problem, holdings: list[list[list[int]]]) -> None:
        self.problem = problem
        self.holdings = holdings
        n, nres = len(problem.members), len(problem.resources)
        self.kept: list[list[list[int]]] = [[[] for _ in range(nres)] for _ in range(n)]
        for m in range(n):
            for p in problem.kept_claims(m):
                self.kept[m][problem.resource_of(p)].append(p)
            for x, own in enumerate(self.kept[m]):  # those the balancing left it first
                mine = set(holdings[m][x])
                own[:] = [p for p in own if p in mine] + [p for p in own if p not in mine]
        self.claims = sum(len(ps) for own in self.kept for ps in own)
        self.subscribers = [[m for m in range(n) if x in problem.subs[m]] for x in range(nres)]
        size = [problem.start[x + 1] - problem.start[x] for x in range(nres)]
        self.size = [size[x] if self.subscribers[x] else 0 for x in range(nres)]

    def solve(self, loads: Sequence[int], above: int = -1) -> tuple[dict[tuple[int, int], int], int] | None:
        """Partitions per (member, resource) and how many previous partitions stay; None: no balanced plan, or
        (without solving) none keeping more than ``above`` (each member keeps at most its load of its kept
        partitions of resources it may hold)."""
        n, nres = len(self.kept), len(self.size)
        floor = [min((loads[m] for m in ms), default=0) for ms in self.subscribers]
        if above >= 0:
            most = 0
            for m in range(n):
                own = self.kept[m]
                most += min(loads[m], sum(len(own[x]) for x in self.problem.subs[m] if loads[m] <= floor[x] + 1))
            if most <= above:
                return None
        sink = nres + n + 1  # nodes: 0 source, 1..nres resources, then the members, then the sink
        arcs: list[tuple[int, int, int, int]] = []  # (from, to, capacity, cost)
        edge: dict[tuple[int, int], int] = {}  # (member, resource) -> index of its first arc (its second follows)
        for x in range(nres):
            if self.size[x]:
                arcs.append((0, 1 + x, self.size[x], 0))
        for m in range(n):
            arcs.append((nres + 1 + m, sink, loads[m], 0))
            for x in sorted(self.problem.subs[m]):
                if self.size[x] and loads[m] <= floor[x] + 1:
                    edge[m, x] = len(arcs)
                    arcs.append((1 + x, nres + 1 + m, len(self.kept[m][x]), 0))
                    arcs.append((1 + x, nres + 1 + m, self.size[x], 1))
        flow = _min_cost_flow(sink + 1, arcs, 0, sink)
        take = {key: flow[k] + flow[k + 1] for key, k in edge.items()}
        if sum(take.values()) != sum(self.size):
            return None
        return take, sum(min(k, len(self.kept[m][x])) for (m, x), k in take.items())

    def assignment(self, take: dict[tuple[int, int], int]) -> list[list[int]]:
        problem = self.problem
        out: list[list[int]] = [[] for _ in self.kept]
        used = bytearray(problem.total)
        for (m, x), k in take.items():
            for p in self.kept[m][x][:k]:
                out[m].append(p)
                used[p] = 1
        for (m, x), k in take.items():
            extra = k - min(k, len(self.kept[m][x]))
            for p in self.holdings[m][x]:
                if extra and not used[p]:
                    out[m].append(p)
                    used[p] = 1
                    extra -= 1
        for x in range(len(self.size)):
            pool = (p for p in range(problem.start[x], problem.start[x + 1]) if not used[p])
            for m in self.subscribers[x]:
                k = take.get((m, x), 0)
                have = sum(1 for p in out[m] if problem.start[x] <= p < problem.start[x + 1])
                out[m].extend(islice(pool, k - have))
        for ints in out:
            ints.sort()
        return out


def _min_cost_flow(nodes: int, arcs: Sequence[tuple[int, int, int, int]], source: int, sink: int) -> list[int]:
    """Flow per arc of a maximum flow of least cost (successive shortest paths: Bellman-Ford on the residual graph,
    then a blocking flow along the shortest paths; the graphs here are resources x members, costs 0 or 1)."""
    graph: list[list[int]] = [[] for _ in range(nodes)]
    to: list[int] = []
    cap: list[int] = []
    cost: list[int] = []
    for a, b, c, w in arcs:  # arc 2k forward, 2k + 1 its residual
        graph[a].append(len(to))
        to.append(b)
        cap.append(c)
        cost.append(w)
        graph[b].append(len(to))
        to.append(a)
        cap.append(0)
        cost.append(-w)
    dist = [0] * nodes
    nxt = [0] * nodes  # per node, the next arc to try in this phase
    on_path = bytearray(nodes)

    def push(u: int, limit: int) -> int:
        """Push up to ``limit`` from ``u`` to the sink along arcs tight under ``dist``; how much was pushed."""
        if u == sink:
            return limit
        on_path[u] = 1
        arcs_u = graph[u]
        while nxt[u] < len(arcs_u):
            e = arcs_u[nxt[u]]
            v = to[e]
            if cap[e] and not on_path[v] and dist[v] == dist[u] + cost[e]:
                got = push(v, min(limit, cap[e]))
                if got:
                    cap[e] -= got
                    cap[e ^ 1] += got
                    on_path[u] = 0
                    return got
            nxt[u] += 1
        on_path[u] = 0
        return 0

    while True:
        dist[:] = [nodes * 2] * nodes  # above any path's cost (costs are 0 or 1, at most nodes arcs)
        dist[source] = 0
        queue = deque([source])
        queued = bytearray(nodes)
        while queue:  # Bellman-Ford, queue-driven (SPFA)
            u = queue.popleft()
            queued[u] = 0
            for e in graph[u]:
                v = to[e]
                if cap[e] and dist[u] + cost[e] < dist[v]:
                    dist[v] = dist[u] + cost[e]
                    if not queued[v]:
                        queued[v] = 1
                        queue.append(v)
        if dist[sink] == nodes * 2:
            return [cap[2 * k + 1] for k in range(len(arcs))]
        # push along every shortest path at once (a blocking flow on the arcs tight under ``dist``): a phase per
        # path length rather than an augmentation per path; tight arcs stay tight, so each path is a shortest one
        nxt[:] = [0] * nodes
        while push(source, sum(cap[e] for e in graph[source])):
            pass


def _rebalance(problem: Problem, holdings: list[list[list[int]]], count: list[int], prev: list[int]) -> None:
    n = len(count)
    subs = [sorted(s) for s in problem.subs]
    while True:
        best: tuple[int, int, int, int] | None = None  # (-gap, i, j, resource)
        order = sorted(range(n), key=lambda m: (count[m], problem.ids[m]))
        for i in order:
            for j in reversed(order):
                gap = count[j] - count[i]
                if gap < 2 or (best is not None and -gap > best[0]):
                    break
                res = next((x for x in subs[i] if holdings[j][x]), None)
                if res is not None:
                    candidate = (-gap, i, j, res)
                    if best is None or candidate < best:
                        best = candidate
                    break
        if best is None:
            return
        _, i, j, res = best
        ps = holdings[j][res]
        pick = max((p for p in ps if prev[p] == i), default=None)
        if pick is None:
            pick = max((p for p in ps if prev[p] != j), default=ps[-1])
        ps.remove(pick)
        holdings[i][res].append(pick)
        holdings[i][res].sort()
        count[j] -= 1
        count[i] += 1
