"""The pipeline under network faults (issue 19's second scenario): `apportion pipeline run` workers, each on its own
host (network namespace, its Spark JVM bound to the host's loopback), connecting to the 3-node etcd cluster of
tests/nemesis/cluster.py with all three endpoints; the log, the output and the workers' files on the file system the
hosts share. A seeded schedule of the nemesis's faults that concern a pipeline — a worker cut off from every etcd node
while it keeps running (longer than the ttl: its partitions move, its batch in flight is fenced), the etcd leader
isolated, kill -9 of a worker (its JVM too) and its restart under the same id — while the workers process the log.

Then `apportion pipeline verify` (every record committed exactly once: count, checksum, per-key order per partition)
and the independent checker's store properties (fence, order, epochs) on etcd's own history of the group: 0 violations.

`make soak` only (a JVM per worker: minutes). APPORTION_NEMESIS_SEED=<seed> replays the same schedule.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from apportion.cli import main
from apportion.fleet import WorkerLog
from apportion.log import PartitionedLog
from apportion.spark import uncommitted_records
from apportion.store import connect
from apportion.waiting import wait_for
from tests.nemesis.checker import check, read_jsonl
from tests.nemesis.cluster import APPORTION, Deployment, WorkerProcess
from tests.nemesis.nemesis import NemesisConfig, _inject, schedule, wait_recovered
from tests.nemesis.test_nemesis import _seed

pytestmark = [pytest.mark.etcd, pytest.mark.spark, pytest.mark.xdist_group("netns-nemesis")]
pytestmark.append(pytest.mark.usefixtures("netns_ok"))

RECORDS, PARTITIONS, BATCH = 20_000, 5, 200  # ~20 micro-batches a partition: work through the faults
WORKERS = ("p0", "p1", "p2")
KINDS = ("isolate-worker", "isolate-leader", "kill-worker")
TTL_S = 5.0
STORE_TIMEOUT_S = 30.0  # longer than any isolation of the schedule (<= 1.8 ttl)


class PipelineProcess(WorkerProcess):
    """One `apportion pipeline run` on its own host, its own Spark JVM (``local[1]``) bound to the host's loopback."""

    def __init__(self, name: str, dep: Deployment, log_dir: Path, out_dir: Path) -> None:
        dep.network.add_host(name)
        # etcd's request deadline raised from 5 s (the URL's documented ?timeout=): with the default, a pipeline
        # worker cut off from etcd for longer exits 1 once it has lost its lease (there is no --connect-timeout as
        # for `apportion worker`), for a supervisor to restart it; here it rides the isolation out and rejoins
        store_url = f"{dep.store_url}?timeout={STORE_TIMEOUT_S:g}"
        super().__init__(name, dep.network[name], store_url, dep.group, dep.directory, TTL_S)
        self.log_dir, self.out_dir = log_dir, out_dir

    def arguments(self, *, replace: bool) -> list[str]:
        # a restart after kill -9 needs no --replace: the pipeline's join waits out the dead incarnation's lease
        return ["env", f"PYSPARK_PYTHON={sys.executable}", "SPARK_LOCAL_IP=127.0.0.1",
                APPORTION, "pipeline", "run", "--store", self.store_url, "--group", self.group, "--id", self.name,
                "--input", str(self.log_dir), "--output", str(self.out_dir), "--resource", "r",
                "--batch-records", str(BATCH), "--master", "local[1]", "--driver-memory", "512m", "--idle", "0.2",
                "--settle", "0.3", "--min-interval", "0.6", "--ttl", str(TTL_S)]  # fmt: skip


def every_worker_owns(dep: Deployment, after: str) -> None:
    """Every partition owned by a running worker, and every worker owning one (a JVM start: minutes under load)."""
    for name in WORKERS:
        wait_recovered(dep, 300, after, require=name, partitions=PARTITIONS)


def reassigned(dep: Deployment, name: str, since: float) -> bool:
    """The worker's new incarnation (started after ``since``) has been assigned partitions."""
    dep.check_workers()
    events = WorkerLog(dep.directory / "logs" / f"{name}.log").refresh()
    started = [i for i, e in enumerate(events) if e.get("event") == "started" and float(e["time"]) > since]
    return bool(started) and any(e.get("event") == "assigned" for e in events[started[0] :])


@pytest.mark.soak  # make soak only: deselected in make test
@pytest.mark.timeout(1800)
def test_pipeline_workers_on_separate_hosts_commit_exactly_once_under_partitions(
    tmp_path: Path, etcd_bin: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = _seed()
    directory, log_dir, out_dir = tmp_path / "run", tmp_path / "log", tmp_path / "out"
    produce = ["pipeline", "produce", "--input", str(log_dir), "--resource", "r", "--partitions", str(PARTITIONS)]
    assert main([*produce, "--records", str(RECORDS), "--seed", str(seed % 1000), "--batch-records", "2000"]) == 0
    log = PartitionedLog(log_dir)
    config = NemesisConfig(directory, seed=seed, faults=len(KINDS) * 2, budget_s=600, ttl_s=TTL_S, kinds=KINDS)

    def say(line: str) -> None:
        with capsys.disabled():
            print(line, flush=True)

    say(f"\npipeline nemesis seed {seed} (replay: APPORTION_NEMESIS_SEED={seed}); history in {directory}/history")
    t0 = time.monotonic()
    with Deployment.create(etcd_bin, directory, [], spares=0, ttl_s=TTL_S) as dep:
        for name in WORKERS:
            dep.workers[name] = PipelineProcess(name, dep, log_dir, out_dir)
            dep.start_worker(name)
        # the JVMs start (tens of seconds on a loaded machine), then every partition is owned and each worker owns
        # some: a fault then always hits a worker that holds partitions (a restarted one first waits for its JVM)
        every_worker_owns(dep, "the start")
        say(f"  workers up and owning every partition after {time.monotonic() - t0:.0f} s")
        for planned in schedule(config):
            since = time.time()
            target = _inject(dep, planned)
            t1 = time.monotonic()
            if planned.kind == "kill-worker":  # the dead incarnation's records name the same id until its lease goes
                wait_for(f"{target}, restarted, to be assigned partitions", partial(reassigned, dep, target, since),
                         300, poll_s=1.0)  # fmt: skip
            every_worker_owns(dep, f"{planned.kind} of {target}")
            took = time.monotonic() - t1
            say(f"  {planned.kind:<16} {target:<4} held {planned.hold_s:.1f} s, recovered in {took:.1f} s")
            dep.sleep(planned.pause_s)
        with connect(dep.store_url) as store:
            lag: dict[int, int] = {}

            def drained() -> bool:
                dep.check_workers()
                lag.update(uncommitted_records(store, dep.group, log, "r"))
                return sum(lag.values()) == 0

            wait_for("every record committed", drained, 600, poll_s=1.0, context=lambda: f"uncommitted: {lag}")
        dep.journal("end")
        for name in WORKERS:
            dep.stop_worker(name)
        dep.dump_store_history()
        verify = subprocess.run(
            [APPORTION, "pipeline", "verify", "--store", dep.store_url, "--group", dep.group, "--input", str(log_dir),
             "--output", str(out_dir), "--resource", "r", "--json"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    history = directory / "history"
    events = [e for name in WORKERS for e in WorkerLog(directory / "logs" / f"{name}.log").refresh()]
    say(f"  worker events: {dict(sorted(Counter(str(e.get('event')) for e in events).items()))}")
    report = check(read_jsonl(history / "store.jsonl"), {}, read_jsonl(history / "nemesis.jsonl"), PARTITIONS)
    say(f"  verify: {verify.stdout.strip()}")
    say(f"  store commits {report.store_commits}, violations {len(report.violations)}, {time.monotonic() - t0:.0f} s")
    assert verify.returncode == 0, f"seed {seed}: {verify.stdout}\n{verify.stderr}"
    assert json.loads(verify.stdout)["ok"], verify.stdout
    assert report.violations == [], f"seed {seed}:\n" + "\n".join(report.violations[:20])
    assert report.store_commits >= RECORDS // BATCH // len(WORKERS), report.table()
