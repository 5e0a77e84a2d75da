"""The resource definition of a group (seed 0, extension 2): partitions, strategy and timings, stored at ``resource``.

Timings are durations in seconds, each at most ``MAX_SECONDS`` (one day: a longer one would overflow the waits
that use it). Defaults make a 3-worker group settle in about 2 s:
``settle_s`` (RST) 0.5, ``min_interval_s`` (MRI) 1.0, ``heartbeat_s`` (HBI) 30, ``ttl_s`` (member lease) 3.
``stateful`` is seed 2's isStateful tag for every partition of the group: the ``high_availability`` strategy then
moves an active only to a member whose replica of its state is within the acceptable recovery lag.

Every field is checked on construction (types, ranges, the strategy's name and its own options by
``apportion.assign.validate_options``, the timings' order), so a definition that exists is a valid one: every path
that writes ``resource`` (a worker creating the group or ``--update``, ``Group(...)``) builds a ``GroupConfig``
first and writes nothing when that fails; a group's plans therefore never fail on its options. Reading it back
(:meth:`GroupConfig.from_record`) runs the same checks and names the key (``CorruptRecord``) when the stored value
is not a valid definition.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from apportion.assign import STRATEGY_NAMES as STRATEGIES
from apportion.assign import validate_options
from apportion.errors import CorruptRecord, InvalidRequest
from apportion.group._keys import decode
from apportion.model import MAX_PARTITIONS
from apportion.store import KeyValue

MAX_SECONDS = 86_400.0


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise InvalidRequest(name, f"must be a positive number of seconds, got {value!r}")
    if value > MAX_SECONDS:
        raise InvalidRequest(name, f"must be at most {MAX_SECONDS:,.0f} s (a day), got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """A group's resource definition. Validated on construction (``InvalidRequest``)."""

    partitions: int
    strategy: str = "sticky"
    settle_s: float = 0.5
    min_interval_s: float = 1.0
    heartbeat_s: float = 30.0
    ttl_s: float = 3.0
    options: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    stateful: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.partitions, bool) or not isinstance(self.partitions, int) or self.partitions < 1:
            raise InvalidRequest("partitions", f"must be an integer >= 1, got {self.partitions!r}")
        if self.partitions > MAX_PARTITIONS:
            raise InvalidRequest(
                "partitions", f"at most {MAX_PARTITIONS:,} partitions in a group, got {self.partitions:,}"
            )
        validate_options(self.strategy, self.options)  # the strategy's name, then its own options
        for name in ("settle_s", "min_interval_s", "heartbeat_s", "ttl_s"):
            object.__setattr__(self, name, _positive(name, getattr(self, name)))
        if self.min_interval_s < self.settle_s:
            raise InvalidRequest("min_interval_s", f"must be >= settle_s ({self.settle_s}), got {self.min_interval_s}")
        if self.heartbeat_s < self.min_interval_s:
            raise InvalidRequest("heartbeat_s", f"must be >= min_interval_s ({self.min_interval_s})")
        if not isinstance(self.stateful, bool):
            raise InvalidRequest("stateful", f"must be true or false, got {self.stateful!r}")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    def to_json(self) -> dict[str, Any]:
        return {
            "partitions": self.partitions,
            "strategy": self.strategy,
            "settle_s": self.settle_s,
            "min_interval_s": self.min_interval_s,
            "heartbeat_s": self.heartbeat_s,
            "ttl_s": self.ttl_s,
            "options": dict(self.options),
            "stateful": self.stateful,
        }

    @classmethod
    def from_json(cls, value: object, key: str | None = None) -> GroupConfig:
        """A stored definition (``to_json``'s output); :class:`CorruptRecord` naming ``key`` when it is not a valid
        one (missing or mistyped fields, values out of range). Unknown fields are ignored (a newer version's)."""
        if not isinstance(value, Mapping):
            raise CorruptRecord(key, f"a resource definition is a JSON object, got {type(value).__name__}")
        if "partitions" not in value:
            raise CorruptRecord(key, "the resource definition has no 'partitions'")
        try:
            return cls(
                partitions=value["partitions"],
                strategy=value.get("strategy", "sticky"),
                settle_s=value.get("settle_s", 0.5),
                min_interval_s=value.get("min_interval_s", 1.0),
                heartbeat_s=value.get("heartbeat_s", 30.0),
                ttl_s=value.get("ttl_s", 3.0),
                options=value.get("options") or {},
                stateful=value.get("stateful", False),
            )
        except (InvalidRequest, TypeError) as exc:  # TypeError: an unhashable strategy name, say
            raise CorruptRecord(key, str(exc)) from None

    @classmethod
    def from_record(cls, kv: KeyValue) -> GroupConfig:
        """The definition stored in ``kv`` (the group's ``resource`` key), validated; CorruptRecord naming it."""
        return cls.from_json(decode(kv.value, kv.key), kv.key)


__all__ = ["MAX_SECONDS", "STRATEGIES", "GroupConfig"]
