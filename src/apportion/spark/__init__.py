"""The data pipeline on Spark (DESIGN.md §6). Names load lazily, so ``import apportion`` never needs pyspark.

- ``spark_partition_expr(col, n)`` — the native Spark expression of THE routing hash (``apportion.routing``).
- ``route(df, key_col, log, resource)`` — append a DataFrame to the partitioned log, routed by that expression.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "spark_partition_expr": "apportion.spark._route",
    "route": "apportion.spark._route",
    "RouteResult": "apportion.spark._route",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'apportion.spark' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = ["RouteResult", "route", "spark_partition_expr"]
