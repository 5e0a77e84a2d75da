"""The simulator measures every mode (issue 30.5): moves, their lower bound and the time to settle per change, in
the rounds, coordinator and static modes; the coordinator's --min-members and --rebalance and static's --replicas
reach the simulated group. Before, the coordinator and static modes reported 0 moves and a bound of 0 whatever the
churn (only ``round_closed`` was counted)."""

from __future__ import annotations

import json

import pytest

from apportion.errors import InvalidRequest
from apportion.sim import SimConfig, simulate
from apportion.spark.analytics._grid import parse_grid
from tests.cli.run import cli


def seed_one(mode: str, **kwargs: object) -> SimConfig:
    """Seed 1's example: athens, byzantium and cyrene hold 30 partitions round-robin; ephesus joins."""
    settings: dict[str, object] = {"strategy": "round_robin", **kwargs}
    return SimConfig(members=3, partitions=30, mode=mode, script=((0.0, "join"),), faults=False, **settings)  # type: ignore[arg-type]


@pytest.mark.parametrize("rebalance", ["automatic", "manual"])
def test_seed_one_s_join_moves_seven_partitions_the_lower_bound_in_the_coordinator_mode(rebalance: str) -> None:
    result = simulate(seed_one("coordinator", rebalance=rebalance))
    assert result.ok, result.violations
    start, join = result.summary()["changes"]
    assert (start["kind"], start["plans"], start["moves"]) == ("start", 1, 0)  # the first table places, moves none
    assert (join["kind"], join["plans"], join["moves"], join["moves_lower_bound"]) == ("join", 1, 7, 7)
    assert join["settle_s"] >= 0.0 and (result.moves, result.min_moves, result.plans) == (7, 7, 2)
    if rebalance == "manual":  # the simulated operator rebalanced after the join
        assert join["settle_s"] >= result.config.settle_s + result.config.min_interval_s


@pytest.mark.parametrize(
    ("mode", "settings"),
    [
        ("rounds", {}),
        ("rounds", {"planned_leave": 1.0}),  # a leave planned first (what a stopping Worker does)
        ("coordinator", {"strategy": "round_robin"}),
        ("coordinator", {"strategy": "round_robin", "rebalance": "manual"}),
    ],
)
@pytest.mark.parametrize("kind", ["leave", "crash"])
def test_a_leave_or_a_crash_moves_exactly_the_leavers_partitions_and_the_simulator_counts_them(
    mode: str, settings: dict[str, object], kind: str
) -> None:
    """Issue 45.5: the leaver is not in the plan's input, so its 4 partitions (12 over 3 members) were counted as
    placements: 0 moves, bound 0, contradicting ``_sticky``'s "one leave moves exactly the leaver's partitions"."""
    config = SimConfig(members=3, partitions=12, mode=mode, faults=False, script=((0.0, kind),), **settings)  # type: ignore[arg-type]
    result = simulate(config)
    assert result.ok, result.violations
    change = result.summary()["changes"][-1]
    assert (change["kind"], change["moves"], change["moves_lower_bound"]) == (kind, 4, 4), change


def test_the_rounds_mode_moves_the_same_seven_and_says_how_long_the_round_took() -> None:
    result = simulate(seed_one("rounds", strategy="sticky"))
    join = result.summary()["changes"][-1]
    assert (join["moves"], join["moves_lower_bound"]) == (7, 7)
    assert join["settle_s"] >= result.config.settle_s  # a round settles for RST first


def test_a_static_count_change_pays_the_range_formula_s_moves_against_the_balanced_bound() -> None:
    """12 partitions from 3 blocks of 4 to 4 blocks of 3: partitions 3, 6, 7, 9, 10 and 11 change ordinal (6 moves)
    where a balanced plan from the old blocks needs 3; back down to 3 the same 6 (the leaving ordinal's 3 and 3
    between the others)."""
    config = SimConfig(members=3, partitions=12, mode="static", faults=False, script=((0.0, "scale_up"),))
    up = simulate(config)
    assert up.ok, up.violations
    assert [(c["kind"], c["moves"], c["moves_lower_bound"]) for c in up.summary()["changes"]] == [
        ("start", 0, 0),
        ("scale_up", 6, 3),
    ]
    down = simulate(SimConfig(members=4, partitions=12, mode="static", faults=False, script=((0.0, "scale_down"),)))
    assert down.ok, down.violations
    assert (down.moves, down.min_moves) == (6, 3)


@pytest.mark.parametrize("mode", ["rounds", "coordinator", "static"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_mode_reports_moves_at_or_above_their_bound_for_each_change(mode: str, seed: int) -> None:
    config = SimConfig(
        members=3, partitions=24, events=12, seed=seed, mode=mode, faults=False,
        strategy="round_robin" if mode == "coordinator" else "sticky",
    )  # fmt: skip
    result = simulate(config)
    assert result.ok, result.violations
    changes = result.summary()["changes"]
    assert len(changes) >= 13 and changes[0]["kind"] == "start"  # static: plus a crashed pod's return
    assert sum(c["moves"] for c in changes) == result.moves > 0, "churn that moves nothing in 12 events?"
    for c in changes:
        assert c["moves"] >= c["moves_lower_bound"] >= 0 and c["settle_s"] >= 0, c


def test_a_coordinator_group_below_its_minimum_owns_nothing_and_that_is_no_violation() -> None:
    waiting = simulate(SimConfig(members=2, partitions=8, events=0, mode="coordinator", min_members=3))
    assert waiting.ok and waiting.plans == 0
    joined = simulate(
        SimConfig(members=2, partitions=8, mode="coordinator", min_members=3, faults=False, script=((0.0, "join"),))
    )
    assert joined.ok, joined.violations
    assert [c["plans"] for c in joined.summary()["changes"]] == [0, 1]  # the table once the third member came


def test_static_replicas_above_members_leave_the_missing_ordinal_s_block_waiting() -> None:
    result = simulate(SimConfig(members=3, replicas=4, partitions=12, events=0, mode="static"))
    assert result.ok, result.violations
    with pytest.raises(InvalidRequest, match="replicas"):
        SimConfig(members=3, replicas=2, mode="static").group_config()
    with pytest.raises(InvalidRequest, match="replicas"):
        SimConfig(members=3, replicas=4, mode="rounds").group_config()


def test_the_command_takes_min_members_rebalance_and_replicas_and_refuses_them_in_another_mode() -> None:
    out = cli(
        "simulate", "--mode", "coordinator", "--members", "3", "--partitions", "12", "--events", "4",
        "--min-members", "2", "--rebalance", "manual", "--no-faults",
    )  # fmt: skip
    assert out.code == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["mode"] == "coordinator" and summary["plans"] >= 1 and len(summary["changes"]) == 5
    static = cli("simulate", "--mode", "static", "--members", "2", "--replicas", "3", "--events", "0")
    assert static.code == 0, static.stderr
    refused = cli("simulate", "--replicas", "3")
    assert refused.code == 2 and refused.one_error_line().endswith(
        "--replicas: only with --mode static (this is --mode rounds)"
    )
    grid = cli("simulate", "--grid", "g.json", "--mode", "static")
    assert grid.code == 2 and "a --grid picks its modes in the grid file" in grid.one_error_line()


def test_a_grid_picks_its_modes() -> None:
    grid = parse_grid({"modes": ["rounds", "coordinator", "static"], "strategies": ["round_robin"], "seeds": [1]})
    assert {s["mode"] for s in grid.scenarios()} == {"rounds", "coordinator", "static"}
    assert {s["mode"] for s in parse_grid({}).scenarios()} == {"rounds"}
    with pytest.raises(InvalidRequest, match="unknown mode 'ring'"):
        parse_grid({"modes": ["ring"]})
