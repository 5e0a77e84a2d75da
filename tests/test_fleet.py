"""``apportion.fleet``'s reading of event lines: what a worker applied, and kinds that are only counted."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from apportion import events
from apportion.fleet import Fleet, WorkerLog

# A stand-in worker: prints the event lines its argv names ("first" or "second" run) and exits.
SCRIPT = """
import json, sys
runs = {
    "first": [("assigned", [0, 1, 2, 3]), ("commit", [0]), ("revoked", [1]), ("lost", [2]), ("assigned", [7]),
              ("commit", [7])],
    "second": [("assigned", [5])],
}
for kind, parts in runs["second" if "second" in sys.argv else "first"]:
    print(json.dumps({"event": kind, "time": 0.0, "partitions": parts}), flush=True)
"""


def test_applied_is_assigned_less_revoked_and_lost_per_process_of_an_id(tmp_path: Path) -> None:
    with Fleet(tmp_path / "logs", [sys.executable, "-c", SCRIPT]) as fleet:
        first = fleet.start("w1")
        assert first.proc.wait(30) == 0
        assert first.applied() == {0, 3, 7}
        second = fleet.start("w1", "second")  # a restart appends to the same log: it starts with nothing applied
        assert second.proc.wait(30) == 0
        assert second.applied() == {5} and first.applied() == {0, 3, 7}


def test_a_count_only_kind_is_counted_but_not_kept(tmp_path: Path) -> None:
    with Fleet(tmp_path / "logs", [sys.executable, "-c", SCRIPT], count_only=("commit",)) as fleet:
        worker = fleet.start("w1")
        assert worker.proc.wait(30) == 0
        assert worker.log.count("commit") == 2 and worker.log.count("assigned") == 2
        assert "commit" not in {e["event"] for e in worker.events}
        assert worker.applied() == {0, 3, 7}


def test_a_count_only_line_is_counted_once_whole(tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    log = WorkerLog(path, count_only=("commit",))
    line = events.line("commit", partitions=[1])
    path.write_text("INFO something\n" + line[:10])  # a line being written: not counted yet
    assert log.count("commit") == 0
    with open(path, "a") as handle:
        handle.write(line[10:] + "\n" + json.dumps({"event": "committed"}) + "\n")  # another kind, same start
    assert log.count("commit") == 1 and log.count("committed") == 1


def test_a_fleets_env_may_carry_what_it_sets_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller's env wins over the fleet's own settings, PYSPARK_PYTHON included: make test passed os.environ after
    a Spark session in the same process had set PYSPARK_PYTHON there, and Fleet raised TypeError (found when the
    Spark group ran before the Kafka and RabbitMQ consumer tests on one xdist worker)."""
    monkeypatch.setenv("PYSPARK_PYTHON", "/somewhere/python")
    fleet = Fleet(tmp_path / "logs", ["true"], env=dict(os.environ, SPARK_LOCAL_IP="::1"))
    assert fleet.env["PYSPARK_PYTHON"] == "/somewhere/python"
    assert fleet.env["SPARK_LOCAL_IP"] == "::1"
    assert Fleet(tmp_path / "logs", ["true"]).env["PYSPARK_PYTHON"] == sys.executable
