"""The checker itself catches broken plans (otherwise the property tests would prove nothing)."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.assign import check, check_or_raise, plan
from apportion.errors import PlanViolation
from apportion.model import Member, Partition, PartitionColumn

from .helpers import parts, request


def test_check_flags_a_partition_with_two_owners_and_one_without() -> None:
    req = request("sticky", {"t": 4}, [Member("a"), Member("b")])
    good = plan(req)
    bad = replace(good, assignment=MappingProxyType({"a": parts("t-0 t-1"), "b": parts("t-1 t-2")}))
    assert any("owned by both" in v for v in check(req, bad))
    with pytest.raises(PlanViolation):
        check_or_raise(req, bad)


def test_check_flags_an_unbalanced_or_needlessly_moving_sticky_plan() -> None:
    members = [Member("a", owned=parts("t-0 t-1"), generation=1), Member("b", owned=parts("t-2 t-3"), generation=1)]
    req = request("sticky", {"t": 4}, members)
    swapped = plan(request("round_robin", {"t": 4}, members))
    problems = check(req, replace(swapped, strategy="sticky"))
    assert any("least possible" in v for v in problems)
    lopsided = replace(plan(req), assignment=MappingProxyType({"a": parts("t-0 t-1 t-2"), "b": parts("t-3")}))
    assert any("unbalanced" in v for v in check(req, lopsided))


def test_check_flags_an_unsubscribed_owner() -> None:
    req = request("sticky", {"t": 1, "u": 1}, [Member("a", frozenset({"t"})), Member("b")])
    bad = replace(plan(req), assignment=MappingProxyType({"a": (Partition("t", 0), Partition("u", 0)), "b": ()}))
    assert any("without subscribing" in v for v in check(req, bad))


@given(
    st.lists(st.lists(st.integers(-2, 9), max_size=6), min_size=2, max_size=2),
    st.sampled_from(["t", "u"]),
    st.booleans(),
)
def test_a_plan_of_columns_gets_the_violations_of_the_same_plan_of_tuples(
    lists: list[list[int]], resource: str, as_range: bool
) -> None:
    """``check`` reads a column's indices directly when it is well formed (issue 27: the close of a 100,000-partition
    round); any column, well formed or not (out of range, unsorted, repeated, owned twice, unsubscribed), gets
    exactly the violations the same partitions as tuples get."""
    req = request("sticky", {"t": 8, "u": 2}, [Member("a", frozenset({"t"})), Member("b", frozenset({"t"}))])
    good = plan(req)
    columns = {m: PartitionColumn(resource, ix) for m, ix in zip("ab", lists, strict=True)}
    if as_range:
        columns["a"] = PartitionColumn(resource, range(0, 8, 2))
    tuples = {m: tuple(Partition(c.resource, i) for i in c.indices) for m, c in columns.items()}
    by_column = check(req, replace(good, assignment=MappingProxyType(columns)))
    by_tuple = check(req, replace(good, assignment=MappingProxyType(tuples)))
    assert by_column == by_tuple
