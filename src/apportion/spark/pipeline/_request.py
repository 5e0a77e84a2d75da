"""What one pipeline worker is asked to be and do, as one typed value: ``PipelineRequest``.

``run_pipeline_worker(request)`` takes it as :func:`apportion.runner.run_worker` takes its member and requested
definition: who the member is (``store_url``, ``group``, ``worker_id``, a static member's ``ordinal``), the group's
definition it asks for (``RequestedGroup``) and the pipeline's own settings (``PipelineSettings``). `apportion
pipeline run` builds it from the member options every member command shares (``apportion.cli._member``) and its own.

The requested definition lacks one thing a ``GroupConfig`` has: the partition counts, which are the log resource's or
the Kafka topics', read when the worker starts (``RequestedGroup.config`` completes it). Imports are light: no
pyspark, no pyarrow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from apportion.group import GroupConfig, Mode, Rounds

if TYPE_CHECKING:
    from apportion.kafka import KafkaConfig
    from apportion.spark.pipeline._pipeline import Transform


@dataclass(frozen=True, slots=True)
class RequestedGroup:
    """The group's definition as a pipeline worker asks for it (``GroupConfig.request``'s fields) but for its partition
    counts. ``partitions``, when given, is checked against the log resource's; ``strategy`` None is the mode's
    default, ``ttl_s`` None the store's; ``options`` are the strategy's."""

    mode: Mode = field(default_factory=Rounds)
    partitions: int | None = None
    strategy: str | None = None
    options: Mapping[str, object] = field(default_factory=dict)
    settle_s: float = GroupConfig.DEFAULT_SETTLE_S
    min_interval_s: float = GroupConfig.DEFAULT_MIN_INTERVAL_S
    heartbeat_s: float = GroupConfig.DEFAULT_HEARTBEAT_S
    ttl_s: float | None = None

    def config(
        self,
        store_url: str,
        *,
        partitions: int | None = None,
        resources: Mapping[str, int] | None = None,
        stateful: bool = False,
    ) -> GroupConfig:
        """The whole definition once the counts are known (validated: ``InvalidRequest``)."""
        return GroupConfig.request(
            store_url, self.mode, partitions=partitions, resources=resources, strategy=self.strategy,
            options=self.options, settle_s=self.settle_s, min_interval_s=self.min_interval_s,
            heartbeat_s=self.heartbeat_s, ttl_s=self.ttl_s, stateful=stateful,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    """The pipeline's own settings (``run_pipeline_worker``'s docstring says what each does).

    ``input_dir`` is the partitioned log's root (unused with ``kafka``); ``resource`` defaults to the group's name;
    ``resources`` are several log resources (or, with ``kafka``, the topics) and ``subscriptions`` those this worker
    processes (default all). ``batch_records`` fixes a batch's records per partition, else the size follows
    ``batch_seconds``. ``transform`` is ``f(df) -> df`` or its ``"module:function"`` name. ``master`` is a Spark
    master or an ``sc://`` Connect URL. ``state_dir`` makes the group stateful. ``slow_commit_s`` holds every batch's
    written output this long before its commit (a slow committer: the window a frozen worker becomes a zombie in,
    as `apportion demo` shows; 0: none)."""

    input_dir: str | Path
    output_dir: str | Path
    resource: str | None = None
    resources: Sequence[str] | None = None
    subscriptions: Sequence[str] | None = None
    batch_records: int | None = None
    batch_seconds: float | None = None
    transform: Transform | str | None = None
    master: str = "local[1]"
    driver_memory: str = "1g"
    revoke_timeout_s: float = 30.0
    idle_s: float = 0.2
    exit_idle_s: float = 0.0
    state_dir: str | Path | None = None
    restore_batch: int = 50_000
    restore_rate: float = 0.0
    slow_commit_s: float = 0.0
    kafka: KafkaConfig | None = None
    kafka_jars: str | None = None


@dataclass(frozen=True, slots=True)
class PipelineRequest:
    """One pipeline worker: the member (``store_url``, ``group``, ``worker_id``, a static member's ``ordinal``), the
    definition it requests (``requested``) and the pipeline's settings (``pipeline``)."""

    store_url: str
    group: str
    worker_id: str
    pipeline: PipelineSettings
    requested: RequestedGroup = field(default_factory=RequestedGroup)
    ordinal: int | None = None


__all__ = ["PipelineRequest", "PipelineSettings", "RequestedGroup"]
