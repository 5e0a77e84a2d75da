"""Strategy name -> (plan function, options type), and the one way to check a strategy's options.

A new strategy registers with one line here (``_PLACES``): its module and, in it, its function ``AssignRequest ->
Plan``, its options type (a :class:`~apportion.assign._options.StrategyOptions` whose ``STRATEGY`` is the name) and
its lower bound on moves ``AssignRequest -> int`` (the ``stats.min_moves`` its plans report; the definition is in
``_core``). A strategy's module is imported when its name is first looked up (`apportion assign` with ``sticky``
loads neither the hashing nor the high-availability code); tests/assign/test_options.py checks every line.
:func:`validate_options` is what the group definition, the JSON request and the simulator ask.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from apportion.assign._options import StrategyOptions
from apportion.errors import InvalidRequest
from apportion.model import AssignRequest, Plan


class Strategy(NamedTuple):
    """A registered strategy: its plan function, its options type and its lower bound on moves."""

    plan: Callable[[AssignRequest], Plan]
    options: type[StrategyOptions]
    min_moves: Callable[[AssignRequest], int]


# name -> its module (in this package) and there its plan function, options type and lower bound on moves
_PLACES: Mapping[str, tuple[str, str, str, str]] = {
    "round_robin": ("_simple", "round_robin", "RoundRobinOptions", "layout_min_moves"),
    "range": ("_simple", "range_", "RangeOptions", "layout_min_moves"),
    "sticky": ("_sticky", "sticky", "StickyOptions", "sticky_min_moves"),
    "weighted": ("_weighted", "weighted", "WeightedOptions", "weighted_min_moves"),
    "rendezvous": ("_hashing", "rendezvous", "RendezvousOptions", "rendezvous_min_moves"),
    "bounded_load": ("_hashing", "bounded_load", "BoundedLoadOptions", "bounded_load_min_moves"),
    "high_availability": (
        "_high_availability", "high_availability", "HighAvailabilityOptions", "high_availability_min_moves",
    ),
}  # fmt: skip


class _Strategies(Mapping[str, Strategy]):
    """The registered strategies by name, each imported on first lookup (then kept)."""

    def __init__(self) -> None:
        self._loaded: dict[str, Strategy] = {}

    def __getitem__(self, name: str) -> Strategy:
        found = self._loaded.get(name)
        if found is None:
            module_name, plan, options, min_moves = _PLACES[name]
            module = importlib.import_module(f"{__package__}.{module_name}")
            found = Strategy(getattr(module, plan), getattr(module, options), getattr(module, min_moves))
            self._loaded[name] = found
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(_PLACES)

    def __len__(self) -> int:
        return len(_PLACES)

    def __contains__(self, name: object) -> bool:
        return name in _PLACES


STRATEGIES: Mapping[str, Strategy] = _Strategies()


def strategy_named(name: object) -> Strategy:
    """The registered strategy ``name``; ``InvalidRequest("strategy", ...)`` listing the known ones."""
    if not isinstance(name, str) or name not in _PLACES:
        raise InvalidRequest("strategy", f"unknown strategy {name!r} (one of {', '.join(sorted(STRATEGIES))})")
    return STRATEGIES[name]


def validate_options(strategy: str, options: Mapping[str, object]) -> StrategyOptions:
    """``options`` checked against ``strategy``'s own options type: its options, defaults filled in.

    ``InvalidRequest`` for an unknown strategy, an option that strategy does not have (naming the ones it has) or a
    bad value (``options.<name>``)."""
    return strategy_named(strategy).options.parse(options)


__all__ = ["STRATEGIES", "Strategy", "strategy_named", "validate_options"]
