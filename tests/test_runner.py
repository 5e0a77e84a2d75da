"""`apportion.runner`: what `apportion worker` runs, called from Python (events through ``emit``, stopped by the
caller through the worker it is handed)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from apportion.errors import InvalidRequest
from apportion.group import GroupConfig, TraceKind
from apportion.runner import Cadence, run_worker
from apportion.waiting import wait_for
from apportion.worker import JoinOptions, Worker


def test_run_worker_emits_its_assignment_and_commits_until_the_caller_stops_it() -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    lock = threading.Lock()
    started: list[Worker] = []
    traced: list[TraceKind] = []

    def emit(event: str, **fields: Any) -> None:
        with lock:
            events.append((event, fields))

    url = f"memory://runner-{uuid.uuid4().hex}"
    thread = threading.Thread(
        target=run_worker,
        args=(url, "g", "w1", GroupConfig(partitions=4, settle_s=0.05)),
        kwargs={
            "emit": emit,
            "commit_every_s": 0.05,
            "on_started": started.append,
            "options": JoinOptions(tracer=lambda kind, fields: traced.append(kind), capacity=2.5),
        },
        daemon=True,
    )
    thread.start()
    wait_for(
        "partitions 0-3 assigned and partition 0 committed",
        lambda: started and any(e == "assigned" for e, _ in events) and started[0].checkpoint(0) is not None,
        20,
        context=lambda: str(events),
    )
    committed = started[0].checkpoint(0)
    started[0].stop()
    thread.join(20)
    assert not thread.is_alive()
    assigned = [f["partitions"] for e, f in events if e == "assigned"]
    assert sorted(p for parts in assigned for p in parts) == [0, 1, 2, 3]
    assert events[-1] == ("stopped", {})
    assert committed is not None and committed.startswith("w1:")  # the stand-in committer's checkpoint
    commits = [f for e, f in events if e == "commit"]  # the history: each accepted commit, its epoch and revision
    assert commits and all(f["revision"] > 0 and f["epoch"] >= 1 for f in commits), commits
    revisions = [f["revision"] for f in commits]
    assert revisions == sorted(revisions), f"in order: {revisions}"
    first_batch = [f["partitions"][0] for f in commits if f["revision"] == revisions[0]]
    assert first_batch == [0, 1, 2, 3], f"a batch is one transaction (commit_many), one line per partition: {commits}"
    assert committed in {f["checkpoint"] for f in commits}
    assert TraceKind.REGISTERED in traced  # the member options travelled whole, through the start-up's own tracer


def test_run_worker_refuses_a_tracer_of_its_own_beside_the_metrics_tracer() -> None:
    with pytest.raises(InvalidRequest, match="metrics"):
        run_worker(
            "memory://runner-refused", "g", "w1", GroupConfig(partitions=4), emit=lambda event, **fields: None,
            options=JoinOptions(tracer=lambda kind, fields: None), metrics_port=0,
        )  # fmt: skip


def test_the_committer_starts_a_batch_every_period_from_the_start_whatever_a_commit_takes() -> None:
    """``--commit-every 5``: batches start at 5, 10, 15, ... even when each commit takes 2 s (sleeping 5 s after each
    commit, as before, offered 5/7 of the promised commits); a commit that overruns the period starts the next at
    once, never two at once, and the grid resumes."""
    cadence, now, starts = Cadence(5.0, 0.0), 0.0, []
    for took in (2.0, 2.0, 2.0, 7.5, 1.0, 1.0):
        now += cadence.wait_s(now)
        cadence.started(now)
        starts.append(now)
        now += took  # the commit
    assert starts == [5.0, 10.0, 15.0, 20.0, 27.5, 30.0]
