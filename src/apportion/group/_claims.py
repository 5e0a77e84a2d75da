"""A member's claims and releases of owner records: the transactions that make and end ownership at the store.

``Claimer`` keeps the partitions the protocol wants this member to hold and does not hold yet (``wanted``), claims
them (``_ownership``'s module doc: one transaction per chunk of ``CHUNK``, compare-absent on each owner record and
unchanged on its epoch record) and hands each landed chunk to the belief (``Belief.believe``, then ``on_assigned``).
What it learns along the way it keeps:

- ``epochs``: each partition's last epoch and the revision of its epoch record (the next claim's compare);
- ``held``: wanted partitions whose owner record another member holds, and since when; such a claim is retried at
  the record's deletion (``note_owner_event``: the watch of the owner records), not polled — at size, polling every
  ``claim_retry_s`` was most of the store's load — and after a ttl at the latest (a missed deletion);
- ``uncertain``: claims whose transaction's outcome is unknown (the store did not answer), settled by reading the
  records back (``settle_uncertain``): adopted if still wanted, given back otherwise;
- ``to_release``: releases not done yet (a store that did not answer), retried at the next step.

A release deletes the owner records that are still this member's (compare on the value: member and epoch), so a
record the store already gave to another member is never touched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from apportion.errors import LeaseNotFound, StoreUnavailable
from apportion.group._belief import Belief
from apportion.group._context import MemberContext
from apportion.group._history import HistoryType
from apportion.group._keys import PartitionId, decode_epoch, decode_owner, pid_of_key, sorted_pids
from apportion.group._trace import TraceKind
from apportion.store import Delete, Event, EventType, Get, Op, Put, absent, mod_revision_is, value_is
from apportion.store import Lease as StoreLease

INF = math.inf
T = TypeVar("T")
# partitions per claim/release txn: a claim takes 2 compares, 2 puts (+1 history put) and 2 gets per partition, and
# etcd allows 128 of each per txn by default (``--max-txn-ops``)
CHUNK = 60
CLAIM_SLICE_S = 0.5  # claiming one step does before it drains its watch again (a newer plan may want other things)

# partition ids: ints in a one-resource group, ``<resource>-<index>`` strings otherwise (``Any``: a callback typed
# for either kind fits)
Callback = Callable[[list[Any]], None]


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterable[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def call(callback: Callback | None, parts: list[PartitionId]) -> None:
    """A member's callback with ``parts`` (a copy), unless there is none or nothing to say."""
    if callback is not None and parts:
        callback(list(parts))


class Claimer:
    """The claims and releases of one member (the module docstring); runs on the stepping thread."""

    def __init__(self, ctx: MemberContext, belief: Belief, on_assigned: Callback | None) -> None:
        self._ctx = ctx
        self._belief = belief
        self._on_assigned = on_assigned
        self.wanted: set[PartitionId] = set()  # partitions the protocol wants held and not held yet
        self.epochs: dict[PartitionId, tuple[int, int]] = {}  # partition -> (last epoch, epoch key mod_revision)
        self.to_release: dict[PartitionId, int] = {}
        self.held: dict[PartitionId, float] = {}  # wanted partitions another member's owner record holds -> seen at
        self.uncertain: set[PartitionId] = set()  # claims whose txn outcome is unknown: ``settle_uncertain``

    def forget(self) -> None:
        """The lease lapsed: nothing is wanted, waited for or owed any more (records it wrote die with it)."""
        self.wanted.clear()
        self.held.clear()
        self.uncertain.clear()  # records an unknown claim may have written die with the lapsed lease
        self.to_release.clear()

    # -- claims ------------------------------------------------------------------------------------------------

    def claim(self, now: float) -> None:
        """Claim the wanted partitions not known to be held by another member, chunk by chunk, applying each chunk
        as it lands (on_assigned per chunk: a member never holds owner records it does not act on), for at most
        ``CLAIM_SLICE_S`` per step (the step then drains its watch: a newer plan may want something else)."""
        belief = self._belief
        lease = belief.lease
        with belief.lock:
            if lease is None or now >= belief.deadline:
                return
        try:
            clock = self._ctx.clock
            began = clock.now()
            for chunk in chunks(self._claimable(began)):
                claimed = self._claim_chunk(now, lease, list(chunk), retry=True)
                if claimed and not self._apply(lease, claimed):
                    return
                if clock.now() - began >= CLAIM_SLICE_S:
                    break
        except LeaseNotFound:
            belief.lose_lease()

    def _claimable(self, now: float) -> list[PartitionId]:
        """The wanted partitions worth a claim now: not held by another member's record, unless that record was
        seen more than a ttl ago (its deletion event is what frees it: ``note_owner_event``; the ttl is a bound
        on a missed one)."""
        held = self.held
        for p in [p for p in held if p not in self.wanted]:
            del held[p]
        retry_before = now - self._ctx.config.ttl_s
        return sorted_pids(p for p in self.wanted if held.get(p, -INF) <= retry_before)

    def _apply(self, lease: StoreLease, claimed: Mapping[PartitionId, int]) -> bool:
        """Believe ``claimed`` and call on_assigned; False when the lease ended meanwhile (the claims die with it)."""
        parts = sorted_pids(claimed)
        self.wanted.difference_update(parts)
        if not self._belief.believe(lease, claimed):
            return False
        self._ctx.trace(TraceKind.ASSIGNED, partitions=parts, epochs=[claimed[p] for p in parts])
        call(self._on_assigned, parts)
        return True

    def settle_uncertain(self, lease: StoreLease) -> None:
        """Claims whose transaction's outcome is unknown (the store did not answer) may have written owner records
        under this lease: read them; adopt those still wanted, give the others back (a record nobody acts on would
        keep its partition from everyone for as long as this member lives)."""
        ctx = self._ctx
        while self.uncertain:
            chunk = sorted_pids(self.uncertain)[:CHUNK]
            found = ctx.store.txn([], [Get(ctx.keys.owner(p)) for p in chunk]).responses
            mine: dict[PartitionId, int] = {}
            for p, kvs in zip(chunk, found, strict=True):
                assert isinstance(kvs, list)
                if kvs and kvs[0].lease == lease.id:
                    member, epoch = decode_owner(kvs[0])
                    if member == ctx.id:
                        mine[p] = epoch
                        self.epochs[p] = (epoch, kvs[0].mod_revision)  # a claim writes owner and epoch together
            wanted = {p: e for p, e in mine.items() if p in self.wanted}
            self.uncertain.difference_update(chunk)
            if mine.keys() - wanted.keys():
                ctx.trace(TraceKind.GIVE_BACK, partitions=sorted_pids(mine.keys() - wanted.keys()))
                self.release(ctx.clock.now(), {p: e for p, e in mine.items() if p not in wanted})
            if wanted and not self._apply(lease, wanted):
                return

    def note_owner_event(self, event: Event) -> None:
        """An owner record was deleted (released, or its lease ended): a claim of that partition may succeed now."""
        if event.type is EventType.DELETE:
            owners = self._ctx.keys.owners
            pid = pid_of_key(event.kv.key[len(owners) :])
            if pid is not None:
                self.held.pop(pid, None)

    def _claim_chunk(
        self, now: float, lease: StoreLease, chunk: list[PartitionId], *, retry: bool
    ) -> dict[PartitionId, int]:
        """One claim transaction: every partition of ``chunk`` (absent owner record, unchanged epoch) or none. On
        failure the owner and epoch records read back say which are free (claimed again once, ``retry``), which
        another member holds (``held``) and which are this member's own under this lease: a claim whose outcome
        it did not learn (adopted)."""
        ctx = self._ctx
        keys = ctx.keys
        compares = []
        success: list[Op] = []
        failure: list[Op] = []
        for p in chunk:
            epoch, rev = self.epochs.get(p, (0, 0))
            owner_key, epoch_key = keys.owner(p), keys.epoch(p)
            compares += [absent(owner_key), mod_revision_is(epoch_key, rev)]
            success += [
                Put(owner_key, ctx.owner_value(epoch + 1), lease.id),
                Put(epoch_key, str(epoch + 1).encode()),
            ]
            failure += [Get(owner_key), Get(epoch_key)]
        epochs = [self.epochs.get(p, (0, 0))[0] + 1 for p in chunk]
        success += ctx.recorder.put(HistoryType.CLAIM, now, partitions=chunk, epochs=epochs)
        try:
            result = ctx.store.txn(compares, success, failure)
        except StoreUnavailable:
            self.uncertain.update(chunk)  # written or not: settled by reading back (``settle_uncertain``)
            raise
        if result.succeeded:
            for p, epoch in zip(chunk, epochs, strict=True):
                self.epochs[p] = (epoch, result.revision)
            ctx.trace(TraceKind.CLAIM, partitions=chunk, epochs=epochs)
            return dict(zip(chunk, epochs, strict=True))
        free: list[PartitionId] = []
        mine: dict[PartitionId, int] = {}
        seen = ctx.clock.now()
        for i, p in enumerate(chunk):
            owner_kvs, epoch_kvs = result.responses[2 * i], result.responses[2 * i + 1]
            assert isinstance(owner_kvs, list) and isinstance(epoch_kvs, list)
            if epoch_kvs:  # the fence's counter: a corrupt one cannot be guessed past (CorruptRecord: exit 2)
                self.epochs[p] = (decode_epoch(epoch_kvs[0].value, epoch_kvs[0].key), epoch_kvs[0].mod_revision)
            else:
                self.epochs[p] = (0, 0)
            if not owner_kvs:
                free.append(p)
                continue
            # a record no claim wrote (bound to no lease) would hold p forever: say so instead of waiting
            member, epoch = decode_owner(owner_kvs[0])
            if member == ctx.id and owner_kvs[0].lease == lease.id:
                mine[p] = epoch
            else:
                self.held[p] = seen
        if mine:
            ctx.trace(TraceKind.ADOPTED, partitions=sorted_pids(mine))
        if free and retry:
            mine.update(self._claim_chunk(now, lease, free, retry=False))
        return mine

    # -- releases ----------------------------------------------------------------------------------------------

    def release(self, now: float, parts: Mapping[PartitionId, int]) -> None:
        """Delete the owner records of ``parts`` (partition -> epoch) that are still this member's; what the store
        does not take now stays in ``to_release`` for the next step."""
        ctx = self._ctx
        if self._belief.lease is None:
            self.to_release.clear()
            return
        self.to_release.update(parts)
        keys = ctx.keys
        for chunk in chunks(sorted_pids(parts)):
            compares = [value_is(keys.owner(p), ctx.owner_value(parts[p])) for p in chunk]
            ops: list[Op] = [Delete(keys.owner(p)) for p in chunk]
            ops += ctx.recorder.put(HistoryType.RELEASE, now, partitions=list(chunk), epochs=[parts[p] for p in chunk])
            if not ctx.store.txn(compares, ops).succeeded:
                for p in chunk:  # some record is not ours any more: release the others one by one
                    ctx.store.txn([compares[chunk.index(p)]], [Delete(keys.owner(p))])
            for p in chunk:
                self.to_release.pop(p, None)
        ctx.trace(TraceKind.RELEASED, partitions=sorted_pids(parts))


__all__ = ["CHUNK", "CLAIM_SLICE_S", "Callback", "Claimer", "call", "chunks"]
