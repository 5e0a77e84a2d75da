"""Process: a group worker runs Spark micro-batches over the log partitions it owns, with fenced commits.

Why micro-batches driven by the worker (and not Structured Streaming with the Python Data Source API)
--------------------------------------------------------------------------------------------------------
Ownership changes *between* batches, and each partition's progress must be committed under its own fence (its
checkpoint written only if ``owner/p`` is still (me, epoch)). A streaming source plans offsets for all its
partitions at once and commits them in Spark's own checkpoint directory, which knows nothing of epochs: a zombie's
stream would keep writing, and a revocation could not wait for "the batch that holds p". Driving ``spark.read``
from the worker loop keeps the whole exactly-once argument in one place and in the store: every batch is planned
from the committed checkpoints of the partitions owned *now*, under per-partition locks that ``on_revoked`` also
takes, and each partition commits (or is fenced) by its own compare — the batch's partitions together, in as few
store transactions as the store allows (``commit_many``), since a compare per partition is what fences it.

One micro-batch (``Pipeline.run_once``)
---------------------------------------
1. lock every partition this worker owns and is processing (sorted order; ``on_revoked`` takes the same locks, so a
   revocation waits for the batch in flight and the next owner starts from its commit);
2. per partition: ``epoch`` = the lease epoch now; ``start`` = the committed checkpoint's offset (read from the
   store once per epoch, then cached: nobody else can commit while we hold the epoch); ``end = min(source end,
   start + size)`` (the source's ends of every planned partition in one call: ``Source.ends``, the log's end or
   Kafka's high watermark; a source that lost records below ``start`` raises, never skips them), the size fixed
   (``batch_records``) or chosen by records and time (``batch_seconds``; ``apportion.spark.pipeline._sizing``, whose
   adaptive size also takes a small remainder whole: ``BatchSize.end``).
   On a new epoch, delete the partition's output files of OLDER epochs that the checkpoint does not list (their
   writers are fenced forever: epochs only grow);
3. ONE Spark job for all partitions, run by Spark's executors (``batch_frame``, ``write_batch``): the source's
   frames (``apportion.spark.pipeline._source``; the log: per partition ``spark.read.parquet`` of exactly its
   segments, filtered to ``[start, end)`` only where a segment crosses the range; Kafka: one batch read of Spark's
   Kafka source with every partition's ``[start, end)``), with the ``partition`` column, through ``transform(df)``,
   one Spark partition per partition (no shuffle: the input is already partitioned and ordered), sorted by offset,
   and written with ``partitionBy`` into one directory per partition, offset range and epoch,
   ``<output>/<resource>/p=<p>/batch=<start>-<end>-e<epoch>/``
   (``apportion.spark.pipeline._output``).
   Dynamic partition overwrite: the job replaces exactly the directories it writes (a retry of the same range
   and epoch replaces its own attempt) and nothing else; Spark stages the files and renames each directory into
   place when the job commits. Nothing is collected to the worker: a batch is bounded by the cluster, not by the
   worker's memory (``--batch-records`` x owned partitions records per job);
4. ONE fenced commit of every partition's ``Checkpoint(end, outputs + [directory])`` under its epoch
   (``commit_tasks``: ``worker.commit_many``; each partition is still fenced by its own compare) — the checkpoint is
   the manifest. Per fenced partition: delete its directory unless the committed checkpoint lists it (an ambiguous
   commit that did apply), stop processing ``p`` (the protocol reports ``on_lost``); the other partitions of the
   batch are committed all the same. A batch that wrote no row for ``p`` (a filtering transform) commits its offsets
   without a directory.

Races with a newer epoch (a zombie — frozen, partitioned away — resumes while the next owner works). The next
owner's clean-up (step 2) may run at any moment of the zombie's steps 3 and 4; every outcome is a fence, never a crash:

- clean-up before the zombie's Spark job commits: the job renames the zombie's directory into place afterwards (its
  name carries the zombie's epoch, so it never replaces the new owner's); the commit is refused (stale epoch) and the
  zombie deletes its own directory. Had the zombie died in between, the directory stays unlisted (invisible) until
  the partition's next epoch change cleans it up;
- clean-up between the job and the commit: the directory is gone; the commit is refused and the discard finds
  nothing to delete;
- the partition was lost AND given back to this worker (a newer epoch of its own: ``on_lost`` then ``on_assigned``)
  while a batch of the older epoch was in flight: that batch is fenced, but the partition stays active and the next
  batch plans it under the new epoch (it is dropped only if no ``on_assigned`` came since the batch was planned).

``fault`` (constructor) is the deterministic fault-injection point for these windows: a callable
``fault(point, task, path)`` run at ``"before_write"`` (the batch planned, Spark's job not started; ``path`` the
directory it will write) and ``"before_commit"`` (the directory written, changelog appended, commit not yet
attempted; run for every task of the batch before its one commit). Tests make the other actor act there;
production passes nothing. ``slow_commit_s`` holds every batch that long between its write and its commit (event
``pausing``): a slow committer (`apportion pipeline run --slow-commit`), the window in which `apportion demo` freezes
a worker to show its late commit fenced.

A failed Spark job (an executor lost beyond Spark's own task retries, the Connect server restarting) commits
nothing: the batch is reported (``batch_failed``) and re-planned from the committed checkpoints after a pause; after
``MAX_FAILED_BATCHES`` failures in a row the worker gives up (``run`` raises) so that a broken transform or engine
is not retried for ever while holding partitions.

Exactly once per record: a record is in the committed output iff a checkpoint lists its directory; checkpoints
advance only by fenced transactions whose new offset range starts where the committed one ended, so committed
directories of a partition tile ``[0, offset)`` without gap or overlap, whoever wrote them — across rebalances
(revocation waits for the batch), kill -9 of a worker (the uncommitted directory is never listed; the next owner
starts from the commit), a failed Spark job (nothing committed; re-planned) and zombies (the commit of a stale epoch
fails; its directory is deleted by itself or by the next owner's clean-up).

Stateful pipelines (``state=StatefulPartitions(...)``, ``apportion.spark.pipeline._stateful``) also keep a running
aggregate per key in a local store per partition, restored from a changelog whose committed ranges ride in the same
fenced checkpoint (step 2 restores on a new epoch; step 4 reads the batch's rows back from the directory Spark wrote,
appends to the changelog before the commit and updates the local store after it); between batches the worker
restores its standby and learner replicas (rounds mode). In coordinator mode the member acks a migration to this
worker only once step 2 has restored the partition under the epoch it holds (``Pipeline.restored``, ``joined``).

Partition states in the pipeline (``on_*`` run on the worker thread, batches on the caller's thread)::

    idle --on_assigned--> ACTIVE --on_revoked (waits for the batch holding p)--> idle
    ACTIVE --on_lost, or Fenced at commit--> idle  (a batch in flight for p is fenced at its commit;
                                                          unless on_assigned gave p back since that batch was planned)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Unpack

import pyarrow as pa
import pyarrow.parquet as pq

from apportion import events
from apportion.errors import ApportionError, Fenced, InvalidRequest, StoreUnavailable
from apportion.events import Emit, WorkerEvent
from apportion.group import CommitResult, PartitionId, PartitionLease, sorted_pids
from apportion.log import PartitionedLog
from apportion.spark.pipeline._output import (
    BATCH_COLUMN,
    OUTPUT_BATCH,
    PARTITION_COLUMN,
    Checkpoint,
    batch_name,
    output_relpath,
    partition_dir,
    remove_output,
)
from apportion.spark.pipeline._sizing import STATEFUL_MAX_RECORDS, BatchSize
from apportion.spark.pipeline._source import Frame, LogSource, Source, Task, as_source
from apportion.spark.pipeline._stateful import Staged, StatefulPartitions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from apportion.worker import Group, JoinOptions, Worker

log = logging.getLogger("apportion.pipeline")

Transform = Callable[["DataFrame"], "DataFrame"]
FaultHook = Callable[[str, "Task", Path], None]
"""``fault(point, task, path)``: the fault-injection point (tests only; see the module docstring). ``point`` is
``"before_write"`` or ``"before_commit"``; ``path`` is the task's output directory."""
MAX_FAILED_BATCHES = 5
"""Spark jobs failing in a row before ``Pipeline.run`` gives up (see the module docstring)."""


class Committer(Protocol):
    """What the pipeline needs from a group member (``apportion.Worker`` and ``RoundsMember`` both fit)."""

    def owned(self) -> list[PartitionId]: ...
    def lease(self, partition: PartitionId) -> PartitionLease: ...
    def commit_many(
        self, checkpoints: Mapping[PartitionId, str], *, epochs: Mapping[PartitionId, int] | None = None
    ) -> CommitResult: ...
    def checkpoint(self, partition: PartitionId) -> str | None: ...


def transform(df: DataFrame) -> DataFrame:
    """The default processing: keep ``partition, offset, key, value`` and add ``digest`` = sha2(value, 256).

    A pure Spark transformation; replace it with any ``f(df) -> df`` (``--transform module:function``) that keeps
    the ``partition`` and ``offset`` columns. Input columns: partition int, offset long, key, value, ts_ms long. It
    is applied to each partition's rows of a micro-batch (``batch_frame``), so it sees one partition at a time.
    """
    from pyspark.sql import functions as F

    return df.select("partition", "offset", "key", "value", F.sha2(F.col("value"), 256).alias("digest"))


def load_transform(spec: str) -> Transform:
    """``module:function`` → the function (``--transform``)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidRequest("transform", f"expected module:function, got {spec!r}")
    try:
        function = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InvalidRequest("transform", f"cannot load {spec!r}: {exc}") from exc
    if not callable(function):
        raise InvalidRequest("transform", f"{spec!r} is not callable")
    return function  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What one micro-batch did. Seconds: ``spark_s`` (Spark's job: read + transform + write by the executors),
    ``write_s`` (the worker's part before the commits: row counts, the stateful changelog), ``commit_s``."""

    partitions: tuple[int, ...]
    records: int
    committed: tuple[int, ...]
    fenced: tuple[int, ...]
    spark_s: float
    write_s: float
    commit_s: float

    @property
    def total_s(self) -> float:
        return self.spark_s + self.write_s + self.commit_s


def batch_frame(
    spark: SparkSession, tasks: Sequence[Task], transform: Transform, source: Source, resource: str
) -> DataFrame:
    """The batch's rows to write: ``output_frame`` of the source's frames of the tasks through ``transform``
    (``transformed``)."""
    return output_frame(transformed(spark, tasks, transform, source, resource))


def transformed(
    spark: SparkSession, tasks: Sequence[Task], transform: Transform, source: Source, resource: str
) -> list[Frame]:
    """The source's frames of the tasks (``Source.frames``: the log's one per task, its segments; Kafka's one for
    all, one Spark partition per Kafka partition), each through ``transform`` (called once per frame)."""
    return [(part, transform(df)) for part, df in source.frames(spark, resource, tasks)]


def output_frame(frames: Sequence[Frame], columns: Sequence[str] | None = None) -> DataFrame:
    """The transformed ``frames`` (``transformed``) as one frame to write: each with the output layout's columns
    ``p`` and ``batch``, a one-task frame in ONE Spark partition (``coalesce(1)``: no shuffle), unioned and sorted
    within their Spark partitions by (p, batch, offset).

    Why this shape: the input is already ordered and already partitioned, so the batch needs neither a shuffle to
    bring a partition's rows together nor a per-row regex on the file path to find its partition; the sort is
    local to a Spark partition (the files of a scan are read in Spark's packing order, not offset order) and gives
    the writer the (p, batch) order it needs, so it adds no sort of its own — an unstable one would lose the
    offset order within a directory. The transform runs on each frame's rows (on the log, a transform with a shuffle
    of its own still ends in one Spark partition per task; on Kafka it must be narrow: ``KafkaSource``).

    ``columns``: the transform's result columns when already known (``transform_columns``; a ``Pipeline`` learns
    them on its first batch), else the first frame's (the same transform of the same schema: they stand for every
    frame's). Through Spark Connect, asking a frame for its columns is a round trip in which the server analyses
    the plan (0.07-0.24 s per batch of a Kafka read, measured on a loaded 2-core machine)."""
    from pyspark.sql import functions as F

    if columns is None:
        columns = transform_columns(frames[0][1])
    selected = []
    for part, df in frames:
        if len(part) == 1:
            task = part[0]
            p, directory = F.lit(task.partition), F.lit(batch_name(task.start, task.end, task.epoch))
        else:  # several partitions' rows in one frame: each row's directory by its partition
            names = F.create_map(*[F.lit(x) for t in part for x in (t.partition, batch_name(t.start, t.end, t.epoch))])
            p, directory = F.col("partition"), names[F.col("partition")]
        df = df.select(*columns, p.alias(PARTITION_COLUMN), directory.alias(BATCH_COLUMN))
        selected.append(df.coalesce(1) if len(part) == 1 else df)
    union = functools.reduce(lambda a, b: a.union(b), selected)  # by position: the same columns in every frame
    return union.sortWithinPartitions(PARTITION_COLUMN, BATCH_COLUMN, "offset")  # the writer's order + offsets


def transform_columns(df: DataFrame) -> list[str]:
    """The columns of a transform's result ``df``, checked (``check_columns``)."""
    columns = list(df.columns)
    check_columns(columns)
    return columns


def check_columns(columns: Sequence[str]) -> None:
    """``InvalidRequest`` unless a transform's result keeps ``partition`` and ``offset`` and does not have the
    output layout's columns."""
    for column in ("partition", "offset"):
        if column not in columns:
            raise InvalidRequest("transform", f"its result must keep the {column!r} column: {list(columns)}")
    clash = {PARTITION_COLUMN, BATCH_COLUMN} & set(columns)
    if clash:
        raise InvalidRequest("transform", f"its result must not have the columns {sorted(clash)} (the output layout's)")


def write_batch(df: DataFrame, output_dir: Path, resource: str) -> None:
    """ONE Spark job, run by the executors, writes ``df`` (``batch_frame``: each task's rows sorted by offset in one
    Spark partition) into each task's own directory ``output_relpath(...)`` under ``output_dir``; dynamic partition
    overwrite replaces exactly those directories (a retry of the same range and epoch: its own attempt).

    Dynamic overwrite stays although the epoch-named directory isolates attempts: it is also what gives each job
    its own staging directory (``.spark-staging-<job>``). Appending to ``<output>/<resource>`` instead would put
    the tasks' files of every worker's jobs — and of a zombie's — under the one ``_temporary`` directory of
    Hadoop's committer, which a job deletes when it commits or aborts, under the others' feet."""
    (
        df.write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy(PARTITION_COLUMN, BATCH_COLUMN)
        .parquet(os.path.abspath(output_dir / resource))  # absolute: through Connect the server resolves it
    )


def output_rows(path: Path) -> int:
    """Rows in one written output directory (from its files' footers; 0 when Spark wrote none for the task)."""
    if not path.is_dir():
        return 0
    files = [f for f in sorted(path.iterdir()) if f.suffix == ".parquet" and not f.name.startswith((".", "_"))]
    return sum(pq.read_metadata(f).num_rows for f in files)


Written = tuple[Task, str | None, tuple[tuple[int, int], ...] | None]
"""A task to commit: the task, its output directory (None: no rows) and, when stateful, its changelog ranges."""


@dataclass(frozen=True, slots=True)
class TaskCommits:
    """What the commit of a batch's tasks did, by partition (each task in exactly one): ``committed`` -> the new
    checkpoint; ``fenced`` -> why (its output directory deleted unless the committed checkpoint lists it);
    ``unknown`` -> why the store's answer is unknown (no answer to the commit, or to the read of a fenced
    partition's checkpoint): its output is kept, unlisted, so invisible, for a later clean-up."""

    committed: dict[int, Checkpoint]
    fenced: dict[int, str]
    unknown: dict[int, str]


def commit_tasks(committer: Committer, written: Sequence[Written], output_dir: Path) -> TaskCommits:
    """The fenced commit of a batch: every task's output directory and changelog ranges in its new checkpoint, in
    one ``commit_many`` (each partition fenced by its own compare). A fenced partition's directory is deleted unless
    the committed checkpoint lists it (an ambiguous commit of ours that did apply)."""
    checkpoints = {task.partition: task.checkpoint.then(task.end, rel, changelog) for task, rel, changelog in written}
    result = committer.commit_many(
        {p: checkpoint.to_json() for p, checkpoint in checkpoints.items()},
        epochs={task.partition: task.epoch for task, _, _ in written},
    )
    committed: dict[int, Checkpoint] = {}
    fenced: dict[int, str] = {}
    unknown: dict[int, str] = {}
    for task, rel, _ in written:
        p = task.partition
        if p in result.committed:
            committed[p] = checkpoints[p]
            continue
        if p in result.failed:
            unknown[p] = result.failed[p]
            continue
        try:
            listed = Checkpoint.parse(committer.checkpoint(p), p).outputs
        except StoreUnavailable as exc:  # cannot tell: keep the output (unlisted outputs are invisible)
            unknown[p] = str(exc)
            continue
        if rel is not None and rel not in listed:
            remove_output(output_dir / rel)
        fenced[p] = str(result.error(p))
    return TaskCommits(committed, fenced, unknown)


def commit_task(
    committer: Committer,
    task: Task,
    rel: str | None,
    output_dir: Path,
    changelog: tuple[tuple[int, int], ...] | None = None,
) -> Checkpoint:
    """``commit_tasks`` of one task: returns the new checkpoint; raises ``Fenced`` (its directory deleted unless the
    committed checkpoint lists it) or ``StoreUnavailable`` (outcome unknown; the directory kept)."""
    outcome = commit_tasks(committer, [(task, rel, changelog)], output_dir)
    p = task.partition
    if p in outcome.fenced:
        raise Fenced(outcome.fenced[p])
    if p in outcome.unknown:
        raise StoreUnavailable(outcome.unknown[p])
    return outcome.committed[p]


def clean_partition(output_dir: Path, resource: str, partition: int, checkpoint: Checkpoint, epoch: int) -> list[str]:
    """Delete the partition's output directories written under epochs older than ``epoch`` that ``checkpoint``
    does not list (their writers can never commit again). Returns the deleted relative paths."""
    parent = partition_dir(resource, partition)
    directory = output_dir / parent
    if not directory.is_dir():
        return []
    listed = set(checkpoint.outputs)
    deleted: list[str] = []
    for name in sorted(os.listdir(directory)):
        match = OUTPUT_BATCH.match(name)
        rel = f"{parent}/{name}"
        if match is not None and int(match.group(3)) < epoch and rel not in listed:
            shutil.rmtree(directory / name, ignore_errors=True)  # its writer may be discarding it too
            deleted.append(rel)
    return deleted


WARM_UP_VIEW = "apportion_warm_up"
"""Prefix of the global temporary view a warm-up leaves on a Spark Connect server (``warm_up``)."""


def warm_up_view(spark: SparkSession, transform: Transform, source: type | None = None) -> str | None:
    """Through Spark Connect, the name of the global temporary view that says ``transform`` was warmed up on the
    server (on ``source``'s records when given: ``warm_up``); None on an engine of this process's own."""
    from apportion.spark.engine import is_connect

    if not is_connect(spark):
        return None
    name = f"{getattr(transform, '__module__', '')}:{getattr(transform, '__qualname__', repr(transform))}"
    if source is not None:
        name += f"@{source.__name__}"
    return f"{WARM_UP_VIEW}_{hashlib.blake2b(name.encode(), digest_size=6).hexdigest()}"


def warm_up(
    spark: SparkSession, transform: Transform = transform, sample: tuple[Source, str, Task] | None = None
) -> float:
    """Run the batch path (``batch_frame`` with the transform, and ``write_batch``: the partitioned write) once, into a
    temporary directory (class loading, code generation: the first Spark job of a JVM is several times slower). Call it
    BEFORE joining the group, so a cold first batch never delays a revocation. Returns the seconds it took.

    What it reads: ``sample`` ``(source, resource, task)``, the source's own records (Kafka's first ones: its
    ``warm_up_task``), which also warms the source's read path (its classes, its client); without one, a one-record
    temporary log. Measured on Kafka (local[1], 1,000,000 records in 8 partitions, two alternating starts each): the
    connector check's empty read and the one-record log took 10.6-12.5 s and the first 80,000-record batch after them
    6.8 s; 1,000 of the topic's records through the batch path took 10.4-10.7 s and that batch 5.4 s.

    Through Spark Connect the JVM is the server's, shared by every worker's session: the first warm-up of a
    transform (and source kind) leaves a global temporary view (``global_temp.apportion_warm_up_<digest>``, in the
    server's application, gone with it) and later workers' warm-ups find it and skip the job (one catalog call instead
    of a Spark job of seconds). A restarted server has no view: the next worker warms it up again."""
    started = time.perf_counter()
    view = warm_up_view(spark, transform, None if sample is None else type(sample[0]))
    if view is not None and spark.catalog.tableExists(f"global_temp.{view}"):
        return time.perf_counter() - started
    with tempfile.TemporaryDirectory(prefix="apportion-warm-up-") as tmp:
        if sample is None:
            log = PartitionedLog(Path(tmp) / "log")
            log.create("warm-up", 1)
            log.append("warm-up", 0, pa.table({"key": ["k"], "value": ["v"], "ts_ms": pa.array([None], pa.int64())}))
            sample = (LogSource(log), "warm-up", Task(0, 0, 0, 1, Checkpoint()))
        source, resource, task = sample
        write_batch(batch_frame(spark, [task], transform, source, resource), Path(tmp) / "out", resource)
    if view is not None:
        spark.range(0).createOrReplaceGlobalTempView(view)
    return time.perf_counter() - started


def emit_log(event: WorkerEvent, **fields: Any) -> None:
    log.info("%s", events.line(event, **fields))


class Pipeline:
    """The processing state of one worker. Give its ``on_*`` methods to ``Group.join``, then ``attach`` the worker
    and call ``run_once`` (one micro-batch) or ``run`` (until stopped)."""

    def __init__(
        self,
        spark: SparkSession,
        log: PartitionedLog | Source,
        output_dir: str | Path,
        resource: str,
        *,
        batch_records: int | None = None,
        batch_seconds: float | None = None,
        transform: Transform = transform,
        emit: Emit = emit_log,
        worker_id: str = "",
        slow_commit_s: float = 0.0,
        state: StatefulPartitions | None = None,
        fault: FaultHook | None = None,
    ) -> None:
        most = None if state is None else STATEFUL_MAX_RECORDS  # a stateful batch is folded in the worker
        self.sizing = BatchSize(batch_records, batch_seconds, most=most)  # InvalidRequest for a bad one
        self.spark = spark
        self.source = as_source(log)  # the log, Kafka (``_source``: what a batch reads)
        self.output_dir = Path(output_dir)
        self.resource = resource
        self.partitions = self.source.partitions(resource)
        self.transform = transform
        self.emit = emit
        self.worker_id = worker_id
        self._slow_commit_s = slow_commit_s
        self._fault = fault
        self._state = threading.Lock()
        self._active: set[int] = set()
        self._locks: dict[int, threading.Lock] = {}
        self._cache: dict[int, tuple[int, Checkpoint]] = {}  # partition -> (epoch, committed checkpoint)
        self._assignments: dict[int, int] = {}  # partition -> how many on_assigned included it
        self._planned: dict[int, int] = {}  # partition -> its _assignments count when its batch was planned
        self._committer: Committer | None = None
        self._columns: list[str] | None = None  # the transform's result columns (``output_frame``), once known
        self.state = state
        self.batches = 0
        self.records = 0

    # -- callbacks (worker thread) ---------------------------------------------------------------------------

    def on_assigned(self, parts: list[int]) -> None:
        with self._state:
            self._active.update(parts)
            for p in parts:
                self._assignments[p] = self._assignments.get(p, 0) + 1
        self.emit(WorkerEvent.ASSIGNED, worker=self.worker_id, partitions=parts)

    def on_revoked(self, parts: list[int]) -> None:
        for p in sorted_pids(parts):
            # waits for the batch in flight that holds p (it commits first)
            with self._lock(p), self._state:
                self._active.discard(p)
                self._cache.pop(p, None)
        self.emit(WorkerEvent.REVOKED, worker=self.worker_id, partitions=parts)

    def on_lost(self, parts: list[int]) -> None:
        with self._state:
            self._active.difference_update(parts)
            for p in parts:
                self._cache.pop(p, None)
        # when the belief really ended: a worker frozen past its deadline reports the loss late
        ended = getattr(self._committer, "belief_ended_at", None)
        self.emit(
            WorkerEvent.LOST,
            worker=self.worker_id,
            partitions=parts,
            **({} if ended is None else {"belief_until": ended}),
        )

    def on_replicas(self, standby: list[int], learners: list[int]) -> None:
        if self.state is not None:
            self.state.on_replicas(standby, learners)

    def replica_lags(self) -> dict[int, int]:
        return {} if self.state is None else self.state.replica_lags()

    def restored(self, partition: int, epoch: int) -> bool:
        """Whether ``partition``'s state is restored under ``epoch``: its first batch of that epoch has read the
        checkpoint and replayed the changelog it names (``_checkpoint``: the cache is set only after ``prepare``). A
        coordinator member acks a migration to this worker only then (``joined``), so the table's ONLINE means the
        new owner has the state."""
        with self._state:
            cached = self._cache.get(partition)
        return cached is not None and cached[0] == epoch

    def restore_replicas(self) -> int:
        """Replay a bounded number of changelog records into this worker's standby and learner replicas."""
        committer = self._committer
        if self.state is None or committer is None:
            return 0
        with self._state:
            active = set(self._active)
        return self.state.restore_replicas(committer, active)

    def attach(self, committer: Committer) -> Pipeline:
        self._committer = committer
        return self

    def _lock(self, partition: int) -> threading.Lock:
        with self._state:
            return self._locks.setdefault(partition, threading.Lock())

    # -- batches (caller's thread) ---------------------------------------------------------------------------

    def run_once(self) -> BatchStats | None:
        """Process one micro-batch over every active owned partition; None when there was nothing to do."""
        committer = self._committer
        if committer is None:
            raise InvalidRequest("pipeline", "attach a worker before running batches")
        owned = set(committer.owned())
        with self._state:
            candidates = sorted_pids(p for p in self._active if p in owned)
        with contextlib.ExitStack() as stack:
            for p in candidates:
                stack.enter_context(self._lock(p))
            planned = [c for c in (self._checkpoint(committer, p) for p in candidates) if c is not None]
            if not planned:
                return None
            ends = self.source.ends(self.resource, {p: checkpoint.offset for p, _, checkpoint in planned})
            self.sizing.spread(sum(1 for p, _, checkpoint in planned if ends[p] > checkpoint.offset))
            tasks = [
                Task(p, epoch, checkpoint.offset, self.sizing.end(checkpoint.offset, ends[p]), checkpoint)
                for p, epoch, checkpoint in planned
                if ends[p] > checkpoint.offset
            ]
            if not tasks:
                return None
            return self._process(committer, tasks)

    def _checkpoint(self, committer: Committer, p: int) -> tuple[int, int, Checkpoint] | None:
        """``(p, epoch, checkpoint)`` to plan ``p``'s task from: the lease's epoch now and the committed checkpoint
        (read once per epoch; on a new epoch the older epochs' unlisted outputs are cleaned up and a stateful
        partition restored first); None when ``p`` is no longer ours."""
        with self._state:
            if p not in self._active:
                return None  # revoked or lost while we waited for the lock
            cached = self._cache.get(p)
            self._planned[p] = self._assignments.get(p, 0)
        try:
            epoch = committer.lease(p).epoch
        except Fenced:
            return None
        if cached is None or cached[0] != epoch:
            checkpoint = Checkpoint.parse(committer.checkpoint(p), p)
            deleted = clean_partition(self.output_dir, self.resource, p, checkpoint, epoch)
            if deleted:
                self.emit(WorkerEvent.CLEANED, worker=self.worker_id, partition=p, epoch=epoch, files=deleted)
            if self.state is not None:
                self.state.prepare(p, checkpoint, epoch)
            with self._state:
                self._cache[p] = (epoch, checkpoint)
        else:
            checkpoint = cached[1]
        return p, epoch, checkpoint

    def _process(self, committer: Committer, tasks: list[Task]) -> BatchStats:
        batch = self.batches + 1
        records = sum(t.records for t in tasks)
        self.emit(
            WorkerEvent.BATCH,
            worker=self.worker_id,
            batch=batch,
            records=records,
            ranges={t.partition: [t.start, t.end, t.epoch] for t in tasks},
        )
        started = batch_started = time.perf_counter()
        frames = transformed(self.spark, tasks, self.transform, self.source, self.resource)
        if self._columns is None:  # the first batch's: asked once (a round trip through Connect), then reused
            self._columns = transform_columns(frames[0][1])
        result = output_frame(frames, self._columns)
        if self._fault is not None:
            for task in tasks:
                self._fault("before_write", task, self.output_dir / self._relpath(task))
        write_batch(result, self.output_dir, self.resource)
        spark_s = time.perf_counter() - started

        started = time.perf_counter()
        written: list[tuple[Task, str | None, Staged | None]] = []
        for task in tasks:
            path = self.output_dir / self._relpath(task)
            staged = None
            if self.state is None:
                rows = output_rows(path)
            else:  # the stateful fold needs the rows: read back what the executors wrote (a local read, in chunks)
                rows, staged = self.state.stage_output(task.partition, path, task.checkpoint)
            rel = self._relpath(task) if rows > 0 else None  # no row written: the offsets commit alone
            written.append((task, rel, staged))
            self.emit(
                WorkerEvent.WRITTEN, worker=self.worker_id, partition=task.partition, epoch=task.epoch, rows=rows,
                start=task.start, end=task.end, file=rel,
            )  # fmt: skip
        fenced: list[int] = []
        write_s = time.perf_counter() - started

        if self._slow_commit_s > 0:  # a slow committer (`apportion demo`'s zombie): a window between write and commit
            self.emit(WorkerEvent.PAUSING, worker=self.worker_id, seconds=self._slow_commit_s)
            time.sleep(self._slow_commit_s)

        started = time.perf_counter()
        if self._fault is not None:
            for task, _, _ in written:
                self._fault("before_commit", task, self.output_dir / self._relpath(task))
        outcome = commit_tasks(
            committer,
            [(task, rel, None if staged is None else staged.changelog) for task, rel, staged in written],
            self.output_dir,
        )
        committed: list[int] = []
        for task, rel, staged in written:
            p = task.partition
            if p in outcome.fenced:
                fenced.append(p)
                self._on_fenced(task, rel)
                continue
            if p in outcome.unknown:
                with self._state:
                    self._cache.pop(p, None)  # ambiguous: re-read the checkpoint next batch
                error = outcome.unknown[p]
                self.emit(WorkerEvent.COMMIT_UNKNOWN, worker=self.worker_id, partition=p, epoch=task.epoch, error=error)
                continue
            checkpoint = outcome.committed[p]
            if staged is not None and self.state is not None:
                self.state.committed(p, staged)
            with self._state:
                if p in self._active:
                    self._cache[p] = (task.epoch, checkpoint)
            committed.append(p)
            self.emit(
                WorkerEvent.COMMIT, worker=self.worker_id, partition=p, epoch=task.epoch, offset=task.end, file=rel
            )
        commit_s = time.perf_counter() - started
        next_records = self.sizing.measured(max(t.records for t in tasks), time.perf_counter() - batch_started)
        self.batches = batch
        self.records += sum(t.records for t in tasks if t.partition in committed)
        stats = BatchStats(
            tuple(t.partition for t in tasks),
            records,
            tuple(committed),
            tuple(sorted_pids(fenced)),
            spark_s,
            write_s,
            commit_s,
        )
        self.emit(
            WorkerEvent.BATCH_DONE, worker=self.worker_id, batch=batch, records=records, committed=committed,
            fenced=fenced, spark_s=round(spark_s, 3), write_s=round(write_s, 3), commit_s=round(commit_s, 4),
            **({"next_records": next_records} if self.sizing.adaptive else {}),
        )  # fmt: skip
        return stats

    def _relpath(self, task: Task) -> str:
        return output_relpath(self.resource, task.partition, task.start, task.end, task.epoch)

    def _on_fenced(self, task: Task, rel: str | None) -> None:
        """``task`` met the fence at its commit: forget the cached checkpoint and stop processing the
        partition — unless ``on_assigned`` gave it back since the batch was planned (then the lease has a newer epoch
        of ours and the next batch plans under it)."""
        p = task.partition
        with self._state:
            self._cache.pop(p, None)
            reassigned = self._assignments.get(p, 0) != self._planned.get(p)
            if not reassigned:
                self._active.discard(p)
            keep = reassigned and p in self._active
        self.emit(
            WorkerEvent.FENCED, worker=self.worker_id, partition=p, epoch=task.epoch, discarded=rel, still_active=keep
        )

    def run(self, stop: threading.Event, *, idle_s: float = 0.2, exit_after_idle_s: float = 0.0) -> None:
        """Run batches until ``stop`` is set (or, with ``exit_after_idle_s`` > 0, after that long without work)."""
        run_batches([self], stop, idle_s=idle_s, exit_after_idle_s=exit_after_idle_s)

    def forget_checkpoints(self) -> None:
        """Re-plan the next batch from the committed checkpoints (after a failed batch)."""
        with self._state:
            self._cache.clear()


STORE_RETRY_MAX_S = 1.0
"""The longest pause between two turns of the batch loop while the store does not answer."""


def run_batches(
    pipelines: Sequence[Pipeline], stop: threading.Event, *, idle_s: float = 0.2, exit_after_idle_s: float = 0.0
) -> None:
    """One batch loop over ``pipelines`` (one per resource, sharing a worker and its Spark session: each turn runs
    a batch of every one of them) until ``stop`` is set, or ``exit_after_idle_s`` passes without work. A failed
    Spark job is retried with a growing pause, re-planned from the committed checkpoints, up to
    ``MAX_FAILED_BATCHES`` in a row. A store that does not answer (the worker cut off from it, an election) is
    waited for as long as it takes, as ``apportion worker`` waits once registered: nothing of the turn was committed,
    and the member's lease decides what it still owns (``on_lost`` at its deadline, registering again when the store
    answers); the batches are re-planned from the committed checkpoints."""
    first = pipelines[0]
    idle_since: float | None = None
    failures = outage = 0
    while not stop.is_set():
        try:
            worked = False
            for pipeline in pipelines:
                worked = pipeline.run_once() is not None or worked
            failures = 0
            if outage:
                first.emit(WorkerEvent.STORE_ANSWERS, worker=first.worker_id, after_attempts=outage)
                outage = 0
        except StoreUnavailable as exc:
            outage += 1
            if outage == 1:  # one line per outage, not per attempt
                first.emit(WorkerEvent.STORE_UNAVAILABLE, worker=first.worker_id, error=str(exc)[:300])
            for pipeline in pipelines:
                pipeline.forget_checkpoints()
            stop.wait(min(idle_s * 2 ** min(outage, 8), STORE_RETRY_MAX_S))
            continue
        except ApportionError:
            raise  # ours (a bad transform's columns, the store): not a Spark job that may succeed again
        except Exception as exc:
            if stop.is_set():
                # stopping: Spark may be shutting down under us (SIGTERM to the process group reaches the JVM);
                # the batch in flight is simply not committed
                first.emit(WorkerEvent.BATCH_ABORTED, worker=first.worker_id, error=repr(exc)[:200])
                return
            failures += 1
            first.emit(WorkerEvent.BATCH_FAILED, worker=first.worker_id, failures=failures, error=repr(exc)[:300])
            if failures >= MAX_FAILED_BATCHES:
                raise
            for pipeline in pipelines:
                pipeline.forget_checkpoints()
            stop.wait(idle_s * 2**failures)
            continue
        if sum(p.restore_replicas() for p in pipelines) > 0 or worked:
            idle_since = None
            continue
        now = time.monotonic()
        idle_since = now if idle_since is None else idle_since
        if exit_after_idle_s > 0 and now - idle_since >= exit_after_idle_s:
            first.emit(WorkerEvent.IDLE_EXIT, worker=first.worker_id, seconds=round(now - idle_since, 3))
            return
        stop.wait(idle_s)


def batches_within_revocation(pipelines: Iterable[Pipeline], options: JoinOptions) -> None:
    """Before joining with ``options``: each pipeline's default batch target follows the revoke timeout it joins
    with (a revocation waits for the batch in flight; ``BatchSize.within``)."""
    from apportion.worker import DEFAULT_REVOKE_TIMEOUT_S

    revoke_timeout_s = options.get("revoke_timeout_s", DEFAULT_REVOKE_TIMEOUT_S)
    for pipeline in pipelines:
        pipeline.sizing.within(revoke_timeout_s)


@contextlib.contextmanager
def joined(group: Group, worker_id: str, pipeline: Pipeline, **options: Unpack[JoinOptions]) -> Iterator[Worker]:
    """Join ``group`` with the pipeline's callbacks and attach the worker; leave gracefully at the end. A stateful
    pipeline keeps replicas warm in the rounds mode (``on_replicas``, ``replica_lags``) and holds a coordinator's
    migration acks until its state is restored (``restored``); in the static mode it restores on claim, before its
    first batch, as in every mode (``_plan``), with no one to tell."""
    if pipeline.state is not None:
        mode = group.mode.name
        if mode == "rounds":
            options.setdefault("replica_lags", pipeline.replica_lags)
            options.setdefault("on_replicas", pipeline.on_replicas)
        elif mode == "coordinator":
            options.setdefault("restored", pipeline.restored)
    batches_within_revocation([pipeline], options)
    worker = group.join(worker_id, pipeline.on_assigned, pipeline.on_revoked, pipeline.on_lost, **options)
    pipeline.attach(worker)
    try:
        yield worker
    finally:
        worker.stop()


__all__ = [
    "BatchStats",
    "Committer",
    "FaultHook",
    "Pipeline",
    "Task",
    "TaskCommits",
    "Written",
    "batch_frame",
    "batches_within_revocation",
    "check_columns",
    "clean_partition",
    "commit_task",
    "commit_tasks",
    "emit_log",
    "joined",
    "load_transform",
    "run_batches",
    "output_rows",
    "transform",
    "warm_up",
    "warm_up_view",
    "write_batch",
]
