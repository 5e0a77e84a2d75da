"""Real `apportion worker` processes with mixed subscriptions over 3 resources on SQLite (issue 20): a join, a
subscription change (`apportion subscribe`), a SIGSTOP zombie, kill -9 and a graceful leave, with every settled
state balanced as Kafka defines it for mixed subscriptions, nobody holding an unsubscribed partition, and fenced
commits per ``<resource>-<index>``."""

from __future__ import annotations

import signal
from pathlib import Path

from apportion import group
from apportion.fleet import Fleet, worker_args
from apportion.group import GroupConfig, parse_resources
from apportion.sim._checks import check_subscribed
from apportion.store import connect
from apportion.waiting import wait_for
from tests.cli.run import cli

RESOURCES = "orders:6,payments:4,refunds:2"
SETTLE_S, MIN_INTERVAL_S, TTL_S = 0.3, 0.6, 2.0


def _problems(url: str, alive: set[str]) -> list[str]:
    """What keeps the group from being at rest on ``alive`` with Kafka's balance (empty: at rest)."""
    with connect(url) as store:
        if not group.settled(store, "g", alive):
            return ["not settled"]
        snapshot = group.group_status(store, "g")
    held = {m: [p for p, info in snapshot["partitions"].items() if info["owner"] == m] for m in sorted(alive)}
    subs = {m: frozenset(info["subscriptions"]) if "subscriptions" in info else None for m, info in
            snapshot["members"].items()}  # fmt: skip
    resources = GroupConfig(resources=parse_resources(RESOURCES)).resources
    return check_subscribed(held, subs, resources, 0.0)


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

        def at_rest(what: str, timeout_s: float) -> float:
            return wait_for(
                what,
                lambda: not _problems(url, alive),
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
        assert any(str(p).startswith("payments-") for p in commits), commits
        assert all(isinstance(p, str) and p.rpartition("-")[0] in ("orders", "payments", "refunds") for p in commits)
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
    return {str(p).rpartition("-")[0] for p, owner in found.items() if owner == member}
