"""Assignment strategies: pure, deterministic functions of an :class:`~apportion.model.AssignRequest`.

``plan(request)`` dispatches on ``request.strategy`` (see ``STRATEGY_NAMES``); ``check(request, plan)`` lists the
violations of the strategy's invariants; ``parse_request``/``plan_to_json`` are the JSON shapes of
``apportion assign``. How previous ownership is read (stale generations, conflicts) is documented in ``_core``.
"""

from __future__ import annotations

from apportion.assign._check import check, check_or_raise, min_moves
from apportion.assign._hashing import stable_hash
from apportion.assign._high_availability import tags
from apportion.assign._json import loads_request, parse_request, plan_to_json
from apportion.assign._registry import OPTIONS, STRATEGIES
from apportion.assign._simple import range_block
from apportion.errors import InvalidRequest
from apportion.model import AssignRequest, Plan

STRATEGY_NAMES: tuple[str, ...] = tuple(sorted(STRATEGIES))


def plan(request: AssignRequest) -> Plan:
    """The plan of ``request.strategy`` for ``request``; raises InvalidRequest for an unknown strategy/option."""
    strategy = STRATEGIES.get(request.strategy)
    if strategy is None:
        raise InvalidRequest("strategy", f"unknown strategy {request.strategy!r} (one of {', '.join(STRATEGY_NAMES)})")
    return strategy(request)


__all__ = [
    "tags",
    "OPTIONS",
    "STRATEGIES",
    "STRATEGY_NAMES",
    "check",
    "check_or_raise",
    "loads_request",
    "min_moves",
    "parse_request",
    "plan",
    "plan_to_json",
    "range_block",
    "stable_hash",
]
