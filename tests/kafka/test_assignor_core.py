"""Seed 4's assignor inside Kafka's group protocol, without a broker: the pure core (Kafka's member metadata ->
``sticky`` -> Kafka's assignment), the user-data format, and whole groups of kafka-python and aiokafka assignors
exchanging their real protocol structs round after round (joins, leaves, members kicked out that come back with a
stale claim, garbled user data).

The oracle for stickiness is the closed form of seed 4, computed from the claims by the tests' own
``tests.kafka.assignor_group.lower_bound`` (not by apportion): with ``P``
partitions over ``N`` members, ``q, r = divmod(P, N)`` and ``o_i`` partitions still validly claimed by member ``i``,
no balanced assignment moves fewer than ``sum(o_i) - (sum(min(o_i, q)) + min(r, #{i: o_i > q}))``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apportion.errors import InvalidRequest
from apportion.kafka._assignor import (
    ASSIGNOR_NAME,
    AiokafkaStickyAssignor,
    Claim,
    KafkaPythonStickyAssignor,
    Subscription,
    assign_group,
    decode_claim,
    decode_stamp,
    encode_claim,
    encode_stamp,
)
from apportion.model import Partition
from tests.kafka.assignor_group import lower_bound, moves

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GROUPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUNDS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- oracles (lower_bound and moves are tests/kafka/assignor_group.py's, shared with the broker test) --------------


def owned_sets(assignment: Mapping[str, Sequence[tuple[str, Sequence[int]]]]) -> dict[str, set[Partition]]:
    return {m: {Partition(t, i) for t, ps in parts for i in ps} for m, parts in assignment.items()}


def assert_exactly_once(after: Mapping[str, set[Partition]], universe: set[Partition]) -> None:
    every = [p for ps in after.values() for p in ps]
    assert len(every) == len(set(every)), "a partition assigned twice"
    assert set(every) == universe, f"unassigned: {sorted(universe - set(every))}"


# -- generated groups ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    topics: dict[str, int]
    members: list[Subscription]
    claims: dict[str, Claim]  # what each member's user data says (members without one are missing)

    @property
    def universe(self) -> set[Partition]:
        return {Partition(t, i) for t, n in self.topics.items() for i in range(n)}


MEMBER_IDS = [f"consumer-{i}-{h:04x}" for i, h in enumerate([0x9F3A, 0x12CD, 0x7B7B, 0x0E41, 0xC0DE, 0x5A5A, 0x8D10])]


@st.composite
def cases(draw: st.DrawFn, equal: bool = True, generations: Sequence[int] = (7,), overlapping: bool = False) -> Case:
    """Topics t0.. (0-16 partitions each), 1-7 members; each partition previously owned by at most one member (or
    claimed on a topic deleted since: ``gone``) — with ``overlapping`` members also claim others' partitions; every
    member subscribes to every topic unless ``equal`` is False; generations drawn from ``generations``."""
    counts = draw(st.lists(st.integers(0, 16), min_size=1, max_size=3))
    topics = {f"t{i}": n for i, n in enumerate(counts)}
    ids = draw(st.lists(st.sampled_from(MEMBER_IDS), min_size=1, max_size=8, unique=True))
    universe = sorted({Partition(t, i) for t, n in topics.items() for i in range(n)} | {Partition("gone", 0)})
    owned: dict[str, set[Partition]] = {m: set() for m in ids}
    for p in universe:
        holder = draw(st.sampled_from([None, *ids]))
        if holder is not None:
            owned[holder].add(p)
    members, claims = [], {}
    for m in ids:
        subscribed = tuple(topics) if equal else tuple(draw(st.lists(st.sampled_from(list(topics)), unique=True)))
        if draw(st.integers(0, 5)) == 0:  # a member that never had an assignment: empty user data
            members.append(Subscription(m, subscribed, b""))
            continue
        if overlapping:
            owned[m] |= set(draw(st.lists(st.sampled_from(universe), max_size=6)))
        claim = Claim(draw(st.sampled_from(list(generations))), tuple(sorted(owned[m])))
        claims[m] = claim
        members.append(Subscription(m, subscribed, encode_claim(claim)))
    return Case(topics, members, claims)


def counted_claims(case: Case, rule: str = "drop") -> dict[str, set[Partition]]:
    """What each member may keep, by the rule for stale claims: its claimed partitions of existing topics it
    subscribes to that no one else keeps — ``drop``: none of a member below the newest generation claimed;
    ``yield``: a partition goes to its newest claimant; then, in one generation, to the smallest member id."""
    top = max((c.generation for c in case.claims.values() if c.partitions), default=0)
    subscribed = {s.member_id: set(s.topics) for s in case.members}
    keeper: dict[Partition, str] = {}
    for m in sorted(case.claims):
        claim = case.claims[m]
        if rule == "drop" and claim.generation < top:
            continue
        for p in claim.partitions:
            newer = p not in keeper or claim.generation > case.claims[keeper[p]].generation
            if p in case.universe and p.resource in subscribed[m] and newer:
                keeper[p] = m
    return {m: {p for p, k in keeper.items() if k == m} for m in case.claims}


def stale_count(case: Case, rule: str) -> int:
    """Claimed partitions that do not count for their generation (unknown topics included)."""
    top = max((c.generation for c in case.claims.values() if c.partitions), default=0)
    newest: dict[Partition, int] = {}
    for c in case.claims.values():
        for p in c.partitions:
            newest[p] = max(newest.get(p, c.generation), c.generation)
    return sum(
        len(c.partitions) if rule == "drop" else sum(newest[p] > c.generation for p in c.partitions)
        for c in case.claims.values()
        if c.generation < top
    )


# -- the user data ---------------------------------------------------------------------------------------------------

claims_st = st.builds(
    Claim,
    st.integers(-1, 2**31 - 1),
    st.lists(st.builds(Partition, st.sampled_from(["a", "t.b", "ünïcode", "x" * 249]), st.integers(0, 2**31 - 1))).map(
        lambda ps: tuple(sorted(set(ps)))
    ),
)


@FAST
@given(claims_st)
def test_a_claim_survives_its_user_data(claim: Claim) -> None:
    assert decode_claim(encode_claim(claim)) == claim


def test_the_user_data_is_version_1_of_the_documented_layout() -> None:
    data = encode_claim(Claim(5, (Partition("b", 2), Partition("a", 1), Partition("b", 0))))
    assert data == (
        struct.pack(">hi", 1, 2)  # version 1, two topics (by name)
        + struct.pack(">h", 1) + b"a" + struct.pack(">ii", 1, 1)
        + struct.pack(">h", 1) + b"b" + struct.pack(">iii", 2, 0, 2)
        + struct.pack(">i", 5)  # the generation
    )  # fmt: skip
    assert encode_stamp(9) == struct.pack(">hi", 1, 9)
    assert decode_stamp(encode_stamp(9)) == 9


def test_a_newer_version_is_read_as_version_1_followed_by_fields_it_does_not_know() -> None:
    v1 = encode_claim(Claim(3, (Partition("a", 0),)))
    v2 = struct.pack(">h", 2) + v1[2:] + b"\x00\x00\x00\x2a rack-a"  # appended fields of a later release
    assert decode_claim(v2) == Claim(3, (Partition("a", 0),))
    assert decode_stamp(struct.pack(">hi", 4, 11) + b"more") == 11


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (struct.pack(">h", 0) + encode_claim(Claim(1, ()))[2:], "version 0"),
        (struct.pack(">h", -3), "version -3"),
        (encode_claim(Claim(1, (Partition("a", 0),))) + b"\x00", "bytes after the last field"),
        (struct.pack(">hi", 1, 2**31 - 1) + b"\x00" * 8, "does not fit"),  # a garbled count allocates nothing
        (struct.pack(">hi", 1, -1) + b"\x00" * 4, "count -1"),
        (struct.pack(">hih", 1, 1, -1) + b"\x00" * 8, "null or negative string length"),
        (struct.pack(">hih", 1, 1, 2) + b"\xff\xfe" + struct.pack(">ii", 0, 1), "not UTF-8"),
        (struct.pack(">hih", 1, 1, 1) + b"a" + struct.pack(">iii", 1, -4, 1), "negative partition"),
        (struct.pack(">hih", 1, 2, 1) + b"a" + struct.pack(">ih", 0, 1) + b"a" + struct.pack(">ii", 0, 1), "twice"),
        (b"\x00", "truncated"),
        (b"garbage that is not a claim", "does not fit"),  # b"ga": "version" 26465, then a count
    ],
)
def test_user_data_that_is_not_a_claim_says_why(data: bytes, why: str) -> None:
    with pytest.raises(InvalidRequest, match=why):
        decode_claim(data)


def test_every_prefix_of_a_claim_is_either_no_claim_or_not_a_claim() -> None:
    data = encode_claim(Claim(4, (Partition("orders", 0), Partition("orders", 7), Partition("pay", 1))))
    assert decode_claim(data[:0]) is None
    for cut in range(1, len(data)):
        with pytest.raises(InvalidRequest):
            decode_claim(data[:cut])


# -- the pure core ---------------------------------------------------------------------------------------------------


@GROUPS
@given(cases(equal=True))
def test_equal_subscriptions_balanced_each_partition_once_and_moves_exactly_the_lower_bound(case: Case) -> None:
    result = assign_group(case.topics, case.members)
    after = owned_sets(result.partitions)
    assert set(after) == {s.member_id for s in case.members}
    assert_exactly_once(after, case.universe)
    sizes = [len(ps) for ps in after.values()]
    assert max(sizes) - min(sizes) <= 1
    claims = counted_claims(case)
    bound = lower_bound(claims, list(after), len(case.universe))
    assert moves(claims, after) == bound == result.plan.stats.min_moves == result.plan.stats.moved


@GROUPS
@given(cases(equal=False))
def test_mixed_subscriptions_give_each_partition_once_to_a_subscriber(case: Case) -> None:
    after = owned_sets(assign_group(case.topics, case.members).partitions)
    subscribed = {s.member_id: set(s.topics) for s in case.members}
    wanted = {p for p in case.universe if any(p.resource in ts for ts in subscribed.values())}
    assert_exactly_once(after, wanted)
    assert all(p.resource in subscribed[m] for m, ps in after.items() for p in ps)


@GROUPS
@given(cases(equal=True, generations=(3, 4, 5), overlapping=True), st.sampled_from(["drop", "yield"]))
def test_stale_claims_count_by_the_rule_and_the_rest_moves_exactly_the_lower_bound(case: Case, rule: str) -> None:
    """``drop`` (seed 4): a member below the newest generation claimed keeps nothing of its claim; ``yield``
    (KIP-54): it loses only what a newer claim names. Either way the plan is balanced and moves exactly the fewest
    possible for the claims that count, and says how many claimed partitions did not count."""
    result = assign_group(case.topics, case.members, rule)  # type: ignore[arg-type]
    after = owned_sets(result.partitions)
    assert_exactly_once(after, case.universe)
    sizes = [len(ps) for ps in after.values()]
    assert max(sizes) - min(sizes) <= 1
    counted = counted_claims(case, rule)
    assert moves(counted, after) == lower_bound(counted, list(after), len(case.universe)) == result.plan.stats.moved
    assert result.stale == stale_count(case, rule)
    assert result.generation == max((c.generation for c in case.claims.values()), default=-1) + 1


@GROUPS
@given(cases(equal=True, generations=(3, 4, 5)))
def test_with_drop_the_answer_is_the_one_without_the_stale_members_user_data(case: Case) -> None:
    top = max((c.generation for c in case.claims.values() if c.partitions), default=0)
    stale = {m for m, c in case.claims.items() if c.partitions and c.generation < top}
    cleaned = [Subscription(s.member_id, s.topics, b"" if s.member_id in stale else s.user_data) for s in case.members]
    assert assign_group(case.topics, case.members).partitions == assign_group(case.topics, cleaned).partitions


@GROUPS
@given(cases(equal=True, generations=(3, 4, 5)))
def test_with_yield_claims_no_one_newer_names_count_as_if_current(case: Case) -> None:
    """Disjoint claims: nothing is named by a newer claim, so every claim counts, whatever its generation."""
    restamped = [
        Subscription(s.member_id, s.topics, encode_claim(Claim(9, case.claims[s.member_id].partitions)))
        if s.member_id in case.claims
        else s
        for s in case.members
    ]
    assert (
        assign_group(case.topics, case.members, "yield").partitions == assign_group(case.topics, restamped).partitions
    )


@GROUPS
@given(cases(equal=True), st.data())
def test_user_data_that_cannot_be_read_is_owning_nothing_never_a_crash(case: Case, data: st.DataObject) -> None:
    garbled, expected = [], []
    for s in case.members:
        raw = data.draw(st.sampled_from([s.user_data or b"", (s.user_data or b"")[:-1]]) | st.binary(max_size=40))
        try:
            readable = decode_claim(raw) is not None
        except InvalidRequest:
            readable = False
        garbled.append(Subscription(s.member_id, s.topics, raw))
        expected.append(Subscription(s.member_id, s.topics, raw if readable else b""))
    result = assign_group(case.topics, garbled)  # never raises
    assert result.partitions == assign_group(case.topics, expected).partitions
    assert_exactly_once(owned_sets(result.partitions), case.universe)


def test_garbled_user_data_is_logged_naming_the_member(caplog: pytest.LogCaptureFixture) -> None:
    members = [Subscription("consumer-a", ("t",), b"\x00\x01\x00"), Subscription("consumer-b", ("t",), None)]
    result = assign_group({"t": 4}, members)
    assert sorted(len(ps) for _, parts in result.partitions.items() for _, ps in parts) == [2, 2]
    assert "member consumer-a is not readable" in caplog.text and "it owns nothing" in caplog.text


def test_a_partition_two_current_members_claim_stays_with_the_smallest_member_id() -> None:
    """The seed says nothing about it; apportion's one rule (assign/_core.py rule 3) applies."""
    both = encode_claim(Claim(4, (Partition("t", 0), Partition("t", 1))))
    members = [Subscription("m-b", ("t",), both), Subscription("m-a", ("t",), both), Subscription("m-c", ("t",), b"")]
    result = assign_group({"t": 3}, members)
    assert dict(result.partitions)["m-a"] == (("t", (0,)),)
    assert result.plan.stats.moved == 1  # t-1 leaves m-a (the quota is one each); m-b's claims did not count


def test_topics_the_leader_has_no_metadata_for_and_partitions_beyond_the_count_are_left_out() -> None:
    claim = encode_claim(Claim(2, (Partition("t", 5), Partition("t", 1), Partition("old", 0))))
    result = assign_group({"t": 2}, [Subscription("m", ("t", "unknown"), claim)])
    assert dict(result.partitions) == {"m": (("t", (0, 1)),)}
    assert result.plan.stats.moved == 0


# -- whole groups of adapters, exchanging the clients' own protocol structs --------------------------------------------


class FakeCluster:
    """The one call the assignors make on a client's ClusterMetadata."""

    def __init__(self, topics: Mapping[str, int]) -> None:
        self.topics = dict(topics)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.topics[topic])) if topic in self.topics else None


@dataclass
class JoinedMember:
    """kafka-python's JoinGroupResponse member as its coordinator hands it to ``assign`` (metadata decoded)."""

    member_id: str
    group_instance_id: str | None
    metadata: Any


def run_round(client: str, assignors: Mapping[str, Any], topics: Mapping[str, int], generation: int) -> None:
    """One eager rebalance as the client's coordinator runs it: every member's ``metadata`` goes over the wire
    (encoded, decoded), the first member by id leads (``assign``), each assignment goes over the wire and reaches
    its member's ``on_assignment`` (with the group's generation from kafka-python, without from aiokafka)."""
    names = sorted(topics)
    if client == "kafka-python":
        from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

        joined = [
            JoinedMember(m, None, ConsumerProtocolSubscription.decode(a.metadata(set(names)).encode()))
            for m, a in sorted(assignors.items())
        ]
        answer = assignors[joined[0].member_id].assign(FakeCluster(topics), joined)
        for m, a in assignors.items():
            a.on_assignment(ConsumerProtocolAssignment.decode(answer[m].encode()), generation)
    else:
        from aiokafka.coordinator.protocol import ConsumerProtocol

        metadata = {m: ConsumerProtocol.METADATA.decode(a.metadata(set(names)).encode()) for m, a in assignors.items()}
        leader = min(assignors)
        answer = assignors[leader].assign(FakeCluster(topics), metadata)
        for m, a in assignors.items():
            a.on_assignment(ConsumerProtocol.ASSIGNMENT.decode(answer[m].encode()))


ADAPTERS = {"kafka-python": KafkaPythonStickyAssignor, "aiokafka": AiokafkaStickyAssignor}
events_st = st.lists(st.tuples(st.sampled_from(["join", "leave", "kick"]), st.integers(0, 99)), min_size=1, max_size=9)


@ROUNDS
@given(st.sampled_from(sorted(ADAPTERS)), st.integers(1, 30), events_st)
def test_a_group_of_adapters_stays_balanced_and_moves_the_lower_bound_through_joins_leaves_and_kicks(
    client: str, partitions: int, events: list[tuple[str, int]]
) -> None:
    """Each event is one rebalance. A kicked member misses it (the group moves on without it, a generation later)
    and comes back in the next one still claiming its old assignment: that claim is stale and dropped, so
    stickiness is measured against the members that were in the last round only."""
    topics = {"orders": partitions}
    universe = {Partition("orders", i) for i in range(partitions)}
    group: dict[str, Any] = {"c-000": ADAPTERS[client]()}
    kicked: dict[str, Any] = {}
    generation = 1
    run_round(client, group, topics, generation)
    serial = 1
    for event, pick in events:
        before = {m: set(a.owned) for m, a in group.items()}  # the last round's members and their assignments
        members = dict(group) | kicked  # the kicked ones rejoin now, with a claim of an older generation
        kicked = {}
        if event == "join":
            members[f"c-{serial:03d}"] = ADAPTERS[client]()
            serial += 1
        elif len(members) > 1:
            name = sorted(members)[pick % len(members)]
            gone = members.pop(name)
            if event == "kick":
                kicked[name] = gone
        generation += 1
        claimed = max(a.generation for a in members.values())
        run_round(client, members, topics, generation)
        after = {m: set(a.owned) for m, a in members.items()}
        assert_exactly_once(after, universe)
        sizes = [len(ps) for ps in after.values()]
        assert max(sizes) - min(sizes) <= 1
        claims = {m: ps for m, ps in before.items() if m in members}  # a rejoining kicked member's are stale
        assert moves(claims, after) == lower_bound(claims, sorted(members), partitions)
        # kafka-python's members take the group's generation; aiokafka's the leader's stamp, above all claimed
        generations = {a.generation for a in members.values()}
        assert generations == ({generation} if client == "kafka-python" else {claimed + 1})
        group = members


def test_a_kicked_member_that_comes_back_loses_its_claim_to_the_current_owners() -> None:
    topics = {"t": 6}
    a, b = KafkaPythonStickyAssignor(), KafkaPythonStickyAssignor()
    run_round("kafka-python", {"a": a, "b": b}, topics, 1)
    c = KafkaPythonStickyAssignor()
    run_round("kafka-python", {"a": a, "c": c}, topics, 2)  # b was kicked out: c took b's three
    held_by_c = set(c.owned)
    run_round("kafka-python", {"a": a, "b": b, "c": c}, topics, 3)  # b is back, still claiming generation 1
    # b's claim is stale: c (generation 2) keeps two of its three rather than b, the smaller id, taking them back
    assert len(c.owned) == 2 and set(c.owned) < held_by_c
    assert a.last_assignment is not None
    assert a.last_assignment.plan.stats.moved == a.last_assignment.plan.stats.min_moves == 2


def test_a_member_with_garbled_user_data_does_not_stop_the_leader() -> None:
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    leader = KafkaPythonStickyAssignor()
    joined = [
        JoinedMember("a", None, ConsumerProtocolSubscription(0, ["t"], encode_claim(Claim(2, (Partition("t", 0),))))),
        JoinedMember("b", None, ConsumerProtocolSubscription(0, ["t"], b"\x00\x01\xff\xff\xff\xff")),
    ]
    answer = leader.assign(FakeCluster({"t": 2}), joined)
    assert {m: a.partitions() for m, a in answer.items()} == {"a": [("t", 0)], "b": [("t", 1)]}


def test_each_consumer_keeps_its_own_claim_and_kafka_python_takes_an_instance_as_given() -> None:
    from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor

    first, second = KafkaPythonStickyAssignor(), KafkaPythonStickyAssignor()
    assert isinstance(first, AbstractPartitionAssignor)  # kafka-python uses an instance as is, calls a class
    run_round("kafka-python", {"a": first, "b": second}, {"t": 4}, 1)
    assert set(first.owned).isdisjoint(second.owned) and len(first.owned) == len(second.owned) == 2
    assert first.name == second.name == ASSIGNOR_NAME


def test_aiokafka_given_the_class_says_to_give_it_an_instance() -> None:
    with pytest.raises(TypeError, match="instance per consumer"):
        AiokafkaStickyAssignor.metadata({"t"})  # what aiokafka calls when given the class


def test_kafka_python_and_aiokafka_members_share_a_group() -> None:
    """One protocol name, one user-data format: a kafka-python leader reads an aiokafka member's subscription and
    the aiokafka member reads its assignment (the consumer protocol's version 0 is the same bytes in both)."""
    from aiokafka.coordinator.protocol import ConsumerProtocol
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    leader, other = KafkaPythonStickyAssignor(), AiokafkaStickyAssignor()
    for generation in (1, 2):
        joined = [
            JoinedMember(m, None, ConsumerProtocolSubscription.decode(a.metadata({"t"}).encode()))
            for m, a in (("a", leader), ("b", other))
        ]
        answer = leader.assign(FakeCluster({"t": 5}), joined)
        leader.on_assignment(answer["a"], generation)
        other.on_assignment(ConsumerProtocol.ASSIGNMENT.decode(answer["b"].encode()))
    assert sorted([len(leader.owned), len(other.owned)]) == [2, 3]
    assert set(leader.owned).isdisjoint(other.owned)
    # in round 2 the aiokafka member claimed the stamp 0 against kafka-python's generation 1: stale, dropped (the
    # documented cost of mixing clients); its partitions were the ones left over, so it got them back, no move
    assert leader.last_assignment is not None and leader.last_assignment.plan.stats.moved == 0
    assert (leader.generation, other.generation) == (2, 2)  # the group's; the stamp: one above the claims (1, 0)


def test_an_unknown_rule_for_stale_claims_is_one_clear_error() -> None:
    with pytest.raises(InvalidRequest, match="stale_claims: 'newest' is not one of drop, yield"):
        AiokafkaStickyAssignor("newest")  # type: ignore[arg-type]
