"""Strategy name -> (plan function, options type), and the one way to check a strategy's options.

A new strategy registers with one line here: its function ``AssignRequest -> Plan``, its options type (a
:class:`~apportion.assign._options.StrategyOptions` whose ``STRATEGY`` is the name) and its lower bound on moves
``AssignRequest -> int`` (the ``stats.min_moves`` its plans report; the definition is in ``_core``).
:func:`validate_options` is what the group definition, the JSON request and the simulator ask.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

from apportion.assign._hashing import (
    BoundedLoadOptions,
    RendezvousOptions,
    bounded_load,
    bounded_load_min_moves,
    rendezvous,
    rendezvous_min_moves,
)
from apportion.assign._high_availability import HighAvailabilityOptions, high_availability, high_availability_min_moves
from apportion.assign._options import StrategyOptions
from apportion.assign._simple import RangeOptions, RoundRobinOptions, layout_min_moves, range_, round_robin
from apportion.assign._sticky import StickyOptions, sticky, sticky_min_moves
from apportion.assign._weighted import WeightedOptions, weighted, weighted_min_moves
from apportion.errors import InvalidRequest
from apportion.model import AssignRequest, Plan


class Strategy(NamedTuple):
    """A registered strategy: its plan function, its options type and its lower bound on moves."""

    plan: Callable[[AssignRequest], Plan]
    options: type[StrategyOptions]
    min_moves: Callable[[AssignRequest], int]


def _by_name(*strategies: Strategy) -> Mapping[str, Strategy]:
    return MappingProxyType({s.options.STRATEGY: s for s in strategies})


STRATEGIES: Mapping[str, Strategy] = _by_name(
    Strategy(round_robin, RoundRobinOptions, layout_min_moves),
    Strategy(range_, RangeOptions, layout_min_moves),
    Strategy(sticky, StickyOptions, sticky_min_moves),
    Strategy(weighted, WeightedOptions, weighted_min_moves),
    Strategy(rendezvous, RendezvousOptions, rendezvous_min_moves),
    Strategy(bounded_load, BoundedLoadOptions, bounded_load_min_moves),
    Strategy(high_availability, HighAvailabilityOptions, high_availability_min_moves),
)


def strategy_named(name: object) -> Strategy:
    """The registered strategy ``name``; ``InvalidRequest("strategy", ...)`` listing the known ones."""
    found = STRATEGIES.get(name) if isinstance(name, str) else None
    if found is None:
        raise InvalidRequest("strategy", f"unknown strategy {name!r} (one of {', '.join(sorted(STRATEGIES))})")
    return found


def validate_options(strategy: str, options: Mapping[str, object]) -> StrategyOptions:
    """``options`` checked against ``strategy``'s own options type: its options, defaults filled in.

    ``InvalidRequest`` for an unknown strategy, an option that strategy does not have (naming the ones it has) or a
    bad value (``options.<name>``)."""
    return strategy_named(strategy).options.parse(options)


__all__ = ["STRATEGIES", "Strategy", "strategy_named", "validate_options"]
