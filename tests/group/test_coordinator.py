"""CoordinatorMember in virtual time: minimum cluster size, migrations, throttle, failover, manual rebalancing."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from apportion.errors import InvalidRequest
from apportion.group import Coordinator, CoordinatorMember, GroupConfig, Rounds, Static, group_status, new_member
from apportion.group._status_records import Waiting
from apportion.group._table import (
    FIRST_TABLE_MAX_SETTLES,
    planned_moves,
    read_table,
    request_rebalance,
    table_changes,
)
from apportion.group.internals import Entry, Keys, TableState, decode
from apportion.store import Delete
from tests.group.modes_harness import RR, ModeHarness


def coordinator_of(h: ModeHarness) -> str:
    found = [m.id for m in h.members.values() if isinstance(m, CoordinatorMember) and m.is_coordinator]
    assert len(found) == 1, f"expected one coordinator, found {found}"
    return found[0]


def table(h: ModeHarness) -> dict[int, Entry]:
    return {p: e for p, (e, _) in read_table(h.store, "g").items()}


def test_minimum_cluster_size_holds_assignment_back() -> None:
    h = ModeHarness()
    h.add_coordinated("a", min_members=3)
    h.add_coordinated("b", min_members=3)
    h.run(2.0)
    assert table(h) == {} and h.assignment() == {"a": [], "b": []}
    h.add_coordinated("c", min_members=3)
    h.run(1.0)
    assert sorted(len(p) for p in h.assignment().values()) == [4, 4, 4]
    assert h.assignment()["a"] == [0, 3, 6, 9]  # round-robin over the sorted members, as in the seed
    assert all(e.state is TableState.ONLINE for e in table(h).values())
    assert all(m.stable() for m in h.members.values())


def test_the_first_table_deals_the_members_in_the_order_they_registered_as_seed_1s_live_members_list() -> None:
    """Issue 45.6: seed 1's round robin walks ``membership.getLiveMembers()``, a list in registration order; the
    first table dealt in id order (a first whatever registered first). Registered c, a, b: c deals first."""
    h = ModeHarness()
    for mid in ("c", "a", "b"):
        h.add_coordinated(mid)
        h.run(0.05)  # registered before the next one starts (well within the first table's settle)
    h.run(1.0)
    assert h.assignment() == {"c": [0, 3, 6, 9], "a": [1, 4, 7, 10], "b": [2, 5, 8, 11]}


def test_members_starting_seconds_apart_share_the_first_table_and_nobody_revokes() -> None:
    """Issue 30.3: with the default min_members (1), three members registering 0.3 s apart got a first table that
    gave every partition to the first, which then revoked most of them; a wait of RST fixed 0.3 s, not the seconds
    a Deployment's pods start apart (issue 45.2). The first table now waits until no member has registered for the
    default first-table settle time (10 s), so it is laid out once, over all three started 2 s apart."""
    h = ModeHarness(dataclasses.replace(RR, partitions=30))
    for mid in ("a", "b", "c"):
        h.add_coordinated(mid, first_settle_s=None)
        h.run(2.0)
        assert table(h) == {}, "the first table waits for the members to stop arriving"
    h.run(Coordinator.DEFAULT_FIRST_SETTLE_S - 2.0 - 0.1)
    assert table(h) == {}, "10 s after the last registration, not before"
    h.run(0.5)
    assert sorted(len(p) for p in h.assignment().values()) == [10, 10, 10]
    assert h.assignment()["a"] == list(range(0, 30, 3))  # the seed's round robin, laid out once
    assert not [c for c in h.log.calls if c[0] in ("revoked", "lost")], "nobody gave anything back"


def test_members_that_keep_arriving_hold_the_first_table_back_at_most_ten_settle_times() -> None:
    """Each registration restarts the wait, but a group whose members keep coming (or one that crash-loops) gets its
    first table FIRST_TABLE_MAX_SETTLES RSTs after min_members were first live."""
    h = ModeHarness()
    h.add_coordinated("m0")
    started = h.clock.now()
    n = 1
    while not table(h):
        h.add_coordinated(f"m{n}")
        n += 1
        h.run(0.4)  # below settle_s (0.5): the quiet time never comes
    waited = h.clock.now() - started
    assert FIRST_TABLE_MAX_SETTLES * RR.settle_s <= waited <= FIRST_TABLE_MAX_SETTLES * RR.settle_s + 0.5


def test_below_the_minimum_or_before_the_first_table_the_group_is_waiting_and_rebalance_is_refused() -> None:
    h = ModeHarness()
    h.add_coordinated("a", min_members=3)
    h.run(1.0)
    assert group_status(h.store, "g").waiting == Waiting(3, 1, "waiting for 3 members (have 1)")
    for refused in (planned_moves, lambda store, group: request_rebalance(store, group, 0.0)):
        with pytest.raises(InvalidRequest, match=r"^group 'g' is waiting for 3 members \(have 1\): no partition"):
            refused(h.store, "g")
    assert h.store.get("/apportion/g/rebalance") is None
    h.add_coordinated("b", min_members=3)
    h.add_coordinated("c", min_members=3)
    h.run(0.1)
    waiting = group_status(h.store, "g").waiting
    assert waiting is not None and waiting.reason.startswith("settling: the first table follows once no")
    h.run(1.0)
    assert group_status(h.store, "g").waiting is None and len(table(h)) == 12
    assert planned_moves(h.store, "g") == []


def test_one_coordinator_at_a_time_and_a_successor_within_ttl() -> None:
    h = ModeHarness()
    for mid in ("a", "b", "c"):
        h.add_coordinated(mid)
    h.run(1.0)
    first = coordinator_of(h)
    h.crash(first)
    h.run(3.5)  # ttl 3 s
    assert coordinator_of(h) != first
    assert set(h.store_owners()) == set(range(12))
    assert first not in h.store_owners().values()


def test_killed_coordinator_mid_migration_is_finished_by_the_successor_without_double_owners() -> None:
    h = ModeHarness()
    for mid in ("a", "b"):
        h.add_coordinated(mid, max_in_flight=1)
    h.run(1.0)
    leader = coordinator_of(h)
    h.add_coordinated("c", max_in_flight=1)

    # step member by member until a migration is in flight, then kill the coordinator (a sticky re-plan moves
    # little: stepping everyone at once could start and finish a migration within one round of steps)
    def migrating() -> bool:
        return any(e.state is TableState.MIGRATING for e in table(h).values())

    for _ in range(200):
        for member in list(h.members.values()):
            member.step(h.clock.now())
            if migrating():
                break
        if migrating():
            break
        h.clock.advance(0.01)
    assert any(e.state is TableState.MIGRATING for e in table(h).values()), "expected a migration in flight"
    h.crash(leader)
    for _ in range(600):
        h.run(0.01)
        h.owners()  # no partition believed by two members at once
    assert coordinator_of(h) != leader
    assert all(e.state is TableState.ONLINE for e in table(h).values())
    owners = h.store_owners()
    assert set(owners) == set(range(12)) and leader not in owners.values()
    assert sorted(len(p) for p in h.assignment().values()) == [6, 6]


def test_moves_are_throttled_to_max_in_flight() -> None:
    h = ModeHarness()
    h.add_coordinated("a", max_in_flight=2)
    h.run(1.0)
    states = {p: e.state for p, e in table(h).items()}
    watch = h.store.watch("/apportion/g/table/")
    h.add_coordinated("b", max_in_flight=2)
    peak = 0
    for _ in range(300):
        h.run(0.01)
        for event in watch.poll():  # replay every table write: the peak of concurrent MIGRATING entries
            states[int(event.kv.key.rsplit("/", 1)[1])] = Entry.from_json(decode(event.kv.value)).state
            peak = max(peak, sum(1 for s in states.values() if s is TableState.MIGRATING))
    assert peak == 2
    assert sorted(len(p) for p in h.assignment().values()) == [6, 6]


def test_throttle_promotes_only_assigned_moves_with_an_owner() -> None:
    t = {p: Entry("a", None, TableState.ONLINE) for p in range(4)}
    changes = table_changes(t, {0: "b", 1: "b", 2: "a", 3: "b"}, ["a", "b"], 1)
    states = {p: e.state for p, e in changes.items()}
    assert states == {0: TableState.MIGRATING, 1: TableState.ASSIGNED, 3: TableState.ASSIGNED}


def test_manual_policy_gives_new_members_nothing_until_an_operator_rebalances() -> None:
    h = ModeHarness()
    for mid in ("a", "b"):
        h.add_coordinated(mid, rebalance="manual")
    h.run(1.0)
    h.add_coordinated("c", rebalance="manual")
    h.run(2.0)
    assert h.assignment()["c"] == []
    moves = planned_moves(h.store, "g")
    assert moves and all(m.target in ("a", "b", "c") for m in moves)
    assert h.assignment()["c"] == []  # a dry run changes nothing
    request_rebalance(h.store, "g", h.clock.now())
    h.run(2.0)
    assert sorted(len(p) for p in h.assignment().values()) == [4, 4, 4]
    assert h.store.get("/apportion/g/rebalance") is None


def test_manual_policy_still_moves_the_partitions_of_a_dead_member() -> None:
    h = ModeHarness()
    for mid in ("a", "b", "c"):
        h.add_coordinated(mid, rebalance="manual")
    h.run(1.0)
    victim = next(m for m in ("a", "b", "c") if m != coordinator_of(h))
    h.crash(victim)
    h.run(4.0)
    owners = h.store_owners()
    assert set(owners) == set(range(12)) and victim not in owners.values()


def test_automatic_policy_rebalances_when_a_member_joins() -> None:
    h = ModeHarness()
    for mid in ("a", "b"):
        h.add_coordinated(mid)
    h.run(1.0)
    h.add_coordinated("c")
    h.run(2.0)
    assert sorted(len(p) for p in h.assignment().values()) == [4, 4, 4]
    assert not [c for c in h.log.calls if c[0] == "lost"]


SEED_NODES = ("athens", "byzantium", "cyrene")


def holders(h: ModeHarness) -> dict[int, str | None]:
    return {p: e.holder for p, e in table(h).items()}


def seed_cluster(partitions: int) -> tuple[ModeHarness, list[dict[str, object]]]:
    """The seed's example: athens, byzantium and cyrene hold ``partitions`` round-robin; ``traced`` collects the
    coordinator's table decisions."""
    h = ModeHarness(GroupConfig(partitions=partitions, strategy="round_robin", settle_s=0.5, min_interval_s=1.0))
    traced: list[dict[str, object]] = []

    def tracer(kind: str, fields: Mapping[str, object]) -> None:
        if kind == "table":
            traced.append(dict(fields))

    for mid in SEED_NODES:
        h.add_coordinated(mid, tracer=tracer, min_members=3)
    h.run(1.0)
    assert h.assignment()["athens"] == list(range(partitions))[::3]  # the first table is the seed's round robin
    return h, traced


@pytest.mark.parametrize(("partitions", "bound"), [(9, 2), (30, 7)])
def test_a_joining_node_takes_only_the_surplus_in_the_seeds_example(partitions: int, bound: int) -> None:
    """Seed 1: 30 partitions on three nodes, ephesus joins: the average is about 7, so only the surplus moves to it —
    7 partitions (the lower bound), none between old nodes; round-robin again would move 21."""
    h, traced = seed_cluster(partitions)
    before = holders(h)
    h.add_coordinated("ephesus")
    h.run(3.0)
    after = holders(h)
    moved = {p: (before[p], after[p]) for p in before if before[p] != after[p]}
    assert len(moved) == bound
    assert {to for _, to in moved.values()} == {"ephesus"}  # only to the new node, never between old ones
    replan = [t for t in traced if t["full"] and t["moves"]]
    assert [(t["moves"], t["min_moves"]) for t in replan] == [(bound, bound)]  # reported: moves = the lower bound
    counts = sorted(len(p) for p in h.assignment().values())
    assert counts[-1] - counts[0] <= 1 and all(e.state is TableState.ONLINE for e in table(h).values())


def test_a_failed_node_moves_only_its_own_partitions_in_a_round_robin_table() -> None:
    h, _ = seed_cluster(30)
    h.add_coordinated("ephesus")
    h.run(3.0)
    before = holders(h)
    victim = next(m for m in SEED_NODES if m != coordinator_of(h))
    h.crash(victim)
    h.run(4.0)
    after = holders(h)
    assert {p for p in before if before[p] != after[p]} == {p for p, m in before.items() if m == victim}


def test_the_coordinator_replans_a_round_robin_table_with_sticky_and_other_strategies_with_their_own() -> None:
    from apportion.group._table import replan_strategy

    rr = GroupConfig(partitions=6, strategy="round_robin")
    assert replan_strategy(rr, {}) == ("round_robin", {})
    assert replan_strategy(rr, {0: Entry("a", None, TableState.ONLINE)}) == ("sticky", {})
    ranged = GroupConfig(partitions=6, strategy="range")
    assert replan_strategy(ranged, {0: Entry("a", None, TableState.ONLINE)})[0] == "range"


def in_flight(entries: dict[int, Entry]) -> list[int]:
    return [p for p, e in entries.items() if e.state is not TableState.ONLINE]


def manual_group_with_moves_in_flight() -> ModeHarness:
    """Manual policy: a and b hold 12 partitions, c joined; an operator's rebalance is being applied one migration at
    a time (only the coordinator has stepped since: its moves are written, none is finished)."""
    h = ModeHarness()
    for mid in ("a", "b"):
        h.add_coordinated(mid, rebalance="manual", max_in_flight=1)
    h.run(1.0)
    h.add_coordinated("c", rebalance="manual", max_in_flight=1)
    h.run(1.0)
    request_rebalance(h.store, "g", h.clock.now())
    h.members[coordinator_of(h)].step(h.clock.now())
    assert in_flight(table(h)), "expected moves in flight"
    return h


def test_a_rebalance_request_is_refused_while_moves_are_in_flight() -> None:
    h = manual_group_with_moves_in_flight()
    with pytest.raises(InvalidRequest, match=r"still moving \(partitions .*\): run it again once every partition"):
        request_rebalance(h.store, "g", h.clock.now())
    h.run(3.0)
    assert not in_flight(table(h))
    request_rebalance(h.store, "g", h.clock.now())  # accepted once every partition is ONLINE


def test_a_request_racing_with_moves_in_flight_waits_until_they_are_done() -> None:
    """A request written anyway (two operators at once) is queued: the coordinator finishes the moves in flight
    before it re-plans, instead of redirecting migrations half done."""
    h = manual_group_with_moves_in_flight()
    targets = {p: e.target for p, e in table(h).items() if e.target is not None}
    h.add_coordinated("d", rebalance="manual", max_in_flight=1)
    h.store.put("/apportion/g/rebalance", b'{"requested_at": 0}')
    while in_flight(table(h)):
        h.run(0.01)
        assert h.store.get("/apportion/g/rebalance") is not None, "the request was taken while moves were in flight"
        assert all(table(h)[p].holder == t for p, t in targets.items()), "a move in flight was redirected"
    assert h.assignment()["d"] == []
    h.run(3.0)
    assert h.store.get("/apportion/g/rebalance") is None
    assert sorted(len(p) for p in h.assignment().values()) == [3, 3, 3, 3]


def coordinated(*members: str) -> ModeHarness:
    """A coordinator-mode group of ``members`` (12 partitions, round robin) after a second of virtual time."""
    h = ModeHarness()
    for mid in members:
        h.add_coordinated(mid)
    h.run(1.0)
    return h


def failed(h: ModeHarness) -> dict[str, dict[str, object]]:
    from apportion.group import group_status

    return {mid: info.to_json() for mid, info in group_status(h.store, "g").failed.items()}


def test_status_lists_a_member_whose_lease_expired_with_when_and_what_it_owned() -> None:
    h = coordinated("a", "b", "c")
    victim = next(m for m in ("a", "b", "c") if m != coordinator_of(h))
    owned = h.members[victim].owned()
    crashed_at = h.clock.now()
    h.crash(victim)
    h.run(4.0)  # ttl 3 s
    record = failed(h)[victim]
    assert record["partitions"] == owned and owned
    assert crashed_at + 2.0 <= float(record["failed_at"]) <= crashed_at + 3.5  # when its lease ran out
    assert record["detected_by"] == coordinator_of(h)
    assert list(failed(h)) == [victim]


def test_a_graceful_leave_is_not_a_failure() -> None:
    h = coordinated("a", "b", "c")
    leaver = next(m for m in ("a", "b", "c") if m != coordinator_of(h))
    h.members[leaver].leave()
    h.crash(leaver)
    h.run(4.0)
    assert failed(h) == {}
    assert leaver not in h.store_owners().values()


def test_a_failed_coordinator_is_recorded_by_its_successor() -> None:
    h = coordinated("a", "b", "c")
    leader = coordinator_of(h)
    owned = h.members[leader].owned()
    h.crash(leader)
    h.run(4.0)
    assert failed(h)[leader]["partitions"] == owned
    assert failed(h)[leader]["detected_by"] == coordinator_of(h) != leader


def test_failed_members_are_kept_for_the_retention_bound_only() -> None:
    from apportion.group.internals import FAILED_RETENTION_S

    h = coordinated("a", "b")
    victim = next(m for m in ("a", "b") if m != coordinator_of(h))
    h.crash(victim)
    h.run(4.0)
    assert victim in failed(h)
    h.clock.advance(FAILED_RETENTION_S - 10.0)
    assert victim in failed(h)
    h.clock.advance(20.0)
    assert victim not in failed(h)  # its lease ended: the store dropped it, no coordinator needed


# -- issue 30.4: a stateful target acks a migration only once it has restored the state -----------------------------


def restoring_target(h: ModeHarness, member_id: str) -> tuple[CoordinatorMember, set[tuple[int, int]], list[Any]]:
    """A coordinator member whose state (per partition and epoch) is restored when the test says so."""
    done: set[tuple[int, int]] = set()
    asked: list[tuple[int, int]] = []

    def restored(partition: int, epoch: int) -> bool:
        asked.append((partition, epoch))
        return (partition, epoch) in done

    return h.add_coordinated(member_id, restored=restored), done, asked


def test_a_stateful_target_acks_a_migration_only_once_its_state_is_restored_under_its_epoch() -> None:
    """Seed 1: the data moves, then the table says ONLINE. A member given ``restored`` (a stateful pipeline) claims
    the partitions migrating to it, and its entries stay MIGRATING (the group unstable) until ``restored(p, epoch)``
    holds for the epoch it claimed them with; then each is acked ONLINE."""
    h = ModeHarness()
    h.add_coordinated("a", max_in_flight=12)
    h.run(1.0)
    b, done, asked = restoring_target(h, "b")
    h.run(2.0)
    moving = {p for p, e in table(h).items() if e.target == "b"}
    assert len(moving) == 6 and all(table(h)[p].state is TableState.MIGRATING for p in moving)
    assert set(b.owned()) == moving, "the target claims at once: it restores under the epoch it holds"
    epochs = {p: b.lease(p).epoch for p in moving}
    assert set(epochs.items()) <= set(asked), "asked about the epoch it holds"
    assert not b.stable() and not [c for c in h.log.calls if c[0] == "lost"]
    first = sorted(moving)[:3]
    done.update((p, epochs[p]) for p in first)
    h.run(0.5)
    assert {p for p, e in table(h).items() if e.state is TableState.ONLINE and e.owner == "b"} == set(first)
    done.update((p, epochs[p]) for p in moving)
    h.run(0.5)
    assert all(e.state is TableState.ONLINE for e in table(h).values())
    assert sorted(len(p) for p in h.assignment().values()) == [6, 6] and b.stable()


def test_a_restored_target_whose_owner_record_is_gone_never_writes_online() -> None:
    """The ack compares the target's owner record at the epoch it restored under: a target that lost the partition
    (its lease ended while it was frozen: here its record is deleted under it) never acks."""
    h = ModeHarness()
    h.add_coordinated("a", max_in_flight=12)
    h.run(1.0)
    b, done, _ = restoring_target(h, "b")
    h.run(2.0)
    p = min(b.owned())
    epoch = b.lease(p).epoch
    assert h.store.txn([], [Delete(Keys("g").owner(p))]).succeeded
    done.add((p, epoch))
    h.run(0.2)
    assert table(h)[p].state is TableState.MIGRATING and table(h)[p].target == "b"


def test_only_a_coordinator_member_takes_the_restored_gate() -> None:
    h = ModeHarness()
    for mode in (Rounds(), Static(1)):
        with pytest.raises(InvalidRequest, match="only a coordinator member acks a migration"):
            new_member(h.store, "g", "x", dataclasses.replace(RR, mode=mode), ordinal=0 if mode.name == "static"
                       else None, clock=h.clock, restored=lambda p, e: True)  # fmt: skip
