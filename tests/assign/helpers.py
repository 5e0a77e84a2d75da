"""Builders shared by the assign tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from apportion.assign import check, plan
from apportion.model import AssignRequest, Member, Partition, Plan, Resource


def parts(text: str) -> tuple[Partition, ...]:
    """'t-0 t-1' -> partitions."""
    return tuple(Partition.parse(x) for x in text.split())


def request(
    strategy: str,
    resources: Mapping[str, int],
    members: Iterable[Member],
    **options: object,
) -> AssignRequest:
    return AssignRequest(strategy, tuple(Resource(n, c) for n, c in resources.items()), tuple(members), options)


def planned(req: AssignRequest) -> Plan:
    """Plan and insist on every invariant of the strategy."""
    result = plan(req)
    assert check(req, result) == [], check(req, result)
    return result


def names(result: Plan, member: str) -> list[str]:
    return [str(p) for p in result.assignment[member]]


def previous(result: Plan, generation: int = 1, **extra: Member) -> list[Member]:
    """The members of ``result`` owning what it gave them (for the next round)."""
    return [Member(m, owned=ps, generation=generation) for m, ps in result.assignment.items()]
