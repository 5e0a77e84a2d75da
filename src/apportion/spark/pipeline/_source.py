"""Where a pipeline's records come from: the seam between the batch loop and its input (``Source``).

A pipeline (``apportion.spark.pipeline._pipeline``) plans each micro-batch from the committed checkpoints of the
partitions it owns, then asks its source two things:

- ``ends(resource, starts)``: per partition, the end of what can be read now from ``start`` on (the batch reads
  ``[start, min(end, start + size))``); a source whose records below ``start`` are gone must say so here, as an error
  naming the partition and the offsets lost, never skip them;
- ``frames(spark, resource, tasks)``: the tasks' records as Spark DataFrames of :data:`INPUT_SCHEMA_DDL` plus the
  apportion ``partition`` (int), read by Spark's executors — never collected to the worker. Each frame comes with the
  tasks whose rows it holds; the pipeline applies the transform to each frame and writes them all in one job.

Two implementations: :class:`LogSource` here (apportion's partitioned Parquet log: per task, its segments, one
Spark partition each) and ``KafkaSource`` (``apportion.spark.pipeline._kafka``: one batch read of Spark's Kafka
source over every task's offset range).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from apportion.log import PartitionedLog
from apportion.spark.pipeline._output import Checkpoint

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

INPUT_SCHEMA_DDL = "offset long, key string, value string, ts_ms long"
"""The columns a source gives besides ``partition``: what the transform sees (``apportion.spark.transform``)."""


@dataclass(frozen=True, slots=True)
class Task:
    """One partition's share of a micro-batch: offsets ``start <= o < end`` under ``epoch``."""

    partition: int
    epoch: int
    start: int
    end: int
    checkpoint: Checkpoint

    @property
    def records(self) -> int:
        """The offsets the task covers (a source with gaps in its offsets, Kafka's transaction markers, reads fewer)."""
        return self.end - self.start


Frame = tuple[tuple[Task, ...], "DataFrame"]
"""A DataFrame of some tasks' input rows (columns ``partition`` + :data:`INPUT_SCHEMA_DDL`) and those tasks."""


class Source(Protocol):
    """A pipeline's input (module docstring)."""

    def partitions(self, resource: str) -> int: ...
    def ends(self, resource: str, starts: Mapping[int, int]) -> dict[int, int]: ...
    def frames(self, spark: SparkSession, resource: str, tasks: Sequence[Task]) -> list[Frame]: ...


class LogSource:
    """apportion's partitioned Parquet log as a pipeline's source: a task reads its partition's segments whole (an
    offset filter only on a segment that crosses the task's range), one frame per task (the pipeline puts each in ONE
    Spark partition after the transform: the log is already partitioned and ordered, no shuffle)."""

    def __init__(self, log: PartitionedLog) -> None:
        self.log = log

    def partitions(self, resource: str) -> int:
        return self.log.partitions(resource)

    def ends(self, resource: str, starts: Mapping[int, int]) -> dict[int, int]:
        return {p: self.log.end_offset(resource, p) for p in starts}

    def frames(self, spark: SparkSession, resource: str, tasks: Sequence[Task]) -> list[Frame]:
        from pyspark.sql import functions as F

        frames: list[Frame] = []
        for task in tasks:  # few calls per task: in a classic session each one is a py4j call and an analysis
            segments = [s for s in self.log.segments(resource, task.partition, task.start) if s.first_offset < task.end]
            paths = [os.path.abspath(s.path) for s in segments]  # through Connect the server reads them
            df = spark.read.schema(INPUT_SCHEMA_DDL).parquet(*paths)
            if any(s.first_offset < task.start or s.last_offset >= task.end for s in segments):
                df = df.where((F.col("offset") >= task.start) & (F.col("offset") < task.end))
            df = df.select(F.lit(task.partition).alias("partition"), "offset", "key", "value", "ts_ms")
            frames.append(((task,), df))
        return frames


def as_source(input: PartitionedLog | Source) -> Source:
    """A pipeline's input as a :class:`Source` (a ``PartitionedLog`` is read through :class:`LogSource`)."""
    return LogSource(input) if isinstance(input, PartitionedLog) else input


__all__ = ["INPUT_SCHEMA_DDL", "Frame", "LogSource", "Source", "Task", "as_source"]
