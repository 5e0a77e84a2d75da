"""The resource definition of a group (seed 0, extension 2): partitions, strategy and timings, stored at ``resource``.

Timings are durations in seconds, each at most ``MAX_SECONDS`` (one day: a longer one would overflow the waits
that use it). Their defaults are written here only (``GroupConfig.DEFAULT_*``: ``Group``, ``SimConfig`` and the CLI
take them from it) and make a 3-worker group settle in about 2 s:
``settle_s`` (RST) 0.5, ``min_interval_s`` (MRI) 1.0, ``heartbeat_s`` (HBI) 30, ``ttl_s`` (member lease) 3
(a store may ask for a longer lease: ``Store.default_ttl_s``, 5 s on etcd).
``stateful`` is seed 2's isStateful tag for every partition of the group: the ``high_availability`` strategy then
moves an active only to a member whose replica of its state is within the acceptable recovery lag.

Every field is checked on construction (types, ranges, the strategy's name and its own options by
``apportion.assign.validate_options``, the timings' order), so a definition that exists is a valid one: every path
that writes ``resource`` (a worker creating the group or ``--update``, ``Group(...)``) builds a ``GroupConfig``
first and writes nothing when that fails; a group's plans therefore never fail on its options. Reading it back
(:meth:`GroupConfig.from_record`; by group name :meth:`GroupConfig.load` and :meth:`GroupConfig.find`) runs the same
checks and names the key (``CorruptRecord``) when the stored value is not a valid definition.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from apportion.assign import STRATEGY_NAMES as STRATEGIES
from apportion.assign import validate_options
from apportion.errors import CorruptRecord, InvalidRequest
from apportion.group._keys import Keys, decode
from apportion.model import MAX_PARTITIONS
from apportion.store import KeyValue, Store

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

    DEFAULT_STRATEGY: ClassVar[str] = "sticky"
    DEFAULT_SETTLE_S: ClassVar[float] = 0.5
    DEFAULT_MIN_INTERVAL_S: ClassVar[float] = 1.0
    DEFAULT_HEARTBEAT_S: ClassVar[float] = 30.0
    DEFAULT_TTL_S: ClassVar[float] = 3.0
    MODES: ClassVar[tuple[str, ...]] = ("rounds", "coordinator", "static")  # the protocols (``apportion.Group``)

    partitions: int
    strategy: str = DEFAULT_STRATEGY
    settle_s: float = DEFAULT_SETTLE_S
    min_interval_s: float = DEFAULT_MIN_INTERVAL_S
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    ttl_s: float = DEFAULT_TTL_S
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

    @classmethod
    def default_strategy(cls, mode: str) -> str:
        """The strategy of a group of ``mode`` that names none: ``round_robin`` in coordinator mode (seed 1's table),
        else ``DEFAULT_STRATEGY``; InvalidRequest for a mode that is not one of ``MODES``."""
        if mode not in cls.MODES:
            raise InvalidRequest("mode", f"{mode!r} is not one of {', '.join(cls.MODES)}")
        return "round_robin" if mode == "coordinator" else cls.DEFAULT_STRATEGY

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
                strategy=value.get("strategy", cls.DEFAULT_STRATEGY),
                settle_s=value.get("settle_s", cls.DEFAULT_SETTLE_S),
                min_interval_s=value.get("min_interval_s", cls.DEFAULT_MIN_INTERVAL_S),
                heartbeat_s=value.get("heartbeat_s", cls.DEFAULT_HEARTBEAT_S),
                ttl_s=value.get("ttl_s", cls.DEFAULT_TTL_S),
                options=value.get("options") or {},
                stateful=value.get("stateful", False),
            )
        except (InvalidRequest, TypeError) as exc:  # TypeError: an unhashable strategy name, say
            raise CorruptRecord(key, str(exc)) from None

    @classmethod
    def from_record(cls, kv: KeyValue) -> GroupConfig:
        """The definition stored in ``kv`` (the group's ``resource`` key), validated; CorruptRecord naming it."""
        return cls.from_json(decode(kv.value, kv.key), kv.key)

    @classmethod
    def find(cls, store: Store, group: str) -> GroupConfig | None:
        """The definition of ``group`` stored on ``store``, or None when it has none yet; CorruptRecord naming the
        key when the stored value is not a valid one."""
        kv = store.get(Keys(group).resource)
        return None if kv is None else cls.from_record(kv)

    @classmethod
    def load(cls, store: Store, group: str) -> GroupConfig:
        """The definition of ``group`` stored on ``store``: ``InvalidRequest`` when it has none (an unknown group),
        CorruptRecord naming the key when the stored value is not a valid one."""
        config = cls.find(store, group)
        if config is None:
            raise InvalidRequest("group", f"group {group!r} has no resource definition")
        return config


__all__ = ["MAX_SECONDS", "STRATEGIES", "GroupConfig"]
