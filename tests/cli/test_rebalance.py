"""`apportion rebalance` while the moves of a previous plan are in flight: refused in one line (exit 2), nothing
requested; a dry run shows the plan and says what is still moving."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from apportion.group import CoordinatorMember, GroupConfig, Mode, Rounds, Static
from apportion.group.internals import Keys, TableState, encode, read_table
from apportion.store import connect
from tests.cli.run import cli
from tests.group.modes_harness import ModeHarness


def moving_group() -> tuple[ModeHarness, str]:
    """A manual-policy group on a named memory store (the in-process CLI opens the same one): a and b hold 12
    partitions, c joined, and an operator's rebalance has been written to the table but not carried out."""
    h = ModeHarness()
    url = f"memory://{uuid.uuid4().hex}"
    h.store = connect(url, clock=h.clock)  # type: ignore[assignment]
    for mid in ("a", "b"):
        h.add_coordinated(mid, rebalance="manual", max_in_flight=1)
    h.run(1.0)
    h.add_coordinated("c", rebalance="manual", max_in_flight=1)
    h.run(1.0)
    assert cli("rebalance", "--store", url, "--group", "g", "--json").code == 0
    leader = next(m for m in h.members.values() if isinstance(m, CoordinatorMember) and m.is_coordinator)
    leader.step(h.clock.now())  # only the coordinator: its moves are in the table, none is done
    return h, url


def states(h: ModeHarness) -> dict[int, TableState]:
    return {p: e.state for p, (e, _) in read_table(h.store, "g").items()}


def test_rebalance_while_migrations_are_in_flight_is_refused_in_one_line() -> None:
    h, url = moving_group()
    moving = sorted(p for p, s in states(h).items() if s is not TableState.ONLINE)
    assert moving and TableState.MIGRATING in states(h).values()
    result = cli("rebalance", "--store", url, "--group", "g")
    assert result.code == 2
    line = result.one_error_line()
    assert (
        f"{len(moving)} partition(s) of group 'g' are still moving" in line and "once every partition is ONLINE" in line
    )
    assert h.store.get("/apportion/g/rebalance") is None  # nothing requested


def test_a_dry_run_while_migrations_are_in_flight_lists_what_is_still_moving() -> None:
    h, url = moving_group()
    moving = sorted(p for p, s in states(h).items() if s is not TableState.ONLINE)
    result = cli("rebalance", "--store", url, "--group", "g", "--dry-run", "--json")
    assert result.code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["in_flight"] == moving and out["requested"] is False
    h.run(3.0)  # the moves finish: a new request is accepted
    assert GroupConfig.find(h.store, "g") is not None and not [
        s for s in states(h).values() if s is not TableState.ONLINE
    ]
    assert cli("rebalance", "--store", url, "--group", "g").code == 0


@pytest.mark.parametrize("mode", [Rounds(), Static()])
def test_rebalance_of_a_group_of_another_mode_is_refused_in_one_line(mode: Mode, tmp_path: Path) -> None:
    """Issue 28 class 1: it planned nothing and said "0 planned moves", exit 0, as if a table existed."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with connect(url) as store:
        store.put(Keys("g").resource, encode(GroupConfig(partitions=4, mode=mode).to_json()))
    for args in ([], ["--dry-run"]):
        result = cli("rebalance", "--store", url, "--group", "g", *args)
        assert result.code == 2, result.stderr
        assert result.one_error_line().endswith(
            f"rebalance: group 'g' is a {mode.name} group: only a coordinator group has a partition table to re-plan"
        )
    with connect(url) as store:
        assert store.get(Keys("g").rebalance) is None
