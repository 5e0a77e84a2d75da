"""``PartitionColumn``: partitions of one resource held as indices, standing in for the tuple of Partitions
(``Member.owned`` from ``apportion assign``'s parser, ``Plan.assignment`` of one-resource plans)."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st

from apportion.assign import loads_request, plan
from apportion.model import AssignRequest, Member, Partition, PartitionColumn, Resource

indices = st.one_of(
    st.lists(st.integers(0, 50), max_size=8, unique=True),
    st.tuples(st.integers(0, 20), st.integers(0, 20)).map(lambda ab: range(min(ab), max(ab))),
)


@given(indices)
def test_a_column_is_equal_to_hashes_and_pickles_as_the_tuple_of_its_partitions(idx: list[int] | range) -> None:
    column = PartitionColumn("t", idx)
    as_tuple = tuple(Partition("t", i) for i in idx)
    assert column == as_tuple and as_tuple == column
    assert hash(column) == hash(as_tuple)
    assert pickle.loads(pickle.dumps(column)) == as_tuple and type(pickle.loads(pickle.dumps(column))) is tuple
    assert list(column) == list(as_tuple) and len(column) == len(as_tuple) and repr(column) == repr(as_tuple)
    assert column[1:] == as_tuple[1:] and isinstance(column[1:], PartitionColumn)
    if as_tuple:
        assert column[-1] == as_tuple[-1] and as_tuple[0] in column
    assert column + (Partition("u", 0),) == (*as_tuple, Partition("u", 0))  # noqa: RUF005 (what + gives)
    assert (Partition("u", 0),) + column == (Partition("u", 0), *as_tuple)  # noqa: RUF005
    assert column == PartitionColumn("t", list(idx)) and {column: 1}[as_tuple] == 1


def test_columns_of_other_partitions_differ() -> None:
    assert PartitionColumn("t", range(3)) != PartitionColumn("u", range(3))
    assert PartitionColumn("t", range(3)) != PartitionColumn("t", [0, 1, 3])
    assert PartitionColumn("t", range(3)) != (Partition("t", 0), Partition("t", 1))
    assert PartitionColumn("t", []) == PartitionColumn("u", []) == ()


def test_a_request_with_columns_plans_as_the_same_request_with_tuples() -> None:
    text = (
        '{"strategy": "sticky", "resources": {"t": 10}, "members": {"a": {"owned": ["t-0", "t-1", "t-2", "t-3"],'
        ' "generation": 1}, "b": {"owned": ["t-9", "t-5", "t-7"], "generation": 1}, "c": {}}}'
    )
    parsed = loads_request(text)
    assert isinstance(parsed.members[0].owned, PartitionColumn)
    assert isinstance(parsed.members[0].owned.indices, range)  # one run: no int per partition
    tuples = AssignRequest(
        "sticky",
        (Resource("t", 10),),
        tuple(Member(m.id, owned=tuple(m.owned), generation=m.generation) for m in parsed.members),
    )
    assert plan(parsed) == plan(tuples)
    assert plan(parsed).assignment == {
        "a": tuple(Partition("t", i) for i in (0, 1, 2, 3)),
        "b": tuple(Partition("t", i) for i in (5, 7, 9)),
        "c": tuple(Partition("t", i) for i in (4, 6, 8)),
    }
