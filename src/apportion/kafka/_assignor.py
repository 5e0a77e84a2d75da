"""Seed 4 inside Kafka's own consumer groups: apportion's ``sticky`` strategy as a partition assignor of kafka-python
(>= 3.0) and aiokafka consumers (``partition_assignment_strategy=[...]``), as KAFKA-12464's assignor is in the Java
client.

**One pure core, two thin adapters.** The group leader's ``assign`` turns Kafka's member metadata into an
:class:`~apportion.model.AssignRequest` (topics as resources with their partition counts from the leader's metadata,
each member with its subscribed topics and the partitions and generation its user data claims), asks
:func:`apportion.assign.plan` for ``sticky`` and turns the :class:`~apportion.model.Plan` back into Kafka's
assignment (:func:`assign_group`). With equal subscriptions that is the constrained two-phase algorithm of
KAFKA-12464; with mixed subscriptions ``sticky``'s general path; both balanced, the first with the fewest moves
possible. :class:`KafkaPythonStickyAssignor` and :class:`AiokafkaStickyAssignor` only move values between the
client's protocol structs and that core; every member of a group must use the same assignor name
(:data:`ASSIGNOR_NAME`), and kafka-python and aiokafka members may share a group (the user data is the same bytes).

**What a member claims travels in its user data** (the ``user_data`` of its JoinGroup subscription, as Java's
StickyAssignor carries its previous assignment and generation): the partitions of its last assignment and that
assignment's generation (:class:`Claim`). Format, version 1 (:func:`encode_claim`; Kafka's own wire conventions:
big-endian, an int16 length before a string, an int32 count before an array)::

    int16 version (1) | int32 topic count | per topic, by name: int16 name length, UTF-8 name,
    int32 partition count, int32 partition ... (ascending) | int32 generation

which is the body of Java's ``StickyAssignorUserData`` v1 (previous assignment, then generation) after an int16
version, as every struct of Kafka's consumer protocol begins. Why a version first and binary: the leader of a
rolling upgrade may run either release, and the version tells it which layout it reads; later versions may only
append fields (Kafka's rule for its consumer protocol), so a reader takes a newer version's payload as version 1
followed by bytes it does not know. Version 1 itself must end exactly where its generation does. Decoding is
defensive (:func:`decode_claim`): empty user data is a member that owns nothing yet (it just started); a payload
that is truncated, overlong, of a version below 1, with a negative count or partition, a topic twice or a name that
is not UTF-8 is logged (a warning naming the member) and read as owning nothing — never an exception in the leader,
whose failure would stall the whole group's rebalance.

**Generations, and stale claims.** Kafka bumps a group's generation at every rebalance; a member that missed one
claims the assignment of an older generation, which the group may meanwhile have given to others. It missed it
because it was kicked out (no heartbeat within ``session_timeout_ms``, no poll within ``max_poll_interval_ms``) —
or, far more often on a busy machine, because its SyncGroup came after the next rebalance had begun (the broker
answers REBALANCE_IN_PROGRESS, the member rejoins without ever seeing the assignment its leader made for it).
Two rules (``stale_claims``; :func:`current_claims`):

- ``drop`` (the default; seed 4's "remove all owned_partitions if the generation is old", Java's constrained path,
  and apportion's own rule for every strategy, ``_core``'s "previous ownership" rule 1): among members that claim
  anything, those whose generation is below the highest lose all their claims;
- ``yield`` (KIP-54's "higher generations overwrite lower generations in case of a conflict", kafka-python's
  StickyPartitionAssignor): an older claim loses only the partitions a newer claim names; what nobody newer claims
  stays with its older claimant (in the REBALANCE_IN_PROGRESS case above: the partitions the missed assignment
  gave it anyway).

Measured on a real broker under load (bench/README.md, "Kafka's consumer groups"): ``drop`` moved partitions in
rebalances where ``yield`` and kafka-python's sticky assignor moved none. ``yield`` is as safe under the eager
protocol both adapters speak: every member gives up all its partitions before it rejoins, so a claim — stale or not
— only decides what stays where, never lets a partition be owned twice. A partition that two members of one
generation both claim stays with the member whose id sorts first (the seed says nothing about it; apportion's rule 3
— the Java client drops it from both, KAFKA-12984); claims on topics a member no longer subscribes to, on deleted
topics or on partitions beyond a topic's count do not count.

Where the generation comes from: kafka-python tells the assignor the group's generation with each assignment
(``on_assignment(assignment, generation)``), so a kafka-python member claims that; aiokafka never tells an assignor
the generation, so the leader writes one into every member's assignment user data (``int16 version (1) | int32
generation``; :func:`encode_stamp`): one more than the highest generation its members claimed — the group's own
whenever the previous rebalance completed one generation earlier, and never above it. Two limits of the stamp,
neither of which can give a partition to two members: in a group mixing both clients an aiokafka member may claim a
lower generation than its kafka-python peers and lose its claims (more moves); and the stamp only knows the
generations of the members present, so when every member of the latest round has gone, it may repeat a number a
gone member holds — should that member come back (one kicked out, not one that closed) its claim ties with the
current owners' and the double-claim rule decides.

**A member's assignor state** (one instance per consumer — it holds that consumer's claim)::

    NEW       (no claim: empty user data)   --on_assignment(partitions, generation)--> ASSIGNED(partitions, gen)
    ASSIGNED  (its claim in the user data)  --on_assignment(...)-->                    ASSIGNED(new partitions, gen')

Triggered by the client after each SyncGroup (``on_assignment``); read by the client before each JoinGroup
(``metadata``). A member that lost its partitions (kicked out) stays ASSIGNED with its old generation on purpose:
the leader, seeing a newer generation, does not count the claim (with ``yield``: what others claim anew).
``claim`` is ``None`` in NEW, the :class:`Claim` in ASSIGNED (two states, so an Optional rather than an enum).

**Several consumers in one process.** kafka-python 3 instantiates a class given in ``partition_assignment_strategy``
per consumer, or uses an instance as given; aiokafka uses what it is given as is, calling its methods on the class
itself when given a class — so the state would be one for every consumer of the process, which is how both
clients' own StickyPartitionAssignor keeps its ``member_assignment`` (class attributes in aiokafka). Here the state
is per instance and the methods are instance methods: give each consumer its own instance (a class given to
aiokafka fails at its first join — the consumer's next ``getmany`` raises aiokafka's KafkaError with a TypeError
saying so — instead of silently sharing one claim between consumers).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from apportion.assign import plan
from apportion.errors import InvalidRequest
from apportion.model import AssignRequest, Member, Partition, Plan, Resource

log = logging.getLogger(__name__)

ASSIGNOR_NAME = "apportion-sticky"  # the protocol name every member of a group announces; the broker picks it
CLAIM_VERSION = 1  # the subscription user data: a member's claim
STAMP_VERSION = 1  # the assignment user data: the generation the leader gave
NO_GENERATION = -1  # Kafka's "no generation yet" (a member that never had an assignment)

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT16_MAX = 2**15 - 1
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

KafkaAssignment = tuple[tuple[str, tuple[int, ...]], ...]  # Kafka's [(topic, [partition, ...]), ...], by topic
StaleClaims = Literal["drop", "yield"]  # how a claim of an older generation is read (current_claims)
STALE_CLAIMS: tuple[StaleClaims, ...] = ("drop", "yield")


@dataclass(frozen=True, slots=True)
class Claim:
    """What a member says it owned: the partitions of its last assignment and that assignment's generation."""

    generation: int
    partitions: tuple[Partition, ...]


@dataclass(frozen=True, slots=True)
class Subscription:
    """One member's JoinGroup metadata as the leader reads it: its id, its topics and its raw user data."""

    member_id: str
    topics: tuple[str, ...]
    user_data: bytes | None


@dataclass(frozen=True, slots=True)
class GroupAssignment:
    """The leader's answer: every member's partitions in Kafka's shape, the one assignment user data every member
    receives (the generation stamp), and the plan with its stats (moves, their lower bound) for diagnostics."""

    partitions: Mapping[str, KafkaAssignment]
    user_data: bytes
    generation: int
    plan: Plan
    stale: int = 0  # claimed partitions that did not count for their generation (current_claims)


# -- the user data ---------------------------------------------------------------------------------------------------


def encode_claim(claim: Claim) -> bytes:
    """Version 1 of a member's user data (module docstring); InvalidRequest for what the format cannot carry."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in claim.partitions:
        by_topic.setdefault(topic, []).append(index)
    out = bytearray(_INT16.pack(CLAIM_VERSION))
    out += _INT32.pack(len(by_topic))
    for topic in sorted(by_topic):
        name = topic.encode()
        if len(name) > _INT16_MAX:
            raise InvalidRequest("user_data", f"topic name of {len(name)} bytes (at most {_INT16_MAX})")
        indices = sorted(set(by_topic[topic]))
        if indices[0] < 0 or indices[-1] > _INT32_MAX:
            raise InvalidRequest("user_data", f"partition of {topic!r} outside 0..{_INT32_MAX}")
        out += _INT16.pack(len(name)) + name + _INT32.pack(len(indices)) + struct.pack(f">{len(indices)}i", *indices)
    out += _INT32.pack(_int32("generation", claim.generation))
    return bytes(out)


def decode_claim(data: bytes | None) -> Claim | None:
    """A member's user data read back: None when empty (a member that owns nothing yet); InvalidRequest naming what
    is wrong for anything else that is not a claim of version 1 or later (the leader reads that as owning nothing:
    :func:`read_claim`)."""
    if not data:
        return None
    reader = _Reader(bytes(data))
    version = reader.version()
    partitions: list[Partition] = []
    seen: set[str] = set()
    for _ in range(reader.count(6)):  # a topic takes at least 6 bytes: an empty name and no partitions
        topic = reader.string()
        if topic in seen:
            raise InvalidRequest("user_data", f"topic {topic!r} listed twice")
        seen.add(topic)
        indices = reader.int32s(reader.count(4))
        if indices and min(indices) < 0:
            raise InvalidRequest("user_data", f"negative partition of topic {topic!r}")
        partitions.extend(Partition(topic, i) for i in indices)
    generation = reader.int32()
    reader.end(version == CLAIM_VERSION)
    return Claim(generation, tuple(partitions))


def read_claim(member_id: str, data: bytes | None) -> Claim | None:
    """:func:`decode_claim` for the leader: user data it cannot read is logged and read as owning nothing."""
    try:
        return decode_claim(data)
    except InvalidRequest as exc:
        log.warning(
            "%s: the user data of member %s is not readable (%s): it owns nothing", ASSIGNOR_NAME, member_id, exc.reason
        )
        return None


def encode_stamp(generation: int) -> bytes:
    """Version 1 of the assignment user data: the generation the leader gave this assignment."""
    return _INT16.pack(STAMP_VERSION) + _INT32.pack(_int32("generation", generation))


def decode_stamp(data: bytes | None) -> int | None:
    """The generation of an assignment's user data; None when there is none or it is not readable."""
    if not data:
        return None
    try:
        reader = _Reader(bytes(data))
        version = reader.version()
        generation = reader.int32()
        reader.end(version == STAMP_VERSION)
    except InvalidRequest as exc:
        log.warning("%s: the assignment's user data is not readable (%s)", ASSIGNOR_NAME, exc.reason)
        return None
    return generation


def _int32(field: str, value: int) -> int:
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise InvalidRequest(field, f"{value} is not an int32")
    return value


class _Reader:
    """Reads Kafka-style big-endian fields off bytes; every shortfall is an InvalidRequest naming the byte."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, size: int) -> int:
        start = self.pos
        if size > len(self.data) - start:
            raise InvalidRequest("user_data", f"truncated: {size} bytes wanted at byte {start} of {len(self.data)}")
        self.pos += size
        return start

    def version(self) -> int:
        version: int = _INT16.unpack_from(self.data, self._take(2))[0]
        if version < 1:
            raise InvalidRequest("user_data", f"version {version} (this assignor writes 1 and reads 1 or later)")
        return version

    def int32(self) -> int:
        value: int = _INT32.unpack_from(self.data, self._take(4))[0]
        return value

    def count(self, item_size: int) -> int:
        """An array's count, checked against the bytes left (a garbled count never allocates a huge list)."""
        at = self.pos
        count = self.int32()
        if count < 0 or count * item_size > len(self.data) - self.pos:
            raise InvalidRequest("user_data", f"count {count} at byte {at} does not fit the {len(self.data)} bytes")
        return count

    def string(self) -> str:
        at = self.pos
        size: int = _INT16.unpack_from(self.data, self._take(2))[0]
        if size < 0:
            raise InvalidRequest("user_data", f"null or negative string length at byte {at}")
        start = self._take(size)
        try:
            return self.data[start : start + size].decode()
        except UnicodeDecodeError:
            raise InvalidRequest("user_data", f"topic name at byte {at} is not UTF-8") from None

    def int32s(self, count: int) -> tuple[int, ...]:
        return struct.unpack_from(f">{count}i", self.data, self._take(4 * count))

    def end(self, exact: bool) -> None:
        """The end of the fields this version reads: extra bytes are a later version's, never version 1's."""
        if exact and self.pos != len(self.data):
            raise InvalidRequest("user_data", f"{len(self.data) - self.pos} bytes after the last field")


# -- the pure core: Kafka's member metadata -> AssignRequest -> Plan -> Kafka's assignment -----------------------------


def assign_group(
    topics: Mapping[str, int], members: Iterable[Subscription], stale_claims: StaleClaims = "drop"
) -> GroupAssignment:
    """The leader's assignment of ``topics`` (name -> partition count, as its metadata knows them; a subscribed topic
    missing there is left out) to ``members``: ``sticky`` over the members' decoded claims, stale ones read by the
    ``stale_claims`` rule (:func:`current_claims`; double claims: apportion's rule, the module docstring). Every
    member is in the answer, with no partitions when it subscribes to nothing known. Pure: same input, same answer,
    in every process."""
    subscriptions = sorted(members, key=lambda s: s.member_id)
    claims = {s.member_id: read_claim(s.member_id, s.user_data) for s in subscriptions}
    current, stale = current_claims(claims, stale_claims)
    request = AssignRequest(
        strategy="sticky",
        resources=tuple(Resource(name, count) for name, count in sorted(topics.items())),
        members=tuple(
            Member(
                s.member_id,
                subscriptions=frozenset(t for t in s.topics if t in topics),
                owned=() if claim is None else claim.partitions,
                generation=NO_GENERATION if claim is None else claim.generation,
            )
            for s in subscriptions
            for claim in (current[s.member_id],)
        ),
    )
    result = plan(request)
    generation = max((c.generation for c in claims.values() if c is not None), default=NO_GENERATION) + 1
    return GroupAssignment(
        {s.member_id: kafka_assignment(result.assignment.get(s.member_id, ())) for s in subscriptions},
        encode_stamp(generation),
        generation,
        result,
        stale,
    )


def current_claims(claims: Mapping[str, Claim | None], rule: StaleClaims) -> tuple[dict[str, Claim | None], int]:
    """The claims as ``sticky`` should read them, and how many claimed partitions do not count for their generation.

    ``drop`` (seed 4): a claim of a generation below the newest counts not at all — removed here, as ``sticky``
    itself would ignore it (``_core``'s rule 1), to count its partitions. ``yield``: a claimed partition counts
    unless another member claims it with a newer generation; what still counts of an older claim is restamped with
    the newest generation, so that ``sticky`` keeps it (two older claims of one generation on one partition are then
    a double claim, apportion's rule decides)."""
    top = max((c.generation for c in claims.values() if c is not None and c.partitions), default=NO_GENERATION)
    newest: dict[Partition, int] = {}
    if rule == "yield":
        for each in filter(None, claims.values()):
            for p in each.partitions:
                newest[p] = max(newest.get(p, each.generation), each.generation)
    current: dict[str, Claim | None] = {}
    stale = 0
    for member, claim in claims.items():
        if claim is None or not claim.partitions or claim.generation == top:
            current[member] = claim
            continue
        kept = tuple(p for p in claim.partitions if newest.get(p, top + 1) <= claim.generation)
        current[member] = Claim(top, kept) if kept else None
        stale += len(claim.partitions) - len(kept)
        why = "seed 4's rule: all of them" if rule == "drop" else "claimed by a newer generation"
        log.info("%s: member %s claims generation %d, below %d: %d of its %d partitions do not count (%s)",
                 ASSIGNOR_NAME, member, claim.generation, top, len(claim.partitions) - len(kept),
                 len(claim.partitions), why)  # fmt: skip
    return current, stale


def kafka_assignment(partitions: Iterable[tuple[str, int]]) -> KafkaAssignment:
    """Partitions in Kafka's assignment shape: ``((topic, (partition, ...)), ...)``, both sorted."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return tuple((topic, tuple(sorted(by_topic[topic]))) for topic in sorted(by_topic))


def topic_counts(cluster: Any, subscriptions: Iterable[Subscription]) -> dict[str, int]:
    """The partition count of every subscribed topic the client's ClusterMetadata knows (both clients' have
    ``partitions_for_topic``, None for an unknown topic: left out, as their own assignors do)."""
    counts: dict[str, int] = {}
    for topic in sorted({t for s in subscriptions for t in s.topics}):
        ids = cluster.partitions_for_topic(topic)
        if ids is None:
            log.warning("%s: no metadata for topic %r: its partitions are not assigned", ASSIGNOR_NAME, topic)
            continue
        counts[topic] = len(ids)
    return counts


# -- the adapters -----------------------------------------------------------------------------------------------------


class _StickyAssignor:
    """What both adapters share: one consumer's claim (the module docstring's state), the leader's call of the core,
    and the last assignment it computed (``last_assignment``: its plan's stats say how many partitions moved).
    ``stale_claims`` is how the leader reads a claim of an older generation: ``"drop"`` (seed 4's rule, the
    default) or ``"yield"`` (KIP-54's); only the leader's own setting matters, give every member the same."""

    name = ASSIGNOR_NAME
    version = 0  # of Kafka's ConsumerProtocol subscription and assignment: the claim travels in the user data

    def __init__(self, stale_claims: StaleClaims = "drop") -> None:
        if stale_claims not in STALE_CLAIMS:
            raise InvalidRequest("stale_claims", f"{stale_claims!r} is not one of {', '.join(STALE_CLAIMS)}")
        self.stale_claims: StaleClaims = stale_claims
        self.claim: Claim | None = None
        self.last_assignment: GroupAssignment | None = None

    @property
    def generation(self) -> int:
        """The generation of this consumer's last assignment (-1 before the first)."""
        return NO_GENERATION if self.claim is None else self.claim.generation

    @property
    def owned(self) -> tuple[Partition, ...]:
        """This consumer's last assignment."""
        return () if self.claim is None else self.claim.partitions

    def _user_data(self) -> bytes:
        return b"" if self.claim is None else encode_claim(self.claim)

    def _assign(self, cluster: Any, subscriptions: Sequence[Subscription]) -> GroupAssignment:
        assignment = assign_group(topic_counts(cluster, subscriptions), subscriptions, self.stale_claims)
        stats = assignment.plan.stats
        log.info("%s: generation %d, %d members, %d partitions, %d moved (fewest possible: %d), %d claimed stale",
                 ASSIGNOR_NAME, assignment.generation, stats.members, stats.partitions, stats.moved, stats.min_moves,
                 assignment.stale)  # fmt: skip
        self.last_assignment = assignment
        return assignment

    def _assigned(self, partitions: Iterable[tuple[str, int]], user_data: bytes | None, generation: int | None) -> None:
        """The state's one transition: the client's generation when it tells it, else the leader's stamp."""
        if generation is None or generation < 0:
            generation = decode_stamp(user_data)
        owned = tuple(sorted(Partition(topic, index) for topic, index in partitions))
        self.claim = Claim(NO_GENERATION if generation is None else generation, owned)


class KafkaPythonStickyAssignor(_StickyAssignor):
    """The assignor for kafka-python >= 3.0 consumers (its ``AbstractPartitionAssignor`` interface, eager protocol)::

        KafkaConsumer(topic, group_id="g", partition_assignment_strategy=[KafkaPythonStickyAssignor()])

    An instance is used as given (the class is registered as a virtual subclass of kafka-python's abstract assignor,
    which is what kafka-python checks); the class itself works too: kafka-python makes one instance per consumer."""

    def __init__(self, stale_claims: StaleClaims = "drop") -> None:
        super().__init__(stale_claims)
        from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor

        AbstractPartitionAssignor.register(type(self))

    def supported_protocols(self) -> list[Any]:
        from kafka.coordinator.assignors.abstract import RebalanceProtocol

        return [RebalanceProtocol.EAGER]

    def metadata(self, topics: Iterable[str]) -> Any:
        from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

        return ConsumerProtocolSubscription(self.version, sorted(topics), self._user_data())

    def assign(self, cluster: Any, members: Iterable[Any]) -> dict[str, Any]:
        from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

        subscriptions = [Subscription(m.member_id, tuple(m.metadata.topics), m.metadata.user_data) for m in members]
        result = self._assign(cluster, subscriptions)
        return {
            member: ConsumerProtocolAssignment(self.version, [(t, list(ps)) for t, ps in parts], result.user_data)
            for member, parts in result.partitions.items()
        }

    def on_assignment(self, assignment: Any, generation: int | None = None) -> None:
        self._assigned(assignment.partitions(), assignment.user_data, generation)


class AiokafkaStickyAssignor(_StickyAssignor):
    """The assignor for aiokafka consumers (its ``AbstractPartitionAssignor`` interface, which aiokafka duck-types:
    ``name``, ``metadata``, ``assign``, ``on_assignment``)::

        AIOKafkaConsumer(topic, group_id="g", partition_assignment_strategy=(AiokafkaStickyAssignor(),))

    One instance per consumer (module docstring). aiokafka does not tell an assignor the group's generation: the
    member claims the generation the leader stamped on its assignment."""

    def metadata(self, topics: Iterable[str] = ()) -> Any:
        if not isinstance(self, _StickyAssignor):  # aiokafka given the class calls AiokafkaStickyAssignor.metadata(t)
            raise TypeError(
                f"{ASSIGNOR_NAME}: give aiokafka an instance per consumer, "
                "partition_assignment_strategy=(AiokafkaStickyAssignor(),), not the class (one claim for all)"
            )
        from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), self._user_data())

    def assign(self, cluster: Any, members: Mapping[str, Any]) -> dict[str, Any]:
        from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

        subscriptions = [Subscription(m, tuple(meta.subscription), meta.user_data) for m, meta in members.items()]
        result = self._assign(cluster, subscriptions)
        return {
            member: ConsumerProtocolMemberAssignment(self.version, [(t, list(ps)) for t, ps in parts], result.user_data)
            for member, parts in result.partitions.items()
        }

    def on_assignment(self, assignment: Any) -> None:
        self._assigned(assignment.partitions(), assignment.user_data, None)


__all__ = [
    "ASSIGNOR_NAME",
    "CLAIM_VERSION",
    "STALE_CLAIMS",
    "STAMP_VERSION",
    "AiokafkaStickyAssignor",
    "Claim",
    "GroupAssignment",
    "KafkaPythonStickyAssignor",
    "StaleClaims",
    "Subscription",
    "assign_group",
    "current_claims",
    "decode_claim",
    "decode_stamp",
    "encode_claim",
    "encode_stamp",
    "kafka_assignment",
    "read_claim",
    "topic_counts",
]
