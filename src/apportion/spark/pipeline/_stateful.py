"""Stateful partitions in the pipeline: local state per partition, a fenced changelog, warm replicas (seed 2).

Each partition of a stateful pipeline keeps a running aggregate per key (``apportion.spark.state.Aggregate``: how many
records, how many characters of value) in a local SQLite file (``<state_dir>/<partition>.sqlite``), backed by the
changelog ``<resource>.changelog`` in the partitioned log. The exactly-once argument of the pipeline extends to
the state because the changelog ranges are part of the fenced checkpoint:

1. before the first batch of a new epoch the active *restores*: it replays the committed changelog ranges beyond its
   local file's position (everything, for a member that never held the partition: this is what a move costs);
2. per batch: fold the batch's rows, merge with the local state, append the new absolute values to the changelog,
   and commit the checkpoint with the appended range (``Checkpoint.changelog``) in the same fenced transaction as
   the output file; only after the commit succeeds is the local file updated. A fenced zombie's appends are in no
   committed range, so no restore ever applies them;
3. standby and learner replicas (``on_replicas`` from the group's plan) are restored between batches, a bounded
   number of records per step, and ``replica_lags`` reports how far behind each one is (committed changelog
   offsets not yet applied) in the member's participation record: the ``high_availability`` strategy moves an
   active only to a replica within ``acceptable_recovery_lag``, so the new owner's step 1 is short.

Step 1 is the same in every mode: it is how the state follows a partition to its new owner. Step 3 exists only in
the rounds mode (seed 2's replicas need its plan). In coordinator mode the new owner's member acks the migration
(the table's ONLINE, seed 1) only once step 1 is done under the epoch it holds (``Pipeline.restored``); in static
mode the ordinal's pod does step 1 when it claims its block. ``apportion.spark.pipeline._worker`` says why each.

``restore_rate`` (records per second, 0 = unlimited) caps every restore of this worker, actives and replicas alike:
the knob that keeps background restoration from saturating a shared disk or network (Kafka's replication throttles
play the same role), and the bandwidth model of the stateful benchmark.

``handoffs`` measures, from the workers' events, how long each moved partition had no active: from its old owner's
``revoked`` (it stopped processing) to its new owner's ``restored`` (state caught up, processing can start).

``verify_state`` rebuilds every partition's state from the committed changelog alone and compares it with the
aggregate of the committed input computed in one pass (the single-process reference).
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from apportion._files import read_parquet_chunks
from apportion.errors import InvalidRequest
from apportion.events import Emit, WorkerEvent
from apportion.log import PartitionedLog
from apportion.spark.pipeline._output import OUTPUT_REMEDY, Checkpoint, committed_checkpoints
from apportion.spark.state import (
    Aggregate,
    PartitionState,
    Ranges,
    add_range,
    append_changelog,
    fold,
    lag,
    merge,
    restore,
)
from apportion.store import Store

STAGE_CHUNK_ROWS = 65_536
"""Rows of a batch's output the worker reads back and folds at a time (``StatefulPartitions.stage_output``)."""


class CheckpointReader(Protocol):
    def checkpoint(self, partition: int) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Staged:
    """A batch's state change, appended to the changelog and waiting for the fenced commit."""

    updates: Mapping[str, Aggregate]
    changelog: Ranges

    @property
    def position(self) -> int:
        """The local store's position once committed: the end of the committed changelog."""
        return self.changelog[-1][1] if self.changelog else 0


class StatefulPartitions:
    """The local state of one worker: actives (restore, stage, committed) and replicas (restore in the background).

    Thread-safety: ``on_replicas`` and ``replica_lags`` are called from the worker's protocol thread, everything
    else from the pipeline's thread; the replica bookkeeping is under a lock, and ``PartitionState`` is thread-safe.
    """

    def __init__(
        self,
        log: PartitionedLog,
        resource: str,
        state_dir: str | Path,
        *,
        emit: Emit,
        worker_id: str = "",
        restore_batch: int = 50_000,
        restore_rate: float = 0.0,
    ) -> None:
        if isinstance(restore_batch, bool) or not isinstance(restore_batch, int) or restore_batch < 1:
            raise InvalidRequest("restore_batch", f"must be an int >= 1, got {restore_batch!r}")
        if isinstance(restore_rate, bool) or not isinstance(restore_rate, int | float) or not restore_rate >= 0:
            raise InvalidRequest("restore_rate", f"must be a number of records per second >= 0, got {restore_rate!r}")
        self.log = log
        self.resource = resource
        self.state_dir = Path(state_dir)
        self.emit = emit
        self.worker_id = worker_id
        self.restore_batch = restore_batch
        self.restore_rate = float(restore_rate)
        self._lock = threading.Lock()
        self._stores: dict[int, PartitionState] = {}
        self._replicas: dict[int, str] = {}  # partition -> "standby" | "learner"
        self._lags: dict[int, int] = {}

    def store(self, partition: int) -> PartitionState:
        with self._lock:
            found = self._stores.get(partition)
            if found is None:
                found = self._stores[partition] = PartitionState.open(self.state_dir, partition)
            return found

    # -- the active ------------------------------------------------------------------------------------------

    def prepare(self, partition: int, checkpoint: Checkpoint, epoch: int) -> None:
        """Bring the local state up to the committed changelog before processing under ``epoch``."""
        state = self.store(partition)
        behind = lag(checkpoint.changelog, state.position)
        started = time.perf_counter()
        replayed = self._restore(partition, state, checkpoint.changelog, None)
        self.emit(
            WorkerEvent.RESTORED, worker=self.worker_id, partition=partition, epoch=epoch, lag=behind, records=replayed,
            committed=lag(checkpoint.changelog, 0), seconds=round(time.perf_counter() - started, 4), keys=len(state),
        )  # fmt: skip

    def stage(self, partition: int, rows: pa.Table | Iterable[pa.Table], checkpoint: Checkpoint) -> Staged:
        """Fold ``rows`` (a table, or chunks of one: ``stage_output`` reads a batch's output in chunks) into new
        absolute values and append them to the changelog (before the fenced commit)."""
        delta: dict[str, Aggregate] = {}
        for chunk in [rows] if isinstance(rows, pa.Table) else rows:
            delta.update(merge(delta, fold(chunk)))  # what the keys of the chunk add up to so far
        updates = merge(self.store(partition).get(delta), delta)
        first, end = append_changelog(self.log, self.resource, partition, updates)
        return Staged(updates, add_range(checkpoint.changelog, first, end))

    def stage_output(self, partition: int, path: Path, checkpoint: Checkpoint) -> tuple[int, Staged]:
        """``stage`` of the rows a batch wrote into ``path`` (its output directory; absent: no row), read back in
        chunks of at most :data:`STAGE_CHUNK_ROWS` rows of ``key`` and ``value`` only. Returns the rows and the stage.
        The worker holds one chunk and the batch's keys at a time, never the batch: the batch itself is bounded by
        :data:`~apportion.spark.pipeline._sizing.STATEFUL_MAX_RECORDS` per partition."""
        counted = [0]

        def chunks() -> Iterator[pa.Table]:
            if not path.is_dir():
                return
            for chunk in read_parquet_chunks(path, OUTPUT_REMEDY, ("key", "value"), STAGE_CHUNK_ROWS):
                counted[0] += chunk.num_rows
                yield chunk

        staged = self.stage(partition, chunks(), checkpoint)
        return counted[0], staged

    def committed(self, partition: int, staged: Staged) -> None:
        """The commit that listed ``staged.changelog`` succeeded: apply it to the local file."""
        self.store(partition).apply(staged.updates, staged.position)

    # -- replicas --------------------------------------------------------------------------------------------

    def on_replicas(self, standby: list[int], learners: list[int]) -> None:
        with self._lock:
            self._replicas = {p: "standby" for p in standby} | {p: "learner" for p in learners}
            self._lags = {p: n for p, n in self._lags.items() if p in self._replicas}
        self.emit(WorkerEvent.REPLICAS, worker=self.worker_id, standby=standby, learners=learners)

    def replica_lags(self) -> dict[int, int]:
        """Partition -> committed changelog records not yet applied, for every replica restored at least once."""
        with self._lock:
            return dict(self._lags)

    def restore_replicas(self, reader: CheckpointReader, active: set[int]) -> int:
        """Replay up to ``restore_batch`` records into the replicas (least restored first); returns the count."""
        with self._lock:
            todo = sorted(
                (p for p in self._replicas if p not in active), key=lambda p: (-self._lags.get(p, 1 << 62), p)
            )
            kinds = dict(self._replicas)
        budget = self.restore_batch
        replayed = 0
        for p in todo:
            checkpoint = Checkpoint.parse(reader.checkpoint(p), p)
            state = self.store(p)
            n = self._restore(p, state, checkpoint.changelog, budget) if budget > 0 else 0
            budget -= n
            replayed += n
            behind = lag(checkpoint.changelog, state.position)
            with self._lock:
                if p not in self._replicas:
                    continue
                before = self._lags.get(p)
                self._lags[p] = behind
            if before is None or n > 0:
                self.emit(WorkerEvent.REPLICA_LAG, worker=self.worker_id, partition=p, kind=kinds[p], lag=behind)
        return replayed

    def _restore(self, partition: int, state: PartitionState, ranges: Ranges, limit: int | None) -> int:
        """``restore`` in steps of ``restore_batch`` records, paced to ``restore_rate``."""
        if self.restore_rate <= 0:
            return restore(self.log, self.resource, partition, state, ranges, limit)
        replayed = 0
        started = time.monotonic()
        while limit is None or replayed < limit:
            step = self.restore_batch if limit is None else min(self.restore_batch, limit - replayed)
            n = restore(self.log, self.resource, partition, state, ranges, step)
            if n == 0:
                break
            replayed += n
            ahead = started + replayed / self.restore_rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)  # pacing, not synchronisation: this is the throttle itself
        return replayed

    def close(self) -> None:
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
        for state in stores:
            state.close()


@dataclass(frozen=True, slots=True)
class StateReport:
    """The state rebuilt from the committed changelog against the aggregate of the committed input."""

    partitions: int
    keys: int
    records: int
    mismatched_keys: int
    mismatched_partitions: tuple[int, ...]

    @property
    def ok(self) -> bool:
        return self.mismatched_keys == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "partitions": self.partitions,
            "keys": self.keys,
            "records": self.records,
            "mismatched_keys": self.mismatched_keys,
            "mismatched_partitions": list(self.mismatched_partitions),
        }


def handoffs(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every partition move seen in the pipeline events of all workers (``worker``, ``time`` fields): each new
    owner's ``restored`` event with ``source`` (the last other worker that revoked the partition before it),
    ``target`` and ``gap_s`` (seconds without an active). A partition that had no previous owner is not a move."""
    ordered = sorted(events, key=lambda e: (float(e["time"]), str(e.get("worker", ""))))
    last_revoked: dict[int, tuple[float, str]] = {}
    found: list[dict[str, Any]] = []
    for e in ordered:
        kind = e.get("event")
        if kind == WorkerEvent.REVOKED:
            for p in e["partitions"]:
                last_revoked[int(p)] = (float(e["time"]), str(e["worker"]))
        elif kind == WorkerEvent.RESTORED:
            before = last_revoked.get(int(e["partition"]))
            if before is not None and before[1] != e["worker"]:
                found.append({**e, "source": before[1], "target": e["worker"], "gap_s": float(e["time"]) - before[0]})
    return found


def reference_state(log: PartitionedLog, resource: str, partition: int, end: int | None = None) -> dict[str, Aggregate]:
    """The single-process reference: the aggregate of the partition's input records below ``end`` in one pass."""
    return fold(log.read(resource, partition, 0, end))


def verify_state(store: Store, group: str, log: PartitionedLog, resource: str) -> StateReport:
    """Rebuild each partition's state from its committed changelog ranges (in a scratch directory) and compare it
    with ``reference_state`` of the committed input."""
    checkpoints = committed_checkpoints(store, group)
    keys = records = mismatched = 0
    bad: list[int] = []
    with tempfile.TemporaryDirectory(prefix="apportion-verify-state-") as scratch:
        for p in range(log.partitions(resource)):
            checkpoint = checkpoints.get(p, Checkpoint())
            with PartitionState.open(scratch, p) as state:
                restore(log, resource, p, state, checkpoint.changelog)
                rebuilt = state.snapshot()
            expected = reference_state(log, resource, p, checkpoint.offset)
            differing = sum(1 for k in expected.keys() | rebuilt.keys() if expected.get(k) != rebuilt.get(k))
            keys += len(expected)
            records += checkpoint.offset
            mismatched += differing
            if differing:
                bad.append(p)
    return StateReport(log.partitions(resource), keys, records, mismatched, tuple(bad))


__all__ = ["StateReport", "StatefulPartitions", "handoffs", "reference_state", "verify_state"]
