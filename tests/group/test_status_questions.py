"""owners, owned_by and settled: the questions the demo, the benches and the process tests ask of a group."""

from __future__ import annotations

import uuid

import apportion
from apportion.group import owned_by, owners, settled
from apportion.waiting import wait_for


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
