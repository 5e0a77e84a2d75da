"""The commit records outside the watched prefix, and those of the layout before (still read).

The backend tests run a member in real time on every backend (memory, SQLite, a real etcd), stepped by the test
itself (no worker thread: what the member does between two calls is exactly what the test makes it do).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.clock import SYSTEM_CLOCK
from apportion.group import GroupConfig, Keys, RoundsMember, committed, encode, group_status
from apportion.store import Event, Store, connect
from apportion.waiting import wait_for
from tests.group.harness import Harness
from tests.store.conftest import BACKENDS, fresh_store_url

GROUP = "g"
KEYS = Keys(GROUP)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with connect(fresh_store_url(request.param, tmp_path, request)) as opened:
        yield opened


def started(store: Store, member_id: str, partitions: int, **options: object) -> RoundsMember:
    """A member in real time that owns every partition of the group (the only member stepped)."""
    config = GroupConfig(partitions=partitions, settle_s=0.05, min_interval_s=0.1, ttl_s=30.0)
    member = RoundsMember(store, GROUP, member_id, config, clock=SYSTEM_CLOCK, **options)  # type: ignore[arg-type]

    def owns_all() -> bool:
        member.step()
        return len(member.owned()) == partitions

    wait_for(f"{member_id} to own all {partitions} partitions", owns_all, 60, poll_s=0.01)
    member.keepalive(SYSTEM_CLOCK.now())
    return member


# -- every backend ------------------------------------------------------------------------------------------------


def test_a_members_watch_receives_no_commit(store: Store) -> None:
    """Commits live outside the group's prefix: every member watches that prefix, and none is woken by a commit."""
    a = started(store, "a", 4)
    events: list[Event] = []
    with store.watch(KEYS.prefix) as watch:
        for p in range(4):
            a.commit(p, "one")
        a.commit(0, "two")
        store.put(KEYS.prefix + "probe", b"{}")  # then a change under the prefix, which the watch must see
        deadline = time.monotonic() + 20
        while not events and time.monotonic() < deadline:
            events += watch.wait(0.2)
    assert [e.kv.key for e in events] == [KEYS.prefix + "probe"]
    assert a.checkpoint(0) == "two"


def test_legacy_commit_records_are_read_until_a_commit_supersedes_them(store: Store) -> None:
    """A store written by the layout before (``/apportion/<group>/commit/<p>``): checkpoint(), status and
    committed() see its checkpoints; a commit writes the new record only, and the one written last wins."""
    for p in range(4):
        store.put(KEYS.legacy_commit(p), encode({"checkpoint": f"old-{p}", "epoch": 1, "member": "w0"}))
    a = started(store, "a", 4)
    assert [a.checkpoint(p) for p in range(4)] == ["old-0", "old-1", "old-2", "old-3"]
    assert group_status(store, GROUP)["partitions"]["1"]["checkpoint"] == "old-1"
    a.commit(0, "new-0")
    a.commit(1, "new-1")
    assert store.get(KEYS.legacy_commit(0)) is not None  # left in place, superseded
    assert committed(store, GROUP) == {0: "new-0", 1: "new-1", 2: "old-2", 3: "old-3"}
    status = group_status(store, GROUP)["partitions"]
    assert [status[str(p)]["checkpoint"] for p in range(4)] == ["new-0", "new-1", "old-2", "old-3"]
    store.put(KEYS.legacy_commit(1), encode({"checkpoint": "later", "epoch": 1, "member": "w0"}))  # written last
    assert a.checkpoint(1) == "later" and committed(store, GROUP)[1] == "later"
    assert a.checkpoint(0) == "new-0"


def test_commit_records_live_under_the_commit_root_not_the_group_prefix() -> None:
    h = Harness()
    a = h.add("a")
    h.run(2.0)
    for p in a.owned():
        a.commit(p, "x")
    assert not [kv.key for kv in h.store.range(KEYS.prefix) if "commit" in kv.key]
    assert KEYS.commits == "/apportion/.commit/g/" and KEYS.commit(3) == "/apportion/.commit/g/3"
    assert sorted(kv.key for kv in h.store.range(KEYS.commits)) == sorted(KEYS.commit(p) for p in range(12))
