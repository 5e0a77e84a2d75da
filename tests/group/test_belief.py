"""Belief is a timer: on_lost at the local deadline however the store behaves, and no commit after on_lost.

Virtual time throughout: the memory store behind a member-private proxy that can be unreachable (fails at once) or
hang (no answer until the caller's time limit), as in the simulator.
"""

from __future__ import annotations

import pytest

from apportion.errors import Fenced, InvalidRequest
from apportion.group import GroupConfig, RoundsMember, group_status
from apportion.group._keys import encode, owner_value
from apportion.group.internals import Keys
from apportion.sim import SimConfig, Simulation, check_trace
from apportion.sim._faults import DriftClock, FlakyStore
from apportion.store import Store, renew_interval_s
from apportion.store._types import KeyValue
from tests.group.harness import Harness

TTL = 3.0
CONFIG = GroupConfig(partitions=4, strategy="sticky", settle_s=0.5, min_interval_s=1.0, heartbeat_s=30.0, ttl_s=TTL)


def _flaky(harness: Harness) -> FlakyStore:
    return FlakyStore(harness.store, DriftClock(harness.clock))


def test_a_commit_with_the_lost_epoch_is_refused_after_on_lost_even_if_the_store_still_holds_the_owner_record() -> None:
    h = Harness(CONFIG)
    store = _flaky(h)
    lost: list[tuple[list[int], float]] = []
    member = RoundsMember(
        store, h.group, "a", CONFIG, clock=h.clock, on_lost=lambda parts: lost.append((parts, h.clock.now()))
    )
    h.members["a"] = member
    h._next_keepalive["a"] = h.clock.now() + renew_interval_s(TTL)
    h.run(2.0)
    assert member.owned() == [0, 1, 2, 3]
    epoch = member.lease(0).epoch

    # unreachable for 2.6 s from just after a renewal: longer than the belief window (2.4 s), shorter than the
    # store's ttl (3 s)
    member.keepalive(h.clock.now())
    h._next_keepalive["a"] = h.clock.now() + renew_interval_s(TTL)
    store.down_until = h.clock.now() + 2.6
    h.run(2.59)
    assert lost and lost[0][0] == [0, 1, 2, 3], "on_lost must have fired at the local deadline"
    old_record = h.store.get(Keys(h.group).owner(0))
    assert old_record is not None, "the scenario needs the store to still hold the old owner record"

    store.down_until = -1.0
    member.step(h.clock.now())  # back: the old lease is revoked first, then the member registers again
    with pytest.raises(Fenced):
        member.commit(0, "late", epoch=epoch)
    assert h.store.get(Keys(h.group).commit(0)) is None, "the store accepted a commit after on_lost"
    record: KeyValue | None = h.store.get(Keys(h.group).owner(0))
    assert record is None or record.lease != old_record.lease, "the lapsed lease was never revoked"


def test_a_commit_refused_at_the_deadline_does_not_hold_back_that_partitions_on_lost_until_the_store_answers() -> None:
    """Found by the namespace nemesis: a worker cut off from etcd had its committer refuse a commit at the local
    deadline (the partition moved to the fenced set) just before the stepping thread lapsed; on_lost then named only
    the other partitions, and the fenced one's came 10 s later, once the store answered again, while a new owner
    had long taken it over."""
    h = Harness(CONFIG)
    store = _flaky(h)
    lost: list[int] = []
    member = RoundsMember(store, h.group, "a", CONFIG, clock=h.clock, on_lost=lost.extend)
    h.members["a"] = member
    h._next_keepalive["a"] = h.clock.now() + renew_interval_s(TTL)
    h.run(2.0)
    assert member.owned() == [0, 1, 2, 3]
    epoch = member.lease(0).epoch
    member.keepalive(h.clock.now())
    deadline = member.local_deadline
    store.down_until = h.clock.now() + 10 * TTL  # unreachable for good, from just after a renewal
    h.frozen.add("a")  # no step before the deadline: the committer's thread is the first to meet it
    h.run(deadline - h.clock.now() + 0.01)
    h.frozen.discard("a")
    with pytest.raises(Fenced):
        member.commit(0, "late", epoch=epoch)
    member.step(h.clock.now())  # the store still does not answer
    assert sorted(lost) == [0, 1, 2, 3], f"on_lost at the deadline must name every partition believed: {lost}"


def test_a_hanging_store_cannot_delay_on_lost_past_the_local_deadline() -> None:
    """One member's store stops answering for 8 s (longer than any timeout): its on_lost comes at its local
    deadline, while the store still hangs, and the others take its partitions without any overlap of beliefs."""
    for seed in range(20):
        sim = Simulation(
            SimConfig(members=3, partitions=12, seed=seed, ttl_s=TTL, faults=False, script=((1.0, "hang", 8.0),))
        )
        result = sim.run()
        assert result.ok, (seed, result.violations)
        hang = next((t, mid, f) for t, mid, kind, f in sim.records if kind == "hang")
        started, member, fields = hang
        renewals = [f for t, mid, kind, f in sim.records if mid == member and kind == "renew" and t <= started]
        deadline = max(float(f["deadline"]) for f in renewals)
        lost = [(t, f) for t, mid, kind, f in sim.records if mid == member and kind == "lost" and t >= started]
        assert lost, f"seed {seed}: {member} never reported on_lost"
        at, _ = lost[0]
        assert at <= deadline + 1e-6, f"seed {seed}: on_lost at {at:.3f}, deadline was {deadline:.3f}"
        assert at < float(fields["until"]), f"seed {seed}: on_lost waited for the store to answer again"
        until = float(fields["until"])
        took_over = [t for t, m, kind, _ in sim.records if kind == "assigned" and m != member and started < t < until]
        assert took_over, f"seed {seed}: nobody took over while {member} hung"
        assert not check_trace(sim.records, sim.clock.now())


def test_the_time_limit_bounds_every_call_of_the_thread_and_lifts_on_exit() -> None:
    h = Harness(CONFIG)
    store: Store = h.store
    assert store.remaining_s(5.0) == 5.0
    with store.time_limit(1.5):
        assert store.remaining_s(5.0) == pytest.approx(1.5)
        h.clock.advance(1.0)
        assert store.remaining_s(5.0) == pytest.approx(0.5)
        with store.time_limit(None):
            assert store.remaining_s(5.0) == 5.0
        assert store.remaining_s(5.0) == pytest.approx(0.5)
    assert store.remaining_s(5.0) == 5.0


def test_status_marks_an_owner_record_whose_member_registered_again_as_lapsing() -> None:
    """After a lapse the member registers under a new lease while its old owner records wait for the old lease to
    go: status must not show those partitions as owned by it."""
    h = Harness(CONFIG)
    keys = Keys(h.group)
    old, new = h.store.grant(TTL), h.store.grant(TTL)
    h.store.put(keys.resource, encode(CONFIG.to_json()))
    h.store.put(keys.member("a"), encode({"pid": 1}), new)
    h.store.put(keys.epoch(0), b"1")
    h.store.put(keys.epoch(1), b"2")
    h.store.put(keys.owner(0), owner_value("a", 1), old)
    h.store.put(keys.owner(1), owner_value("a", 2), new)
    status = group_status(h.store, h.group)
    assert status.partitions["0"].lapsing is True
    assert status.partitions["1"].lapsing is False
    assert status.members["a"].partitions == ("1",)
    assert status.members["a"].lapsing == ("0",)


def _second(h: Harness, member_id: str, **options: object) -> RoundsMember:
    return RoundsMember(h.store, h.group, member_id, CONFIG, clock=h.clock, **options)  # type: ignore[arg-type]


def test_a_second_live_member_with_the_same_id_is_refused_and_never_registers() -> None:
    h = Harness(CONFIG)
    h.add("a")
    h.run(2.0)
    lease = h.store.get(Keys(h.group).member("a"))
    twin = _second(h, "a")
    with pytest.raises(InvalidRequest, match="already live in group"):
        for _ in range(1000):  # 1.5 ttl of steps while the original keeps renewing
            twin.step(h.clock.now())
            h.run(0.01)
    current = h.store.get(Keys(h.group).member("a"))
    assert lease is not None and current is not None and current.lease == lease.lease
    assert h.members["a"].owned() == [0, 1, 2, 3], "the original keeps everything"


def test_a_restart_with_the_same_id_after_a_crash_waits_for_the_old_registration_to_expire() -> None:
    h = Harness(CONFIG)
    h.add("a")
    h.run(2.0)
    h.frozen.add("a")  # crashed: no steps, no renewals
    crashed_at = h.clock.now()
    restarted = _second(h, "a")
    h.members["a2"] = restarted
    h._next_keepalive["a2"] = h.clock.now() + renew_interval_s(TTL)
    h.run(TTL + 2.0)
    assert restarted.owned() == [0, 1, 2, 3]
    registered = h.store.get(Keys(h.group).member("a"))
    assert registered is not None and restarted.store_lease is not None
    assert registered.lease == restarted.store_lease.id
    assert h.clock.now() - crashed_at >= TTL


def test_replace_fences_the_live_holder_of_the_id() -> None:
    h = Harness(CONFIG)
    lost: list[list[int]] = []
    original = RoundsMember(h.store, h.group, "a", CONFIG, clock=h.clock, on_lost=lost.append)
    h.members["a"] = original
    h._next_keepalive["a"] = h.clock.now() + renew_interval_s(TTL)
    h.run(2.0)
    replacement = _second(h, "a", replace=True)
    replacement.step(h.clock.now())
    assert replacement.store_lease is not None
    original.step(h.clock.now())  # its next renewal or step finds its lease gone
    original.keepalive(h.clock.now())
    with pytest.raises(Fenced, match="replaced by another process with id 'a'"):  # not "already live": issue 28
        original.step(h.clock.now())
    assert lost and lost[0] == [0, 1, 2, 3]
    assert original.owned() == []


def test_a_corrupt_participation_record_leaves_that_member_out_of_the_cut() -> None:
    """Participation records only inform the cut: a garbage one is skipped with a warning (not a stopped worker)."""
    h = Harness(CONFIG)
    a = h.add("a")
    h.run(0.1)  # a opened a round and joined it; the round closes after the settle time
    rnd = a.round
    assert rnd > 0 and a.plan_round != rnd
    h.store.put(Keys(h.group).participation(rnd, "zz"), b"not json")
    h.run(2.0)
    assert a.owned() == [0, 1, 2, 3]


@pytest.mark.parametrize("commits_first", [False, True])
def test_a_member_frozen_past_its_deadline_reports_that_its_belief_ended_at_the_deadline(commits_first: bool) -> None:
    """A frozen process learns of its loss when it runs again; ``belief_ended_at``, read in ``on_lost``, says when
    the belief really ended (the local deadline), whether the loss comes from the step's deadline check or from a
    commit refused first."""
    h = Harness(CONFIG)
    seen: list[tuple[list[int], float | None]] = []
    member = _second(h, "a", on_lost=lambda parts: seen.append((parts, member.belief_ended_at)))
    h.members["a"] = member
    h._next_keepalive["a"] = h.clock.now() + renew_interval_s(TTL)
    h.run(2.0)
    assert member.owned() == [0, 1, 2, 3] and member.belief_ended_at is None
    epoch, deadline = member.lease(0).epoch, member.local_deadline
    h.frozen.add("a")
    h.run(3 * TTL)  # frozen: no step, no renewal
    h.frozen.discard("a")
    assert h.clock.now() > deadline + TTL
    if commits_first:
        with pytest.raises(Fenced):
            member.commit(0, "late", epoch=epoch)
    member.step(h.clock.now())
    assert seen and sorted(p for parts, _ in seen for p in parts) == [0, 1, 2, 3]
    assert all(ended == pytest.approx(deadline) for _, ended in seen), (seen, deadline)
