"""The data pipeline on Spark (DESIGN.md §6). Names load lazily, so ``import apportion`` never needs pyspark.

- ``spark_partition_expr(col, n)`` — the native Spark expression of THE routing hash (``apportion.routing``).
- ``route(df, key_col, log, resource)`` — append a DataFrame to the partitioned log, routed by that expression.
- ``Pipeline`` / ``transform`` — process the owned partitions in micro-batches with fenced commits (``_pipeline``);
  ``run_pipeline_worker(PipelineRequest(...))`` — one worker process as ``apportion pipeline run`` runs it
  (``_worker``; the request: the member, its ``RequestedGroup`` and the ``PipelineSettings``, ``_request``);
  ``spark_session`` — the small local session every part of apportion starts (``_session``).
- ``StatefulPartitions`` — per-partition state backed by a fenced changelog, with standby/learner replicas
  (``Pipeline(..., state=...)``); ``verify_state`` rebuilds it from the changelog against a one-pass reference;
  ``handoffs`` measures each moved partition's time without an active (``_stateful``). The local state store
  itself and its changelog are the public module ``apportion.spark.state`` (``PartitionState``, ``restore``, ...).
- ``read_committed(spark_or_none, store, group, output_dir)`` — the ONLY correct way to read pipeline output;
  ``verify(...)`` compares it with the input log (``_output``), ``verify_kafka(...)`` with a Kafka topic;
  ``committed_checkpoints`` / ``uncommitted_records`` — how far each partition is committed.
- ``KafkaSource`` — Kafka topics as a pipeline's input, read by Spark's executors (``_kafka``; the seam is
  ``_source``).
- Analyse: ``events_frame`` (``group.history`` → DataFrame), ``ownership_intervals``, ``unowned_gaps``, ``overlaps``,
  ``moves_per_round``, ``balance_over_time``, ``handoff_latency``, ``latency_stats`` (``_analytics``);
  ``write_report`` → ``ReportSummary`` (tables, plots, index.html with a headline of ``Verdict``s; ``_report``).
- Simulate at scale: ``load_grid`` → ``Grid``, ``run_grid`` → ``GridResult`` (scenarios as Spark tasks; ``_grid``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apportion._lazy import lazy_names

if TYPE_CHECKING:  # the same names, eagerly, for type checkers
    from apportion.spark.analytics._analytics import (
        balance_over_time,
        events_frame,
        handoff_latency,
        latency_stats,
        moves_per_round,
        overlaps,
        ownership_intervals,
        unowned_gaps,
    )
    from apportion.spark.analytics._grid import Grid, GridResult, load_grid, run_grid, simulate_grid
    from apportion.spark.analytics._report import ReportSummary, Verdict, write_report
    from apportion.spark.engine._cluster import StandaloneCluster
    from apportion.spark.engine._serve import ConnectServer
    from apportion.spark.engine._session import (
        DEFAULT_CONNECT_PORT,
        connect_address,
        reach_master,
        spark_session,
        validate_master,
    )
    from apportion.spark.pipeline._kafka import KafkaSource, verify_kafka
    from apportion.spark.pipeline._output import (
        Checkpoint,
        VerifyReport,
        committed_checkpoints,
        read_committed,
        read_committed_arrow,
        uncommitted_records,
        verify,
    )
    from apportion.spark.pipeline._pipeline import BatchStats, Pipeline, joined, transform, warm_up
    from apportion.spark.pipeline._request import PipelineRequest, PipelineSettings, RequestedGroup
    from apportion.spark.pipeline._route import RouteResult, route, spark_partition_expr
    from apportion.spark.pipeline._stateful import StatefulPartitions, StateReport, handoffs, verify_state
    from apportion.spark.pipeline._worker import readable_dir, run_pipeline_worker, writable_dir

_LAZY = {
    "spark_partition_expr": "apportion.spark.pipeline._route",
    "route": "apportion.spark.pipeline._route",
    "RouteResult": "apportion.spark.pipeline._route",
    "BatchStats": "apportion.spark.pipeline._pipeline",
    "KafkaSource": "apportion.spark.pipeline._kafka",
    "verify_kafka": "apportion.spark.pipeline._kafka",
    "Pipeline": "apportion.spark.pipeline._pipeline",
    "transform": "apportion.spark.pipeline._pipeline",
    "joined": "apportion.spark.pipeline._pipeline",
    "warm_up": "apportion.spark.pipeline._pipeline",
    "spark_session": "apportion.spark.engine._session",
    "run_pipeline_worker": "apportion.spark.pipeline._worker",
    "PipelineRequest": "apportion.spark.pipeline._request",
    "PipelineSettings": "apportion.spark.pipeline._request",
    "RequestedGroup": "apportion.spark.pipeline._request",
    "StatefulPartitions": "apportion.spark.pipeline._stateful",
    "StateReport": "apportion.spark.pipeline._stateful",
    "handoffs": "apportion.spark.pipeline._stateful",
    "verify_state": "apportion.spark.pipeline._stateful",
    "Checkpoint": "apportion.spark.pipeline._output",
    "VerifyReport": "apportion.spark.pipeline._output",
    "read_committed": "apportion.spark.pipeline._output",
    "read_committed_arrow": "apportion.spark.pipeline._output",
    "verify": "apportion.spark.pipeline._output",
    "events_frame": "apportion.spark.analytics._analytics",
    "ownership_intervals": "apportion.spark.analytics._analytics",
    "unowned_gaps": "apportion.spark.analytics._analytics",
    "overlaps": "apportion.spark.analytics._analytics",
    "moves_per_round": "apportion.spark.analytics._analytics",
    "balance_over_time": "apportion.spark.analytics._analytics",
    "handoff_latency": "apportion.spark.analytics._analytics",
    "latency_stats": "apportion.spark.analytics._analytics",
    "ReportSummary": "apportion.spark.analytics._report",
    "Verdict": "apportion.spark.analytics._report",
    "write_report": "apportion.spark.analytics._report",
    "Grid": "apportion.spark.analytics._grid",
    "GridResult": "apportion.spark.analytics._grid",
    "load_grid": "apportion.spark.analytics._grid",
    "run_grid": "apportion.spark.analytics._grid",
    "readable_dir": "apportion.spark.pipeline._worker",
    "writable_dir": "apportion.spark.pipeline._worker",
    "simulate_grid": "apportion.spark.analytics._grid",
    "uncommitted_records": "apportion.spark.pipeline._output",
    "committed_checkpoints": "apportion.spark.pipeline._output",
    "connect_address": "apportion.spark.engine._session",
    "validate_master": "apportion.spark.engine._session",
    "reach_master": "apportion.spark.engine._session",
    "DEFAULT_CONNECT_PORT": "apportion.spark.engine._session",
    "ConnectServer": "apportion.spark.engine._serve",
    "StandaloneCluster": "apportion.spark.engine._cluster",
}


__getattr__ = lazy_names(__name__, _LAZY)


__all__ = [
    "BatchStats",
    "Checkpoint",
    "ConnectServer",
    "DEFAULT_CONNECT_PORT",
    "Grid",
    "GridResult",
    "KafkaSource",
    "Pipeline",
    "PipelineRequest",
    "PipelineSettings",
    "ReportSummary",
    "RequestedGroup",
    "Verdict",
    "RouteResult",
    "StandaloneCluster",
    "StateReport",
    "StatefulPartitions",
    "VerifyReport",
    "balance_over_time",
    "committed_checkpoints",
    "connect_address",
    "events_frame",
    "handoff_latency",
    "handoffs",
    "joined",
    "latency_stats",
    "load_grid",
    "moves_per_round",
    "overlaps",
    "ownership_intervals",
    "read_committed",
    "read_committed_arrow",
    "reach_master",
    "readable_dir",
    "route",
    "run_grid",
    "run_pipeline_worker",
    "simulate_grid",
    "spark_partition_expr",
    "spark_session",
    "transform",
    "uncommitted_records",
    "validate_master",
    "unowned_gaps",
    "verify",
    "verify_kafka",
    "verify_state",
    "warm_up",
    "writable_dir",
    "write_report",
]
