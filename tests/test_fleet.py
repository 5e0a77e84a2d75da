"""``apportion.fleet``'s reading of event lines: what a worker applied, and kinds that are only counted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

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
