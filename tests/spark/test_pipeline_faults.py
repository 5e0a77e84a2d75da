"""The pipeline's races with a newer epoch, made deterministic by its fault hook (no sleeps): a newer epoch cleaning
up before a zombie's Spark job writes, its output cleaned up before its commit, a partition lost and re-acquired by
the same worker while a batch of the older epoch is in flight, and a failed Spark job. Each must end in a fenced
partition (or a commit under the new epoch, or a batch run again), never a traceback, a stalled partition or a
record committed twice."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from apportion.errors import Fenced, StoreUnavailable
from apportion.group import CommitResult, GroupConfig, PartitionId, PartitionLease
from apportion.log import PartitionedLog, Producer
from apportion.spark import Pipeline, transform
from apportion.spark.pipeline._output import Checkpoint, committed_checkpoints, read_committed_arrow
from apportion.spark.pipeline._pipeline import MAX_FAILED_BATCHES, clean_partition
from apportion.spark.pipeline._source import LogSource
from apportion.spark.pipeline._stateful import StatefulPartitions, verify_state
from tests.group.harness import Harness
from tests.spark.test_stateful import Events

pytestmark = pytest.mark.spark

CONFIG = GroupConfig(partitions=2, settle_s=0.5, min_interval_s=1.0, ttl_s=3.0)


def _log(tmp_path: Path, records: int = 20) -> PartitionedLog:
    log = PartitionedLog(tmp_path / "log")
    log.create("r", 2)
    with Producer(log, "r", batch_records=10) as producer:
        producer.send_many((f"k{i % 7}", f"v{i}") for i in range(records))
    return log


def _files(out: Path) -> list[str]:
    """The outputs holding data under ``out``: batch directories (relative), whoever wrote them."""
    return sorted({str(f.parent.relative_to(out)) for f in out.rglob("*.parquet")})


def _zombie_scenario(spark: Any, tmp_path: Path, point: str) -> tuple[Harness, Pipeline, Events, dict[str, Any]]:
    """Worker z owns both partitions; at ``point`` of its first batch it freezes, n takes over and cleans up."""
    log = _log(tmp_path)
    h = Harness(CONFIG)
    zombie = h.add("z")
    h.run(3)
    assert zombie.owned() == [0, 1]
    out = tmp_path / "out"
    seen: dict[str, Any] = {"cleaned": []}

    def new_owner_takes_over(at: str, task: Any, path: Path) -> None:
        if at != point or "n" in h.members:
            return
        assert path.exists() == (at == "before_commit"), f"the hook at {at} gets the directory: {path}"
        h.frozen.add("z")
        new_owner = h.add("n")
        h.run(CONFIG.ttl_s + 5)  # z's lease lapses; n claims every partition under a newer epoch
        assert new_owner.owned() == [0, 1]
        for p in (0, 1):
            epoch = new_owner.lease(p).epoch
            checkpoint = Checkpoint.parse(new_owner.checkpoint(p), p)
            seen["cleaned"] += clean_partition(out, "r", p, checkpoint, epoch)  # what n's first batch does

    events = Events()
    state = StatefulPartitions(log, "r", tmp_path / "state" / "z", emit=events, worker_id="z")
    pipeline = Pipeline(
        spark, log, out, "r", batch_records=100, emit=events, worker_id="z", state=state,
        fault=new_owner_takes_over,
    )  # fmt: skip
    pipeline.attach(zombie)
    pipeline.on_assigned(zombie.owned())
    return h, pipeline, events, seen


def test_a_zombie_whose_spark_job_writes_after_the_newer_epochs_clean_up_is_fenced_and_discards_its_output(
    spark: Any, tmp_path: Path
) -> None:
    h, pipeline, events, seen = _zombie_scenario(spark, tmp_path, "before_write")
    stats = pipeline.run_once()
    assert stats is not None
    assert stats.committed == ()
    assert set(stats.fenced) == {0, 1}
    assert {e["partition"] for e in events.of("fenced")} == {0, 1}
    assert seen["cleaned"] == []  # nothing was written yet when the new owner cleaned up
    assert all(e["rows"] > 0 for e in events.of("written"))  # the zombie's job did write, after the clean-up
    assert _files(tmp_path / "out") == []  # nothing of the zombie's is left behind
    assert committed_checkpoints(h.store, "g") == {}
    assert pipeline.run_once() is None  # alive, and it processes nothing it no longer owns


def test_output_cleaned_up_by_a_newer_epoch_between_write_and_commit_is_fenced_and_nothing_is_committed(
    spark: Any, tmp_path: Path
) -> None:
    h, pipeline, events, seen = _zombie_scenario(spark, tmp_path, "before_commit")
    stats = pipeline.run_once()
    assert stats is not None
    assert stats.committed == ()
    assert set(stats.fenced) == {0, 1}
    assert sorted(seen["cleaned"]) == sorted(e["file"] for e in events.of("written"))
    assert _files(tmp_path / "out") == []
    assert committed_checkpoints(h.store, "g") == {}
    assert pipeline.run_once() is None


def test_a_failed_spark_job_commits_nothing_and_the_batch_is_run_again_from_the_commit(
    spark: Any, tmp_path: Path
) -> None:
    """The first job fails inside Spark (a Python UDF raising in an executor); ``run`` reports it, re-plans from the
    committed checkpoints and the next attempt commits every record exactly once."""
    from pyspark.sql import functions as F

    log = _log(tmp_path)
    out = tmp_path / "out"
    ownership = Ownership([0, 1])
    events = Events()
    attempts = {"n": 0}

    @F.udf("string")
    def explode(value: str) -> str:
        raise RuntimeError(f"executor failure on {value}")

    def failing_once(df: Any) -> Any:
        attempts["n"] += 1
        return transform(df.withColumn("value", explode("value")) if attempts["n"] == 1 else df)

    pipeline = Pipeline(spark, log, out, "r", batch_records=100, emit=events, worker_id="w", transform=failing_once)
    pipeline.attach(ownership)
    pipeline.on_assigned([0, 1])
    pipeline.run(threading.Event(), idle_s=0.01, exit_after_idle_s=0.2)
    assert [e["failures"] for e in events.of("batch_failed")] == [1]
    checkpoints = {p: Checkpoint.parse(c, p) for p, c in ownership.commits.items()}
    assert {p: c.offset for p, c in checkpoints.items()} == {p: log.end_offset("r", p) for p in (0, 1)}
    rows = sum(pq.read_table(out / rel).num_rows for c in checkpoints.values() for rel in c.outputs)
    assert rows == log.end_offset("r", 0) + log.end_offset("r", 1)


def test_a_spark_job_failing_again_and_again_stops_the_worker(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    @F.udf("string")
    def explode(value: str) -> str:
        raise RuntimeError("broken transform")

    log = _log(tmp_path)
    events = Events()
    pipeline = Pipeline(spark, log, tmp_path / "out", "r", emit=events, transform=lambda df: transform(
        df.withColumn("value", explode("value"))))  # fmt: skip
    pipeline.attach(Ownership([0]))
    pipeline.on_assigned([0])
    with pytest.raises(Exception, match="broken transform"):
        pipeline.run(threading.Event(), idle_s=0.001)
    assert [e["failures"] for e in events.of("batch_failed")] == list(range(1, MAX_FAILED_BATCHES + 1))


class Ownership:
    """A committer whose leases the test moves by hand: commit is a compare-and-set on the partition's epoch."""

    def __init__(self, partitions: list[int]) -> None:
        self.epochs = dict.fromkeys(partitions, 1)
        self.mine = set(partitions)
        self.commits: dict[int, str] = {}

    def owned(self) -> list[int]:
        return sorted(self.mine)

    def lease(self, partition: int) -> PartitionLease:
        if partition not in self.mine:
            raise Fenced(f"partition {partition} is not owned")
        return PartitionLease(partition, self.epochs[partition], "w")

    def commit_many(
        self, checkpoints: Mapping[PartitionId, str], *, epochs: Mapping[PartitionId, int] | None = None
    ) -> CommitResult:
        committed: dict[PartitionId, int] = {}
        fenced: dict[PartitionId, int | None] = {}
        for p, checkpoint in checkpoints.items():
            epoch = (epochs or {}).get(p)
            if p not in self.mine or epoch != self.epochs[int(p)]:
                fenced[p] = epoch
            else:
                self.commits[int(p)] = checkpoint
                committed[p] = len(self.commits)
        return CommitResult(committed, fenced, member="w")

    def checkpoint(self, partition: int) -> str | None:
        return self.commits.get(partition)


def test_a_partition_lost_and_reassigned_while_its_batch_is_in_flight_is_processed_under_the_new_epoch(
    spark: Any, tmp_path: Path
) -> None:
    """The batch's commit of epoch 1 is fenced, but on_assigned gave the partition back (epoch 3) meanwhile: the
    worker must keep processing it, not drop it until the next rebalance."""
    log = _log(tmp_path)
    out = tmp_path / "out"
    ownership = Ownership([0, 1])
    events = Events()

    def lapse_and_reacquire(at: str, task: Any, path: Path) -> None:
        if at == "before_commit" and task.partition == 0 and task.epoch == 1:
            ownership.epochs[0] = 3  # lost (epoch 2 went to a member that never committed), claimed back
            pipeline.on_lost([0])
            pipeline.on_assigned([0])

    pipeline = Pipeline(spark, log, out, "r", batch_records=100, emit=events, worker_id="w", fault=lapse_and_reacquire)
    pipeline.attach(ownership)
    pipeline.on_assigned([0, 1])
    first = pipeline.run_once()
    assert first is not None and first.fenced == (0,) and first.committed == (1,)
    second = pipeline.run_once()  # today: None, partition 0 stalls while its owner idles
    assert second is not None and second.committed == (0,)
    assert pipeline.run_once() is None
    checkpoints = {p: Checkpoint.parse(c, p) for p, c in ownership.commits.items()}
    assert [c.offset for _, c in sorted(checkpoints.items())] == [log.end_offset("r", 0), log.end_offset("r", 1)]
    assert checkpoints[0].outputs[0].endswith("-e0000000003")
    assert _files(out) == sorted(rel for c in checkpoints.values() for rel in c.outputs)  # epoch 1's output is gone


def test_a_lost_partition_whose_batch_is_fenced_is_not_processed_again(spark: Any, tmp_path: Path) -> None:
    log = _log(tmp_path)
    ownership = Ownership([0, 1])

    def lapse(at: str, task: Any, path: Path) -> None:
        if at == "before_commit" and task.partition == 0:
            ownership.mine.discard(0)
            ownership.epochs[0] = 2
            pipeline.on_lost([0])

    pipeline = Pipeline(spark, log, tmp_path / "out", "r", batch_records=100, emit=Events(), fault=lapse)
    pipeline.attach(ownership)
    pipeline.on_assigned([0, 1])
    first = pipeline.run_once()
    assert first is not None and first.fenced == (0,) and first.committed == (1,)
    assert pipeline.run_once() is None
    assert _files(tmp_path / "out") == [Checkpoint.parse(ownership.commits[1], 1).outputs[0]]


def test_the_zombies_state_and_output_stay_exactly_once_after_it_is_fenced(spark: Any, tmp_path: Path) -> None:
    """After the fenced zombie, the new owner processes everything: output and state are exactly once."""
    h, pipeline, _, _ = _zombie_scenario(spark, tmp_path, "before_write")
    pipeline.run_once()
    assert isinstance(pipeline.source, LogSource)
    log = pipeline.source.log
    new_owner = h.members["n"]
    events = Events()
    state = StatefulPartitions(log, "r", tmp_path / "state" / "n", emit=events, worker_id="n")
    follower = Pipeline(spark, log, tmp_path / "out", "r", batch_records=100, emit=events, worker_id="n", state=state)
    follower.attach(new_owner)
    follower.on_assigned(new_owner.owned())
    stats = follower.run_once()
    assert stats is not None and set(stats.committed) == {0, 1}
    table = read_committed_arrow(h.store, "g", tmp_path / "out")
    assert sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True)) == [
        (p, o) for p in (0, 1) for o in range(log.end_offset("r", p))
    ]
    assert verify_state(h.store, "g", log, "r").ok


class Unreachable(Ownership):
    """A committer cut off from its store for its first ``calls`` reads: each raises StoreUnavailable, as a member's
    store call does while the worker cannot reach any endpoint."""

    def __init__(self, partitions: list[int], calls: int) -> None:
        super().__init__(partitions)
        self.failing = calls

    def checkpoint(self, partition: int) -> str | None:
        if self.failing > 0:
            self.failing -= 1
            raise StoreUnavailable("etcd unreachable after 5s: 10.0.0.1:2379: connection timed out")
        return super().checkpoint(partition)


def test_a_store_that_does_not_answer_is_waited_for_and_the_batches_resume_exactly_once(
    spark: Any, tmp_path: Path
) -> None:
    """A nemesis finding (issue 19, a pipeline worker cut off from etcd): the batch loop let StoreUnavailable end the
    worker (exit 1) where `apportion worker` waits for its store. It now says so once, waits, re-plans from the
    committed checkpoints and commits every record exactly once when the store answers."""
    log = _log(tmp_path)
    out = tmp_path / "out"
    ownership = Unreachable([0, 1], calls=5)
    events = Events()
    pipeline = Pipeline(spark, log, out, "r", batch_records=100, emit=events, worker_id="w")
    pipeline.attach(ownership)
    pipeline.on_assigned([0, 1])
    pipeline.run(threading.Event(), idle_s=0.01, exit_after_idle_s=0.2)
    assert ownership.failing == 0
    assert [e["error"][:16] for e in events.of("store_unavailable")] == ["etcd unreachable"]  # one line per outage
    assert [e["after_attempts"] for e in events.of("store_answers")] == [5]
    checkpoints = {p: Checkpoint.parse(c, p) for p, c in ownership.commits.items()}
    assert {p: c.offset for p, c in checkpoints.items()} == {p: log.end_offset("r", p) for p in (0, 1)}
    rows = sum(pq.read_table(out / rel).num_rows for c in checkpoints.values() for rel in c.outputs)
    assert rows == log.end_offset("r", 0) + log.end_offset("r", 1)
