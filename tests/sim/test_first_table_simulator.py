"""Issue 45.2: the coordinator's first table when the fleet starts seconds apart, measured in the simulator.

The first table used to wait until no member had registered for RST (0.5 s): members started 0.6 s apart (a
Deployment's pods start seconds apart) got a first table that gave all 30 partitions to the first, which then gave
25 back as the other two arrived. The lower bound of a fleet's start is 0 moves (nothing was owned before it), so
every one of them was a move a table laid out over the whole fleet would not make. The first table now waits for a
settle time of its own (``Coordinator.first_table_settle_s``: 10 s by default, RST when ``--min-members`` declares
the fleet's size).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.group import Coordinator
from apportion.sim import SimConfig, SimResult, simulate


def fleet(gap_s: float, members: int = 3, partitions: int = 30, **kwargs: object) -> SimConfig:
    """``members`` coordinator-mode members started ``gap_s`` apart, no churn afterwards (seed 1's round robin)."""
    return SimConfig(
        members=members, partitions=partitions, mode="coordinator", strategy="round_robin", events=0, faults=False,
        start_gap_s=gap_s, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def the_start(result: SimResult) -> dict[str, object]:
    assert result.ok, result.violations
    start: dict[str, object] = result.summary()["changes"][0]
    assert start["kind"] == "start"
    return start


def first_ownership_s(result: SimResult) -> float:
    """Virtual seconds from the first member's start to the first partition owned (the first table's claims)."""
    return min(t for t, _, kind, _ in result.trace if kind == "assigned") - 1000.0


@pytest.mark.parametrize("members", [3, 6])
@pytest.mark.parametrize("gap_s", [0.0, 0.6, 2.0, 5.0])
def test_a_fleet_started_seconds_apart_gets_one_first_table_and_no_move_after_it(gap_s: float, members: int) -> None:
    result = simulate(fleet(gap_s, members))
    start = the_start(result)
    assert start["moves_lower_bound"] == 0, "a fleet's start owned nothing before it"
    assert (start["plans"], start["moves"]) == (1, 0), f"{gap_s} s apart: {start}"
    arrived = (members - 1) * gap_s
    assert first_ownership_s(result) >= arrived + Coordinator.DEFAULT_FIRST_SETTLE_S  # the price, once per group


def test_the_old_first_table_settle_of_rst_moved_25_of_30_partitions_for_members_0_6_s_apart() -> None:
    """What the issue measured, with the old rule (a first table settle of RST, 0.5 s): the test above is sensitive."""
    start = the_start(simulate(fleet(0.6, first_settle_s=0.5)))
    assert (start["plans"], start["moves"], start["moves_lower_bound"]) == (3, 25, 0)


def test_a_declared_minimum_lays_the_table_out_rst_after_the_fleet_arrived() -> None:
    """``--min-members 3`` declares the fleet's size: the table waits for three, then RST (0.5 s), not 10 s."""
    result = simulate(fleet(2.0, min_members=3))
    assert (the_start(result)["moves"], first_ownership_s(result)) == (0, pytest.approx(4.5, abs=0.1))


def test_a_fleet_slower_than_the_first_settle_pays_moves_unless_the_settle_is_raised() -> None:
    """The limit, stated: members 12 s apart outlast the default 10 s; ``--first-settle 15`` covers them."""
    assert the_start(simulate(fleet(12.0)))["moves"] == 25
    assert the_start(simulate(fleet(12.0, first_settle_s=15.0)))["moves"] == 0


@settings(max_examples=15, deadline=None)
@given(
    members=st.integers(1, 8),
    partitions=st.integers(1, 40),
    gap_s=st.floats(0.0, Coordinator.DEFAULT_FIRST_SETTLE_S * 0.9),
    seed=st.integers(0, 1000),
)
def test_any_fleet_arriving_within_the_first_settle_moves_nothing_after_the_first_table(
    members: int, partitions: int, gap_s: float, seed: int
) -> None:
    start = the_start(simulate(fleet(gap_s, members, partitions, seed=seed)))
    assert start["moves"] <= start["moves_lower_bound"] == 0, start
