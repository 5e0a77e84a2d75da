"""A group's mode: which protocol its members run, with that protocol's own settings, as one value.

``Rounds()`` (seed 0, ``_rounds``), ``Coordinator(min_members, rebalance, max_in_flight, first_settle_s)`` (seed 1,
``_coordinator``) or ``Static(replicas)`` (seed 3, ``_static``): frozen values, validated on construction
(``InvalidRequest`` naming the field), each default written here once. The mode is part of the group's definition
(``GroupConfig.mode``) and stored with it in the ``resource`` record as ``"mode": {"name": ..., <settings>}``
(:func:`mode_to_json`, :func:`mode_from_json`): a member of another mode is refused, not left to starve
(``GroupConfig.check_join``).

What each value holds is what the group shares; what a member is (its ordinal, capacity, subscriptions) is not
part of it. ``Static.replicas`` is the replica count a static group *starts* with (None: the first member's ordinal
+ 1); the live count is the group's ``replicas`` key (``_static``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from apportion.errors import CorruptRecord, InvalidRequest
from apportion.model import MAX_PARTITIONS

MODES = ("rounds", "coordinator", "static")
POLICIES = ("automatic", "manual")

NO_STATIC_SUBSCRIPTIONS = "static mode has no subscriptions: each ordinal consumes every resource"

MAX_SECONDS = 86_400.0
"""The longest duration a group's timing may be (one day: a longer one would overflow the waits it is added to)."""


def positive_seconds(name: str, value: object) -> float:
    """A duration: a finite number of seconds above 0 and at most ``MAX_SECONDS``; InvalidRequest naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise InvalidRequest(name, f"must be a positive number of seconds, got {value!r}")
    if value > MAX_SECONDS:
        raise InvalidRequest(name, f"must be at most {MAX_SECONDS:,.0f} s (a day), got {value!r}")
    return float(value)


MAX_REPLICAS = MAX_PARTITIONS
"""The most replicas a static group may count (and so the highest ordinal is ``MAX_REPLICAS - 1``): a pod beyond
the most partitions a group can hold could never own one, and a count raised by a mistyped ordinal (20 digits) would
stay raised for good."""


def _integer(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidRequest(name, f"must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidRequest(name, f"must be at most {maximum:,}, got {value:,}")
    return value


def validate_replicas(replicas: object) -> int:
    """A replica count: an integer in 1..``MAX_REPLICAS``."""
    return _integer("replicas", replicas, 1, MAX_REPLICAS)


def validate_ordinal(ordinal: object) -> int:
    """An ordinal: an integer in 0..``MAX_REPLICAS - 1``."""
    return _integer("ordinal", ordinal, 0, MAX_REPLICAS - 1)


@dataclass(frozen=True, slots=True)
class Rounds:
    """Seed 0's continuous assignment rounds: no settings of its own (the timings are the definition's)."""

    name: ClassVar[str] = "rounds"
    default_strategy: ClassVar[str] = "sticky"


@dataclass(frozen=True, slots=True)
class Coordinator:
    """Seed 1's elected coordinator: the table is created once ``min_members`` are live and no member has registered
    for ``first_table_settle_s`` (below); ``rebalance`` ``"automatic"`` re-plans on every membership change,
    ``"manual"`` on `apportion rebalance`; at most ``max_in_flight`` migrations at once."""

    name: ClassVar[str] = "coordinator"
    default_strategy: ClassVar[str] = "round_robin"  # seed 1's table
    DEFAULT_MIN_MEMBERS: ClassVar[int] = 1
    DEFAULT_REBALANCE: ClassVar[str] = "automatic"
    DEFAULT_MAX_IN_FLIGHT: ClassVar[int] = 4
    DEFAULT_FIRST_SETTLE_S: ClassVar[float] = 10.0

    min_members: int = DEFAULT_MIN_MEMBERS
    rebalance: str = DEFAULT_REBALANCE
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    first_settle_s: float | None = None

    def __post_init__(self) -> None:
        _integer("min_members", self.min_members, 1)
        if not isinstance(self.rebalance, str) or self.rebalance not in POLICIES:
            raise InvalidRequest("rebalance", f"{self.rebalance!r} is not one of {', '.join(POLICIES)}")
        _integer("max_in_flight", self.max_in_flight, 1)
        if self.first_settle_s is not None:
            object.__setattr__(self, "first_settle_s", positive_seconds("first_settle_s", self.first_settle_s))

    def first_table_settle_s(self, settle_s: float) -> float:
        """How long no member may have registered before the first table is laid out (the group's ``settle_s`` is
        RST): ``first_settle_s`` when given; else RST when ``min_members`` declares the fleet's size (above 1: the
        table waits for that many, then RST, as seed 1's minimum cluster size); else ``DEFAULT_FIRST_SETTLE_S``
        (10 s), so that a fleet whose members start up to a few seconds apart (a Deployment's pods) shares the first
        table instead of the first member getting every partition and giving most of them back
        (``_coordinator``'s "The first table")."""
        if self.first_settle_s is not None:
            return self.first_settle_s
        return settle_s if self.min_members > 1 else self.DEFAULT_FIRST_SETTLE_S


@dataclass(frozen=True, slots=True)
class Static:
    """Seed 3's StatefulSet ordinals: ``replicas`` is the count a group starts with when it has none yet (None: the
    first member's ordinal + 1)."""

    name: ClassVar[str] = "static"
    default_strategy: ClassVar[str] = "sticky"  # unused by the range formula; what the definition records

    replicas: int | None = None

    def __post_init__(self) -> None:
        if self.replicas is not None:
            validate_replicas(self.replicas)


Mode = Rounds | Coordinator | Static


def mode_named(name: str) -> Mode:
    """The mode called ``name`` with its default settings; InvalidRequest for a name that is not one of ``MODES``."""
    if name == "coordinator":
        return Coordinator()
    if name == "static":
        return Static()
    if name == "rounds":
        return Rounds()
    raise InvalidRequest("mode", f"{name!r} is not one of {', '.join(MODES)}")


def mode_to_json(mode: Mode) -> dict[str, Any]:
    if isinstance(mode, Coordinator):
        settings: dict[str, Any] = {
            "min_members": mode.min_members, "rebalance": mode.rebalance, "max_in_flight": mode.max_in_flight,
        }  # fmt: skip
        if mode.first_settle_s is not None:
            settings["first_settle_s"] = mode.first_settle_s
    elif isinstance(mode, Static):
        settings = {} if mode.replicas is None else {"replicas": mode.replicas}
    else:
        settings = {}
    return {"name": mode.name, **settings}


def mode_from_json(value: object, key: str | None = None) -> Mode:
    """The stored mode (``mode_to_json``'s output); CorruptRecord naming ``key`` otherwise. Unknown settings are
    ignored (a newer version's), missing ones take their defaults."""
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        raise CorruptRecord(key, f"the group's mode is {{name, ...settings}}, got {value!r}")
    try:
        base = mode_named(value["name"])
        if isinstance(base, Coordinator):
            return Coordinator(
                value.get("min_members", Coordinator.DEFAULT_MIN_MEMBERS),
                value.get("rebalance", Coordinator.DEFAULT_REBALANCE),
                value.get("max_in_flight", Coordinator.DEFAULT_MAX_IN_FLIGHT),
                value.get("first_settle_s"),
            )
        if isinstance(base, Static):
            return Static(value.get("replicas"))
        return base
    except (InvalidRequest, TypeError) as exc:
        raise CorruptRecord(key, f"mode: {exc}") from None


__all__ = [
    "MAX_REPLICAS",
    "MAX_SECONDS",
    "MODES",
    "NO_STATIC_SUBSCRIPTIONS",
    "POLICIES",
    "Coordinator",
    "Mode",
    "Rounds",
    "Static",
    "mode_from_json",
    "mode_named",
    "mode_to_json",
    "positive_seconds",
    "validate_ordinal",
    "validate_replicas",
]
