"""The fast paths of the JSON request (issue 18 item 1): msgspec decoding and columnar partition lists give the very
result of the standard library and the one-at-a-time walk, or step aside so that the walk words the exact error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.assign import dumps_plan, loads_request, parse_request, plan, plan_to_json
from apportion.assign._json import _columnar, _decode_fast, _walk
from apportion.errors import InvalidRequest
from apportion.model import Partition, PartitionColumn, Resource

BIG = 20_000
RESOURCES = {"t": Resource("t", BIG), "t-x": Resource("t-x", 5), "u\n": Resource("u\n", 3), 'é"': Resource('é"', 4)}


def big_request(owned: list[Any]) -> str:
    return json.dumps({"strategy": "sticky", "resources": {"t": BIG, "u": 3}, "members": {"C0": {"owned": owned}}})


def error_of(text: str | bytes) -> str:
    with pytest.raises(InvalidRequest) as caught:
        loads_request(text)
    return str(caught.value)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (5, "members.C0.owned[16543]: must be a '<resource>-<index>' string, got 5"),
        (None, "members.C0.owned[16543]: must be a '<resource>-<index>' string, got None"),
        ("t-20000", "members.C0.owned[16543]: 't-20000' is out of range (t has 20000 partitions)"),
        ("t-12", "members.C0.owned[16543]: 't-12' is listed twice"),
        ("t-7x", "members.C0.owned[16543]: 't-7x' is not <resource>-<index> (index in ASCII digits)"),
        ("t-", "members.C0.owned[16543]: 't-' is not <resource>-<index> (index in ASCII digits)"),
        ("t-+7", "members.C0.owned[16543]: 't-+7' is not <resource>-<index> (index in ASCII digits)"),
        ("t-\u0661", "members.C0.owned[16543]: 't-\u0661' is not <resource>-<index> (index in ASCII digits)"),
        ("v-1", "members.C0.owned[16543]: unknown resource 'v'"),
        ("u-3", "members.C0.owned[16543]: 'u-3' is out of range (u has 3 partitions)"),
        ("t-1\nt-2", "members.C0.owned[16543]: unknown resource 't-1\\nt'"),
    ],
)
def test_a_bad_partition_deep_in_a_big_list_is_named_by_its_exact_path(bad: object, message: str) -> None:
    owned: list[Any] = [f"t-{i}" for i in range(BIG - 1)]
    owned[16543] = bad
    assert error_of(big_request(owned)) == message
    with pytest.raises(InvalidRequest) as caught:  # the Python API: the same message
        parse_request(json.loads(big_request(owned)))
    assert str(caught.value) == message


def test_a_big_valid_list_in_any_order_of_several_resources_parses_as_the_walk_does() -> None:
    owned = [f"t-{i}" for i in range(BIG - 1, -1, -3)] + [
        "u-2",
        "u-0",
        "t-000000000002",
    ]  # indices 1, 4, ... from the top
    request = loads_request(big_request(owned))
    assert request.members[0].owned == tuple(Partition.parse(p) for p in owned)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("t-16543", -1, "members.C0.lag.t-16543: must be an integer >= 0, got -1"),
        ("t-16543", True, "members.C0.lag.t-16543: must be an integer >= 0, got True"),
        ("t-x", 5, "members.C0.lag.t-x: 't-x' is not <resource>-<index> (index in ASCII digits)"),
        ("t-20000", 5, "members.C0.lag.t-20000: 't-20000' is out of range (t has 20000 partitions)"),
    ],
)
def test_a_bad_lag_deep_in_a_big_map_is_named_by_its_exact_path(key: str, value: object, message: str) -> None:
    lag: dict[str, Any] = {f"t-{i}": i for i in range(BIG)}
    del lag["t-16543"]
    lag[key] = value
    text = json.dumps({"strategy": "high_availability", "resources": {"t": BIG}, "members": {"C0": {"lag": lag}}})
    assert error_of(text) == message


def test_a_big_lag_map_parses_as_the_walk_does() -> None:
    lag = {f"t-{i}": i * 7 for i in range(BIG - 1, -1, -2)} | {"t-0000002": 3}
    text = json.dumps({"strategy": "high_availability", "resources": {"t": BIG}, "members": {"C0": {"lag": lag}}})
    assert loads_request(text).members[0].lag == {Partition.parse(k): v for k, v in lag.items()}


@pytest.mark.parametrize(
    "text",
    [
        '{"strategy": "sticky", "members": {"a": {}, "a": {}}}',
        '{"strategy": "sticky", "members": {"a" :{}, "b": {}, "a"\n:{}}}',
        '{"strategy": "sticky", "members": {"a": {}, "\\u0061": {}}}',
        '{"strategy": "sticky", "members": {"a:b": {"rack": "x", "rack": "y"}}}',
        '{"strategy": "sticky", "resources": {"t": 2}, "members": {"a": {"owned": [{"x": 1, "x": 2}]}}}',
    ],
)
def test_duplicate_keys_are_refused_whatever_decodes_them(text: str) -> None:
    assert "duplicate key (ids must be unique)" in error_of(text)


keys = st.text(alphabet='ab:" \\', max_size=3)
json_values = st.recursive(
    st.none() | st.integers() | st.text(alphabet='ab:"\\ \n', max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.lists(st.tuples(keys, inner), max_size=3),
    max_leaves=12,
)


def to_text(value: Any) -> str:
    """JSON text, where a list of pairs is an object that may repeat a key."""
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        return "{" + ", ".join(f"{json.dumps(k)}: {to_text(v)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(to_text(v) for v in value) + "]"
    return json.dumps(value)


def has_duplicates(value: Any) -> bool:
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        names = [k for k, _ in value]
        return len(set(names)) < len(names) or any(has_duplicates(v) for _, v in value)
    return isinstance(value, list) and any(has_duplicates(v) for v in value)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_fast_decoding_gives_the_standard_result_or_steps_aside(value: Any) -> None:
    text = to_text(value)
    fast = _decode_fast(text)
    if has_duplicates(value):
        assert fast is None
    elif fast is not None:
        assert fast == json.loads(text)


partition_texts = st.lists(
    st.sampled_from(["t-", "t-x-", "u\n-", 'é"-', "v-", "", "-", "t-1\nt-"]).flatmap(
        lambda prefix: st.text(alphabet="0123\n-x\u0661", min_size=0, max_size=3).map(prefix.__add__)
    )
    | st.integers(0, 3).map(lambda i: f"t-{i}")
    | st.just(7),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(partition_texts)
def test_a_column_accepted_fast_is_what_the_walk_accepts(raw: list[Any]) -> None:
    fast = _columnar(raw, RESOURCES)
    try:
        walked = _walk(raw, "owned", RESOURCES)
    except InvalidRequest:
        assert fast is None
    else:
        assert fast is None or (list(fast) == walked and all(type(p) is Partition for p in fast))


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(["sticky", "high_availability", "round_robin"]), st.integers(0, 4), st.integers(0, 12))
def test_dumps_plan_is_plan_to_json_as_text(strategy: str, members: int, partitions: int) -> None:
    text = json.dumps(
        {
            "strategy": strategy,
            "resources": {"t": partitions, 'é"-x': {"partitions": 3, "stateful": True}},
            "members": {f"m\\{i}": {"owned": [f"t-{i}"] if i < partitions else []} for i in range(members)},
        }
    )
    result = plan(loads_request(text))
    assert json.loads(dumps_plan(result)) == plan_to_json(result)


ONE = {"t": Resource("t", 300)}


def members_request(lists: list[list[Any]]) -> str:
    members = {f"m{k}": {"owned": owned, "generation": 1} for k, owned in enumerate(lists)}
    return json.dumps({"strategy": "sticky", "resources": {"t": 300}, "members": members})


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (5, "members.m2.owned[1]: must be a '<resource>-<index>' string, got 5"),
        ("t-300", "members.m2.owned[1]: 't-300' is out of range (t has 300 partitions)"),
        ("t-200", "members.m2.owned[1]: 't-200' is listed twice"),
        ("t- 7", "members.m2.owned[1]: 't- 7' is not <resource>-<index> (index in ASCII digits)"),
        ("t--7", "members.m2.owned[1]: unknown resource 't-'"),
        ("u-1", "members.m2.owned[1]: unknown resource 'u'"),
    ],
)
def test_a_bad_partition_among_many_members_lists_is_named_by_its_member_and_position(bad: Any, message: str) -> None:
    lists: list[list[Any]] = [[f"t-{i}" for i in range(k * 50, k * 50 + 50)] for k in range(6)]
    lists[2] = ["t-200", bad, "t-201"]
    assert error_of(members_request(lists)) == message


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 299), max_size=6), max_size=5))
def test_every_members_list_checked_together_parses_as_each_list_alone(indices: list[list[int]]) -> None:
    lists = [[f"t-{i}" for i in owned] for owned in indices]
    try:
        walked = [tuple(_walk(owned, "owned", ONE)) for owned in lists]
    except InvalidRequest:
        with pytest.raises(InvalidRequest):
            loads_request(members_request(lists))
        return
    request = loads_request(members_request(lists))
    assert [m.owned for m in request.members] == walked
    assert [list(m.owned) for m in request.members] == [list(w) for w in walked]


@pytest.mark.parametrize("colon", ['" :', '"\n:', '"\t :', '"\r:'])
def test_a_duplicate_key_with_whitespace_before_its_colon_is_refused(colon: str) -> None:
    text = '{"strategy": "sticky", "resources": {"t": 3}, "members": {"a": {}, "a' + colon + ' {"rack": "x\\":"}}}'
    assert error_of(text) == "a: duplicate key (ids must be unique)"


# The raw path (issue 31 item 4): members' `owned` lists read from their JSON text, no string made per partition.

RAW_RESOURCES = {"t": 40, "t-x": 5, 'é"': 4, "u1": 12}
separators = st.sampled_from([", ", ",", " ,", ",\n  ", "\t,\t"])
list_texts = st.one_of(
    st.lists(st.integers(0, 45), max_size=8),  # in range or not, repeated or not, in any order
    st.integers(0, 30).flatmap(lambda low: st.integers(low, low + 9).map(lambda high: list(range(low, high + 1)))),
).flatmap(
    lambda indices: st.tuples(
        st.just(indices),
        st.sampled_from(sorted(RAW_RESOURCES)),
        separators,
        st.sampled_from(["plain", "zero", "escape", "space", "other", "number", "empty"]),
        st.integers(0, 8),
    )
)


def list_text(indices: list[int], resource: str, sep: str, twist: str, at: int) -> str:
    """A JSON list of ``<resource>-<index>`` strings in the layout given, with one twist at position ``at``."""
    items = [json.dumps(f"{resource}-{i}", ensure_ascii=False) for i in indices]
    if items and at < len(items):
        index = indices[at]
        items[at] = {
            "plain": items[at],
            "zero": json.dumps(f"{resource}-0{index}", ensure_ascii=False),  # the walk accepts it, the raw path not
            "escape": json.dumps(f"{resource}-{index}"),  # é as \u00e9
            "space": json.dumps(f"{resource}- {index}"),
            "other": json.dumps(f"t-x-{index}"),
            "number": str(index),
            "empty": json.dumps(f"{resource}-", ensure_ascii=False),  # no index at all
        }[twist]
    return "[" + sep.join(items) + "]"


@settings(max_examples=400, deadline=None)
@given(st.lists(list_texts, max_size=4), separators)
def test_the_raw_path_gives_the_general_result_or_steps_aside(lists: list[Any], sep: str) -> None:
    from apportion.assign._json import _loads_raw, _loads_text

    members = sep.join(f'"m{k}": {{"owned": {list_text(*spec)}, "generation": 1}}' for k, spec in enumerate(lists))
    resources = json.dumps(RAW_RESOURCES, ensure_ascii=False)
    text = f'{{"strategy": "sticky", "resources": {resources}, "members": {{{members}}}}}'
    try:
        general = _loads_text(text)
    except InvalidRequest as exc:
        assert error_of(text) == str(exc)  # the same one-line error, whichever path read it first
        return
    try:
        raw = _loads_raw(text.encode())
    except InvalidRequest:
        raw = None
    assert raw is None or raw == general
    assert loads_request(text) == general == loads_request(text.encode())
    if all(twist == "plain" and len(set(indices)) == len(indices) and max(indices, default=0) < RAW_RESOURCES[name]
           for indices, name, _, twist, _ in lists):  # fmt: skip
        assert raw is not None  # every list in the exact form: the raw path read it


def test_an_index_left_out_of_a_one_string_list_is_worded_not_raised() -> None:
    assert error_of(b'{"strategy": "sticky", "resources": {"t": 4}, "members": {"a": {"owned": ["t-"]}}}') == (
        "members.a.owned[0]: 't-' is not <resource>-<index> (index in ASCII digits)"
    )


@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":")])
def test_a_big_request_of_blocks_and_shuffled_lists_takes_the_raw_path(separators: tuple[str, str]) -> None:
    from apportion.assign._json import _loads_raw, _loads_text

    shuffled = [f"t-{(i * 7919) % BIG}" for i in range(500)]
    blocks = [[f"t-{i}" for i in range(k * 100, (k + 1) * 100)] for k in range(50)]
    members = {f"m{k}": {"owned": block, "generation": 3} for k, block in enumerate(blocks)}
    members |= {"s": {"owned": shuffled, "capacity": 2, "rack": "a"}, "e": {"owned": []}, "n": {}, "z": None}
    text = json.dumps({"strategy": "sticky", "resources": {"t": BIG}, "members": members}, separators=separators)
    raw = _loads_raw(text.encode())
    assert raw is not None and raw == _loads_text(text)
    assert raw.members[0].owned == tuple(Partition("t", i) for i in range(100))
    assert isinstance(raw.members[0].owned, PartitionColumn) and isinstance(raw.members[0].owned.indices, range)


@pytest.mark.parametrize(
    ("member", "message"),
    [
        ('{"owned": ["t-1", "t-1"]}', "members.m.owned[1]: 't-1' is listed twice"),
        ('{"owned": ["t-1", "t-20000"]}', "members.m.owned[1]: 't-20000' is out of range (t has 20000 partitions)"),
        ('{"owned": ["t-1"], "generation": -1}', "members.m.generation: must be an integer >= 0, got -1"),
        ('{"owned": ["t-1"], "capacity": true}', "members.m.capacity: must be a positive number, got True"),
        ('{"owned": ["t-1"], "owned": ["t-2"]}', "owned: duplicate key (ids must be unique)"),
        ('{"owned": [{"a": 1, "a": 2}]}', "a: duplicate key (ids must be unique)"),
        ('{"owned": ["t-1"], "colour": 1}', "members.m.colour: unknown field (expected one of"),
        ('{"owned": "t-1"}', "members.m.owned: must be a list of '<resource>-<index>' strings"),
    ],
)
def test_an_error_the_raw_path_meets_is_worded_as_the_general_path_words_it(member: str, message: str) -> None:
    text = f'{{"strategy": "sticky", "resources": {{"t": {BIG}}}, "members": {{"k": {{}}, "m": {member}}}}}'
    assert error_of(text).startswith(message)
    assert error_of(text.encode()).startswith(message)


def test_an_index_of_more_digits_than_int_reads_is_worded_not_raised() -> None:
    for owned in ([f"t-{'1' * 5000}"], ["t-1", f"t-{'1' * 5000}"], [f"t-{'1' * 5000}", "t-1"]):
        message = error_of(big_request(owned))
        assert "index above the maximum" in message and len(message) < 300


def test_bytes_that_are_not_utf8_are_refused_as_input() -> None:
    assert error_of(b'{"strategy": "\xff"}') == "input: not UTF-8 text (byte 14): a JSON request is"
