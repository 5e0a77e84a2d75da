"""The resource definition of a group (seed 0, extension 2): partitions, strategy and timings, stored at ``resource``.

One resource or several. ``GroupConfig(partitions=12)`` is a one-resource group, as every group was before groups
over several resources existed: its resource is named after the group, its partition ids are the ints 0..n-1 in the
key space (``owner/7``), the API and the CLI, and its stored definition is ``{"partitions": 12, ...}`` exactly as
before (no migration: an existing group's records are read as they always were). ``GroupConfig(resources=(Resource(
"orders", 4), Resource("payments", 2, weights=...)))`` is a group over named resources: its partition ids are the
strings ``<resource>-<index>`` (``owner/orders-3``), its stored definition lists ``resources`` (and no
``partitions``; ``GroupConfig.partitions`` is then the total). Which kind a group is follows from its stored
definition alone (``named``); the two kinds never share a key (``owner/3`` vs ``owner/orders-3``), and a definition
may not switch kinds (:meth:`GroupConfig.check_update`: the checkpoints under the old ids would be orphaned). A
change of any resource (added, removed, its partition count or weights) is a definition change: a new round.

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

The mode (``mode``: ``Rounds()``, ``Coordinator(...)`` or ``Static(...)``, ``_mode``) is part of the definition and
stored with it. A definition written before modes were stored has none: it reads as ``mode=None`` ("not recorded"),
not as rounds, because a static or coordinator group created by older code has no mode either and reading it as
rounds would refuse its own members after an upgrade. Nothing in the old records says which protocol ran (the keys
each mode leaves behind are no proof: a rounds group once scaled by mistake has a ``replicas`` key), so the first
member to register under this version records its own mode, once (compare-and-set, ``FencedMember._load_config``);
from then on the mode is the group's. Until then ``status`` says ``mode: null`` and ``apportion scale`` is allowed
(the old behaviour).

Requested and effective definitions. What a caller asks for (``Group(...).requested``, a worker's options) is the
*requested* definition; the one stored at ``resource`` is the *effective* one, which every member adopts and
follows (``FencedMember.config``; its lease ttl, timings, strategy and mode settings are the stored ones). When they
differ (:meth:`GroupConfig.check_join`, at a member's start and when ``Group`` is made):

- the mode (rounds, coordinator, static): refused (``InvalidRequest``), with or without ``update``: its members run
  another protocol, and a member of this one would wait for ever; a definition with no mode yet takes this one;
- the partitions or resources (given explicitly): refused unless ``update`` (then the requested definition is
  written and a new round starts); without it the worker would silently process another partitioning than asked;
- anything else (strategy, options, timings, stateful, the mode's own settings: ``max_in_flight``, a static
  group's starting ``replicas``): the stored one wins, unless ``update`` writes the requested one. A definition
  changed while a member runs (another member's ``update``) is adopted, never refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, ClassVar

from apportion._version import version
from apportion.assign import STRATEGY_NAMES as STRATEGIES
from apportion.assign import validate_options
from apportion.errors import CorruptRecord, InvalidRequest, NewerFormat
from apportion.group._keys import FORMATS, LAYOUT, LEGACY_LAYOUT, Keys, PartitionId, decode, encode, valid_name
from apportion.group._mode import (
    MAX_SECONDS,
    MODES,
    NO_STATIC_SUBSCRIPTIONS,
    Mode,
    Rounds,
    Static,
    mode_from_json,
    mode_named,
    mode_to_json,
    positive_seconds,
)
from apportion.model import MAX_PARTITIONS, Partition, Resource, partition_name, partition_of
from apportion.store import KeyValue, Store, default_ttl_s


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """A group's resource definition. Validated on construction (``InvalidRequest``)."""

    DEFAULT_STRATEGY: ClassVar[str] = "sticky"
    DEFAULT_SETTLE_S: ClassVar[float] = 0.5
    DEFAULT_MIN_INTERVAL_S: ClassVar[float] = 1.0
    DEFAULT_HEARTBEAT_S: ClassVar[float] = 30.0
    DEFAULT_TTL_S: ClassVar[float] = 3.0
    MODES: ClassVar[tuple[str, ...]] = MODES  # the protocols' names (``_mode``)

    partitions: int = 0  # a one-resource group's count; with ``resources``: their total (0 or that total given)
    strategy: str = DEFAULT_STRATEGY
    settle_s: float = DEFAULT_SETTLE_S
    min_interval_s: float = DEFAULT_MIN_INTERVAL_S
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    ttl_s: float = DEFAULT_TTL_S
    options: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    stateful: bool = False
    resources: tuple[Resource, ...] = ()  # named resources (sorted by name); empty: one resource named after the group
    mode: Mode | None = field(default_factory=Rounds)  # None: stored before modes were (the module docstring)
    layout: int = LAYOUT  # where the ownership records live (``_keys``): a group keeps the one it was created with

    def __post_init__(self) -> None:
        if self.resources:
            resources = _resources(self.resources)
            total = sum(r.partitions for r in resources)
            if self.partitions not in (0, total):
                raise InvalidRequest("partitions", f"is the total of the resources' ({total}), got {self.partitions!r}")
            object.__setattr__(self, "resources", resources)
            object.__setattr__(self, "partitions", total)
        if isinstance(self.partitions, bool) or not isinstance(self.partitions, int) or self.partitions < 1:
            raise InvalidRequest("partitions", f"must be an integer >= 1, got {self.partitions!r}")
        if self.partitions > MAX_PARTITIONS:
            raise InvalidRequest(
                "partitions", f"at most {MAX_PARTITIONS:,} partitions in a group, got {self.partitions:,}"
            )
        validate_options(self.strategy, self.options)  # the strategy's name, then its own options
        for name in ("settle_s", "min_interval_s", "heartbeat_s", "ttl_s"):
            object.__setattr__(self, name, positive_seconds(name, getattr(self, name)))
        if self.min_interval_s < self.settle_s:
            raise InvalidRequest("min_interval_s", f"must be >= settle_s ({self.settle_s}), got {self.min_interval_s}")
        if self.heartbeat_s < self.min_interval_s:
            raise InvalidRequest("heartbeat_s", f"must be >= min_interval_s ({self.min_interval_s})")
        if not isinstance(self.stateful, bool):
            raise InvalidRequest("stateful", f"must be true or false, got {self.stateful!r}")
        if self.layout not in (LEGACY_LAYOUT, LAYOUT) or isinstance(self.layout, bool):
            raise InvalidRequest("layout", f"must be {LEGACY_LAYOUT} or {LAYOUT}, got {self.layout!r}")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        if self.mode is not None and not isinstance(self.mode, Mode):
            raise InvalidRequest("mode", f"must be Rounds(), Coordinator(...) or Static(...), got {self.mode!r}")

    @classmethod
    def request(
        cls,
        store: Store | str,
        mode: Mode,
        *,
        partitions: int | None = None,
        resources: object = None,
        strategy: str | None = None,
        settle_s: float = DEFAULT_SETTLE_S,
        min_interval_s: float = DEFAULT_MIN_INTERVAL_S,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        ttl_s: float | None = None,
        options: Mapping[str, object] | None = None,
        stateful: bool = False,
    ) -> GroupConfig:
        """The definition a caller asks for on ``store`` (a store or its URL, not opened): ``strategy`` None is the
        mode's default (``default_strategy``), ``ttl_s`` None the store's (``Store.default_ttl_s``: 5 s on etcd),
        else ``DEFAULT_TTL_S``; ``resources`` as :func:`parse_resources` takes them. Validated (InvalidRequest)."""
        if ttl_s is None:
            ttl_s = (default_ttl_s(store) if isinstance(store, str) else store.default_ttl_s) or cls.DEFAULT_TTL_S
        return cls(
            partitions=partitions or 0,
            resources=() if resources is None else parse_resources(resources),
            strategy=cls.default_strategy(mode) if strategy is None else strategy,
            settle_s=settle_s,
            min_interval_s=min_interval_s,
            heartbeat_s=heartbeat_s,
            ttl_s=ttl_s,
            options=options or {},
            stateful=stateful,
            mode=mode,
        )

    @classmethod
    def default_strategy(cls, mode: Mode | str) -> str:
        """The strategy of a group of ``mode`` that names none: ``round_robin`` in coordinator mode (seed 1's table),
        else ``DEFAULT_STRATEGY``; InvalidRequest for a mode name that is not one of ``MODES``."""
        return (mode_named(mode) if isinstance(mode, str) else mode).default_strategy

    @property
    def mode_name(self) -> str | None:
        """``rounds``, ``coordinator`` or ``static``; None for a definition stored before modes were."""
        return None if self.mode is None else self.mode.name

    @property
    def named(self) -> bool:
        """True for a group over named resources (partition ids ``<resource>-<index>``), False for a one-resource
        group of ``partitions`` (ids 0..n-1)."""
        return bool(self.resources)

    def resources_of(self, group: str) -> tuple[Resource, ...]:
        """The resources a strategy plans, sorted by name: the named ones, or one named after ``group``."""
        if self.resources:
            if not self.stateful:
                return self.resources
            return tuple(Resource(r.name, r.partitions, r.weights, stateful=True) for r in self.resources)
        return (Resource(group, self.partitions, stateful=self.stateful),)

    def resource_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.resources)

    def partition_ids(self) -> list[PartitionId]:
        """Every partition id of the group, in (resource, index) order."""
        if not self.resources:
            return list(range(self.partitions))
        return [partition_name(r.name, i) for r in self.resources for i in range(r.partitions)]

    def pid(self, part: Partition) -> PartitionId:
        """The id of ``part`` in this group: its index in a one-resource group, ``<resource>-<index>`` otherwise."""
        return partition_name(part.resource, part.index) if self.resources else part.index

    def partition(self, group: str, pid: PartitionId) -> Partition:
        """The :class:`Partition` of id ``pid`` (InvalidRequest when it is not an id of this group's kind)."""
        return partition_of(pid, group)

    def parse_pid(self, value: object, field_name: str = "partition", *, known: bool = True) -> PartitionId:
        """A partition id as a record, a plan or the command line gives it: an int (or digits) in a one-resource
        group, ``<resource>-<index>`` of one of its resources otherwise (of any resource unless ``known``: a plan
        written before the definition changed); InvalidRequest naming ``field_name``."""
        if not self.resources:
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
            if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 7:
                return int(value)
            raise InvalidRequest(field_name, f"{value!r} is not a partition number of a one-resource group")
        if not isinstance(value, str):
            raise InvalidRequest(field_name, f"{value!r} is not <resource>-<index>")
        part = Partition.parse(value, field_name)
        if known and not any(r.name == part.resource for r in self.resources):
            raise InvalidRequest(field_name, f"{value!r}: the group has no resource {part.resource!r}")
        return str(part)

    def check_pid(self, value: object, field_name: str = "partition") -> PartitionId:
        """``parse_pid`` of one of this group's partitions (its index in range); InvalidRequest naming the group's
        partitions otherwise."""
        pid = self.parse_pid(value, field_name)
        if isinstance(pid, int):
            if pid >= self.partitions:
                raise InvalidRequest(field_name, f"{pid} is not a partition of the group (0..{self.partitions - 1})")
            return pid
        part = Partition.parse(pid)
        count = next(r.partitions for r in self.resources if r.name == part.resource)
        if part.index >= count:
            raise InvalidRequest(field_name, f"{pid} is not a partition of {part.resource} (0..{count - 1})")
        return pid

    def subscriptions(self, names: object) -> frozenset[str] | None:
        """A member's subscriptions (None: every resource), checked against the group's resources."""
        if names is None:
            return None
        if isinstance(self.mode, Static):
            raise InvalidRequest("subscriptions", NO_STATIC_SUBSCRIPTIONS)
        if isinstance(names, str) or not isinstance(names, list | tuple | set | frozenset):
            raise InvalidRequest("subscriptions", f"must be a list of resource names, got {names!r}")
        if not self.resources:
            raise InvalidRequest("subscriptions", "a one-resource group has nothing to subscribe to: name resources")
        known = self.resource_names()
        for name in names:
            if name not in known:
                raise InvalidRequest("subscriptions", f"{name!r} is not a resource of the group ({', '.join(known)})")
        if not names:
            raise InvalidRequest("subscriptions", "must name at least one resource")
        return frozenset(names)

    def require_mode(self, group: str, name: str, field_name: str, why: str) -> None:
        """InvalidRequest naming ``field_name`` when this (stored) definition's mode is not ``name``: an operator's
        command of one mode on a group of another (``apportion scale``, ``apportion rebalance``). A definition that
        records no mode (an older version's) passes: it may be of that mode."""
        if self.mode is not None and self.mode.name != name:
            raise InvalidRequest(field_name, f"group {group!r} is a {self.mode.name} group: {why}")

    def check_update(self, stored: GroupConfig) -> None:
        """InvalidRequest when this definition may not replace ``stored``: a one-resource group cannot become a
        group over named resources or back (its checkpoints and epochs are keyed by the other kind of id). (Nor
        may the mode change: :meth:`check_join`.)"""
        if self.named != stored.named:
            kinds = ("a one-resource group", "a group over named resources")
            why = "its checkpoints and epochs are keyed by the other kind of id"
            raise InvalidRequest("resources", f"{kinds[stored.named]} cannot become {kinds[self.named]} ({why})")

    def check_join(self, stored: GroupConfig, group: str, *, update: bool = False, partitions: bool = True) -> None:
        """InvalidRequest when a member asking for this (requested) definition may not join ``group`` whose stored
        (effective) definition is ``stored``: another mode, or (``partitions``: this definition's partitions were
        given, not read from the store) other partitions or resources without ``update``. What else may differ, and
        what happens then, is the module docstring's "Requested and effective definitions"."""
        if stored.mode is not None and self.mode is not None and stored.mode.name != self.mode.name:
            raise InvalidRequest(
                "mode", f"group {group!r} is a {stored.mode.name} group; this worker asked for --mode {self.mode.name}"
            )
        if update:
            self.check_update(stored)
            return
        if partitions and (self.partitions, self.resources) != (stored.partitions, stored.resources):
            raise InvalidRequest(
                "partitions",
                f"group {group!r} has {_partitioning(stored)}; this worker asked for {_partitioning(self)} "
                "(a worker with --update rewrites the definition)",
            )

    def to_json(self) -> dict[str, Any]:
        if self.resources:
            head: dict[str, Any] = {"resources": [_resource_json(r) for r in self.resources]}
        else:
            head = {"partitions": self.partitions}
        return {
            **head,
            "strategy": self.strategy,
            "settle_s": self.settle_s,
            "min_interval_s": self.min_interval_s,
            "heartbeat_s": self.heartbeat_s,
            "ttl_s": self.ttl_s,
            "options": dict(self.options),
            "stateful": self.stateful,
            **({} if self.mode is None else {"mode": mode_to_json(self.mode)}),
        }

    @classmethod
    def from_json(cls, value: object, key: str | None = None) -> GroupConfig:
        """A stored definition (``to_json``'s output); :class:`CorruptRecord` naming ``key`` when it is not a valid
        one (missing or mistyped fields, values out of range). Unknown fields are ignored (a newer version's)."""
        if not isinstance(value, Mapping):
            raise CorruptRecord(key, f"a resource definition is a JSON object, got {type(value).__name__}")
        if "partitions" not in value and "resources" not in value:
            raise CorruptRecord(key, "the resource definition has no 'partitions'")
        try:
            return cls(
                partitions=value.get("partitions", 0),
                resources=parse_resources(value.get("resources") or ()),
                strategy=value.get("strategy", cls.DEFAULT_STRATEGY),
                settle_s=value.get("settle_s", cls.DEFAULT_SETTLE_S),
                min_interval_s=value.get("min_interval_s", cls.DEFAULT_MIN_INTERVAL_S),
                heartbeat_s=value.get("heartbeat_s", cls.DEFAULT_HEARTBEAT_S),
                ttl_s=value.get("ttl_s", cls.DEFAULT_TTL_S),
                options=value.get("options") or {},
                stateful=value.get("stateful", False),
                mode=None if "mode" not in value else mode_from_json(value["mode"], key),
            )
        except (InvalidRequest, TypeError) as exc:  # TypeError: an unhashable strategy name, say
            raise CorruptRecord(key, str(exc)) from None

    def keys(self, group: str) -> Keys:
        """The key names of ``group`` under this definition's layout."""
        return Keys(group, self.layout)

    def record(self) -> bytes:
        """The stored form of this definition (the ``resource`` key's value). Layout 1: ``to_json()`` itself, as
        every earlier version wrote it. Layout 2 nests it, ``{"layout": 2, "definition": {...}}``, on purpose:
        an earlier version finds no ``partitions`` there and refuses the group (CorruptRecord), rather than
        claiming its partitions in the layout-1 records this version does not read (``_keys``)."""
        if self.layout == LEGACY_LAYOUT:
            return encode(self.to_json())
        return encode({"layout": self.layout, "definition": self.to_json()})

    @classmethod
    def from_record(cls, kv: KeyValue) -> GroupConfig:
        """The definition stored in ``kv`` (the group's ``resource`` key, :meth:`record`'s form), validated;
        CorruptRecord naming it; NewerFormat when a newer release wrote it in a format this one does not read
        (``_keys``, "Versions"): checked before anything else in the record, which that format may mean otherwise."""
        value = decode(kv.value, kv.key)
        if "layout" not in value:  # written by a version before layouts: layout 1
            return replace(cls.from_json(value, kv.key), layout=LEGACY_LAYOUT)
        layout = value["layout"]
        if isinstance(layout, bool) or not isinstance(layout, int) or layout < LAYOUT:
            raise CorruptRecord(kv.key, f"'layout' must be an integer >= {LAYOUT}, got {layout!r}")
        if layout > LAYOUT:  # a newer release's format: stop, whatever else the record says (``_keys``, "Versions")
            raise NewerFormat(kv.key, layout, FORMATS, version())
        return replace(cls.from_json(value.get("definition"), kv.key), layout=layout)

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


def _partitioning(config: GroupConfig) -> str:
    """``4 partitions`` or ``resources orders:4,payments:2``: a definition's partitioning, as an error names it."""
    if config.resources:
        return "resources " + ",".join(f"{r.name}:{r.partitions}" for r in config.resources)
    return f"{config.partitions} partitions"


def _resource_json(resource: Resource) -> dict[str, Any]:
    out: dict[str, Any] = {"name": resource.name, "partitions": resource.partitions}
    return out if resource.weights is None else {**out, "weights": list(resource.weights)}


def parse_resources(value: object) -> tuple[Resource, ...]:
    """Resources as a definition stores them (``[{name, partitions, weights?}]``) or as the command line gives them
    (``{"orders": 4}`` or ``"orders:4,payments:2"``); InvalidRequest naming ``resources``."""
    if isinstance(value, str):
        specs = []
        for spec in value.split(","):
            name, sep, count = spec.strip().rpartition(":")
            if not sep or not (count.isascii() and count.isdigit()) or len(count) > 7:
                raise InvalidRequest("resources", f"{spec.strip()!r} is not <name>:<partitions>")
            specs.append(Resource(name, int(count)))
        return tuple(specs)
    if isinstance(value, Mapping):
        return tuple(Resource(n, c) for n, c in value.items())
    if not isinstance(value, list | tuple):
        raise InvalidRequest("resources", f"must be a list of resources, got {type(value).__name__}")
    out = []
    for item in value:
        if isinstance(item, Resource):
            out.append(item)
        elif isinstance(item, Mapping) and "name" in item and "partitions" in item:
            weights = item.get("weights")
            if weights is not None and not isinstance(weights, list | tuple):
                raise InvalidRequest("resources", f"{item['name']!r}: weights must be a list of numbers")
            out.append(Resource(item["name"], item["partitions"], None if weights is None else tuple(weights)))
        else:
            raise InvalidRequest("resources", f"each resource is {{name, partitions, weights?}}, got {item!r}")
    return tuple(out)


def _resources(resources: object) -> tuple[Resource, ...]:
    """Named resources checked (names, counts, weights) and sorted by name."""
    checked = []
    for r in parse_resources(resources):
        if not isinstance(r.name, str) or not valid_name(r.name):
            raise InvalidRequest("resources", f"{r.name!r} must be 1-128 characters [A-Za-z0-9._-] starting with one")
        if isinstance(r.partitions, bool) or not isinstance(r.partitions, int) or r.partitions < 1:
            raise InvalidRequest("resources", f"{r.name}: partitions must be an integer >= 1, got {r.partitions!r}")
        if r.partitions > MAX_PARTITIONS:
            raise InvalidRequest("resources", f"{r.name}: at most {MAX_PARTITIONS:,} partitions")
        weights = r.weights
        if weights is not None:
            if len(weights) != r.partitions:
                raise InvalidRequest("resources", f"{r.name}: {len(weights)} weights for {r.partitions} partitions")
            for w in weights:
                if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w <= 0:
                    raise InvalidRequest("resources", f"{r.name}: a weight must be a positive number, got {w!r}")
            weights = tuple(float(w) for w in weights)
        checked.append(Resource(r.name, r.partitions, weights))
    names = [r.name for r in checked]
    if len(set(names)) != len(names):
        raise InvalidRequest("resources", "names a resource twice")
    if sum(r.partitions for r in checked) > MAX_PARTITIONS:
        raise InvalidRequest("resources", f"at most {MAX_PARTITIONS:,} partitions in a group")
    return tuple(sorted(checked, key=lambda r: r.name))


__all__ = ["MAX_SECONDS", "STRATEGIES", "GroupConfig", "parse_resources"]
