"""Seed 1's minimum cluster size with real `apportion worker` processes on a SQLite file and a PostgreSQL database
(issue 30.3; conftest.py's ``url``, without etcd): workers started a moment apart share the first table, and a group
below its minimum says so in `rebalance`, `status` and the dashboard's feed (read-only opens of the store)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from apportion.fleet import Fleet, worker_args
from apportion.store import connect
from apportion.waiting import wait_for
from apportion.web import Feed
from tests.group.test_modes_processes import alive, members, run_cli
from tests.group.test_processes import balanced

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("url", ["sqlite", "postgres"], indirect=True)
def test_three_workers_started_0_3_s_apart_share_the_first_table_with_no_revocation(url: str, tmp_path: Path) -> None:
    """With --min-members 1 (the default), the first worker used to get all 30 partitions and then revoke 20 of them
    as the next two registered: the first table now waits until nobody has registered for its settle time
    (`--first-settle`, 10 s by default: the simulator measures fleets started up to 5 s apart,
    tests/sim/test_first_table_simulator.py). It is 2 s here, to keep the test short: started 0.3 s apart, the three
    processes *register* up to ~1 s apart on a loaded 2-core machine (their imports); what is tested with real
    processes is that the table waits for the settle, and that `--first-settle` reaches the group."""
    args = worker_args(url, "g", "--partitions", "30", "--mode", "coordinator", "--first-settle", "2")
    with Fleet(tmp_path / "logs", args) as fleet:
        workers = []
        for wid in ("w1", "w2", "w3"):
            workers.append(fleet.start(wid))
            time.sleep(0.3)  # the scenario's pace (a fleet starting together), not a synchronisation
        wait_for("30 partitions over w1, w2, w3", lambda: balanced(url, {"w1", "w2", "w3"}), 60, alive=alive(*workers))
        for w in workers:
            assert [len(e["partitions"]) for e in w.of("assigned")] == [10], f"{w.id}: {w.of('assigned')}"
            assert not w.of("revoked") and not w.of("lost"), f"{w.id} gave partitions back: {w.tail()}"


@pytest.mark.parametrize("url", ["sqlite", "postgres"], indirect=True)
def test_a_group_below_its_minimum_says_waiting_in_rebalance_status_and_the_dashboard(url: str, tmp_path: Path) -> None:
    args = worker_args(url, "g", "--partitions", "6", "--mode", "coordinator", "--min-members", "3")
    with Fleet(tmp_path / "logs", args) as fleet:
        first = fleet.start("w1")
        wait_for("w1 to register", lambda: members(url) == ["w1"], 30, alive=alive(first))
        for dry in ([], ["--dry-run"]):
            refused = run_cli("rebalance", "--store", url, "--group", "g", *dry)
            assert refused.returncode == 2, refused.stdout + refused.stderr
            assert refused.stderr.strip() == (
                "apportion: error: group 'g' is waiting for 3 members (have 1): no partition table to re-plan yet "
                "(apportion status shows it)"
            )
        status = run_cli("status", "--store", url, "--group", "g", "--json")
        assert status.returncode == 0, status.stderr
        reason = "waiting for 3 members (have 1)"
        assert json.loads(status.stdout)["waiting"] == {"min_members": 3, "live": 1, "reason": reason}
        text = run_cli("status", "--store", url, "--group", "g")
        assert reason in text.stdout, text.stdout
        feed = Feed(url, "g").start()
        try:
            wait_for("the feed to say waiting", lambda: (feed.state().get("waiting") or {}).get("reason") == reason, 20)
            others = [fleet.start("w2"), fleet.start("w3")]
            wait_for("the table over 3 members", lambda: balanced(url, {"w1", "w2", "w3"}), 60, alive=alive(*others))
            wait_for("the feed to stop waiting", lambda: feed.state().get("waiting") is None, 20)
        finally:
            feed.close()
        status = run_cli("status", "--store", url, "--group", "g", "--json")
        assert json.loads(status.stdout)["waiting"] is None
        assert run_cli("rebalance", "--store", url, "--group", "g", "--dry-run").returncode == 0
    with connect(url) as store:
        assert store.get("/apportion/g/rebalance") is None  # the refused requests wrote nothing
