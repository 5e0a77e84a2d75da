"""The integer view of an :class:`AssignRequest` that every strategy works on, and the way back to a :class:`Plan`.

Partitions become global ints: resources sorted by name, partition ``(r, i)`` is ``start[r] + i``, so int order is
(resource, index) order. Members become their position in the id-sorted member list. Strategies compute, per member,
a sorted list of ints; :func:`to_plan` turns that into Partition tuples, moves and stats.

Previous ownership (documented once, used by every strategy and by :func:`apportion.assign.check`; the one
exception: ``high_availability`` keeps a stale claim that no newer claim contradicts, see its docstring):

1. Only members with a non-empty ``owned`` take part. Let ``G`` be the highest ``generation`` among them.
   A member whose ``generation`` is lower than ``G`` is stale: all its owned partitions are ignored (Kafka semantics:
   it missed a round, its view is out of date).
2. Partitions of unknown resources or with an index out of range are ignored (the resource shrank).
3. When several current-generation members claim the same partition, the member with the smallest id keeps the
   claim (ids compare as strings); the others' claims are ignored. A member listing a partition twice claims it once.
4. The resulting owner is the partition's *previous owner*. A partition whose new owner differs from a previous
   owner is a *move* (``source`` = previous owner); a partition without one is a placement (``source`` None) and
   is not a move. Previously owned partitions of a resource the owner no longer subscribes to must move (forced
   moves, :func:`forced_moves`), when anybody subscribes to it.

Moves and their lower bound — one definition for every strategy (``PlanStats``, :func:`apportion.assign.check`,
the simulator): ``stats.moved`` counts the moves; ``stats.min_moves`` is the fewest moves that any plan within the
strategy's balance (as :mod:`apportion.assign._check` states it) needs given the previous owners — the same number
:func:`apportion.assign.min_moves` computes from the request, through the strategy's ``min_moves`` in the
registry. Where the balance is "max - min <= 1 among a group's members over the group's partitions" (``sticky``,
``round_robin``, ``range``), :func:`balanced_min_moves` gives it exactly; ``sticky`` with mixed subscriptions,
``weighted`` with partition weights, ``rendezvous`` and ``high_availability`` with uneven subscriptions report a
lower bound (each strategy's docstring says which). ``high_availability`` may leave moves for later rounds:
``stats.deferred``; one round then moves at least ``model.round_lower_bound(min_moves, deferred)``.
"""

from __future__ import annotations

import gc
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain, pairwise, repeat, zip_longest
from operator import itemgetter, sub
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple, overload

from apportion.errors import InvalidRequest
from apportion.model import AssignRequest, Member, Move, Partition, PartitionColumn, Plan, PlanStats, Resource

if TYPE_CHECKING:
    from fractions import Fraction

_new_tuple = tuple.__new__
_first = itemgetter(0)
_second = itemgetter(1)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building millions of acyclic tuples (it would rescan them many times).

    Then put what was allocated meanwhile straight into the oldest generation (``gc.freeze()`` + ``gc.unfreeze()``:
    two list splices) instead of letting the next young collection scan it: the collector untracks plain tuples of
    atoms but never named tuples (Partition, Move), so that scan (~0.1 s per million) frees nothing, and it would
    be repeated when they reach the middle generation. Skipped when the process froze objects itself (a pre-fork
    server): ``gc.unfreeze()`` would release those too.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if enabled:
            gc.enable()


def exact(value: float) -> Fraction:
    """A float as the decimal the user most likely meant (0.2 -> 1/5), so bands do not round the wrong way."""
    from fractions import Fraction  # imported here: the count-balanced strategies never ask (fractions loads decimal)

    return Fraction(repr(float(value)))


def mark(target: bytearray | list[int], ints: Sequence[int], value: int) -> None:
    """``target[p] = value`` for every ``p`` of ``ints``: one slice assignment for a range, else a C-level map."""
    if isinstance(ints, range) and ints.step == 1:
        if len(ints):
            target[ints.start : ints.stop] = (
                bytes((value,)) * len(ints) if isinstance(target, bytearray) else [value] * len(ints)
            )
        return
    for _ in map(target.__setitem__, ints, repeat(value)):
        pass


def mark_all(target: bytearray, claims: Iterable[Sequence[int]], value: int) -> None:
    for ints in claims:
        mark(target, ints, value)


@dataclass(slots=True)
class Problem:
    """An AssignRequest in ints. Build with :meth:`of`; read-only afterwards."""

    request: AssignRequest
    resources: list[Resource]  # sorted by name
    start: list[int]  # global int of partition 0 of each resource; start[-1] == total
    rindex: dict[str, int]
    members: list[Member]  # sorted by id
    ids: list[str]
    subs: list[frozenset[int]]  # resource indices each member subscribes to (existing resources only)
    claims: list[Sequence[int]]  # resolved previous ownership per member, sorted ints (rules 1-3 above); a range
    # when the member owned one run of indices (a PartitionColumn of a range: no int objects, slices set its bytes)
    owned_tuples: list[Sequence[Partition] | None]  # the member's own sorted owned partitions when they equal claims
    _prev: list[int] | None = field(default=None)

    @property
    def total(self) -> int:
        return self.start[-1]

    @classmethod
    def of(cls, request: AssignRequest) -> Problem:
        resources = sorted(request.resources, key=lambda r: r.name)
        start = [0]
        rindex: dict[str, int] = {}
        for i, res in enumerate(resources):
            if res.name in rindex:
                raise InvalidRequest(f"resources.{res.name}", "duplicate resource name")
            if res.partitions < 0:
                raise InvalidRequest(f"resources.{res.name}", "partition count must be >= 0")
            rindex[res.name] = i
            start.append(start[-1] + res.partitions)
        members = sorted(request.members, key=lambda m: m.id)
        ids = [m.id for m in members]
        for a, b in pairwise(ids):
            if a == b:
                raise InvalidRequest(f"members.{a}", "duplicate member id")
        every = frozenset(range(len(resources)))
        subs = [
            every if m.subscriptions is None else frozenset(rindex[s] for s in m.subscriptions if s in rindex)
            for m in members
        ]
        problem = cls(request, resources, start, rindex, members, ids, subs, [], [])
        problem._resolve_claims()
        return problem

    # -- previous ownership ---------------------------------------------------------------------------------------

    def _ints(self, owned: Sequence[Partition]) -> tuple[Sequence[int], bool]:
        """Owned partitions as sorted ints (unknown resources, out-of-range indices dropped); True when ``owned``
        was already sorted and nothing was dropped (so the tuple itself can be reused in the output). A column's
        indices are read as they are (a range stays a range)."""
        if isinstance(owned, PartitionColumn):
            return self._column_ints(owned)
        names = set(map(_first, owned))
        if len(names) == 1:
            (name,) = names
            r = self.rindex.get(name)
            if r is None:
                return [], False
            idx = list(map(_second, owned))
            n = self.resources[r].partitions
            clean = True
            if idx and (min(idx) < 0 or max(idx) >= n):
                idx = [i for i in idx if 0 <= i < n]
                clean = False
            base = self.start[r]
            ints = [base + i for i in idx] if base else idx
            ordered = sorted(ints)
            return ordered, clean and ordered == ints
        ints = []
        for name, i in owned:
            r = self.rindex.get(name)
            if r is not None and 0 <= i < self.resources[r].partitions:
                ints.append(self.start[r] + i)
        ints.sort()
        return ints, False

    def _column_ints(self, owned: PartitionColumn) -> tuple[Sequence[int], bool]:
        r = self.rindex.get(owned.resource)
        idx = owned.indices
        if r is None or not idx:
            return [], r is not None
        n = self.resources[r].partitions
        base = self.start[r]
        if isinstance(idx, range) and idx.step == 1:
            if idx.start >= 0 and idx.stop <= n:
                return range(base + idx.start, base + idx.stop), True
            return range(base + max(idx.start, 0), base + min(idx.stop, n)), False
        ints = list(idx)
        if min(ints) < 0 or max(ints) >= n:
            return sorted(base + i for i in ints if 0 <= i < n), False
        shifted = [base + i for i in ints] if base else ints
        ordered = sorted(shifted)
        return ordered, ordered == shifted

    def _resolve_claims(self) -> None:
        live = [m for m in self.members if m.owned]
        top = max((m.generation for m in live), default=0)
        claims: list[Sequence[int]] = []
        tuples: list[Sequence[Partition] | None] = []
        for m in self.members:
            if m.owned and m.generation == top:
                ints, reusable = self._ints(m.owned)
                claims.append(ints)
                tuples.append(m.owned if reusable else None)
            else:
                claims.append([])
                tuples.append(None)
        count = sum(map(len, claims))
        if count:
            seen = bytearray(self.total)
            mark_all(seen, claims, 1)
            if seen.count(1) != count:  # a conflict (or a duplicate): the smallest member id keeps the claim
                seen = bytearray(self.total)
                for k, ints in enumerate(claims):
                    kept = []
                    for p in ints:
                        if not seen[p]:
                            seen[p] = 1
                            kept.append(p)
                    if len(kept) != len(ints):
                        claims[k] = kept
                        tuples[k] = None
        self.claims = claims
        self.owned_tuples = tuples

    def prev(self) -> list[int]:
        """Previous owner (member position) of every partition, -1 for none."""
        if self._prev is None:
            prev = [-1] * self.total
            for m, ints in enumerate(self.claims):
                mark(prev, ints, m)
            self._prev = prev
        return self._prev

    # -- partitions and subscriptions -----------------------------------------------------------------------------

    def resource_of(self, p: int) -> int:
        return bisect_right(self.start, p) - 1

    def eligible(self, m: int, p: int) -> bool:
        return self.resource_of(p) in self.subs[m]

    def kept_claims(self, m: int) -> Sequence[int]:
        """The member's previous partitions that it still subscribes to (the ones it may keep)."""
        subs = self.subs[m]
        if len(subs) == len(self.resources):
            return self.claims[m]
        return [p for p in self.claims[m] if self.resource_of(p) in subs]

    def groups(self) -> list[tuple[list[int], list[int]]]:
        """Resources grouped by identical subscriber sets: (resource indices, subscriber positions), by first name.

        Resources nobody subscribes to are left out (their partitions stay unassigned).
        """
        by_set: dict[tuple[int, ...], list[int]] = {}
        for r in range(len(self.resources)):
            subscribers = tuple(m for m, s in enumerate(self.subs) if r in s)
            if subscribers:
                by_set.setdefault(subscribers, []).append(r)
        return sorted(((rs, list(ms)) for ms, rs in by_set.items()), key=lambda g: g[0][0])

    def equal_subscriptions(self) -> bool:
        return all(s == self.subs[0] for s in self.subs)

    def interleaved(self, ints: Sequence[int]) -> Sequence[int]:
        """Sorted ``ints`` in seed 4's order "for data parallelism": by index, then resource (t0-0, t1-0, t0-1, t1-1,
        ...). ``ints`` itself when they all belong to one resource (the order is then the same)."""
        if not ints or self.resource_of(ints[0]) == self.resource_of(ints[-1]):
            return ints
        start = self.start
        runs = []
        for r in range(self.resource_of(ints[0]), self.resource_of(ints[-1]) + 1):
            a, b = bisect_left(ints, start[r]), bisect_left(ints, start[r + 1])
            if a < b:
                runs.append((r, ints[a:b]))
        first = runs[0][1][0] - start[runs[0][0]]
        if all(run[-1] - run[0] == len(run) - 1 and run[0] - start[r] == first for r, run in runs):
            # every resource's ints are consecutive indices from the same first one (as from scratch): deal them
            return [p for p in chain.from_iterable(zip_longest(*(run for _, run in runs), fillvalue=-1)) if p >= 0]
        nres = len(self.resources)
        keys: list[int] = []  # index * nres + resource: sorting the keys sorts by (index, resource)
        for r, run in runs:
            base = start[r] * nres - r
            keys.extend([p * nres - base for p in run])
        keys.sort()  # one sorted run per resource: a merge
        return [start[r] + i for i, r in map(divmod, keys, repeat(nres))]

    def ints_of(self, resources: Sequence[int]) -> list[int]:
        out: list[int] = []
        for r in resources:
            out.extend(range(self.start[r], self.start[r + 1]))
        return out

    def weight(self, p: int) -> float:
        r = self.resource_of(p)
        res = self.resources[r]
        return 1.0 if res.weights is None else float(res.weights[p - self.start[r]])

    def unit_weights(self) -> bool:
        return all(r.weights is None or all(w == 1 for w in r.weights) for r in self.resources)

    # -- back to values -------------------------------------------------------------------------------------------

    def partitions(self, ints: Sequence[int], everything: list[Partition] | None = None) -> Sequence[Partition]:
        """The Partitions of sorted ints: a :class:`PartitionColumn` of their indices with one resource (no tuple per
        partition), else tuples (built without Partition.__new__'s Python-level overhead)."""
        if len(self.resources) == 1:
            return PartitionColumn(self.resources[0].name, ints)
        if everything is not None:
            if isinstance(ints, range) and ints.step == 1:
                return tuple(everything[ints.start : ints.stop])
            return tuple(map(everything.__getitem__, ints))
        if len(self.resources) == 1:
            name = self.resources[0].name
            return tuple(map(_new_tuple, repeat(Partition), zip(repeat(name), ints)))
        out = []
        for p in ints:
            r = bisect_right(self.start, p) - 1
            out.append(_new_tuple(Partition, (self.resources[r].name, p - self.start[r])))
        return tuple(out)

    def everything(self) -> list[Partition]:
        out: list[Partition] = []
        for res in self.resources:
            out.extend(map(_new_tuple, repeat(Partition), zip(repeat(res.name), range(res.partitions))))
        return out


def forced_moves(problem: Problem) -> int:
    """Previous partitions whose owner no longer subscribes to them but someone does: every plan moves them."""
    subscribed = frozenset().union(*problem.subs)
    total = 0
    for m, claims in enumerate(problem.claims):
        if claims:
            for r in subscribed - problem.subs[m]:
                total += _count_in(problem, claims, r)
    return total


def balanced_min_moves(problem: Problem, groups: Sequence[tuple[Sequence[int], Sequence[int]]]) -> int:
    """The forced moves plus, for each group (resources, members), the fewest moves that leave every member with
    ``q`` or ``q + 1`` of the group's ``P`` partitions (``q, r = divmod(P, members)``)::

        sum(o_i) - (sum(min(o_i, q)) + min(r, #{i : o_i > q}))

    ``o_i`` counting member ``i``'s previous partitions in the group: each member keeps at most ``q`` of them, and
    at most ``r`` members keep a ``q + 1``-th; the constrained algorithm of seed 4 keeps exactly that many."""
    total = forced_moves(problem)
    everything = len(problem.resources)
    for resources, members in groups:
        if not members:
            continue
        q, r = divmod(sum(problem.start[x + 1] - problem.start[x] for x in resources), len(members))
        if len(resources) == everything:
            owned = [len(problem.claims[m]) for m in members]
        else:
            owned = [sum(_count_in(problem, problem.claims[m], x) for x in resources) for m in members]
        kept = sum(min(o, q) for o in owned) + min(r, sum(1 for o in owned if o > q))
        total += sum(owned) - kept
    return total


def _count_in(problem: Problem, claims: Sequence[int], resource: int) -> int:
    """How many of the sorted ``claims`` are partitions of ``resource``."""
    return bisect_left(claims, problem.start[resource + 1]) - bisect_left(claims, problem.start[resource])


def moves_of(problem: Problem, assignment: Sequence[Sequence[int]]) -> list[tuple[int, int, int]]:
    """(partition, previous owner or -1, new owner) for every partition whose owner changed, by partition."""
    prev = problem.prev()
    out: list[tuple[int, int, int]] = []
    for m, ints in enumerate(assignment):
        out.extend((p, prev[p], m) for p in ints if prev[p] != m)
    out.sort()
    return out


class MoveColumns(NamedTuple):
    """Moves as three parallel columns of ints, by partition: partition, previous owner (-1: none), new owner.
    Strategies that move a million partitions build these directly instead of a million row tuples."""

    partitions: Sequence[int]  # a list, or a range when every partition moves in order (sticky from scratch)
    sources: list[int]
    targets: list[int]

    @classmethod
    def of_rows(cls, rows: Sequence[tuple[int, int, int]]) -> MoveColumns:
        if not rows:
            return cls([], [], [])
        parts, sources, targets = zip(*rows, strict=True)
        return cls(list(parts), list(sources), list(targets))


class LazyMoves(Sequence[Move]):
    """``Plan.moves`` of the strategies built on :func:`to_plan`: a read-only sequence of :class:`Move` kept as int
    columns, made into Move tuples on first use (iteration, indexing, comparison, repr, pickling) and cached.

    Building a million Move tuples (and collecting them once) was most of a plan from scratch (every partition is
    then a placement), and the protocols read only the assignment and the stats. It compares equal to the tuple of
    its moves (and to another LazyMoves with the same moves), hashes like it, and pickles as that tuple.

    Safe to share between threads: one slot holds the columns or, once built, the tuple; a reader that finds the
    columns builds from them (two racing readers build equal tuples, the last one stored stays).
    """

    __slots__ = ("_len", "_state")

    def __init__(self, columns: _MoveSource, count: int) -> None:
        self._state: _MoveSource | tuple[Move, ...] = columns
        self._len = count

    def _items(self) -> tuple[Move, ...]:
        state = self._state
        if isinstance(state, tuple):
            return state
        with gc_paused():
            built = state.build()
        self._state = built
        return built

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Move: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Move, ...]: ...

    def __getitem__(self, index: int | slice) -> Move | tuple[Move, ...]:
        return self._items()[index]

    def __iter__(self) -> Iterator[Move]:
        return iter(self._items())

    def __contains__(self, value: object) -> bool:
        return value in self._items()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyMoves):
            return len(self) == len(other) and self._items() == other._items()
        if isinstance(other, tuple):
            return len(self) == len(other) and self._items() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._items())

    def __repr__(self) -> str:
        return repr(self._items())

    def __reduce__(self) -> tuple[type[tuple[Move, ...]], tuple[tuple[Move, ...]]]:
        return (tuple, (self._items(),))


@dataclass(frozen=True, slots=True)
class _MoveSource:
    """What :class:`LazyMoves` needs to build its Move tuples: the int columns, member ids, and the Partition
    values (``everything`` when the plan built them all, else resource names and starts to make them)."""

    columns: MoveColumns
    ids: list[str]
    names: list[str]
    start: list[int]
    everything: list[Partition] | None

    def build(self) -> tuple[Move, ...]:
        parts = self.columns.partitions
        if self.everything is not None:
            move_parts: Iterable[Partition] = map(self.everything.__getitem__, parts)
        elif len(self.names) == 1:
            move_parts = map(_new_tuple, repeat(Partition), zip(repeat(self.names[0]), parts))
        else:
            start, names = self.start, self.names
            rs = [bisect_right(start, p) - 1 for p in parts]
            indices = map(sub, parts, map(start.__getitem__, rs))
            move_parts = map(_new_tuple, repeat(Partition), zip(map(names.__getitem__, rs), indices, strict=True))
        source_names: list[str | None] = [None, *self.ids]  # index owner + 1: -1 (nobody) -> None
        column = self.columns.sources
        sources: Iterable[str | None] = (
            repeat(None, len(column))  # placements only (from scratch)
            if column.count(-1) == len(column)
            else map(source_names.__getitem__, map((1).__add__, column))
        )
        targets = map(self.ids.__getitem__, self.columns.targets)
        # tuple.__new__(Move, row) over zipped columns runs entirely in C
        return tuple(map(_new_tuple, repeat(Move), zip(move_parts, sources, targets, strict=True)))


def to_plan(
    problem: Problem,
    assignment: Sequence[Sequence[int]],
    moves: list[tuple[int, int, int]] | MoveColumns | None,
    min_moves: int,
) -> Plan:
    """Build the Plan from per-member sorted ints; ``moves`` as rows from :func:`moves_of` (computed when None) or
    as :class:`MoveColumns`; ``min_moves`` the strategy's lower bound (see the module docstring). The moves stay
    columns until first read (:class:`LazyMoves`)."""
    if moves is None:
        moves = moves_of(problem, assignment)
    columns = moves if isinstance(moves, MoveColumns) else MoveColumns.of_rows(moves)
    with gc_paused():
        moved_count = len(columns.partitions)
        everything = None
        if len(problem.resources) > 1:  # with one, each list is a column of its ints (Problem.partitions)
            placed = sum(map(len, assignment))
            fresh = sum(1 for m, ints in enumerate(assignment) if not _reusable(problem, m, ints))
            if placed and (moved_count * 4 > placed or fresh * 4 > len(assignment)):
                everything = problem.everything()
        table: dict[str, Sequence[Partition]] = {}
        for m, ints in enumerate(assignment):
            owned = problem.owned_tuples[m]
            if len(problem.resources) == 1:
                table[problem.ids[m]] = problem.partitions(ints)
            elif owned is not None and _reusable(problem, m, ints):
                table[problem.ids[m]] = owned[: len(ints)]
            else:
                table[problem.ids[m]] = problem.partitions(ints, everything)
    names = [r.name for r in problem.resources]
    source = _MoveSource(columns, problem.ids, names, problem.start, everything)
    sizes = list(map(len, assignment))
    stats = PlanStats(
        partitions=problem.total,
        members=len(assignment),
        min=min(sizes, default=0),
        max=max(sizes, default=0),
        moved=moved_count - columns.sources.count(-1),
        min_moves=min_moves,
    )
    return Plan(problem.request.strategy, MappingProxyType(table), LazyMoves(source, moved_count), stats)


def _reusable(problem: Problem, m: int, ints: Sequence[int]) -> bool:
    """True when the member's new partitions are a prefix of its (sorted) previous ones: reuse its tuple."""
    claims = problem.claims[m]
    return problem.owned_tuples[m] is not None and len(ints) <= len(claims) and claims[: len(ints)] == ints
