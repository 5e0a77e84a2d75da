"""``rendezvous`` and ``bounded_load``: coordination-free placement from a stable hash.

The one hash (:func:`stable_hash`): the first 8 bytes of BLAKE2b (``digest_size=8``) of the UTF-8 text, read as a
big-endian unsigned int. It is the same in every process and on every platform (unlike ``hash()`` of a str).

- ``rendezvous`` (highest random weight): partition ``<resource>-<index>`` goes to the subscribed member with the
  highest ``stable_hash("<member>\\0<resource>-<index>")`` (ties: smallest id). When a member joins only the
  partitions it now wins move; when one leaves only its partitions move. No balance bound beyond the statistical one.
- ``bounded_load`` (consistent hashing with bounded loads, Mirrokni, Thorup, Zadimoghaddam 2018): every member puts
  ``vnodes`` points (default 64) on a ring at ``stable_hash("<member>\\0<k>")``; partitions, in (resource, index)
  order, start at ``stable_hash("<resource>-<index>")`` and walk clockwise to the first subscribed member holding
  fewer than ``ceil(load_factor * P / N)`` partitions (``load_factor`` option, default 1.25, at least 1). So no
  member holds more than that bound. With mixed subscriptions, a partition whose subscribers are all full goes to
  its least loaded subscriber (the bound then holds per subscriber set only).

``stats.min_moves``: for ``rendezvous`` (no balance to reach) the forced moves; for ``bounded_load`` with equal
subscriptions the forced moves plus every member's previous partitions above the bound (exact), with mixed
subscriptions the forced moves (a lower bound). Neither strategy tries to reach it.
"""

from __future__ import annotations

import hashlib
import math
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Self

from apportion.assign._core import Problem, exact, forced_moves, to_plan
from apportion.assign._options import StrategyOptions, integer_option, number_option
from apportion.model import AssignRequest, Plan, partition_name


@dataclass(frozen=True, slots=True)
class RendezvousOptions(StrategyOptions):
    """``rendezvous`` takes no options."""

    STRATEGY: ClassVar[str] = "rendezvous"


@dataclass(frozen=True, slots=True)
class BoundedLoadOptions(StrategyOptions):
    """The options of ``bounded_load``: ``load_factor`` (the bound over the mean load) and ``vnodes`` (ring points
    per member)."""

    STRATEGY: ClassVar[str] = "bounded_load"
    load_factor: float = 1.25
    vnodes: int = 64

    @classmethod
    def _read(cls, options: Mapping[str, object]) -> Self:
        return cls(
            number_option(options, "load_factor", "must be a number >= 1", lambda x: 1 <= x < math.inf),
            integer_option(options, "vnodes", "must be an integer in [1, 4096]", lambda n: 1 <= n <= 4096),
        )


def stable_hash(text: str) -> int:
    """BLAKE2b-64 of the UTF-8 text as a big-endian unsigned int: apportion's one routing hash."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def _names(problem: Problem) -> list[str]:
    out: list[str] = []
    for res in problem.resources:
        out.extend(partition_name(res.name, i) for i in range(res.partitions))
    return out


def rendezvous(request: AssignRequest) -> Plan:
    problem = Problem.of(request)
    assignment: list[list[int]] = [[] for _ in problem.members]
    names = _names(problem)
    for resources, subscribers in problem.groups():
        prefixes = [problem.ids[m] + "\0" for m in subscribers]
        for p in problem.ints_of(resources):
            name = names[p]
            best = max(range(len(subscribers)), key=lambda k: (stable_hash(prefixes[k] + name), -k))
            assignment[subscribers[best]].append(p)
    for ints in assignment:  # groups of resources interleave: restore (resource, index) order
        ints.sort()
    return to_plan(problem, assignment, None, forced_moves(problem))


def rendezvous_min_moves(request: AssignRequest) -> int:
    """The lower bound of ``rendezvous`` (the registry's): the forced moves."""
    return forced_moves(Problem.of(request))


def bounded_capacity(partitions: int, members: int, load_factor: float) -> int:
    """``ceil(load_factor * partitions / members)``, computed exactly (1.1 * 10 is 11, not 11.000000000000002)."""
    return math.ceil(exact(load_factor) * partitions / members) if members else 0


def bounded_load(request: AssignRequest) -> Plan:
    problem = Problem.of(request)
    options = BoundedLoadOptions.parse(request.options)
    load_factor, vnodes = options.load_factor, options.vnodes
    n = len(problem.members)
    assignment: list[list[int]] = [[] for _ in range(n)]
    if n == 0:
        return to_plan(problem, assignment, None, 0)
    ring = sorted((stable_hash(f"{problem.ids[m]}\0{k}"), m) for m in range(n) for k in range(vnodes))
    points = [h for h, _ in ring]
    owners = [m for _, m in ring]
    groups = problem.groups()
    cap = problem_capacity(problem, load_factor)
    load = [0] * n
    names = _names(problem)
    for resources, subscribers in groups:
        allowed = set(subscribers)
        for p in problem.ints_of(resources):
            start = bisect_left(points, stable_hash(names[p]))
            chosen = -1
            for step in range(len(ring)):
                m = owners[(start + step) % len(ring)]
                if m in allowed and load[m] < cap:
                    chosen = m
                    break
            if chosen < 0:
                chosen = min(subscribers, key=lambda x: (load[x], x))
            load[chosen] += 1
            assignment[chosen].append(p)
    for ints in assignment:  # groups of resources interleave: restore (resource, index) order
        ints.sort()
    return to_plan(problem, assignment, None, _bounded_min_moves(problem, cap))


def bounded_load_min_moves(request: AssignRequest) -> int:
    """The lower bound of ``bounded_load`` (the registry's); see the module docstring."""
    problem = Problem.of(request)
    return _bounded_min_moves(problem, problem_capacity(problem, BoundedLoadOptions.parse(request.options).load_factor))


def problem_capacity(problem: Problem, load_factor: float) -> int:
    """The bound of ``bounded_load`` for ``problem``: over the partitions somebody subscribes to and every member."""
    universe = sum(len(problem.ints_of(g[0])) for g in problem.groups())
    return bounded_capacity(universe, len(problem.members), load_factor)


def _bounded_min_moves(problem: Problem, cap: int) -> int:
    forced = forced_moves(problem)
    if not problem.equal_subscriptions():
        return forced
    return forced + sum(max(0, len(problem.kept_claims(m)) - cap) for m in range(len(problem.members)))
