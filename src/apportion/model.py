"""Shared value types: partitions, resources, members, assignment requests and plans.

All values are immutable. Partitions are ``(resource, index)`` named tuples: cheap to create by the million, ordered
by resource then index, and printed as ``<resource>-<index>`` (parsed by splitting at the last hyphen).
Identities are strings compared as strings; nothing here relies on ``hash()`` of a str or on set order.

One partition identity, two spellings. A strategy plans :class:`Partition` values; a group names the same partition
by its :data:`PartitionId`: the index (an int) in a one-resource group, the text ``<resource>-<index>`` in a group
over named resources; its keys (``owner/7``, ``owner/orders-7``), its JSON records and the Spark columns carry that
text. The text is written by :func:`partition_name` and split by :func:`split_partition_name` only (a resource name
may hold hyphens, an index never does: split at the last one); :func:`partition_of` converts an id to
its ``Partition`` (``GroupConfig.pid`` back, as only the group knows which spelling it uses), :func:`resource_of`
and :func:`index_of` read one part of an id.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from types import MappingProxyType
from typing import NamedTuple, TypeAlias, overload

from apportion.errors import InvalidRequest

EMPTY_MAPPING: Mapping[str, object] = MappingProxyType({})

# The most partitions a request (summed over its resources) or a group may have: checked where input enters, before
# anything is allocated or stored. A plan of a million partitions takes about a second and a few hundred MB.
MAX_PARTITIONS = 1_000_000
_MAX_INDEX_DIGITS = len(str(MAX_PARTITIONS))

SEPARATOR = "-"
"""Between a partition's resource and its index in its text, ``<resource>-<index>``."""

PartitionId: TypeAlias = int | str
"""A partition's id in a group: its index in a one-resource group, ``<resource>-<index>`` in a group over named
resources (``GroupConfig.named``)."""


def partition_name(resource: str, index: int) -> str:
    """The text of partition ``index`` of ``resource``: ``<resource>-<index>`` (``orders-7``); the one place it is
    written."""
    return f"{resource}{SEPARATOR}{index}"


def split_partition_name(text: str) -> tuple[str, str] | None:
    """``(resource, index digits)`` of ``<resource>-<index>``, split at the last hyphen; None when ``text`` is not of
    that form (no hyphen, an empty resource, an index that is not ASCII digits). The one place the text is split; the
    digits are left for the caller to bound before ``int()`` (:meth:`Partition.parse` caps them)."""
    resource, sep, index = text.rpartition(SEPARATOR)
    if not sep or not resource or not (index.isascii() and index.isdigit()):
        return None
    return resource, index


def resource_of(pid: PartitionId) -> str | None:
    """The resource ``<resource>-<index>`` names; None for an int id (a one-resource group's) or other text."""
    if not isinstance(pid, str):
        return None
    found = split_partition_name(pid)
    return None if found is None else found[0]


def index_of(pid: PartitionId) -> int:
    """A partition's index within its resource: the int id itself, or the index of ``<resource>-<index>``
    (InvalidRequest for other text)."""
    return pid if isinstance(pid, int) else Partition.parse(pid).index


class Partition(NamedTuple):
    """One partition of a resource: ``t1-4`` is ``Partition("t1", 4)``."""

    resource: str
    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose: a partition's number

    def __str__(self) -> str:
        return partition_name(self.resource, self.index)

    @classmethod
    def parse(cls, text: str, field_name: str = "partition") -> Partition:
        """Parse ``<resource>-<index>``; raise :class:`InvalidRequest` naming ``field_name`` when malformed."""
        found = split_partition_name(text)
        if found is None:
            raise InvalidRequest(field_name, f"{text[:80]!r} is not <resource>-<index> (index in ASCII digits)")
        resource, index = found
        if len(index.lstrip("0")) > _MAX_INDEX_DIGITS:
            raise InvalidRequest(field_name, f"{text[:80]!r}: index above the maximum of {MAX_PARTITIONS:,} partitions")
        return cls(resource, int(index))


_new_tuple = tuple.__new__


class PartitionColumn(Sequence[Partition]):
    """Partitions of one resource held as a column of indices (a ``range`` or a sequence of ints), not one
    :class:`Partition` tuple each: what ``apportion assign``'s JSON parser puts in ``Member.owned`` and what the
    planner puts in ``Plan.assignment`` for a one-resource list. A plan of a million partitions is then a few
    thousand of these instead of a million tuples made, read back into ints and collected.

    The compatibility layer for the tuple form: a read-only sequence of :class:`Partition` equal to the tuple of its
    partitions (and to another column with the same ones), hashing and pickling as that tuple, ``+`` with a tuple
    giving a tuple; slicing gives a column. Its Partition tuples are made on first iteration and cached. The
    indices are not copied: whoever builds a column hands over a sequence nobody changes afterwards.
    """

    __slots__ = ("_items", "indices", "resource")

    def __init__(self, resource: str, indices: Sequence[int]) -> None:
        self.resource = resource
        self.indices = indices
        self._items: tuple[Partition, ...] | None = None

    def items(self) -> tuple[Partition, ...]:
        """The partitions as a tuple (made once)."""
        items = self._items
        if items is None:
            items = tuple(map(_new_tuple, repeat(Partition), zip(repeat(self.resource), self.indices)))
            self._items = items
        return items

    def __len__(self) -> int:
        return len(self.indices)

    @overload
    def __getitem__(self, index: int) -> Partition: ...

    @overload
    def __getitem__(self, index: slice) -> PartitionColumn: ...

    def __getitem__(self, index: int | slice) -> Partition | PartitionColumn:
        if isinstance(index, slice):
            return PartitionColumn(self.resource, self.indices[index])
        return Partition(self.resource, self.indices[index])

    def __iter__(self) -> Iterator[Partition]:
        return iter(self.items())

    def __contains__(self, value: object) -> bool:
        return value in self.items()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PartitionColumn):
            if len(self) != len(other):
                return False
            return not self.indices or (self.resource == other.resource and list(self.indices) == list(other.indices))
        if isinstance(other, tuple):
            return len(self) == len(other) and self.items() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.items())

    def __add__(self, other: object) -> tuple[Partition, ...]:
        if isinstance(other, PartitionColumn | tuple):
            return (*self, *other)
        return NotImplemented

    def __radd__(self, other: object) -> tuple[Partition, ...]:
        if isinstance(other, tuple):
            return (*other, *self)
        return NotImplemented

    def __repr__(self) -> str:
        return repr(self.items())

    def __reduce__(self) -> tuple[type[tuple[Partition, ...]], tuple[tuple[Partition, ...]]]:
        return (tuple, (self.items(),))


def partition_of(pid: PartitionId, resource: str) -> Partition:
    """The :class:`Partition` a group's id names: ``Partition(resource, pid)`` for an int (a one-resource group's,
    its resource named ``resource``), the parsed ``<resource>-<index>`` for text (InvalidRequest when malformed)."""
    return Partition.parse(pid) if isinstance(pid, str) else Partition(resource, pid)


@dataclass(frozen=True, slots=True)
class Resource:
    """A partitioned resource: ``partitions`` partitions numbered 0..n-1, optional per-partition weights."""

    name: str
    partitions: int
    weights: tuple[float, ...] | None = None
    stateful: bool = False

    def partition(self, index: int) -> Partition:
        return Partition(self.name, index)

    def all_partitions(self) -> list[Partition]:
        return [Partition(self.name, i) for i in range(self.partitions)]

    def weight(self, index: int) -> float:
        return 1.0 if self.weights is None else self.weights[index]


@dataclass(frozen=True, slots=True)
class Member:
    """A member as a strategy sees it.

    ``subscriptions`` None means every resource. ``owned`` are the partitions it held in ``generation``.
    ``lag`` (partition -> offsets behind its changelog end), ``standby`` and ``learners`` (warm-up replicas it holds)
    serve the high-availability strategy; ``ready`` are the replicas the previous plan called ready (its
    ``Plan.ready`` for this member): ``high_availability`` keeps them ready within a wider lag band (hysteresis).
    ``join_revision`` is the store revision at which the member joined (in
    rounds mode the creation revision of its participation record: seed 0's versionstamp); ``round_robin`` deals
    partitions in that order (ties by id) when every member has one, in id order when none has.
    """

    id: str
    subscriptions: frozenset[str] | None = None
    owned: Sequence[Partition] = ()  # a tuple, or a PartitionColumn (equal to the tuple)
    generation: int = 0
    capacity: float = 1.0
    rack: str | None = None
    standby: tuple[Partition, ...] = ()
    learners: tuple[Partition, ...] = ()
    lag: Mapping[Partition, int] = field(default_factory=lambda: MappingProxyType({}))
    join_revision: int | None = None
    ready: tuple[Partition, ...] = ()

    def subscribes_to(self, resource: str) -> bool:
        return self.subscriptions is None or resource in self.subscriptions


@dataclass(frozen=True, slots=True)
class AssignRequest:
    """The whole input of a strategy: pure values, no I/O."""

    strategy: str
    resources: tuple[Resource, ...]
    members: tuple[Member, ...]
    options: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))


class Move(NamedTuple):
    """A partition whose owner changes; ``source`` is None when nobody (live) owned it.

    A named tuple rather than a dataclass: plans of a million partitions build a million of them.
    """

    partition: Partition
    source: str | None
    target: str


@dataclass(frozen=True, slots=True)
class PlanStats:
    """Sizes and movement of a plan. Moves and their lower bound have one definition for every strategy, in
    :mod:`apportion.assign._core`: ``moved`` counts partitions that had a (live) owner and get another one (first
    placements are not moves); ``min_moves`` is the fewest moves any plan within the strategy's balance needs given
    the previous plan (a lower bound where the strategy's docstring says it is not exact); ``deferred`` counts the
    moves this plan leaves for later rounds (``high_availability``'s actives waiting for a ready replica on their
    target; 0 for every other strategy)."""

    partitions: int
    members: int
    min: int
    max: int
    moved: int
    min_moves: int
    deferred: int = 0


def round_lower_bound(min_moves: int, deferred: int) -> int:
    """The fewest moves a plan can make when reaching the balance takes ``min_moves`` and it leaves ``deferred`` for
    later rounds: what one round of the simulator counts as its lower bound (for every strategy but
    ``high_availability`` this is ``min_moves``)."""
    return max(0, min_moves - deferred)


@dataclass(frozen=True, slots=True)
class Plan:
    """A strategy's answer: the active owner of each partition, sorted; replicas for high availability."""

    strategy: str
    assignment: Mapping[str, Sequence[Partition]]  # each a tuple or a PartitionColumn (equal to the tuple)
    moves: Sequence[Move]  # by partition; a tuple, or (strategies on assign's to_plan) a lazy sequence equal to one
    stats: PlanStats
    standby: Mapping[str, tuple[Partition, ...]] = field(default_factory=lambda: MappingProxyType({}))
    learners: Mapping[str, tuple[Partition, ...]] = field(default_factory=lambda: MappingProxyType({}))
    # high availability: the standby/learner replicas already within the acceptable recovery lag (seed 2's isReady),
    # and the delay after which a probing round should run (None: no learner is warming up, nothing to probe).
    ready: Mapping[str, tuple[Partition, ...]] = field(default_factory=lambda: MappingProxyType({}))
    probe_after_s: float | None = None

    def owner_of(self) -> dict[Partition, str]:
        """Partition -> member id, for every assigned partition."""
        return {p: member for member, parts in self.assignment.items() for p in parts}


__all__ = [
    "MAX_PARTITIONS",
    "AssignRequest",
    "Member",
    "Move",
    "Partition",
    "PartitionColumn",
    "PartitionId",
    "Plan",
    "PlanStats",
    "Resource",
    "SEPARATOR",
    "index_of",
    "partition_name",
    "partition_of",
    "resource_of",
    "round_lower_bound",
    "split_partition_name",
]
