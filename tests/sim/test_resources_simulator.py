"""The simulator over a group of several named resources with random, changing subscriptions (issue 20)."""

from __future__ import annotations

import pytest

from apportion.errors import InvalidRequest
from apportion.model import Resource
from apportion.sim import SimConfig, simulate
from apportion.sim._checks import check_subscribed, check_subscribed_trace

RESOURCES = "orders:6,payments:4,refunds:2"


def mixed(seed: int, mode: str = "rounds") -> SimConfig:
    return SimConfig(members=2 + seed % 4, events=8 + seed % 7, seed=seed, resources=RESOURCES, mode=mode)


@pytest.mark.parametrize("mode", ["rounds", "coordinator"])
def test_seeds_with_subscription_changes_keep_exclusivity_subscriptions_liveness_and_kafka_balance(mode: str) -> None:
    failures, changes = [], 0
    for seed in range(12):
        result = simulate(mixed(seed, mode))
        changes += result.faults.get("subscribe", 0)
        if not result.ok:
            failures.append((seed, result.violations[:2]))
    assert not failures, f"failing seeds (apportion simulate --resources {RESOURCES} --seed N): {failures[:5]}"
    assert changes > 0, "the seeds drew no subscription change: the test would prove nothing about them"


def test_same_seed_with_resources_gives_the_same_trace() -> None:
    assert simulate(mixed(7)).trace == simulate(mixed(7)).trace


def test_the_checks_catch_an_unsubscribed_partition_and_a_mixed_subscription_imbalance() -> None:
    records = [
        (1.0, "m0", "spawn", {"subscriptions": ["orders"]}),
        (2.0, "m0", "assigned", {"partitions": ["orders-0"]}),
        (3.0, "m0", "subscribed", {"subscriptions": ["refunds"]}),
        (4.0, "m0", "assigned", {"partitions": ["orders-1"]}),
    ]
    found = check_subscribed_trace(records)
    assert len(found) == 1 and "orders-1" in found[0]
    resources = (Resource("orders", 4), Resource("refunds", 2))
    subs = {"a": frozenset({"orders"}), "b": None}
    held = {"a": ["orders-0"], "b": ["orders-1", "orders-2", "orders-3", "refunds-0", "refunds-1"]}
    assert any(v.startswith("balance") for v in check_subscribed(held, subs, resources, 5.0))
    assert any("subscribed to" in v for v in check_subscribed({"a": ["refunds-0"]}, subs, resources, 5.0))
    fair = {"a": ["orders-0", "orders-1", "orders-2"], "b": ["orders-3", "refunds-0", "refunds-1"]}
    assert check_subscribed(fair, subs, resources, 5.0) == []


def test_a_static_simulation_over_named_resources_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="rounds or coordinator"):
        mixed(1, "static").group_config()


@pytest.mark.soak  # ~200 s of CPU: make test runs 12 seeds per mode (above)
def test_one_thousand_mixed_subscription_seeds_in_both_modes() -> None:
    failures = []
    for seed in range(1_000):
        config = mixed(seed, ("rounds", "coordinator")[seed % 2])
        result = simulate(config)
        if not result.ok:
            failures.append((seed, config.mode, result.violations[:2]))
    assert not failures, f"failing seeds: {failures[:5]}"
