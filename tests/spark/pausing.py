"""A pipeline worker whose first batch pauses between writing its output and committing it: the window in which a
test kills it or freezes it into a zombie. ``python -m tests.spark.pausing SECONDS <apportion arguments>`` runs
`apportion` with that fault hook installed (``Pipeline``'s ``fault``, at ``before_commit``); the product has no
option for it. Its ``pausing`` event is the one `apportion pipeline run --slow-commit` emits. :func:`pausing` turns a
fleet's command line into this one (``Fleet.start(..., command=pausing(fleet.args, 5.0))``).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def pausing(args: Sequence[str], pause_s: float) -> list[str]:
    """``args`` (``python -m apportion.cli ...``, as ``apportion.fleet`` builds it) run through this module."""
    if list(args[1:3]) != ["-m", "apportion.cli"]:
        raise ValueError(f"not an apportion command line: {args[:3]}")
    return [args[0], "-m", __name__, str(pause_s), *args[3:]]


def first_commit_pause(pause_s: float, worker_id: str) -> Any:
    """A fault hook: the first ``before_commit`` of the process (its first batch's) emits ``pausing`` and sleeps."""
    from apportion.spark.pipeline._pipeline import emit_log

    left = [1]

    def fault(point: str, task: Any, path: Path) -> None:
        if point == "before_commit" and left[0] > 0:
            left[0] -= 1
            emit_log("pausing", worker=worker_id, partition=task.partition, seconds=pause_s)
            time.sleep(pause_s)

    return fault


def main(argv: list[str]) -> int:
    import apportion.cli._pipeline as command
    from apportion.cli import main as apportion

    pause_s, rest = float(argv[0]), argv[1:]
    run = command.run_pipeline_worker

    def paused(request: Any, **kwargs: Any) -> None:
        run(request, fault=first_commit_pause(pause_s, request.worker_id), **kwargs)

    command.run_pipeline_worker = functools.wraps(run)(paused)
    return apportion(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
