"""Assignment strategies: pure, deterministic functions of an :class:`~apportion.model.AssignRequest`.

``plan(request)`` dispatches on ``request.strategy`` (see ``STRATEGY_NAMES``); each strategy has its own options
type (``WeightedOptions``, ``BoundedLoadOptions``, ``HighAvailabilityOptions``; the others take none) and
``validate_options(strategy, options)`` is the one check of a strategy's options; ``check(request, plan)`` lists the
violations of the strategy's invariants; ``parse_request``/``plan_to_json`` are the JSON shapes of
``apportion assign`` (``loads_request``/``dumps_plan``: from and to JSON text, fast at a million partitions;
``gc_paused()`` keeps the cyclic GC off while a caller builds millions of tuples). How previous ownership is read
(stale generations, conflicts) is documented in ``_core``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apportion._lazy import by_module, lazy_dir, lazy_names
from apportion.assign._registry import STRATEGIES, Strategy, strategy_named, validate_options
from apportion.model import AssignRequest, Plan

if TYPE_CHECKING:  # the same names, eagerly, for type checkers
    from apportion.assign._check import check, check_or_raise, min_moves
    from apportion.assign._core import gc_paused
    from apportion.assign._hashing import BoundedLoadOptions, stable_hash
    from apportion.assign._high_availability import HighAvailabilityOptions, ignored_options, replica_tags, tags
    from apportion.assign._json import dumps_plan, loads_request, parse_request, plan_to_json
    from apportion.assign._options import StrategyOptions
    from apportion.assign._simple import range_block
    from apportion.assign._weighted import WeightedOptions

# every other public name -> the module it loads from, on first use (PEP 562): `apportion assign` with one
# strategy loads that strategy's module, not the others nor the checker
_LAZY = by_module(
    {
        "apportion.assign._check": "check check_or_raise min_moves",
        "apportion.assign._core": "gc_paused",
        "apportion.assign._hashing": "BoundedLoadOptions stable_hash",
        "apportion.assign._high_availability": "HighAvailabilityOptions ignored_options replica_tags tags",
        "apportion.assign._json": "dumps_plan loads_request parse_request plan_to_json",
        "apportion.assign._options": "StrategyOptions",
        "apportion.assign._simple": "range_block",
        "apportion.assign._weighted": "WeightedOptions",
    }
)

__getattr__ = lazy_names(__name__, _LAZY)
__dir__ = lazy_dir(__name__, _LAZY)


STRATEGY_NAMES: tuple[str, ...] = tuple(sorted(STRATEGIES))


def plan(request: AssignRequest) -> Plan:
    """The plan of ``request.strategy`` for ``request``; raises InvalidRequest for an unknown strategy/option."""
    strategy = strategy_named(request.strategy)
    strategy.options.parse(request.options)
    return strategy.plan(request)


__all__ = [
    "replica_tags",
    "tags",
    "BoundedLoadOptions",
    "HighAvailabilityOptions",
    "STRATEGIES",
    "STRATEGY_NAMES",
    "Strategy",
    "StrategyOptions",
    "WeightedOptions",
    "check",
    "check_or_raise",
    "dumps_plan",
    "gc_paused",
    "ignored_options",
    "loads_request",
    "min_moves",
    "parse_request",
    "plan",
    "plan_to_json",
    "range_block",
    "stable_hash",
    "validate_options",
]
