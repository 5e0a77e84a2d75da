"""A partition's one identity: ``Partition`` in the core, ``<resource>-<index>`` as text, written and split in one
place (``apportion.model``); the keys and JSON a group stores keep the text they always had."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.errors import InvalidRequest
from apportion.group import GroupConfig, committed, group_status, parse_resources
from apportion.group._keys import PlanRecord
from apportion.group.internals import Keys, decode
from apportion.model import (
    Partition,
    index_of,
    partition_name,
    partition_of,
    resource_of,
    split_partition_name,
)
from apportion.store import Put
from tests.group.harness import Harness

NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)


@given(NAMES, st.integers(0, 999_999))
def test_a_partitions_text_splits_back_into_its_resource_and_index_even_with_hyphens_in_the_name(
    resource: str, index: int
) -> None:
    text = partition_name(resource, index)
    assert str(Partition(resource, index)) == text
    assert Partition.parse(text) == Partition(resource, index) == partition_of(text, "ignored")
    assert split_partition_name(text) == (resource, str(index))
    assert resource_of(text) == resource and index_of(text) == index


@pytest.mark.parametrize("text", ["orders", "-3", "orders-", "orders-x", "orders-٣", "orders-3 "])
def test_text_that_names_no_partition_splits_to_nothing_and_parses_to_an_invalid_request(text: str) -> None:
    assert split_partition_name(text) is None and resource_of(text) is None
    with pytest.raises(InvalidRequest, match="is not <resource>-<index>"):
        Partition.parse(text)


def test_a_one_resource_groups_int_id_is_its_index_and_has_no_resource_in_its_text() -> None:
    assert partition_of(7, "orders") == Partition("orders", 7) and index_of(7) == 7 and resource_of(7) is None
    assert GroupConfig(partitions=3).pid(Partition("g", 2)) == 2
    assert GroupConfig(resources=parse_resources("eu-orders:3")).pid(Partition("eu-orders", 2)) == "eu-orders-2"


def test_keys_and_records_of_a_named_group_keep_the_text_old_stores_hold() -> None:
    """Records an earlier version wrote (literal bytes, a resource name with a hyphen) read back, and what this
    version writes for the same partitions has the same keys and bytes."""
    config = GroupConfig(resources=parse_resources("eu-orders:3,x:1"), settle_s=0.5, min_interval_s=1.0, ttl_s=3.0)
    h = Harness(config)
    h.store.txn(
        [],
        [
            Put("/apportion/g/commit/eu-orders-1", b'{"checkpoint":"41","epoch":1,"member":"old"}'),
            Put("/apportion/.commit/g/x-0", b'{"checkpoint":"7","epoch":2,"member":"old"}'),
        ],
    )
    assert committed(h.store, "g") == {"eu-orders-1": "41", "x-0": "7"}
    member = h.add("a")
    h.run(2.5)
    assert member.owned() == ["eu-orders-0", "eu-orders-1", "eu-orders-2", "x-0"]
    keys = Keys("g")
    owner = h.store.get("/apportion/.own/g/owner/eu-orders-2")
    assert keys.owner("eu-orders-2") == "/apportion/.own/g/owner/eu-orders-2" and owner is not None
    member.commit("eu-orders-2", "99")
    written = h.store.get("/apportion/.commit/g/eu-orders-2")
    assert written is not None and written.value == b'{"checkpoint":"99","epoch":1,"member":"a"}'
    assert committed(h.store, "g")["eu-orders-2"] == "99"
    latest = decode(h.store.get(keys.latest).value)  # type: ignore[union-attr]
    plan = PlanRecord.from_json(decode(h.store.get(keys.plan(latest["round"])).value))  # type: ignore[union-attr]
    assert plan.assignment == {"a": ["eu-orders-0", "eu-orders-1", "eu-orders-2", "x-0"]}
    assert sorted(group_status(h.store, "g").partitions) == ["eu-orders-0", "eu-orders-1", "eu-orders-2", "x-0"]
