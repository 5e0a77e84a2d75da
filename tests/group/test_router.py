"""apportion.Router, seed 1's client: a key's partition and owner from a watch-backed copy of the partition table
(no store read per route), NotEnoughMembers below the minimum cluster size."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import apportion
from apportion.errors import NotEnoughMembers
from apportion.group.internals import TableState, read_table
from apportion.routing import partition_for
from apportion.store import connect
from apportion.waiting import wait_for
from tests.cli.run import cli
from tests.group.harness import Harness
from tests.group.modes_harness import ModeHarness

KEYS = [f"order-{i}" for i in range(200)]


def holders(h: ModeHarness) -> dict[int, str | None]:
    return {p: e.holder for p, (e, _) in read_table(h.store, "g").items()}


@pytest.fixture
def h() -> ModeHarness:
    """A coordinator-mode group on a named memory store (the in-process CLI opens the same one): min_members 3."""
    harness = ModeHarness()
    harness.url = f"memory://{uuid.uuid4().hex}"  # type: ignore[attr-defined]
    harness.store = connect(harness.url, clock=harness.clock)  # type: ignore[assignment, attr-defined]
    for mid in ("a", "b"):
        harness.add_coordinated(mid, min_members=3)
    harness.run(1.0)
    return harness


@pytest.fixture
def store_calls(h: ModeHarness, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every store call made from now on (txn, get, range, watch), by name."""
    calls: list[str] = []
    for name in ("txn", "get", "range", "watch"):
        original = getattr(h.store, name)

        def counted(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(h.store, name, counted)
    yield calls


def test_route_raises_not_enough_members_below_the_minimum_cluster_size(h: ModeHarness) -> None:
    with apportion.Router(h.store, "g", follow=False) as router:
        with pytest.raises(NotEnoughMembers, match=r"2 live member\(s\), below its minimum cluster size of 3"):
            router.route("order-1")
        h.add_coordinated("c", min_members=3)
        h.run(1.0)
        router.refresh()
        partition, owner, state = router.route("order-1")
        assert partition == partition_for("order-1", 12)
        assert owner == holders(h)[partition] and state is TableState.ONLINE


def test_routes_come_from_the_cached_table_without_a_store_read_per_call(
    h: ModeHarness, store_calls: list[str]
) -> None:
    h.add_coordinated("c", min_members=3)
    h.run(1.0)
    store_calls.clear()  # the members' own calls so far
    with apportion.Router(h.store, "g", follow=False) as router:
        opened = len(store_calls)  # the two watches (the prefix, the owner records beside it) and one snapshot read
        routes = {key: router.route(key) for key in KEYS}
        assert len(store_calls) == opened == 3
    table = holders(h)
    assert all(r.owner == table[r.partition] and r.state is TableState.ONLINE for r in routes.values())
    assert all(r.epoch is not None for r in routes.values())  # the owner records name the same members


def test_the_watch_moves_routes_to_the_new_owner_after_a_migration(h: ModeHarness) -> None:
    h.add_coordinated("c", min_members=3)
    h.run(1.0)
    with apportion.Router(h.store, "g", follow=False) as router:
        h.add_coordinated("d", min_members=3)
        h.run(3.0)
        moved = {p for p, m in holders(h).items() if m == "d"}
        key = next(k for k in KEYS if partition_for(k, 12) in moved)
        assert router.route(key).owner != "d"  # not refreshed yet: the copy, not the store
        router.refresh()
        assert router.route(key).owner == "d"


def test_a_following_router_sees_changes_on_its_own(h: ModeHarness) -> None:
    with apportion.Router(h.store, "g") as router:
        h.add_coordinated("c", min_members=3)
        h.run(1.0)
        table = holders(h)

        def routed() -> bool:
            try:
                return all(router.route(k).owner == table[partition_for(k, 12)] for k in KEYS)
            except NotEnoughMembers:
                return False

        wait_for("the router's thread to apply the new table from the watch", routed, 10.0)


def test_a_rounds_group_routes_to_the_owner_record_and_has_no_minimum() -> None:
    h = Harness()
    for mid in ("a", "b"):
        h.add(mid)
    h.run(4.0)
    owners = h.owners()
    with apportion.Router(h.store, "g", follow=False) as router:
        for key in KEYS[:20]:
            route = router.route(key)
            assert route.owner == owners[route.partition] and route.state is None and route.epoch


def test_apportion_route_is_exit_1_in_one_line_below_the_minimum_cluster_size(h: ModeHarness) -> None:
    result = cli("route", "--store", h.url, "--group", "g", "order-1")  # type: ignore[attr-defined]
    assert result.code == 1
    assert "below its minimum cluster size of 3" in result.one_error_line()
