"""Real `apportion worker` processes with mixed subscriptions over 3 resources on SQLite (issue 20): a join, a
subscription change (`apportion subscribe`), a SIGSTOP zombie, kill -9 and a graceful leave, with every settled
state balanced as Kafka defines it for mixed subscriptions, nobody holding an unsubscribed partition, and fenced
commits per ``<resource>-<index>``."""

from __future__ import annotations

import signal
from itertools import pairwise
from pathlib import Path
from typing import Any, NamedTuple

from apportion import group
from apportion.fleet import Fleet, worker_args
from apportion.group import GroupConfig, PartitionId, parse_resources
from apportion.model import AssignRequest, Member, Partition, resource_of, round_lower_bound
from apportion.sim._checks import check_subscribed
from apportion.store import connect
from apportion.waiting import wait_for
from tests.assign.test_properties import keep_then_single_moves
from tests.cli.run import cli

RESOURCES = "orders:6,payments:4,refunds:2"
CONFIG = GroupConfig(resources=parse_resources(RESOURCES))
SETTLE_S, MIN_INTERVAL_S, TTL_S = 0.3, 0.6, 2.0


class Rest(NamedTuple):
    """The group at rest: the round of its plan and every member's holdings (its plan) and subscriptions."""

    round: int
    held: dict[str, list[PartitionId]]
    subs: dict[str, frozenset[str] | None]


def _rest(url: str, alive: set[str]) -> Rest | None:
    """The group at rest on ``alive`` (None: not settled)."""
    with connect(url) as store:
        if not group.settled(store, "g", alive):
            return None
        snapshot = group.group_status(store, "g")
    held = {m: [p for p, info in snapshot.partitions.items() if info.owner == m] for m in sorted(alive)}
    subs = {m: None if info.subscriptions is None else frozenset(info.subscriptions) for m, info in
            snapshot.members.items()}  # fmt: skip
    return Rest(snapshot.plan_round, held, subs)


def _problems(url: str, alive: set[str], rest: Rest | None = None) -> list[str]:
    """What keeps the group from being at rest on ``alive`` with Kafka's balance (empty: at rest)."""
    rest = rest or _rest(url, alive)
    if rest is None:
        return ["not settled"]
    return check_subscribed(rest.held, rest.subs, CONFIG.resources, 0.0)


def _moves_within_the_general_paths_bound(before: Rest, after: Rest, closed: list[dict[str, Any]]) -> bool:
    """When exactly one plan was written between two rests, assert it moved no more than the general path's bound:
    ``keep_then_single_moves`` (every member keeps what it still subscribes to, the rest goes to the least loaded,
    then Kafka's imbalance is removed by single moves) on the request that plan had: the holdings at the rest
    before. The strategy's reported ``min_moves`` is only a lower bound with mixed subscriptions (0 here: every
    resource has a subscriber that also subscribes to another, so no closed-form group exists), so "moves = the
    bound", as single-resource groups assert, cannot be asserted here. False: several plans, not checked."""
    between = [e for e in closed if before.round < e["round"] <= after.round]
    if len(between) != 1 or between[0]["round"] != after.round:
        return False
    names = frozenset(r.name for r in CONFIG.resources)
    members = tuple(
        Member(m, after.subs[m] or names, tuple(Partition.parse(str(p)) for p in before.held.get(m, ())), 1)
        for m in between[0]["participants"]
    )
    request = AssignRequest("sticky", CONFIG.resources, members)
    previous = {p: m.id for m in members for p in m.owned}
    baseline = keep_then_single_moves(request)
    bound = sum(1 for m, ps in baseline.items() for p in ps if previous.get(p, m) != m)
    # a member that left or crashed: its partitions are moves of the plan too (issue 45.5), which no request names
    placed = {str(p) for ps in after.held.values() for p in ps}
    participants = set(between[0]["participants"])
    bound += sum(1 for m, ps in before.held.items() if m not in participants for p in ps if str(p) in placed)
    assert between[0]["moves"] <= bound, (between[0], before, after, bound)
    return True


def test_workers_with_mixed_subscriptions_survive_a_join_a_subscription_change_a_zombie_kill_9_and_a_leave(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    options = ["--resources", RESOURCES, "--settle", str(SETTLE_S), "--min-interval", str(MIN_INTERVAL_S),
               "--ttl", str(TTL_S), "--commit-every", "0.2"]  # fmt: skip
    with Fleet(tmp_path / "logs", worker_args(url, "g", *options)) as fleet:
        fleet.start("w0")
        fleet.start("w1", "--subscribe", "orders")
        fleet.start("w2", "--subscribe", "payments,refunds")
        alive = {"w0", "w1", "w2"}

        rests: list[Rest] = []  # the group at each rest, for the moves of the plans written between two of them

        def at_rest(what: str, timeout_s: float) -> float:
            def rested() -> bool:
                rest = _rest(url, alive)
                if rest is None or _problems(url, alive, rest):
                    return False
                rests.append(rest)
                return True

            return wait_for(
                what,
                rested,
                timeout_s,
                alive=lambda: fleet.check(alive),
                context=lambda: f"problems: {_problems(url, alive)}",
            )

        at_rest("3 workers with mixed subscriptions at rest", 30)

        fleet.start("w3", "--subscribe", "orders,refunds")  # a join
        alive.add("w3")
        at_rest("4 workers at rest after w3 joined", 20)

        done = cli("subscribe", "--store", url, "--group", "g", "--id", "w0", "refunds")  # a subscription change
        assert done.code == 0, done.stderr
        wait_for("w0 to revoke what it no longer subscribes to", lambda: _owned_resources(url, "w0") <= {"refunds"}, 10)
        at_rest("at rest after w0 subscribed to refunds only", 20)

        zombie = fleet["w3"]  # SIGSTOP: replaced while frozen; on SIGCONT it reports lost and rejoins
        zombie.signal(signal.SIGSTOP)
        others = alive - {"w3"}
        wait_for("w3's partitions taken over while it is frozen", lambda: _owned_by(url, others), 15)
        seen = len(zombie.events)
        zombie.signal(signal.SIGCONT)
        wait_for("w3 to report lost", lambda: "lost" in [e["event"] for e in zombie.events[seen:]], 10)
        at_rest("at rest after w3 came back", 20)

        fleet["w1"].proc.kill()  # kill -9: the only other orders-only member
        alive.discard("w1")
        took = at_rest("w1's partitions owned again", 20)
        assert took <= TTL_S + SETTLE_S + MIN_INTERVAL_S + 10, f"failover took {took:.1f} s"

        fleet["w3"].signal(signal.SIGTERM)  # a graceful leave
        assert fleet["w3"].proc.wait(15) == 0
        alive.discard("w3")
        at_rest("at rest after w3 left", 20)
        assert _owned_resources(url, "w0") == {"refunds"}

        with connect(url) as store:
            commits = group.committed(store, "g")
            closed = [e for e in group.history(store, "g") if e["type"] == "round_closed"]
        assert all(e["moves"] >= round_lower_bound(e["min_moves"], e["deferred"]) for e in closed), closed
        checked = [_moves_within_the_general_paths_bound(before, after, closed) for before, after in pairwise(rests)]
        assert sum(checked) >= 2, f"too few single-round transitions to check moves: {rests} {closed}"
        assert any(str(p).startswith("payments-") for p in commits), commits
        assert all(isinstance(p, str) and resource_of(p) in ("orders", "payments", "refunds") for p in commits)
        codes = fleet.stop_all(15)
        assert all(codes[w] == 0 for w in alive), codes
        lost = {e["worker"] for e in fleet.events() if e.get("event") == "lost" and e["partitions"]}
        assert lost <= {"w1", "w3"}, lost


def _owned_by(url: str, members: set[str]) -> bool:
    with connect(url) as store:
        return group.owned_by(store, "g", members)


def _owned_resources(url: str, member: str) -> set[str]:
    with connect(url) as store:
        found = group.owners(store, "g")
    return {str(resource_of(p)) for p, owner in found.items() if owner == member}
