"""owners, owned_by and settled: the questions the demo, the benches and the process tests ask of a group; which
partitions are moving and why one is not at rest (status and the dashboard of a large group)."""

from __future__ import annotations

import uuid

import apportion
from apportion.group import PartitionStatus, group_status, owned_by, owners, settled
from apportion.group.internals import Entry, Keys, TableState, encode, not_at_rest
from apportion.waiting import wait_for
from tests.group.large_group import build_group


def test_owners_owned_by_and_settled_follow_a_group_of_two_in_real_time() -> None:
    store = apportion.connect(f"memory://status-{uuid.uuid4().hex}")
    assert owners(store, "g") == {} and not owned_by(store, "g", {"a"}) and not settled(store, "g", {"a"})
    group = apportion.Group(store, "g", partitions=4, settle_s=0.05, min_interval_s=0.1, ttl_s=2.0)
    with group.join("a"), group.join("b"):
        wait_for("a and b to settle", lambda: settled(store, "g", {"a", "b"}), 10)
        found = owners(store, "g")
        assert sorted(found) == [0, 1, 2, 3] and sorted(map(str, found.values())) == ["a", "a", "b", "b"]
        assert owned_by(store, "g", {"a", "b", "c"}) and not owned_by(store, "g", {"a"})
        assert not settled(store, "g", {"a"}) and not settled(store, "g", {"a", "b", "c"})


def test_a_partition_not_where_the_plan_puts_it_is_moving_and_not_at_rest() -> None:
    """group_status says ``moving_to`` where the latest plan gives a partition to another member than its owner;
    not_at_rest words why a partition is not at rest (what status and the dashboard list of a large group)."""
    store = apportion.connect(f"memory://status-{uuid.uuid4().hex}")
    group = build_group(store, "g", members=3, partitions=12, unowned=1)
    keys = Keys("g")
    lease = store.get(keys.member("w1"))
    assert lease is not None
    store.put(keys.owner(0), encode({"epoch": 1, "member": "w1"}), lease.lease)  # the plan gives 0 to w0
    found = group_status(store, "g").partitions
    assert found["0"].moving_to == "w0" and found["11"].moving_to == "w2" and found["11"].owner is None
    assert [p for p, info in found.items() if info.moving_to is not None] == ["0", "11"]
    assert group.unowned == (11,)
    assert not_at_rest(found["0"]) == ["moving to w0"]
    assert not_at_rest(found["11"]) == ["unowned (planned for w2)"]
    assert not_at_rest(found["5"]) == []
    lapsing = PartitionStatus("w1", 1, None, lapsing=True, learners={"w2": None})
    assert not_at_rest(lapsing) == ["lapsing", "learners warming up"]
    assert not_at_rest(PartitionStatus(None, 1, None, waiting_for=2)) == ["waiting for ordinal 2"]
    entry = Entry("w1", "w2", TableState.MIGRATING)
    assert not_at_rest(found["5"], entry) == ["MIGRATING → w2"]
    assert not_at_rest(found["5"], Entry("w1", None, TableState.ONLINE)) == []
