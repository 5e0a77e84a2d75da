"""The deterministic simulator: same seed same trace, and the safety/liveness properties over many seeds."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from apportion.assign import STRATEGY_NAMES
from apportion.sim import SimConfig, simulate

SOAK = os.environ.get("APPORTION_SOAK") == "1"
CI_SEEDS = 500  # make soak runs 10,000 more (SOAK_SEEDS); 1,000 here cost make test 23 s of its 15 minutes
SOAK_SEEDS = 10_000


def small(seed: int) -> SimConfig:
    """A small group per seed, sized so that 500 seeds run in about 25 s on one core."""
    return SimConfig(members=2 + seed % 5, partitions=6 + seed % 11, events=6 + seed % 5, seed=seed)


def test_same_seed_gives_the_same_trace() -> None:
    first = simulate(SimConfig(members=5, partitions=16, events=15, seed=42))
    second = simulate(SimConfig(members=5, partitions=16, events=15, seed=42))
    assert first.trace == second.trace
    assert first.summary() == second.summary()
    assert simulate(SimConfig(members=5, partitions=16, events=15, seed=43)).trace != first.trace


@pytest.mark.parametrize("block", range(2))
def test_five_hundred_seeds_keep_exclusivity_fencing_and_liveness(block: int) -> None:
    failures = []
    for seed in range(block * CI_SEEDS // 2, (block + 1) * CI_SEEDS // 2):
        result = simulate(small(seed))
        if not result.ok:
            failures.append((seed, result.violations[:2]))
    assert not failures, f"failing seeds (replay with apportion simulate --seed N): {failures[:5]}"


def test_planned_leaves_keep_exclusivity_fencing_and_liveness_under_faults() -> None:
    """Every graceful leave planned (``Worker.stop``'s way) among crashes, freezes, hangs and store outages."""
    failures, planned = [], 0
    for seed in range(100):
        base = small(seed)
        config = SimConfig(
            members=base.members, partitions=base.partitions, events=base.events, seed=seed, planned_leave=1.0
        )
        result = simulate(config)
        planned += sum(1 for _, _, kind, _ in result.trace if kind == "leaving")
        if not result.ok:
            failures.append((seed, result.violations[:2]))
    assert not failures, f"failing seeds (SimConfig(..., planned_leave=1.0)): {failures[:5]}"
    assert planned >= 20, f"only {planned} planned leaves in 100 seeds"


def test_a_planned_leave_hands_over_without_leaving_partitions_unowned_for_a_round() -> None:
    script = ((5.0, "leave"),)
    immediate = simulate(SimConfig(members=3, partitions=12, events=0, seed=7, faults=False, script=script))
    planned = simulate(
        SimConfig(members=3, partitions=12, events=0, seed=7, faults=False, script=script, planned_leave=1.0)
    )
    assert immediate.ok and planned.ok, (immediate.violations, planned.violations)
    assert [kind for _, _, kind, _ in planned.trace].count("leaving") == 1
    assert planned.rounds == immediate.rounds  # one round for the leave, none more after it
    # the leaver's 4 partitions: a round (RST at least) unowned each when released first; ~0 when planned
    assert immediate.unowned_s >= 4 * SimConfig().settle_s
    assert planned.unowned_s < immediate.unowned_s / 10


def test_round_robin_in_join_order_keeps_exclusivity_fencing_liveness_and_balance_in_rounds_mode() -> None:
    """``round_robin`` deals each round in its participation order (seed 0), which churn and faults reshuffle."""
    failures = []
    for seed in range(150):
        base = small(seed)
        config = SimConfig(
            members=base.members, partitions=base.partitions, events=base.events, seed=seed, strategy="round_robin"
        )
        result = simulate(config)
        if not result.ok:
            failures.append((seed, result.violations[:2]))
    assert not failures, f"failing seeds (apportion simulate --strategy round_robin --seed N): {failures[:5]}"


@pytest.mark.slow
@pytest.mark.soak  # make test keeps every strategy's seeds (the per-strategy test)
def test_soak_many_seeds_with_every_strategy() -> None:
    seeds = SOAK_SEEDS if SOAK else 200
    strategies = ("sticky", "round_robin", "range", "weighted", "rendezvous", "bounded_load")
    failures = []
    for seed in range(CI_SEEDS, CI_SEEDS + seeds):
        config = small(seed)
        config = SimConfig(
            members=config.members,
            partitions=config.partitions,
            events=config.events + 5,
            seed=seed,
            strategy=strategies[seed % len(strategies)],
        )
        result = simulate(config)
        if not result.ok:
            failures.append((seed, config.strategy, result.violations[:2]))
    assert not failures, f"failing seeds: {failures[:5]}"


@pytest.mark.parametrize(("seed", "strategy"), [(6104, "range")])
def test_a_fenced_partition_that_the_plan_still_gives_its_member_is_claimed_again(seed: int, strategy: str) -> None:
    """In these soak seeds a commit stuck in a hanging store call returns after the belief window and is refused
    (fenced): the member releases the partition, and it stayed unowned until the next round (heartbeat 30 s) because
    the plan still gave it to that member, so nobody else claimed it. Since claims wait for the owner record's
    deletion instead of polling, 6104 is the one seed of 1,000-11,000 that still reaches this scenario (checked with
    ``RoundsMember._reclaim`` disabled: it then fails, and only it); 1581 no longer fences."""
    base = small(seed)
    config = SimConfig(
        members=base.members, partitions=base.partitions, events=base.events + 5, seed=seed, strategy=strategy
    )
    result = simulate(config)
    assert any(kind == "fenced" for _, _, kind, _ in result.trace), "the scenario no longer fences a commit"
    assert result.ok, result.violations


def test_checker_catches_beliefs_that_outlive_the_store_lease() -> None:
    """Mutation check: with an unsafe local deadline (1.5 x ttl) frozen members overlap their successors."""
    caught = [
        seed
        for seed in range(200)
        if any(
            "exclusivity" in v
            for v in simulate(SimConfig(members=4, partitions=8, events=12, seed=seed, safety=1.5)).violations
        )
    ]
    assert caught, "the exclusivity checker must notice beliefs that outlive the lease"


def test_zombie_commits_after_a_freeze_are_all_rejected() -> None:
    """Freezes happen in these seeds; every zombie commit attempt is checked by the fencing property."""
    frozen = 0
    for seed in range(100):
        result = simulate(SimConfig(members=4, partitions=8, events=10, seed=seed))
        frozen += result.faults.get("freeze", 0)
        assert not [v for v in result.violations if v.startswith("fencing")]
    assert frozen > 20


def test_simulate_cli_prints_a_summary_and_fails_with_the_seed() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "apportion.cli",
            "simulate",
            "--members",
            "8",
            "--partitions",
            "40",
            "--events",
            "20",
            "--seed",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert '"moves_lower_bound"' in proc.stdout and '"unowned_partition_s"' in proc.stdout and '"rounds"' in proc.stdout


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_simulate_reports_at_least_as_many_moves_as_its_lower_bound(strategy: str) -> None:
    """`apportion simulate --strategy high_availability` printed 18 moves against a "lower bound" of 70: the bound
    counted first placements, and every probing round counted again the moves still waiting for a ready learner."""
    result = simulate(SimConfig(strategy=strategy))
    assert result.ok, result.violations
    assert result.moves >= result.min_moves, result.summary()
    if strategy in ("sticky", "high_availability"):
        assert result.moves == result.min_moves, result.summary()


def test_a_stateful_simulation_reports_moves_that_waited_for_learners_once() -> None:
    options = {"max_warmup_replicas": 2, "acceptable_recovery_lag": 100, "probing_rebalance_interval_s": 2.0}
    config = SimConfig(
        members=3, partitions=12, events=6, strategy="high_availability", stateful=True, options=options,
        state_records=2_000, restore_rate=4_000.0,
    )  # fmt: skip
    result = simulate(config)
    assert result.ok, result.violations
    assert result.rounds > config.events  # probing rounds happened
    assert 0 < result.min_moves <= result.moves, result.summary()
