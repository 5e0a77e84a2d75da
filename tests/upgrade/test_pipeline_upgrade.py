"""A stateful pipeline rolled from the previous release to this code one worker at a time, and one worker back, while
records stream in: the output and the state stay exactly once (issue 42.3; README, "Compatibility: which versions
run together").

Three `apportion pipeline run` workers of the previous release (``tests/upgrade/releases.py``, with its ``spark``
extra) process the 8 partitions of a log with ``--state-dir`` (per-key aggregates per partition behind the fenced
changelog) on a SQLite store, thin clients of the run's one Spark Connect server (``connect_server``: this code's
server, the release's client pinned to its pyspark). Each worker is replaced by this code in turn — SIGTERM, wait for
its exit, start the new version under the same id with the same state directory (a pod keeps its volume), wait until
it holds partitions and has committed a batch — and then the first one is rolled back to the previous release the
same way. That first one comes back on another node each time (its state directory gone: its state is rebuilt from
the committed changelog alone, which the other version wrote), the others keep theirs (the other version's local
state files, then the changelog's tail). A producer appends seeded records from the moment the first workers hold their
partitions, so every hand-over lands between batches with input waiting.

At the end this code's `apportion pipeline verify` must find every record committed exactly once (count, checksum,
per-key order) and the state rebuilt from the committed changelog equal to a one-pass aggregate of the input (the
demo's "state exactly once"); both versions must have committed batches, and each cold start must have rebuilt
state from the changelog the other version wrote."""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from apportion.fleet import Fleet, WorkerProcess, pipeline_args
from apportion.log import PartitionedLog, SeededRecords
from apportion.spark.pipeline._output import uncommitted_records
from apportion.store import connect
from apportion.waiting import wait_for
from tests.spark.test_pipeline import assert_exactly_once, timeline
from tests.upgrade.releases import Release, installed, previous_release

# the thin-worker group: this test runs on the xdist worker that holds the Connect server, beside the pipeline's
# other thin-worker tests (tests/spark/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.xdist_group("thin-workers")]

PARTITIONS = 8
WORKERS = ("w0", "w1", "w2")
CHUNK, EVERY_S = 32, 1.5  # while the workers are replaced: a batch of a worker each 1.5 s at most, however fast
TIMINGS = ("--settle", "0.3", "--min-interval", "0.6", "--ttl", "3")
START_S = 120  # a thin worker's start (imports, Connect session, warm-up): ~5 s idle, a minute on a loaded machine


@pytest.fixture(scope="module")
def previous() -> Release:
    return installed(*previous_release())


class Rollout:
    """The pipeline's fleet and which version each of its processes runs."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.version: dict[WorkerProcess, str] = {}

    def start(self, wid: str, command: Sequence[str], version: str) -> WorkerProcess:
        process = self.fleet.start(wid, command=command)
        self.version[process] = version
        return process

    def context(self) -> str:
        held = ", ".join(f"{w} ({self.version[self.fleet[w]]}): {sorted(self.fleet[w].applied())}" for w in WORKERS)
        return f"{held}\n{timeline(self.fleet.started)}"

    def wait_committing(self, what: str, processes: Sequence[WorkerProcess]) -> None:
        """Until each of ``processes`` holds partitions and has committed a batch, and every partition is held."""

        def done() -> bool:
            held = [p.applied() for p in processes]
            if not all(held) or not all(any(e.get("event") == "commit" for e in p.own_events()) for p in processes):
                return False
            return len(set().union(*(self.fleet[w].applied() for w in WORKERS))) == PARTITIONS

        wait_for(what, done, START_S, alive=lambda: self.fleet.check(WORKERS), context=self.context)

    def replace(
        self, wid: str, command: Sequence[str], version: str, *, lose_state: Path | None = None
    ) -> WorkerProcess:
        """SIGTERM, wait for the exit, (delete ``lose_state``), start ``version`` under the same id, wait until it
        commits."""
        old = self.fleet[wid]
        old.signal(signal.SIGTERM)
        code = old.proc.wait(60)
        assert code == 0, f"{wid} ({self.version[old]}) exited {code} on SIGTERM:\n{old.tail(40)}"
        if lose_state is not None:
            shutil.rmtree(lose_state)
        new = self.start(wid, command, version)
        self.wait_committing(f"{wid} of {version} to hold partitions and commit a batch", [new])
        return new


def restores(process: WorkerProcess) -> list[dict[str, Any]]:
    """The process's ``restored`` events: its state caught up with a partition's committed changelog."""
    return [e for e in process.own_events() if e.get("event") == "restored"]


def replayed(process: WorkerProcess) -> int:
    return sum(e["records"] for e in restores(process))


def test_a_stateful_pipeline_rolled_to_this_code_and_back_keeps_exactly_once_output_and_state(
    tmp_path: Path, previous: Release, connect_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    log_dir, out_dir, url = tmp_path / "log", tmp_path / "out", f"sqlite:///{tmp_path / 'store.db'}"
    log = PartitionedLog(log_dir)
    log.create("r", PARTITIONS)
    records = SeededRecords(log, "r", 1_000_000, keys=97, seed=7, batch_records=CHUNK)
    state = tmp_path / "state"
    options = ("--spark", connect_server.url, "--batch-records", "200", "--state-dir", str(state), *TIMINGS)
    old = previous.pipeline(url, "g", log_dir, out_dir, "r", *options)
    new = pipeline_args(url, "g", log_dir, out_dir, "r", *options)
    began = time.monotonic()
    with Fleet(tmp_path / "logs", old) as fleet, connect(url) as store:
        rollout = Rollout(fleet)
        first = [rollout.start(wid, old, previous.version) for wid in WORKERS]
        wait_for(  # before any input: no first batch in flight (a cold server's slowest) delays the first rebalance
            f"3 workers of {previous.tag} to share the {PARTITIONS} partitions",
            lambda: all(p.applied() for p in first) and len(set().union(*(p.applied() for p in first))) == PARTITIONS,
            START_S,
            alive=lambda: fleet.check(WORKERS),
            context=rollout.context,
        )
        stream = records.stream(records.total, CHUNK, EVERY_S, name="upgrade-producer")
        rollout.wait_committing(f"3 workers of {previous.tag} to commit", first)
        cold = state / WORKERS[0]  # the first worker's volume: lost at each of its restarts
        upgraded = [rollout.replace(wid, new, "current", lose_state=cold if wid == WORKERS[0] else None)
                    for wid in WORKERS]  # fmt: skip
        rolled_back = rollout.replace(WORKERS[0], old, previous.version, lose_state=cold)
        records.stop()
        wait_for("the producer to end its chunk", lambda: not stream.is_alive(), 10)
        assert records.error is None, records.error

        def lag() -> int:
            return sum(uncommitted_records(store, "g", log, "r").values())

        wait_for(f"all {records.produced} records to be committed", lambda: lag() == 0, 60, poll_s=0.2, progress=lag,
                 alive=lambda: fleet.check(WORKERS), context=rollout.context)  # fmt: skip
        codes = fleet.stop_all(60)
        assert codes == dict.fromkeys(WORKERS, 0), f"{codes}\n{rollout.context()}"
    took = time.monotonic() - began

    assert_exactly_once(url, log_dir, out_dir, records.produced, capsys)
    committed = {version: 0 for version in (previous.version, "current")}
    for process, version in rollout.version.items():
        committed[version] += sum(1 for e in process.own_events() if e.get("event") == "commit")
    assert all(committed.values()), f"a version committed nothing: {committed}"
    # the changelog crossed versions both ways: the first upgraded worker rebuilt, cold, state from what the previous
    # release wrote, the rolled-back one from what both wrote (a partition's first restore in a process: its keys
    # came from the changelog alone, replayed then or as a standby replica before)
    for cold_start in (upgraded[0], rolled_back):
        first_restores = {e["partition"]: e for e in reversed(restores(cold_start))}
        assert any(e["keys"] > 0 for e in first_restores.values()), rollout.context()
    replays = ", ".join(f"{p.id} ({rollout.version[p]}): {replayed(p)}" for p in fleet.started)
    # the figures, shown with -s or on a failure
    print(f"{took:.1f} s, {records.produced} records, commits by version {committed}, changelog records replayed "
          f"by the active on a claim: {replays}")  # fmt: skip
