"""RoundsMember on the memory store in virtual time: rounds, plans, handoff, fencing, lease lapse."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from apportion.errors import Fenced, InvalidRequest
from apportion.group import GroupConfig, RoundsMember, history
from apportion.group.internals import Keys
from tests.group.harness import FAST, Harness


def test_three_members_settle_within_two_seconds_with_balanced_exclusive_ownership() -> None:
    h = Harness()
    for mid in ("a", "b", "c"):
        h.add(mid)
    h.run(2.0)
    assert all(m.stable() for m in h.members.values())
    owners = h.owners()
    assert sorted(owners) == list(range(12))
    assert sorted(len(p) for p in h.assignment().values()) == [4, 4, 4]


def test_every_member_reads_the_same_plan() -> None:
    h = Harness()
    for mid in ("a", "b", "c"):
        h.add(mid)
    h.run(2.0)
    rounds = {m.plan_round for m in h.members.values()}
    assert len(rounds) == 1
    planned = sorted(p for m in h.members.values() for p in m.assignment)
    assert planned == list(range(12))


def test_joining_member_moves_only_what_it_takes_and_kept_partitions_are_not_revoked() -> None:
    h = Harness()
    h.add("a")
    h.add("b")
    h.run(2.0)
    before = h.assignment()
    h.log.calls.clear()
    h.add("c")
    h.run(3.0)
    after = h.assignment()
    assert sorted(len(p) for p in after.values()) == [4, 4, 4]
    for mid in ("a", "b"):
        assert set(after[mid]) <= set(before[mid])  # sticky: a and b only give up partitions
    revoked = {p for kind, _, parts, _ in h.log.calls if kind == "revoked" for p in parts}
    assert revoked == set(after["c"])  # only the moved partitions paused
    assert not [c for c in h.log.calls if c[0] == "lost"]


def test_graceful_leave_moves_only_the_leavers_partitions() -> None:
    h = Harness()
    for mid in ("a", "b", "c"):
        h.add(mid)
    h.run(2.0)
    before = h.assignment()
    h.members["c"].leave()
    del h.members["c"]
    h.run(3.0)
    after = h.assignment()
    assert sorted(p for parts in after.values() for p in parts) == list(range(12))
    for mid in ("a", "b"):
        assert set(before[mid]) <= set(after[mid])


def _settled(*members: str) -> Harness:
    h = Harness()
    for mid in members:
        h.add(mid)
    h.run(2.0)
    return h


def _leave_planned(h: Harness, mid: str, limit_s: float) -> float:
    """Begin ``mid``'s planned leave, step everyone until it is ready, then leave; return how long it took."""
    member = h.members[mid]
    started = h.clock.now()
    member.begin_leave(started)
    while not member.leave_ready(h.clock.now()):
        assert h.clock.now() - started < limit_s, f"{mid}'s planned leave not ready within {limit_s} s"
        h.run(0.01)
    member.leave()
    del h.members[mid]
    return h.clock.now() - started


def _handoff_gaps(h: Harness, leaver: str) -> dict[int, float]:
    """For each partition the leaver gave up: the time from its on_revoked to the next on_assigned of it."""
    revoked = {p: t for kind, mid, parts, t in h.log.calls if kind == "revoked" and mid == leaver for p in parts}
    return {
        p: min(t for kind, mid, parts, t in h.log.calls if kind == "assigned" and p in parts and t >= revoked[p]) - at
        for p, at in revoked.items()
    }


def test_planned_leave_hands_each_partition_over_at_its_release_not_a_round_later() -> None:
    h = _settled("a", "b", "c")
    before = h.assignment()
    h.log.calls.clear()
    took = _leave_planned(h, "c", FAST.min_interval_s + FAST.settle_s + FAST.ttl_s)
    h.run(0.1)
    after = h.assignment()
    assert sorted(p for parts in after.values() for p in parts) == list(range(12))
    for mid in ("a", "b"):
        assert set(before[mid]) <= set(after[mid])  # only c's partitions moved
    gaps = _handoff_gaps(h, "c")
    assert sorted(gaps) == before["c"]
    # the new owners claim within a step of the release; a leave that releases first waits a whole round (RST)
    assert max(gaps.values()) <= 0.02 < FAST.settle_s
    assert took <= FAST.min_interval_s + FAST.settle_s + 0.1  # at most MRI + RST, not the bound
    assert not [call for call in h.log.calls if call[0] == "lost"]
    releases = [e for e in history(h.store, "g") if e["type"] == "release"]
    assert {e["partition"] for e in releases} == set(before["c"])


def test_a_planned_leave_costs_one_round_even_when_others_hear_of_its_end_with_its_plan() -> None:
    h = _settled("a", "b", "c")
    leaver = h.members["c"]
    leaver.begin_leave(h.clock.now())

    def closed() -> int:
        return sum(1 for e in history(h.store, "g") if e["type"] == "round_closed")

    before = closed()
    while closed() == before:  # step one member at a time; stop at the close, before anyone applies the plan
        h.clock.advance(0.01)
        for member in h.members.values():
            member.keepalive(h.clock.now())
            member.step(h.clock.now())
            if closed() > before:
                break
    while not leaver.leave_ready(h.clock.now()):  # the leaver alone hands over and leaves
        h.clock.advance(0.01)
        leaver.step(h.clock.now())
    leaver.leave()
    del h.members["c"]
    h.run(3.0)  # a and b hear the plan and the leaver's end in one step
    assert closed() == before + 1, "the leaver's end asked for another round after the plan made without it"
    assert all(m.stable() for m in h.members.values())
    assert sorted(h.owners()) == list(range(12))


def test_immediate_leave_leaves_the_partitions_unowned_for_a_round() -> None:
    h = _settled("a", "b", "c")
    h.log.calls.clear()
    h.members["c"].leave()
    del h.members["c"]
    h.run(3.0)
    assert min(_handoff_gaps(h, "c").values()) >= FAST.settle_s  # what the planned leave avoids


def test_members_leaving_together_or_alone_do_not_wait_for_a_plan() -> None:
    h = _settled("a", "b", "c")
    for member in h.members.values():
        member.begin_leave(h.clock.now())
    h.run(0.05)  # each hears that the others leave too: nobody is left to plan for
    assert all(m.leave_ready(h.clock.now()) for m in h.members.values())
    alone = _settled("a")
    assert alone.members["a"].owned()
    alone.members["a"].begin_leave(alone.clock.now())
    assert alone.members["a"].leave_ready(alone.clock.now())


def test_planned_leave_gives_up_waiting_at_its_bound_when_no_plan_comes() -> None:
    h = _settled("a", "b")
    h.frozen.add("b")  # b never joins the leave's round, but its lease lives on: keep it alive
    leaver = h.members["a"]
    started = h.clock.now()
    leaver.begin_leave(started)
    while not leaver.leave_ready(h.clock.now()):
        h.members["b"].keepalive(h.clock.now())
        h.run(0.05)
        assert h.clock.now() - started < 10, "the planned leave never gave up"
    assert h.clock.now() - started >= FAST.min_interval_s + FAST.settle_s + FAST.ttl_s - 0.06
    assert leaver.owned()  # it still held its partitions while it waited; leave() revokes and releases them
    leaver.leave()
    assert leaver.owned() == []


def test_crashed_member_partitions_are_owned_again_after_its_lease_expires() -> None:
    h = Harness()
    for mid in ("a", "b", "c"):
        h.add(mid)
    h.run(2.0)
    h.frozen.add("c")  # crash: never stepped again, no keepalive
    crashed_at = h.clock.now()
    h.run(FAST.ttl_s + FAST.min_interval_s + FAST.settle_s + 0.5)
    assert sorted(h.owners()) == list(range(12))
    assert crashed_at + FAST.ttl_s < h.clock.now()


def test_frozen_member_is_fenced_loses_everything_and_rejoins() -> None:
    h = Harness()
    for mid in ("a", "b", "c"):
        h.add(mid)
    h.run(2.0)
    zombie = h.members["c"]
    held = {p: zombie.lease(p).epoch for p in zombie.owned()}
    assert held
    h.frozen.add("c")
    h.run(FAST.ttl_s + 3.0)
    assert sorted(h.owners()) == list(range(12))  # replaced
    # The zombie resumes: it does not believe it owns anything any more, and a commit with its old epoch is fenced.
    h.frozen.discard("c")
    assert zombie.owned() == []
    p, epoch = next(iter(held.items()))
    with pytest.raises(Fenced):
        zombie.commit(p, "zombie", epoch=epoch)
    h.run(4.0)
    lost = {q for kind, mid, parts, _ in h.log.calls if kind == "lost" and mid == "c" for q in parts}
    assert lost == set(held)
    assert all(m.stable() for m in h.members.values())
    assert sorted(h.owners()) == list(range(12))


def test_commit_requires_the_current_epoch_and_checkpoint_is_readable_by_anyone() -> None:
    h = Harness()
    h.add("a")
    h.add("b")
    h.run(2.0)
    a = h.members["a"]
    p = a.owned()[0]
    lease = a.lease(p)
    a.commit(p, "offset-10")
    assert h.members["b"].checkpoint(p) == "offset-10"
    with pytest.raises(Fenced):
        a.commit(p, "stale", epoch=lease.epoch - 1)
    with pytest.raises(Fenced):
        h.members["b"].commit(p, "not-mine")
    events = [e for e in history(h.store, "g") if e["type"] == "commit"]
    assert events[-1]["partition"] == p and events[-1]["epoch"] == lease.epoch


def test_epochs_grow_on_every_handoff() -> None:
    h = Harness()
    h.add("a")
    h.run(2.0)
    first = {p: h.members["a"].lease(p).epoch for p in h.members["a"].owned()}
    h.add("b")
    h.run(3.0)
    for p in h.members["b"].owned():
        assert h.members["b"].lease(p).epoch == first[p] + 1


def test_more_members_than_partitions_settles() -> None:
    config = GroupConfig(partitions=2, settle_s=0.5, min_interval_s=1.0, ttl_s=3.0)
    h = Harness(config)
    for i in range(5):
        h.add(f"m{i}")
    h.run(3.0)
    assert all(m.stable() for m in h.members.values())
    assert sorted(h.owners()) == [0, 1]


def test_same_participants_keep_the_plan_on_heartbeat_rounds() -> None:
    config = GroupConfig(partitions=12, strategy="round_robin", settle_s=0.2, min_interval_s=0.5, heartbeat_s=2.0)
    h = Harness(config)
    for mid in ("a", "b", "c"):
        h.add(mid)
    h.run(2.0)
    before, first_round = h.assignment(), h.members["a"].plan_round
    h.run(5.0)
    assert h.members["a"].plan_round > first_round  # heartbeat rounds happened
    assert h.assignment() == before
    closed = [e for e in history(h.store, "g") if e["type"] == "round_closed"]
    assert closed[-1]["kept"] is True


def test_resource_change_forces_a_new_round_with_the_new_partition_count() -> None:
    h = Harness()
    h.add("a")
    h.add("b")
    h.run(2.0)
    bigger = GroupConfig(partitions=20, settle_s=0.5, min_interval_s=1.0, ttl_s=3.0)
    h.add("c", config=bigger, update=True)
    h.run(4.0)
    assert sorted(h.owners()) == list(range(20))
    assert all(m.config.partitions == 20 for m in h.members.values())


def test_newcomer_uses_the_stored_definition_unless_asked_to_update() -> None:
    """Timings (and strategy, options): the stored definition is the effective one (``_config``'s docstring)."""
    h = Harness()
    h.add("a")
    h.run(1.0)
    other = GroupConfig(partitions=12, settle_s=0.7, min_interval_s=1.5, ttl_s=4.0)
    h.add("b", config=other)
    h.run(3.0)
    assert h.members["b"].config == h.members["a"].config != other
    assert sorted(h.owners()) == list(range(12))


def test_newcomer_asking_for_other_partitions_is_refused_before_it_registers() -> None:
    """Issue 28: it used to run silently on the stored partitions; read from the store (not given), they are
    adopted."""
    h = Harness()
    h.add("a")
    h.run(1.0)
    b = RoundsMember(h.store, h.group, "b", dataclasses.replace(h.config, partitions=99), clock=h.clock)
    with pytest.raises(InvalidRequest, match="group 'g' has 12 partitions; this worker asked for 99 partitions"):
        b.step(h.clock.now())
    assert h.store.get(Keys(h.group).member("b")) is None
    c = RoundsMember(
        h.store, h.group, "c", dataclasses.replace(h.config, partitions=99), clock=h.clock, partitions_given=False
    )
    c.step(h.clock.now())
    assert c.config.partitions == 12


def test_slow_revocation_beyond_its_deadline_leads_to_on_lost() -> None:
    h = Harness()
    h.add("a", revoke_timeout_s=0.5, delay=lambda kind, parts: 10.0)
    h.run(2.0)
    h.add("b")
    h.run(FAST.ttl_s + 3.0)
    assert sorted(h.members["b"].owned()) == list(range(12))  # a's lease lapsed while it was still revoking
    h.run(9.0)  # the slow callback returns (10 s) and a reports the rest as lost
    lost = [c for c in h.log.calls if c[0] == "lost" and c[1] == "a"]
    assert lost, "a revocation that overran revoke_timeout_s must end with on_lost"
    assert sorted(h.owners()) == list(range(12))


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("partitions", {"partitions": 0}),
        ("strategy", {"partitions": 3, "strategy": "nope"}),
        ("ttl_s", {"partitions": 3, "ttl_s": -1}),
        ("min_interval_s", {"partitions": 3, "settle_s": 2.0, "min_interval_s": 1.0}),
    ],
)
def test_invalid_timings_and_definitions_are_rejected(field: str, kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest) as info:
        GroupConfig(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def _slow_revoker(seconds: float) -> object:
    """A delay hook: the member's first on_revoked takes ``seconds`` (it is busy, and cannot join rounds)."""
    pending = [seconds]
    return lambda kind, parts: pending.pop() if kind == "revoked" and pending else 0.0


def _revoked(h: Harness, mid: str) -> list[int]:
    return [p for kind, m, parts, _ in h.log.calls if kind == "revoked" and m == mid for p in parts]


def test_a_round_waits_for_a_member_busy_in_on_revoked_instead_of_taking_its_partitions() -> None:
    h = Harness()
    h.add("m0")
    h.add("m1", delay=_slow_revoker(1.5))
    h.add("m2")
    h.run(3)
    assert len(h.assignment()["m1"]) == 4
    h.add("m3")
    h.run(1.0)  # the join's plan: m1 gives one partition up, slowly
    assert h.members["m1"].busy_until is not None, "m1 should be inside its slow on_revoked"
    h.add("m4")  # a second join opens a round while m1 is busy: it waits for m1 (up to RST + ttl)
    h.run(8)
    final = h.assignment()["m1"]
    assert sorted(len(p) for p in h.assignment().values()) == [2, 2, 2, 3, 3]
    assert len(_revoked(h, "m1")) == 4 - len(final), "m1 lost more than the joins' moves"
    assert all(len(p) == 4 for kind, m, p, _ in h.log.calls if kind == "assigned" and m == "m1")  # nothing back


def test_a_member_busy_longer_than_ttl_past_the_settle_time_is_left_out_of_the_round() -> None:
    h = Harness()
    h.add("m0")
    h.add("m1", delay=_slow_revoker(30.0))
    h.add("m2")
    h.run(3)
    h.add("m3")
    h.run(1.0)
    assert h.members["m1"].busy_until is not None
    h.add("m4")
    opened = h.clock.now()
    h.run(FAST.settle_s + FAST.ttl_s + FAST.min_interval_s + 0.5)
    others = {h.members[m].plan_round for m in ("m0", "m2", "m3", "m4")}
    assert len(others) == 1 and "m1" not in h.members["m0"]._participants  # closed without the stuck member
    assert h.members["m0"].plan_round > 0 and h.clock.now() - opened < FAST.settle_s + FAST.ttl_s + 2.0


def _participation_order(h: Harness, rnd: int) -> list[str]:
    """The members of round ``rnd`` by the revision that created their participation records (seed 0's order)."""
    prefix = Keys(h.group).round(rnd)
    records = [kv for kv in h.store.range(prefix) if kv.key.rsplit("/", 1)[1] not in ("joined", "plan")]
    return [kv.key.rsplit("/", 1)[1] for kv in sorted(records, key=lambda kv: kv.create_revision)]


def _round_robin_joined_in_order(partitions: int, order: tuple[str, ...]) -> Harness:
    """A settled round_robin group whose members started, and joined the first round, in ``order``."""
    h = Harness(GroupConfig(partitions=partitions, strategy="round_robin", settle_s=0.5, min_interval_s=1.0))
    for mid in order:
        h.add(mid)
        h.run(0.1)  # each one joins the open round before the next one starts
    h.run(2.0)
    return h


def _dealt_in(order: list[str], partitions: int) -> dict[str, list[int]]:
    return {mid: list(range(k, partitions, len(order))) for k, mid in enumerate(order)}


def test_round_robin_deals_partitions_to_the_members_in_the_order_they_joined_the_round() -> None:
    """Seed 0: participant k (by the versionstamp of its participation) gets partitions k, k + N, ...; here the
    members join in the order c, a, b, which is not their id order."""
    h = _round_robin_joined_in_order(7, ("c", "a", "b"))
    rnd = h.members["a"].plan_round
    assert {m.plan_round for m in h.members.values()} == {rnd}
    assert _participation_order(h, rnd) == ["c", "a", "b"]
    assert h.assignment() == _dealt_in(["c", "a", "b"], 7) == {"c": [0, 3, 6], "a": [1, 4], "b": [2, 5]}


def test_round_robin_deals_each_new_round_in_that_rounds_participation_order() -> None:
    """The order is per round, as in seed 0: a newcomer's round deals by the revisions of ITS participation records."""
    h = _round_robin_joined_in_order(9, ("c", "a", "b"))
    first = h.members["a"].plan_round
    h.add("d")
    h.run(4.0)
    rnd = h.members["d"].plan_round
    assert rnd > first and {m.plan_round for m in h.members.values()} == {rnd}
    order = _participation_order(h, rnd)
    assert sorted(order) == ["a", "b", "c", "d"]
    assert h.assignment() == _dealt_in(order, 9)


def _open_a_round_and_find_its_opener(h: Harness, joiner: str) -> tuple[int, str, float]:
    """Add ``joiner`` to a settled group and step until it (or anyone) opens a round: (round, opener, time)."""
    seen = {e["revision"] for e in history(h.store, "g") if e["type"] == "round_opened"}
    h.add(joiner)
    for _ in range(500):
        h.run(0.01)
        opened = [e for e in history(h.store, "g") if e["type"] == "round_opened" and e["revision"] not in seen]
        if opened:
            return opened[0]["revision"], opened[0]["member"], h.clock.now()
    raise AssertionError("no round opened within 5 s of a join")


def _closer(h: Harness, rnd: int) -> tuple[str, float] | None:
    closed = [e for e in history(h.store, "g") if e["type"] == "round_closed" and e["round"] == rnd]
    return (closed[0]["member"], closed[0]["time"]) if closed else None


def test_a_round_is_closed_by_its_opener_even_when_it_was_busy_past_the_settle_time() -> None:
    """One closer per round (``RoundsMember._close_at``): the opener closes at RST, the others are backups spread
    over max(RST, ttl/2) after it. An opener busy a little past RST (frozen 0.1 s beyond it here) still closes its
    round: no backup's turn came yet (with every member closing at RST, as before, the first backup stepped did)."""
    h = Harness()
    for mid in ("a", "b", "c", "d", "e", "f"):
        h.add(mid)
    h.run(3.0)
    rnd, opener, _ = _open_a_round_and_find_its_opener(h, "g")
    h.frozen.add(opener)
    h.run(FAST.settle_s + 0.1)
    assert _closer(h, rnd) is None, "a backup closed the round at the settle time, before the opener's turn"
    h.frozen.discard(opener)
    h.run(0.05)
    closer = _closer(h, rnd)
    assert closer is not None and closer[0] == opener, (closer, opener)
    h.run(2.0)
    assert all(m.stable() for m in h.members.values()) and sorted(h.owners()) == list(range(12))


def test_a_backup_closes_the_round_of_a_frozen_opener_before_its_lease_expires() -> None:
    h = Harness()
    for mid in ("a", "b", "c", "d"):
        h.add(mid)
    h.run(3.0)
    rnd, opener, opened_at = _open_a_round_and_find_its_opener(h, "e")
    h.frozen.add(opener)  # for good: it keeps its lease (and its place in the cut) until ttl passes
    h.run(FAST.settle_s + max(FAST.settle_s, FAST.ttl_s / 2) + 0.05)
    closer = _closer(h, rnd)
    assert closer is not None and closer[0] != opener, (closer, opener)
    assert opened_at + FAST.settle_s <= closer[1] < opened_at + FAST.ttl_s  # a backup's turn, not the expiry's
    h.run(FAST.ttl_s + 3.0)  # the opener's lease expires: its partitions go to the others
    del h.members[opener]
    assert all(m.stable() for m in h.members.values()) and sorted(h.owners()) == list(range(12))


class _SlowCloses:
    """A planner per member that counts its calls; the first call of ``slow`` (a member id) takes ``seconds`` of
    virtual time, during which every other member steps (and every member, the closer too unless ``frozen``, keeps
    its lease alive: a keepalive thread runs beside a busy stepping thread)."""

    def __init__(self, h: Harness, slow: str, seconds: float, *, frozen: bool = False) -> None:
        self.h, self.slow, self.seconds, self.frozen = h, slow, seconds, frozen
        self.calls: list[tuple[str, float]] = []
        self.slowed = False

    def planner(self, mid: str) -> Any:
        from apportion.assign import plan

        def planned(request: Any) -> Any:
            self.calls.append((mid, self.h.clock.now()))
            if mid == self.slow and not self.slowed:
                self.slowed = True
                self._others_step(mid)
            return plan(request)

        return planned

    def _others_step(self, busy: str) -> None:
        h = self.h
        end = h.clock.now() + self.seconds
        while h.clock.now() < end:
            h.clock.advance(0.01)
            now = h.clock.now()
            for mid, member in list(h.members.items()):
                if mid == busy and self.frozen:
                    continue
                member.keepalive(now)
                if mid != busy:
                    member.step(now)


def _slow_close_harness(seconds: float, *, frozen: bool = False) -> tuple[Harness, _SlowCloses, int, str, float]:
    """Six members settled; a seventh joins; the round's opener takes ``seconds`` to plan its close."""
    h = Harness()
    slow = _SlowCloses(h, slow="", seconds=seconds, frozen=frozen)
    for mid in "abcdef":
        h.add(mid, planner=slow.planner(mid))
    h.run(3.0)
    seen = {e["revision"] for e in history(h.store, "g") if e["type"] == "round_opened"}
    h.add("x", planner=slow.planner("x"))
    for _ in range(500):
        h.clock.advance(0.01)
        now = h.clock.now()
        for member in list(h.members.values()):
            member.keepalive(now)
            member.step(now)
        opened = [e for e in history(h.store, "g") if e["type"] == "round_opened" and e["revision"] not in seen]
        if opened:
            slow.slow = opened[0]["member"]
            slow.calls.clear()
            return h, slow, opened[0]["revision"], opened[0]["member"], now
    raise AssertionError("no round opened within 5 s of a join")


def test_a_backup_whose_turn_comes_while_the_opener_is_closing_waits_for_it() -> None:
    """One closer at a time (``RoundsMember._close``, the ``closing`` record): the opener's close takes 3 s (a
    100,000-partition plan at load), past every backup's turn (max(RST, ttl/2) = 1.5 s after RST); no backup plans
    meanwhile, and the opener's plan is the round's. Before, every backup closed too: at 64 members x 100,000 on
    SQLite ~40 closes of one round ran at once and none finished in 150 s."""
    h, slow, rnd, opener, _ = _slow_close_harness(3.0)
    h.run(FAST.settle_s + 4.0)
    assert slow.slowed, "the opener never closed"
    assert [mid for mid, _ in slow.calls] == [opener], slow.calls
    closer = _closer(h, rnd)
    assert closer is not None and closer[0] == opener, (closer, opener)
    h.run(2.0)
    assert all(m.stable() for m in h.members.values()) and sorted(h.owners()) == list(range(12))


def test_a_closer_that_freezes_mid_close_is_taken_over_once_its_lease_ends() -> None:
    """The ``closing`` record is bound to the closer's lease: a closer frozen inside its close (no keepalive) holds
    the backups only until its lease ends (ttl), not for the hold bound (4 ttl); a backup then closes the round."""
    h, _, rnd, opener, opened_at = _slow_close_harness(FAST.ttl_s + 2.0, frozen=True)
    h.run(FAST.settle_s + 0.1)  # the opener's close: frozen inside it for ttl + 2 s while the others step
    closer = _closer(h, rnd)  # (the cut lost the frozen joiner: the previous plan is kept, no planner is called)
    assert closer is not None and closer[0] != opener, (closer, opener)
    assert closer[1] < opened_at + FAST.settle_s + FAST.ttl_s + 1.0 + 0.5, (closer, opened_at)


def test_a_live_closer_stuck_past_the_hold_bound_is_taken_over() -> None:
    """A closer alive (its lease kept) but stuck holds the others for ``CLOSE_HOLD_TTLS`` ttl after they saw its
    ``closing`` record, then one backup takes it over and closes the round (the stuck close's own write then fails
    on the plan that exists)."""
    from apportion.group._round_close import CLOSE_HOLD_TTLS

    hold = CLOSE_HOLD_TTLS * FAST.ttl_s
    h, slow, rnd, opener, opened_at = _slow_close_harness(hold + 2.0)
    h.run(1.0)
    backups = [(mid, t) for mid, t in slow.calls if mid != opener]
    assert backups, slow.calls
    took_over_at = backups[0][1]
    assert opened_at + FAST.settle_s + hold - 0.1 <= took_over_at <= opened_at + FAST.settle_s + hold + 1.0, backups
    assert len({mid for mid, _ in backups}) == 1, backups  # one backup at a time: the others wait for it
    closer = _closer(h, rnd)
    assert closer is not None and closer[0] != opener, (closer, opener)
