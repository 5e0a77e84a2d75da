"""The data pipeline on Spark (DESIGN.md §6). Names load lazily, so ``import apportion`` never needs pyspark.

- ``spark_partition_expr(col, n)`` — the native Spark expression of THE routing hash (``apportion.routing``).
- ``route(df, key_col, log, resource)`` — append a DataFrame to the partitioned log, routed by that expression.
- ``Pipeline`` / ``transform`` — process the owned partitions in micro-batches with fenced commits (``_pipeline``).
- ``read_committed(spark_or_none, store, group, output_dir)`` — the ONLY correct way to read pipeline output;
  ``verify(...)`` compares it with the input log (``_output``).
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "spark_partition_expr": "apportion.spark._route",
    "route": "apportion.spark._route",
    "RouteResult": "apportion.spark._route",
    "BatchStats": "apportion.spark._pipeline",
    "Pipeline": "apportion.spark._pipeline",
    "transform": "apportion.spark._pipeline",
    "spark_session": "apportion.spark._pipeline",
    "Checkpoint": "apportion.spark._output",
    "VerifyReport": "apportion.spark._output",
    "read_committed": "apportion.spark._output",
    "read_committed_arrow": "apportion.spark._output",
    "verify": "apportion.spark._output",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'apportion.spark' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "BatchStats",
    "Checkpoint",
    "Pipeline",
    "RouteResult",
    "VerifyReport",
    "read_committed",
    "read_committed_arrow",
    "route",
    "spark_partition_expr",
    "spark_session",
    "transform",
    "verify",
]
