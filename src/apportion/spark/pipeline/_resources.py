"""The pipeline over several log resources: one group over named resources, one ``Pipeline`` per resource.

A worker of a group over named resources owns partitions ``<resource>-<index>``; each resource's ``Pipeline`` (its
log resource, its output directories ``<resource>/<index>/...``) sees only its own, by their index, through a
``ResourceView`` of the worker: ``owned``, ``lease``, ``commit`` and ``checkpoint`` of ``orders-3`` are the worker's,
fenced per ``<resource>-<index>`` exactly as in a one-resource group. ``Resources`` splits the group's callbacks
among the pipelines; ``run_batches`` runs every pipeline's micro-batch in one loop on the worker's Spark session.
Exactly once holds per record per resource: each resource's committed checkpoints list its own outputs
(``verify(..., resource)`` reads the committed checkpoints of that resource only).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TypeVar, Unpack

from apportion.group import CommitResult, PartitionId, PartitionLease
from apportion.model import Partition, index_of, partition_name
from apportion.spark.pipeline._pipeline import Committer, Pipeline, batches_within_revocation
from apportion.worker import Group, JoinOptions, Worker

V = TypeVar("V")


def split(parts: Sequence[PartitionId]) -> dict[str, list[int]]:
    """``["orders-3", "payments-0"]`` -> ``{"orders": [3], "payments": [0]}`` (each list sorted)."""
    out: dict[str, list[int]] = {}
    for pid in parts:
        part = Partition.parse(str(pid))
        out.setdefault(part.resource, []).append(part.index)
    return {name: sorted(indices) for name, indices in out.items()}


class ResourceView(Committer):
    """One resource's partitions of a worker, by index (what its ``Pipeline`` commits through)."""

    def __init__(self, worker: Worker, resource: str) -> None:
        self.worker = worker
        self.resource = resource

    def _pid(self, index: int) -> str:
        return partition_name(self.resource, index)

    def owned(self) -> list[PartitionId]:
        return list(split(self.worker.owned()).get(self.resource, []))

    def lease(self, partition: PartitionId) -> PartitionLease:
        return self.worker.lease(self._pid(int(partition)))

    def commit(self, partition: PartitionId, checkpoint: str, *, epoch: int | None = None) -> int:
        return self.worker.commit(self._pid(int(partition)), checkpoint, epoch=epoch)

    def commit_many(
        self, checkpoints: Mapping[PartitionId, str], *, epochs: Mapping[PartitionId, int] | None = None
    ) -> CommitResult:
        """The worker's ``commit_many`` of these indices' partitions; the result by index again."""
        given: dict[PartitionId, int] | None = None
        if epochs is not None:
            given = {self._pid(int(p)): epoch for p, epoch in epochs.items()}
        result = self.worker.commit_many({self._pid(int(p)): c for p, c in checkpoints.items()}, epochs=given)
        fenced, failed = _by_index(result.fenced), _by_index(result.failed)
        return CommitResult(_by_index(result.committed), fenced, failed, result.member)

    def checkpoint(self, partition: PartitionId) -> str | None:
        return self.worker.checkpoint(self._pid(int(partition)))

    @property
    def belief_ended_at(self) -> float | None:
        return self.worker.belief_ended_at


def _by_index(values: Mapping[PartitionId, V]) -> dict[PartitionId, V]:
    """``{"orders-3": v}`` -> ``{3: v}`` (one resource's partitions)."""
    return {index_of(pid): value for pid, value in values.items()}


class Resources:
    """The group's callbacks, split among the pipelines of the resources they name."""

    def __init__(self, pipelines: Mapping[str, Pipeline]) -> None:
        self.pipelines = dict(pipelines)

    def _each(self, parts: list[PartitionId], kind: str) -> None:
        for name, indices in sorted(split(parts).items()):
            pipeline = self.pipelines.get(name)
            if pipeline is not None:  # a resource this worker runs no pipeline for never reaches it (subscriptions)
                getattr(pipeline, kind)(indices)

    def on_assigned(self, parts: list[PartitionId]) -> None:
        self._each(parts, "on_assigned")

    def on_revoked(self, parts: list[PartitionId]) -> None:
        self._each(parts, "on_revoked")

    def on_lost(self, parts: list[PartitionId]) -> None:
        self._each(parts, "on_lost")


@contextlib.contextmanager
def joined_resources(
    group: Group, worker_id: str, pipelines: Mapping[str, Pipeline], **options: Unpack[JoinOptions]
) -> Iterator[Worker]:
    """Join ``group`` (over named resources) with the pipelines' callbacks, subscribed to exactly their resources,
    and attach each pipeline to its view of the worker; leave gracefully at the end."""
    batches_within_revocation(pipelines.values(), options)
    split_callbacks = Resources(pipelines)
    worker = group.join(
        worker_id,
        split_callbacks.on_assigned,
        split_callbacks.on_revoked,
        split_callbacks.on_lost,
        **JoinOptions(**options, subscriptions=sorted(pipelines)),
    )
    for name, pipeline in pipelines.items():
        pipeline.attach(ResourceView(worker, name))
    try:
        yield worker
    finally:
        worker.stop()


__all__ = ["ResourceView", "Resources", "joined_resources", "split"]
