"""The simulator runs the coordinator and static modes with the same checks as the rounds protocol."""

from __future__ import annotations

import pytest

from apportion.sim import SimConfig, simulate

SEEDS = 200


def small(seed: int, mode: str) -> SimConfig:
    return SimConfig(
        members=2 + seed % 4,
        partitions=6 + seed % 11,
        events=6 + seed % 5,
        seed=seed,
        mode=mode,
        strategy="round_robin" if mode == "coordinator" else "sticky",
        max_in_flight=1 + seed % 4,
    )


@pytest.mark.parametrize("mode", ["coordinator", "static"])
def test_two_hundred_seeds_per_mode_keep_exclusivity_fencing_and_liveness(mode: str) -> None:
    failures = []
    for seed in range(SEEDS):
        result = simulate(small(seed, mode))
        if not result.ok:
            failures.append((seed, result.violations[:2]))
    assert not failures, f"failing {mode} seeds: {failures[:5]}"


@pytest.mark.parametrize("mode", ["coordinator", "static"])
def test_same_seed_gives_the_same_trace_in_every_mode(mode: str) -> None:
    first = simulate(small(7, mode))
    assert first.trace == simulate(small(7, mode)).trace


@pytest.mark.parametrize("mode", ["coordinator", "static"])
def test_the_checker_catches_overlap_when_members_trust_their_lease_too_long(mode: str) -> None:
    caught = 0
    for seed in range(15):
        config = small(seed, mode)
        unsafe = SimConfig(**{**{f: getattr(config, f) for f in config.__dataclass_fields__}, "safety": 1.9})
        caught += not simulate(unsafe).ok
    assert caught > 0, "an unsafe local deadline should produce exclusivity violations on some seed"
