"""The simulator runs the coordinator and static modes with the same checks as the rounds protocol."""

from __future__ import annotations

import os

import pytest

from apportion.sim import SimConfig, check_static, simulate

SOAK = os.environ.get("APPORTION_SOAK") == "1"
SEEDS = 2000 if SOAK else 100  # 200 in make test cost it 32 s of its 15 minutes; make soak runs 2,000


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


@pytest.mark.slow  # so that make soak (-m "slow or soak") runs it with its 2,000 seeds
@pytest.mark.parametrize("mode", ["coordinator", "static"])
def test_seeds_per_mode_keep_exclusivity_fencing_and_liveness(mode: str) -> None:
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


STATEFULSET_SCRIPT = (
    (1.0, "scale_up"),
    (3.0, "crash", 2.0),  # the pod returns 2 s later: its block waits for it meanwhile
    (7.0, "scale_down"),
    (9.0, "scale_up"),
    (11.0, "restart"),
    (13.0, "scale_down"),
)


def scaled(seed: int) -> SimConfig:
    return SimConfig(members=3, partitions=10, seed=seed, mode="static", faults=False, script=STATEFULSET_SCRIPT)


def test_static_scale_up_and_down_are_scale_records_the_trace_checks_follow() -> None:
    raised_by_pod = raised_by_operator = 0
    for seed in range(6):
        result = simulate(scaled(seed))
        assert result.ok, (seed, result.violations)
        scales = [(member, detail) for _, member, kind, detail in result.trace if kind == "scale"]
        operator = [d for m, d in scales if m == "operator"]
        assert operator[-1] == "replicas=3", "3 -> 4 -> 3 -> 4 -> 3: the last scale down is the operator's"
        raised_by_pod += any("previous=3" in d and "replicas=4" in d for m, d in scales if m != "operator")
        raised_by_operator += "replicas=4" in operator
        assert result.faults.get("return") == 1, "the crashed pod came back"
    assert raised_by_pod and raised_by_operator, "both ways of scaling up: the new pod's ordinal, apportion scale"


def record(t: float, member: str, kind: str, **fields: object) -> tuple[float, str, str, dict[str, object]]:
    return (t, member, kind, fields)


def test_the_static_check_catches_an_unpublished_count_and_an_assignment_outside_the_block() -> None:
    published = [record(0, "m0", "scale", ordinal=0, replicas=2, previous=None)]
    good = [*published, record(1, "m0", "static", ordinal=0, replicas=2), record(2, "m0", "assigned", partitions=[0])]
    assert check_static(good, 4) == []
    unpublished = [*published, record(1, "m1", "static", ordinal=1, replicas=3)]
    assert "follows a replica count 3 nobody published" in check_static(unpublished, 4)[0]
    outside = [*good, record(3, "m0", "assigned", partitions=[3])]  # ordinal 0 of 2 holds 0-1
    assert "assigned [3] outside its block" in check_static(outside, 4)[0]
    wrong_raise = [*published, record(1, "m5", "scale", ordinal=5, replicas=3, previous=2)]
    assert "raised 2 to 3" in check_static(wrong_raise, 4)[0]
