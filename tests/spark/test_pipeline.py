"""The Spark pipeline end to end: every input record appears exactly once in the committed output, in per-key
order, across a rebalance (in-process) and across kill -9, a SIGSTOP zombie and a late joiner (real processes on a
SQLite store, each worker with its own Spark session)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from apportion.cli import main
from apportion.fleet import Fleet, WorkerProcess, pipeline_args
from apportion.group import owned_by
from apportion.log import PartitionedLog, Producer
from apportion.spark import Pipeline, read_committed, read_committed_arrow, verify
from apportion.spark._output import committed_checkpoints, uncommitted_records
from apportion.spark._pipeline import joined
from apportion.store import connect
from apportion.waiting import wait_for
from apportion.worker import Group

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

COLUMNS = ["partition", "offset", "key", "value", "digest"]


def expected_output(spark: Any, log: PartitionedLog, resource: str) -> Any:
    """The input log as the default transform must output it, computed without Spark's sha2."""
    tables = []
    for p in range(log.partitions(resource)):
        t = log.read(resource, p)
        digests = [hashlib.sha256(v.encode()).hexdigest() for v in t.column("value").to_pylist()]
        tables.append(
            pa.table(
                {
                    "partition": pa.array([p] * t.num_rows, pa.int32()),
                    "offset": t.column("offset"),
                    "key": t.column("key"),
                    "value": t.column("value"),
                    "digest": pa.array(digests, pa.string()),
                }
            )
        )
    return spark.createDataFrame(pa.concat_tables(tables).to_pandas())


def assert_per_key_offset_order(table: pa.Table) -> None:
    last: dict[tuple[int, str], int] = {}
    parts, offsets, keys = (table.column(c).to_pylist() for c in ("partition", "offset", "key"))
    for p, o, k in zip(parts, offsets, keys, strict=True):
        assert last.get((p, k), -1) < o, f"key {k!r} of partition {p}: offset {o} after {last[(p, k)]}"
        last[(p, k)] = o


def test_two_workers_in_one_process_process_every_record_once_across_a_rebalance(spark: Any, tmp_path: Path) -> None:
    from pyspark.testing import assertDataFrameEqual

    log = PartitionedLog(tmp_path / "log")
    log.create("r", 4)
    with Producer(log, "r", batch_records=700) as producer:
        producer.send_many((f"k{i % 37}", f"v{i}") for i in range(6000))
    store = connect(f"memory://{uuid.uuid4().hex}")
    group = Group(store, "g", partitions=4, settle_s=0.2, min_interval_s=0.4, ttl_s=3.0)
    out = tmp_path / "out"
    first = Pipeline(spark, log, out, "r", batch_records=400, worker_id="a")
    second = Pipeline(spark, log, out, "r", batch_records=400, worker_id="b")
    stop = threading.Event()
    with joined(group, "a", first) as a:
        assert a.wait_until_stable(10), "worker a did not settle"
        stats = first.run_once()
        assert stats is not None and stats.committed == (0, 1, 2, 3)
        with joined(group, "b", second) as b:
            # Both settle before either processes more, so the rebalance happens with work left for each.
            assert b.wait_until_stable(15) and a.wait_until_stable(15), "the rebalance did not settle"
            assert b.owned(), "worker b got no partition"
            runners = [threading.Thread(target=pl.run, args=(stop,)) for pl in (first, second)]
            for t in runners:
                t.start()
            try:
                wait_for(
                    "no lag",
                    lambda: b.owned() != [] and sum(uncommitted_records(store, "g", log, "r").values()) == 0,
                    60,
                )
            finally:
                stop.set()
                for t in runners:
                    t.join(60)
    assert first.records > 0 and second.records > 0, "both workers must have committed batches"
    report = verify(store, "g", log, "r", out)
    assert report.ok, report
    committed_rows = read_committed_arrow(store, "g", out)
    assert_per_key_offset_order(committed_rows)
    by_partition: dict[int, list[int]] = {}
    for p, o in zip(*(committed_rows.column(c).to_pylist() for c in ("partition", "offset")), strict=True):
        by_partition.setdefault(p, []).append(o)
    assert all(offsets == sorted(offsets) for offsets in by_partition.values())  # the output is in offset order
    actual = read_committed(spark, store, "g", out).select(*COLUMNS)
    assertDataFrameEqual(actual, expected_output(spark, log, "r"))


# -- real processes ------------------------------------------------------------------------------------------

RECORDS, PARTITIONS, BATCH = 200_000, 8, 10_000
TIMINGS = ["--settle", "0.3", "--min-interval", "0.6", "--ttl", "2"]
PAUSE_S = 5.0  # every worker's first batch pauses between writing its output and committing it


def pipeline_process(
    url: str,
    log_dir: Path,
    out_dir: Path,
    worker_id: str,
    *,
    pause_s: float = 0.0,
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> WorkerProcess:
    """`apportion pipeline run` in its own session (signals reach its JVM too); its log in ``<log_dir>/../logs``."""
    args = pipeline_args(url, "g", log_dir, out_dir, "r", "--batch-records", str(BATCH), "--driver-memory", "512m",
                         "--idle", "0.1", *TIMINGS)  # fmt: skip
    pause = ("--pause-before-commit", str(pause_s)) if pause_s else ()
    return Fleet(log_dir.parent / "logs", args, env).start(worker_id, *pause, *extra)


def timeline(processes: list[WorkerProcess]) -> str:
    """Every worker's main events in time order (for failure messages and APPORTION_TIMELINE=1)."""
    kinds = ("started", "assigned", "revoked", "lost", "pausing", "fenced", "restored", "replicas", "stopped")
    events = sorted(
        ((e["time"], w.id, e) for w in processes for e in list(w.events) if e.get("event") in kinds),
        key=lambda item: (item[0], item[1]),
    )
    t0 = events[0][0] if events else 0.0
    return "\n".join(
        f"{t - t0:7.2f} {wid} " + json.dumps({k: v for k, v in e.items() if k not in ("time", "worker")})
        for t, wid, e in events
    )


@pytest.mark.slow  # ~45 s of worker time; ~115 s in all on a loaded 2-core machine (3 worker JVMs + the test's)
def test_three_worker_processes_survive_kill_zombie_and_late_join_with_exactly_once_output(
    tmp_path: Path, processes: list[WorkerProcess], request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    url, log_dir, out_dir = survive_kill_zombie_and_late_join(tmp_path, processes, capsys)
    spark = request.getfixturevalue("spark")  # started only now: fewer JVMs at once on a 2-core machine
    from pyspark.testing import assertDataFrameEqual

    with connect(url) as store:
        actual = read_committed(spark, store, "g", out_dir).select(*COLUMNS)
        assertDataFrameEqual(actual, expected_output(spark, PartitionedLog(log_dir), "r"))


def survive_kill_zombie_and_late_join(
    tmp_path: Path,
    processes: list[WorkerProcess],
    capsys: pytest.CaptureFixture[str],
    *,
    engine: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    first_batches: Callable[[], None] | None = None,
    records: int = RECORDS,
) -> tuple[str, Path, Path]:
    """Two workers start; ``first_batches()`` (if given) runs while their first batches are under way; the first to
    pause before its commit is killed, the other frozen there (a zombie), a third joins late and takes over, the
    zombie resumes and is fenced. Then every record must be committed exactly once, in per-key order. ``engine``:
    the workers' Spark arguments (default: a JVM each). Returns the store URL and the log and output directories."""
    log_dir, out_dir, url = tmp_path / "log", tmp_path / "out", f"sqlite:///{tmp_path / 'store.db'}"
    produce = ["pipeline", "produce", "--input", str(log_dir), "--resource", "r"]
    assert main([*produce, "--partitions", str(PARTITIONS), "--records", str(records), "--seed", "7"]) == 0
    log = PartitionedLog(log_dir)
    assert sum(log.end_offset("r", p) for p in range(PARTITIONS)) == records

    # Two workers start; both pause in their first batch between write and commit. The first to pause is killed
    # with SIGKILL mid-batch, the second is frozen with SIGSTOP in the same window (a zombie with written output).
    processes += [pipeline_process(url, log_dir, out_dir, w, pause_s=PAUSE_S, extra=engine, env=env)
                  for w in ("w1", "w2")]  # fmt: skip
    if first_batches is not None:
        first_batches()
    wait_for(
        "a first batch to pause before its commit",
        lambda: any(w.of("pausing") for w in processes),
        300,  # Spark's start-up and warm-up: ~40 s idle, 90 s+ on a loaded CI machine (polled: no cost when fast)
        context=lambda: timeline(processes),
    )
    killed = next(w for w in processes if w.of("pausing"))
    killed.signal(signal.SIGKILL)
    # a third worker joins late (its Spark starts meanwhile)
    late = pipeline_process(url, log_dir, out_dir, "w3", extra=engine, env=env)
    frozen = next(w for w in processes if w is not killed)
    processes.append(late)
    wait_for(
        f"{frozen.id} to take over and pause before its commit",
        lambda: bool(frozen.of("pausing")),
        180,
        context=lambda: timeline(processes),
    )
    frozen.signal(signal.SIGSTOP)
    killed_files = [e["file"] for e in killed.of("written")]
    zombie_files = [e["file"] for e in frozen.of("written")]
    zombie_partitions = {e["partition"] for e in frozen.of("written")}
    assert killed_files and zombie_files

    # The late joiner takes everything once the zombie's lease lapses; then the zombie resumes.
    with connect(url) as store:
        wait_for(
            "w3 to own every partition",
            lambda: owned_by(store, "g", {"w3"}),
            300,  # w3's Spark starts meanwhile: a minute or more on a loaded CI machine
            context=lambda: timeline(processes),
        )
        frozen.signal(signal.SIGCONT)
        wait_for(
            f"{frozen.id}'s stale commits to be fenced",
            lambda: bool(frozen.of("fenced")),
            120,
            context=lambda: timeline(processes),
        )
        wait_for(
            "all input to be committed",
            lambda: sum(uncommitted_records(store, "g", log, "r").values()) == 0,
            300,
            context=lambda: timeline(processes),
        )
        checkpoints = committed_checkpoints(store, "g")
    for w in (frozen, late):
        w.signal(signal.SIGTERM)
    for w in (frozen, late):
        assert w.proc.wait(60) == 0, f"{w.id} did not leave gracefully:\n{w.tail()}"
    assert killed.proc.wait(10) == -signal.SIGKILL

    if os.environ.get("APPORTION_TIMELINE"):
        with capsys.disabled():
            print(timeline(processes))
    committed = {rel for c in checkpoints.values() for rel in c.outputs}
    assert not committed & {*killed_files, *zombie_files}, "uncommitted output of a dead or fenced writer was listed"
    assert not any((out_dir / f).exists() for f in [*killed_files, *zombie_files]), "stale output was not discarded"
    assert zombie_partitions <= {e["partition"] for e in frozen.of("fenced")}
    assert late.of("commit"), f"the late joiner committed nothing:\n{late.tail(40)}"

    capsys.readouterr()
    assert main(["pipeline", "verify", "--store", url, "--group", "g", "--input", str(log_dir), "--output",
                 str(out_dir), "--resource", "r", "--json"]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["output_records"] == records and report["duplicates"] == report["missing"] == 0
    with connect(url) as store:
        assert_per_key_offset_order(read_committed_arrow(store, "g", out_dir))
    return url, log_dir, out_dir
