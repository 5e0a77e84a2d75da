"""The closing of a round (``_rounds``): when a member tries, the ``closing`` record that keeps it to one closer at a
time, reading the cut, waiting for the live members of the previous plan, and writing the plan (``_round_plan``).

One closer at a time
--------------------
The round's opener closes it at RST; every other member is a backup whose turn comes later (``_close_at``). A close
begins by writing ``closing`` ({round, closer}, bound to the closer's lease) in the txn that reads the round (compare:
the ``closing`` revision it knows; a member that finds it held learns the holder from the same answer). A backup
whose turn comes while a live member holds ``closing`` for the open round waits: for the plan's event, for the record
to go (its lease ended: the closer died or froze), or up to ``CLOSE_HOLD_TTLS`` ttl after it last saw it written (a
closer alive but stuck), then takes it over. The plan's txn deletes it. Why: a backup's turn is spread over
max(RST, ttl/2), and a close of a 100,000-partition plan (read, plan, check, write) takes longer than that at load:
at 64 members x 100,000 partitions on SQLite, py-spy found ~40 members closing the same round at once, each close
slowing the others, and no round closed in 150 s. The record only spares work: the close txn's compares alone keep
one plan per round, so an old member that ignores it, or a holder overtaken, changes nothing but the cost.
"""

from __future__ import annotations

import zlib
from collections.abc import Container, Mapping
from typing import Any

from apportion.errors import CorruptRecord
from apportion.group._config import GroupConfig
from apportion.group._context import MemberContext
from apportion.group._history import HistoryType
from apportion.group._keys import PlanRecord, decode, encode
from apportion.group._ownership import Planner
from apportion.group._round_plan import Checker, close_plan, read_plan
from apportion.group._trace import TraceKind
from apportion.store import Delete, Get, KeyValue, Op, Put, absent, mod_revision_is
from apportion.store import Lease as StoreLease

CLOSE_HOLD_TTLS = 4
"""A backup waits for a live holder of ``closing`` up to this many ttl (module doc, "One closer at a time")."""


def says_leaving(kv: KeyValue) -> bool:
    """A ``members/<id>`` record announces a planned leave (a corrupt one announces nothing). Every member hears
    every registration (O(members²) events in a large group): only a record that mentions the key is decoded."""
    if b'"leaving"' not in kv.value:
        return False
    try:
        return bool(decode(kv.value, kv.key).get("leaving"))
    except CorruptRecord:
        return False


class RoundCloser:
    """The closes of one rounds member, and the ``closing`` record as it last saw it."""

    def __init__(self, ctx: MemberContext, *, planner: Planner, checker: Checker) -> None:
        self._ctx = ctx
        self._planner = planner
        self._checker = checker
        self.held: tuple[int, str, float] | None = None  # ``closing`` as last seen: (round, closer, seen at)
        self.revision = 0  # its mod_revision (0: absent, or not known: a take's compare tells)

    def on_record(self, kv: KeyValue | None) -> None:
        """The ``closing`` record as read or heard (None: absent). A record this version cannot read is held by
        nobody: it may be taken over at once (its revision is kept for the take's compare)."""
        self.revision = 0 if kv is None else kv.mod_revision
        self.held = None
        if kv is None:
            return
        try:
            value = decode(kv.value, kv.key)
        except CorruptRecord:
            return
        rnd, closer = value.get("round"), value.get("closer")
        if isinstance(rnd, int) and isinstance(closer, str):
            self.held = (rnd, closer, self._ctx.clock.now())

    def close_at(
        self, rnd: int, *, first_seen: float, opener: str | None, dead: Container[str], leaving: Container[str]
    ) -> float:
        """When this member, joined to the open round ``rnd`` (seen first at ``first_seen``, opened by ``opener``;
        ``dead`` and ``leaving``: the members whose registration went, or says it leaves), tries to close it: RST
        after it saw the round open when it opened the round itself, or when the opener cannot close it (its
        registration gone or leaving: a leaving member opens rounds but joins none; a round written by a version
        that names no opener); otherwise as a
        backup, at a point of its own spread over the ``max(RST, ttl / 2)`` that follows (a hash of its id and the
        round: the same in every replay), should the opener be busy (claiming, inside on_revoked), frozen or dead.
        The first close wins and a backup whose turn comes after the plan's event never reads the round. Why not
        every member at RST: each close reads the round and the previous plan and writes a whole plan, and at 32
        members x 16,384 partitions on etcd the 31 survivors of a kill -9 all did, 1.1-3.3 s between the close and
        the first claim (py-spy: the stepping threads waiting on etcd behind 31 closes and 31 plan reads). Why not
        the opener alone: a busy opener held every round of a starting fleet for the whole backup wait. A turn
        that comes while another live member holds ``closing`` for this round waits for it (the module
        docstring)."""
        ctx = self._ctx
        config = ctx.config
        first = first_seen + config.settle_s
        if opener is None or opener == ctx.id or opener in dead or opener in leaving:
            turn = first
        else:
            spread = max(config.settle_s, config.ttl_s / 2)
            turn = first + spread * (zlib.crc32(f"{ctx.id}/{rnd}".encode()) / 2**32)
        held = self.held
        if held is not None and held[0] == rnd and held[1] != ctx.id and held[1] not in dead:
            return max(turn, held[2] + CLOSE_HOLD_TTLS * max(config.ttl_s, config.settle_s))
        return turn

    def close(
        self, now: float, rnd: int, lease: StoreLease, *, first_seen: float, applied: tuple[int, PlanRecord] | None
    ) -> tuple[bool, bool]:
        """Try to write the cut and plan of ``rnd`` under ``lease``: (True when the round has a plan now, mine or
        another's; True when a close txn lost a race, perhaps to a new round: ``current`` is to be read again). The
        read of the round takes ``closing`` in the same txn; a close that finds it held by another waits (False;
        ``close_at`` says until when). ``first_seen``: when this member saw the round open (``_awaited``);
        ``applied``: the (round, plan) it applied last (``_previous_plan``)."""
        ctx = self._ctx
        store, keys = ctx.store, ctx.keys
        # held already (a close that waits for a participant, or lost a race, tries again): the compare alone says
        # nobody took it over; written again it would be one more write and an event to every member per retry
        held = self.held
        writes_closing = held is None or held[:2] != (rnd, ctx.id)
        take_ops: list[Op] = [Get(keys.rounds, prefix=True)]
        if writes_closing:
            take_ops.insert(0, Put(keys.closing, encode({"round": rnd, "closer": ctx.id}), lease.id))
        compare = [mod_revision_is(keys.closing, self.revision)]
        take = store.txn(compare, take_ops, [Get(keys.closing)])
        if not take.succeeded:
            found = take.responses[0]
            self.on_record(found[0] if isinstance(found, list) and found else None)
            return False, False
        if writes_closing:
            self.held, self.revision = (rnd, ctx.id, now), take.revision
        round_kvs = take.responses[-1]
        assert isinstance(round_kvs, list)
        records: dict[str, KeyValue] = {}  # decoded only once the round can close
        joined_rev = 0
        older: set[int] = set()
        for kv in round_kvs:
            rest = kv.key[len(keys.rounds) :]
            head, _, name = rest.partition("/")
            if not head.isdigit():
                continue
            other = int(head)
            if other == rnd:
                if name == "joined":
                    joined_rev = kv.mod_revision
                elif name == "plan":
                    return True, False
                else:
                    records[name] = kv
            elif other < rnd:
                older.add(other)
        if not records:
            return False, False
        config_kv = store.get(keys.resource)
        if config_kv is not None and config_kv.mod_revision != ctx.config_revision:
            ctx.config = GroupConfig.from_record(config_kv)
            ctx.config_revision = config_kv.mod_revision
        previous = self._previous_plan(applied)
        if self._awaited(previous, records, now, first_seen):
            return False, False
        value = close_plan(
            records,
            previous,
            ctx.config,
            group=ctx.group,
            rnd=rnd,
            closer=ctx.id,
            closed_at=now,
            resource_revision=ctx.config_revision,
            planner=self._planner,
            checker=self._checker,
        )
        if value is None:
            return False, False
        ids = list(value.participants)
        # explain: who stopped subscribing
        subscribing = {"subscriptions": dict(value.subscriptions)} if value.subscriptions else {}
        movement = {"moves": value.moves, "min_moves": value.min_moves, "deferred": value.deferred, "kept": value.kept}
        ops: list[Op] = [
            Put(keys.plan(rnd), encode(value.to_json())),
            Put(keys.latest, encode({"round": rnd})),
        ]
        ops += [Delete(keys.round(old), prefix=True) for old in sorted(older)]
        ops.append(Delete(keys.closing))
        ops += ctx.recorder.put(HistoryType.ROUND_CLOSED, now, round=rnd, participants=ids, **movement, **subscribing)
        compares = [
            absent(keys.plan(rnd)),
            mod_revision_is(keys.joined(rnd), joined_rev),
            mod_revision_is(keys.current, rnd),
        ]
        result = store.txn(compares, ops)
        if result.succeeded:
            ctx.trace(TraceKind.ROUND_CLOSED, round=rnd, participants=len(ids), **movement)
        # closed by me, or the txn lost a race (perhaps to a new round): re-read at once
        return True, not result.succeeded

    def _awaited(
        self, previous: PlanRecord | None, joined: Mapping[str, Any], now: float, first_seen: float
    ) -> list[str]:
        """Members of the previous plan that have not joined yet although they are live (their ``members/<id>``
        exists and does not announce a planned leave). The round waits for them up to ``ttl_s`` past RST, or until
        each has joined or its registration has gone with its lease: closing without a live member takes every
        partition it keeps away, only to give them back a round later. Such a member is inside ``on_revoked`` (it
        cannot join while its callback waits for its batch in flight), or busy: at 32 members x 16,384 partitions
        on two cores, a kill -9's round closed 0.5 s after it opened with 26 of the 31 survivors; the other 5
        revoked 512 partitions each and the next round moved 2,640 back (issue 27). A dead member's registration
        goes with its lease, so a failover is not slowed; a frozen one is waited for until its lease ends (ttl)."""
        ctx = self._ctx
        store, keys = ctx.store, ctx.keys
        if previous is None or now >= first_seen + ctx.config.settle_s + ctx.config.ttl_s:
            return []
        missing = [m for m in previous.participants if m not in joined and m != ctx.id]
        if not missing:
            return []
        # one read of the registrations, not one per missing participant (31 round trips at 32 members on etcd)
        registered = {kv.key[len(keys.members) :]: kv for kv in store.range(keys.members)}
        awaited = []
        for m in missing:
            kv = registered.get(m)
            if kv is not None and not says_leaving(kv):
                awaited.append(m)
        return awaited

    def _previous_plan(self, applied: tuple[int, PlanRecord] | None) -> PlanRecord | None:
        """The last plan written (None: none yet): the one this member applied when it is that one, else read."""
        store, keys = self._ctx.store, self._ctx.keys
        latest = store.get(keys.latest)
        if latest is None:
            return None
        rnd = int(decode(latest.value, latest.key)["round"])
        if applied is not None and applied[0] == rnd:
            return applied[1]  # the plan this member applied: not read again (16,384 partitions: ~200 KB)
        kv = store.get(keys.plan(rnd))
        return None if kv is None else read_plan(kv, store)


__all__ = ["CLOSE_HOLD_TTLS", "RoundCloser", "says_leaving"]
