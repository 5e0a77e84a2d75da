"""Process: a group worker runs Spark micro-batches over the log partitions it owns, with fenced commits.

Why micro-batches driven by the worker (and not Structured Streaming with the Python Data Source API)
--------------------------------------------------------------------------------------------------------
Ownership changes *between* batches, and each partition's progress must be committed by its own fenced store
transaction (``commit/<p>`` only if ``owner/p`` is still (me, epoch)). A streaming source plans offsets for all its
partitions at once and commits them in Spark's own checkpoint directory, which knows nothing of epochs: a zombie's
stream would keep writing, and a revocation could not wait for "the batch that holds p". Driving ``spark.read``
from the worker loop keeps the whole exactly-once argument in one place and in the store: every batch is planned
from the committed checkpoints of the partitions owned *now*, under per-partition locks that ``on_revoked`` also
takes, and each partition commits (or is fenced) separately.

One micro-batch (``Pipeline.run_once``)
---------------------------------------
1. lock every partition this worker owns and is processing (sorted order; ``on_revoked`` takes the same locks, so a
   revocation waits for the batch in flight and the next owner starts from its commit);
2. per partition: ``epoch`` = the lease epoch now; ``start`` = the committed checkpoint's offset (read from the
   store once per epoch, then cached: nobody else can commit while we hold the epoch); ``end = min(log end,
   start + batch_records)``. On a new epoch, delete the partition's output files of OLDER epochs that the checkpoint
   does not list (their writers are fenced forever: epochs only grow);
3. ONE Spark job for all partitions: ``spark.read.parquet(segments)`` filtered to ``[start, end)`` per partition,
   with a ``partition`` column, through ``transform(df)``; the result is collected with ``toArrow()``. A micro-batch
   is therefore bounded by ``batch_records`` x owned partitions rows on the driver (``--batch-records``);
4. per partition: write the rows (sorted by offset) to ``<output>/<resource>/<p>/<start>-<end>-e<epoch>.parquet``
   atomically (temp file, fsync, rename, fsync dir), then ``worker.commit(p, Checkpoint(end, outputs + [file]),
   epoch=epoch)``. On ``Fenced``: delete the file unless the committed checkpoint lists it (an ambiguous commit
   that did apply), stop processing ``p`` (the protocol reports ``on_lost``).

Races with a newer epoch (a zombie — frozen, partitioned away — resumes while the next owner works). The next
owner's clean-up (step 2) may run at any moment of the zombie's step 4; every outcome is a fence, never a crash:

- clean-up between the zombie's temp write and its rename: the temp file is gone, ``os.replace`` finds nothing
  (``FileNotFoundError``). Only a newer epoch deletes a temp file of ours, so ``write_output`` raises ``Fenced``:
  the partition is reported fenced like a refused commit and the batch goes on with the other partitions;
- clean-up between the rename and the commit: the output file is gone; the commit is refused (stale epoch) and the
  discard finds nothing to delete;
- the partition was lost AND given back to this worker (a newer epoch of its own: ``on_lost`` then ``on_assigned``)
  while a batch of the older epoch was in flight: that batch is fenced, but the partition stays active and the next
  batch plans it under the new epoch (it is dropped only if no ``on_assigned`` came since the batch was planned).

``fault`` (constructor, and ``write_output``) is the deterministic fault-injection point for these windows: a
callable ``fault(point, task, path)`` run at ``"before_rename"`` (temp file written and fsynced, not renamed) and
``"before_commit"`` (output renamed, changelog appended, commit not yet attempted). Tests make the other actor act
there; production passes nothing.

Exactly once per record: a record is in the committed output iff a checkpoint lists its file; checkpoints advance
only by fenced transactions whose new offset range starts where the committed one ended, so committed files of a
partition tile ``[0, offset)`` without gap or overlap, whoever wrote them — across rebalances (revocation waits for
the batch), kill -9 (the uncommitted file is never listed; the next owner starts from the commit) and zombies (the
commit of a stale epoch fails; its file is deleted by itself or by the next owner's clean-up).

Stateful pipelines (``state=StatefulPartitions(...)``, ``apportion.spark._stateful``) also keep a running
aggregate per key in a local store per partition, restored from a changelog whose committed ranges ride in the same
fenced checkpoint (step 2 restores on a new epoch; step 4 appends to the changelog before the commit and updates the
local store after it); between batches the worker restores its standby and learner replicas.

Partition states in the pipeline (``on_*`` run on the worker thread, batches on the caller's thread)::

    idle --on_assigned--> ACTIVE --on_revoked (waits for the batch holding p)--> idle
    ACTIVE --on_lost, or Fenced at write/commit--> idle  (a batch in flight for p is fenced at its rename or commit;
                                                          unless on_assigned gave p back since that batch was planned)
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from apportion import events
from apportion.errors import Fenced, InvalidRequest, StoreUnavailable
from apportion.group import PartitionLease
from apportion.log import SCHEMA, PartitionedLog, Segment, segment_name
from apportion.spark._output import OUTPUT_FILE, TMP_PREFIX, Checkpoint, output_relpath
from apportion.spark._stateful import Staged, StatefulPartitions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from apportion.worker import Group

log = logging.getLogger("apportion.pipeline")

Transform = Callable[["DataFrame"], "DataFrame"]
Emit = Callable[..., None]
FaultHook = Callable[[str, "Task", Path], None]
"""``fault(point, task, path)``: the fault-injection point (tests only; see the module docstring). ``point`` is
``"before_rename"`` (``path``: the temp file) or ``"before_commit"`` (``path``: the output file)."""
INPUT_SCHEMA_DDL = "offset long, key string, value string, ts_ms long"


class Committer(Protocol):
    """What the pipeline needs from a group member (``apportion.Worker`` and ``RoundsMember`` both fit)."""

    def owned(self) -> list[int]: ...
    def lease(self, partition: int) -> PartitionLease: ...
    def commit(self, partition: int, checkpoint: str, *, epoch: int | None = None) -> None: ...
    def checkpoint(self, partition: int) -> str | None: ...


def transform(df: DataFrame) -> DataFrame:
    """The default processing: keep ``partition, offset, key, value`` and add ``digest`` = sha2(value, 256).

    A pure Spark transformation; replace it with any ``f(df) -> df`` (``--transform module:function``) that keeps
    the ``partition`` and ``offset`` columns. Input columns: partition int, offset long, key, value, ts_ms long.
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
class Task:
    """One partition's share of a micro-batch: offsets ``start <= o < end`` under ``epoch``."""

    partition: int
    epoch: int
    start: int
    end: int
    checkpoint: Checkpoint
    segments: tuple[Segment, ...]

    @property
    def records(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What one micro-batch did. Seconds: ``spark_s`` (read + transform + collect), ``write_s``, ``commit_s``."""

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


def write_output(
    output_dir: Path, resource: str, task: Task, table: pa.Table, *, fault: FaultHook | None = None
) -> str:
    """Write ``table`` as the task's output file atomically; returns its path relative to ``output_dir``.

    Raises ``Fenced`` when the temp file vanished before its rename: a newer epoch's clean-up deleted it, which only
    happens once the partition belongs to that epoch (``clean_partition``)."""
    rel = output_relpath(resource, task.partition, task.start, task.end, task.epoch)
    final = output_dir / rel
    directory = final.parent
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f"{TMP_PREFIX}e{task.epoch:010d}-{os.getpid()}-{final.name}"
    try:
        with open(tmp, "wb") as handle:
            pq.write_table(table, handle)
            handle.flush()
            os.fsync(handle.fileno())
        if fault is not None:
            fault("before_rename", task, tmp)
        try:
            os.replace(tmp, final)
        except FileNotFoundError as exc:
            raise Fenced(
                f"partition {task.partition}: the temp file of epoch {task.epoch} was removed before its rename "
                "(a newer epoch's clean-up: this writer is fenced)"
            ) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)  # a failed write leaves nothing behind (not even for the clean-up)
        raise
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return rel


def commit_task(
    committer: Committer,
    task: Task,
    rel: str,
    output_dir: Path,
    changelog: tuple[tuple[int, int], ...] | None = None,
) -> Checkpoint:
    """The fenced commit of one task's output (and, when stateful, of its ``changelog`` ranges). Returns the new
    checkpoint; on ``Fenced`` deletes the file unless the committed checkpoint lists it, and re-raises."""
    checkpoint = task.checkpoint.then(task.end, rel, changelog)
    try:
        committer.commit(task.partition, checkpoint.to_json(), epoch=task.epoch)
    except Fenced:
        try:
            committed = Checkpoint.parse(committer.checkpoint(task.partition), task.partition)
        except StoreUnavailable:
            raise  # cannot tell: keep the file (unlisted files are invisible; the next owner cleans up)
        if rel not in committed.outputs:
            with contextlib.suppress(FileNotFoundError):
                (output_dir / rel).unlink()
        raise
    return checkpoint


def clean_partition(output_dir: Path, resource: str, partition: int, checkpoint: Checkpoint, epoch: int) -> list[str]:
    """Delete the partition's output and temp files written under epochs older than ``epoch`` that ``checkpoint``
    does not list (their writers can never commit again). Returns the deleted relative paths."""
    directory = output_dir / resource / str(partition)
    if not directory.is_dir():
        return []
    listed = set(checkpoint.outputs)
    deleted: list[str] = []
    for name in sorted(os.listdir(directory)):
        rel = f"{resource}/{partition}/{name}"
        if name.startswith(TMP_PREFIX):
            head = name[len(TMP_PREFIX) :].split("-", 1)[0]
            older = head.startswith("e") and head[1:].isdigit() and int(head[1:]) < epoch
        else:
            match = OUTPUT_FILE.match(name)
            older = match is not None and int(match.group(3)) < epoch and rel not in listed
        if older:
            try:
                (directory / name).unlink()
            except FileNotFoundError:
                continue  # its writer renamed or discarded it meanwhile (a renamed one is deleted at its fence)
            deleted.append(rel)
    return deleted


def read_tasks(spark: SparkSession, tasks: Sequence[Task]) -> DataFrame:
    """One DataFrame of every task's input rows (``partition`` int + the log's columns).

    ONE scan over the segment files of all tasks (the partition is the name of the file's directory, read from
    Spark's ``_metadata.file_path``) filtered to each task's offset range — cheaper to plan and run than a union
    of one scan per partition. Row order is not guaranteed: the writer sorts each partition's rows by offset.
    """
    from pyspark.sql import functions as F

    paths = [os.path.abspath(s.path) for t in tasks for s in t.segments]  # through Connect the server reads them
    df = spark.read.schema(INPUT_SCHEMA_DDL).parquet(*paths)
    partition = F.regexp_extract(F.col("_metadata.file_path"), r"/(\d+)/[^/]+$", 1).cast("int")
    wanted = functools.reduce(
        lambda a, b: a | b,
        [(partition == t.partition) & (F.col("offset") >= t.start) & (F.col("offset") < t.end) for t in tasks],
    )
    return df.where(wanted).select(partition.alias("partition"), "offset", "key", "value", "ts_ms")


def warm_up(spark: SparkSession, transform: Transform = transform) -> float:
    """Run the batch path once on a one-record file (class loading, code generation: the first Spark job of a JVM
    is several times slower). Call it BEFORE joining the group, so a cold first batch never delays a revocation.
    Returns the seconds it took."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="apportion-warm-up-") as tmp:
        path = Path(tmp) / "0" / segment_name(0, 0)  # the log's layout: <partition>/<segment>
        path.parent.mkdir()
        pq.write_table(pa.table({"offset": [0], "key": ["k"], "value": ["v"], "ts_ms": [None]}, schema=SCHEMA), path)
        task = Task(0, 0, 0, 1, Checkpoint(), (Segment(str(path), 0, 0),))
        transform(read_tasks(spark, [task])).toArrow()
    return time.perf_counter() - started


def emit_log(event: str, **fields: Any) -> None:
    log.info("%s", events.line(event, **fields))


class Pipeline:
    """The processing state of one worker. Give its ``on_*`` methods to ``Group.join``, then ``attach`` the worker
    and call ``run_once`` (one micro-batch) or ``run`` (until stopped)."""

    def __init__(
        self,
        spark: SparkSession,
        log: PartitionedLog,
        output_dir: str | Path,
        resource: str,
        *,
        batch_records: int = 10_000,
        transform: Transform = transform,
        emit: Emit = emit_log,
        worker_id: str = "",
        pause_before_commit_s: float = 0.0,
        pause_batches: int = 1,
        state: StatefulPartitions | None = None,
        fault: FaultHook | None = None,
    ) -> None:
        if isinstance(batch_records, bool) or not isinstance(batch_records, int) or batch_records < 1:
            raise InvalidRequest("batch_records", f"must be an int >= 1, got {batch_records!r}")
        self.spark = spark
        self.log = log
        self.output_dir = Path(output_dir)
        self.resource = resource
        self.partitions = log.partitions(resource)
        self.batch_records = batch_records
        self.transform = transform
        self.emit = emit
        self.worker_id = worker_id
        self._pause_s = pause_before_commit_s
        self._pauses_left = pause_batches if pause_before_commit_s > 0 else 0
        self._fault = fault
        self._state = threading.Lock()
        self._active: set[int] = set()
        self._locks: dict[int, threading.Lock] = {}
        self._cache: dict[int, tuple[int, Checkpoint]] = {}  # partition -> (epoch, committed checkpoint)
        self._assignments: dict[int, int] = {}  # partition -> how many on_assigned included it
        self._planned: dict[int, int] = {}  # partition -> its _assignments count when its batch was planned
        self._committer: Committer | None = None
        self.state = state
        self.batches = 0
        self.records = 0

    # -- callbacks (worker thread) ---------------------------------------------------------------------------

    def on_assigned(self, parts: list[int]) -> None:
        with self._state:
            self._active.update(parts)
            for p in parts:
                self._assignments[p] = self._assignments.get(p, 0) + 1
        self.emit("assigned", worker=self.worker_id, partitions=parts)

    def on_revoked(self, parts: list[int]) -> None:
        for p in sorted(parts):
            # waits for the batch in flight that holds p (it commits first)
            with self._lock(p), self._state:
                self._active.discard(p)
                self._cache.pop(p, None)
        self.emit("revoked", worker=self.worker_id, partitions=parts)

    def on_lost(self, parts: list[int]) -> None:
        with self._state:
            self._active.difference_update(parts)
            for p in parts:
                self._cache.pop(p, None)
        self.emit("lost", worker=self.worker_id, partitions=parts)

    def on_replicas(self, standby: list[int], learners: list[int]) -> None:
        if self.state is not None:
            self.state.on_replicas(standby, learners)

    def replica_lags(self) -> dict[int, int]:
        return {} if self.state is None else self.state.replica_lags()

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
            candidates = sorted(p for p in self._active if p in owned)
        with contextlib.ExitStack() as stack:
            for p in candidates:
                stack.enter_context(self._lock(p))
            tasks = [t for t in (self._plan(committer, p) for p in candidates) if t is not None]
            if not tasks:
                return None
            return self._process(committer, tasks)

    def _plan(self, committer: Committer, p: int) -> Task | None:
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
                self.emit("cleaned", worker=self.worker_id, partition=p, epoch=epoch, files=deleted)
            if self.state is not None:
                self.state.prepare(p, checkpoint, epoch)
            with self._state:
                self._cache[p] = (epoch, checkpoint)
        else:
            checkpoint = cached[1]
        start = checkpoint.offset
        end = min(self.log.end_offset(self.resource, p), start + self.batch_records)
        if end <= start:
            return None
        segments = tuple(s for s in self.log.segments(self.resource, p, start) if s.first_offset < end)
        return Task(p, epoch, start, end, checkpoint, segments)

    def _process(self, committer: Committer, tasks: list[Task]) -> BatchStats:
        batch = self.batches + 1
        records = sum(t.records for t in tasks)
        self.emit(
            "batch",
            worker=self.worker_id,
            batch=batch,
            records=records,
            ranges={t.partition: [t.start, t.end, t.epoch] for t in tasks},
        )
        started = time.perf_counter()
        result = self.transform(read_tasks(self.spark, tasks)).toArrow()
        for column in ("partition", "offset"):
            if column not in result.column_names:
                raise InvalidRequest("transform", f"its result must keep the {column!r} column: {result.column_names}")
        spark_s = time.perf_counter() - started

        started = time.perf_counter()
        written: list[tuple[Task, str, Staged | None]] = []
        fenced: list[int] = []
        parts = result.column("partition")
        for task in tasks:
            rows = result.filter(pc.equal(parts, task.partition))
            rows = rows.take(pc.sort_indices(rows, sort_keys=[("offset", "ascending")]))
            try:
                rel = write_output(self.output_dir, self.resource, task, rows, fault=self._fault)
            except Fenced:
                self._on_fenced(task, output_relpath(self.resource, task.partition, task.start, task.end, task.epoch))
                fenced.append(task.partition)
                continue
            staged = None if self.state is None else self.state.stage(task.partition, rows, task.checkpoint)
            written.append((task, rel, staged))
            self.emit(
                "written", worker=self.worker_id, partition=task.partition, epoch=task.epoch, rows=rows.num_rows,
                start=task.start, end=task.end, file=rel,
            )  # fmt: skip
        write_s = time.perf_counter() - started

        if self._pauses_left > 0:  # fault injection for tests: a window between write and commit
            self._pauses_left -= 1
            self.emit("pausing", worker=self.worker_id, seconds=self._pause_s)
            time.sleep(self._pause_s)

        started = time.perf_counter()
        committed: list[int] = []
        for task, rel, staged in written:
            p = task.partition
            if self._fault is not None:
                self._fault("before_commit", task, self.output_dir / rel)
            try:
                checkpoint = commit_task(
                    committer, task, rel, self.output_dir, None if staged is None else staged.changelog
                )
            except Fenced:
                fenced.append(p)
                self._on_fenced(task, rel)
                continue
            except StoreUnavailable as exc:
                with self._state:
                    self._cache.pop(p, None)  # ambiguous: re-read the checkpoint next batch
                self.emit("commit_unknown", worker=self.worker_id, partition=p, epoch=task.epoch, error=str(exc))
                continue
            if staged is not None and self.state is not None:
                self.state.committed(p, staged)
            with self._state:
                if p in self._active:
                    self._cache[p] = (task.epoch, checkpoint)
            committed.append(p)
            self.emit("commit", worker=self.worker_id, partition=p, epoch=task.epoch, offset=task.end, file=rel)
        commit_s = time.perf_counter() - started
        self.batches = batch
        self.records += sum(t.records for t in tasks if t.partition in committed)
        stats = BatchStats(
            tuple(t.partition for t in tasks),
            records,
            tuple(committed),
            tuple(sorted(fenced)),
            spark_s,
            write_s,
            commit_s,
        )
        self.emit(
            "batch_done", worker=self.worker_id, batch=batch, records=records, committed=committed, fenced=fenced,
            spark_s=round(spark_s, 3), write_s=round(write_s, 3), commit_s=round(commit_s, 4),
        )  # fmt: skip
        return stats

    def _on_fenced(self, task: Task, rel: str) -> None:
        """``task`` met the fence (at its rename or its commit): forget the cached checkpoint and stop processing the
        partition — unless ``on_assigned`` gave it back since the batch was planned (then the lease has a newer epoch
        of ours and the next batch plans under it)."""
        p = task.partition
        with self._state:
            self._cache.pop(p, None)
            reassigned = self._assignments.get(p, 0) != self._planned.get(p)
            if not reassigned:
                self._active.discard(p)
            keep = reassigned and p in self._active
        self.emit("fenced", worker=self.worker_id, partition=p, epoch=task.epoch, discarded=rel, still_active=keep)

    def run(self, stop: threading.Event, *, idle_s: float = 0.2, exit_after_idle_s: float = 0.0) -> None:
        """Run batches until ``stop`` is set (or, with ``exit_after_idle_s`` > 0, after that long without work)."""
        idle_since: float | None = None
        while not stop.is_set():
            try:
                stats = self.run_once()
            except Exception as exc:
                if not stop.is_set():
                    raise
                # stopping: Spark may be shutting down under us (SIGTERM to the process group reaches the JVM);
                # the batch in flight is simply not committed
                self.emit("batch_aborted", worker=self.worker_id, error=repr(exc)[:200])
                return
            if self.restore_replicas() > 0 or stats is not None:
                idle_since = None
                continue
            now = time.monotonic()
            idle_since = now if idle_since is None else idle_since
            if exit_after_idle_s > 0 and now - idle_since >= exit_after_idle_s:
                self.emit("idle_exit", worker=self.worker_id, seconds=round(now - idle_since, 3))
                return
            stop.wait(idle_s)


@contextlib.contextmanager
def joined(group: Group, worker_id: str, pipeline: Pipeline, **join_kwargs: Any) -> Iterator[Any]:
    """Join ``group`` with the pipeline's callbacks and attach the worker; leave gracefully at the end."""
    if pipeline.state is not None:
        join_kwargs.setdefault("replica_lags", pipeline.replica_lags)
        join_kwargs.setdefault("on_replicas", pipeline.on_replicas)
    worker = group.join(worker_id, pipeline.on_assigned, pipeline.on_revoked, pipeline.on_lost, **join_kwargs)
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
    "clean_partition",
    "commit_task",
    "emit_log",
    "joined",
    "load_transform",
    "read_tasks",
    "transform",
    "warm_up",
    "write_output",
]
