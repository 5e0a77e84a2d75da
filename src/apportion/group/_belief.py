"""A member's lease and its belief: which partitions it believes it owns, with which epochs, until when.

The keeper of the belief window of ``_ownership``'s module doc: the local deadline is the last successful keepalive
*request* time + ttl x ``safety``, earlier than the store can expire the lease; the belief in every owned partition
ends there at the latest (``owned`` and ``lease_of`` say nothing past it), and every store call of a step runs under
what is left of it (``within``). Three threads meet here, under ``lock``: the stepping thread (claims believed,
revocations, lapses), the keepalive thread (``keepalive``: the deadline moves on) and the threads that commit
(``fence``: a refused commit ends the belief in that partition, the stepping thread then calls ``on_lost``).
Everything else of the member runs on the stepping thread alone.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from apportion.errors import Fenced, LeaseNotFound, StoreUnavailable
from apportion.group._context import MemberContext
from apportion.group._history import HistoryType
from apportion.group._keys import PartitionId, sorted_pids
from apportion.group._trace import TraceKind
from apportion.store import Lease as StoreLease

INF = math.inf


@dataclass(frozen=True, slots=True)
class PartitionLease:
    """A partition this worker believes it owns, with the epoch that fences its commits."""

    partition: PartitionId
    epoch: int
    member: str


class Belief:
    """The lease, the local deadline and the believed partitions (partition -> epoch) of one member. The fields are
    read and written under ``lock`` wherever another thread may be at them (the module docstring)."""

    def __init__(self, ctx: MemberContext, *, safety: float, revoke_timeout_s: float) -> None:
        self._ctx = ctx
        self.safety = safety
        self.revoke_timeout_s = revoke_timeout_s
        self.lock = threading.Lock()
        self.lease: StoreLease | None = None
        self.deadline = -INF
        self.lease_lost = False
        self.revoke_started: float | None = None  # an on_revoked running since then (``may_renew``)
        self.renew_failing = False
        self.owned: dict[PartitionId, int] = {}  # believed: partition -> epoch
        # partitions fenced by commit (-> epoch), awaiting on_lost and release on the stepping thread
        self.fenced: dict[PartitionId, int] = {}
        self.fenced_deadline = -INF  # the latest local deadline of the leases that held the partitions in ``fenced``
        self.ended_at: float | None = None  # see ``FencedMember.belief_ended_at``
        # store work a lapse left for later (``clean_up``), done before the member registers again
        self.dead_leases: list[StoreLease] = []  # lapsed leases not yet revoked
        self.unrecorded: list[dict[str, Any]] = []  # "lost" history events not yet written: fields (time first)

    # -- read by any thread ------------------------------------------------------------------------------------

    def owned_at(self, now: float) -> list[PartitionId]:
        """The partitions believed owned at ``now`` (none once the local deadline has passed)."""
        with self.lock:
            if now >= self.deadline:
                return []
            return sorted_pids(self.owned)

    def lease_of(self, partition: PartitionId, now: float) -> PartitionLease:
        """``partition``'s epoch, if it is believed owned at ``now``; else Fenced."""
        with self.lock:
            epoch = self.owned.get(partition)
            if epoch is None or now >= self.deadline:
                raise Fenced(f"partition {partition} is not owned by {self._ctx.id}")
            return PartitionLease(partition, epoch, self._ctx.id)

    def holding(self) -> tuple[dict[PartitionId, int], float]:
        """A copy of the believed partitions and the local deadline, read together."""
        with self.lock:
            return dict(self.owned), self.deadline

    def held(self) -> dict[PartitionId, int]:
        """A copy of the believed partitions (partition -> epoch)."""
        with self.lock:
            return dict(self.owned)

    def local_deadline(self) -> float:
        with self.lock:
            return self.deadline

    def belief_ended_at(self) -> float | None:
        with self.lock:
            return self.ended_at

    def epochs_of(self, parts: Iterable[PartitionId]) -> dict[PartitionId, int]:
        """The epochs of those of ``parts`` believed owned (whatever the deadline: the committer checks it)."""
        with self.lock:
            owned = self.owned
            return {p: owned[p] for p in parts if p in owned}

    def sendable(
        self, chunk: Iterable[PartitionId], epoch_of: Mapping[PartitionId, int], now: float
    ) -> tuple[float, list[PartitionId]]:
        """The local deadline, and the partitions of ``chunk`` still believed owned with ``epoch_of`` at ``now``."""
        with self.lock:
            deadline = self.deadline
            return deadline, [p for p in chunk if now < deadline and self.owned.get(p) == epoch_of[p]]

    # -- the lease ---------------------------------------------------------------------------------------------

    def may_renew(self, now: float) -> bool:
        """False while a revocation overruns ``revoke_timeout_s`` (bounded revocation: let the lease lapse)."""
        started = self.revoke_started
        return started is None or now - started <= self.revoke_timeout_s

    def keepalive(self, now: float) -> bool:
        """Renew the lease (``FencedMember.keepalive``; the caller checked the member runs); True when renewed."""
        lease = self.lease
        if lease is None or not self.may_renew(now):
            return False
        with self.lock:
            left = self.deadline - now
        if left <= 0:
            return False
        store = self._ctx.store
        try:
            with store.time_limit(left):
                store.keepalive(lease)
        except LeaseNotFound:
            with self.lock:
                if self.lease is lease:
                    self.lease_lost = True
            return False
        except StoreUnavailable as exc:
            if not self.renew_failing:
                self.renew_failing = True
                self._ctx.trace(TraceKind.RENEW_FAILED, deadline=now + left, reason=str(exc))
            return False
        with self.lock:
            if self.lease is lease and now < self.deadline:
                self.deadline = now + lease.ttl_s * self.safety
                deadline = self.deadline
            else:
                return False
        if self.renew_failing:
            self.renew_failing = False
            self._ctx.trace(TraceKind.RENEW_RECOVERED, deadline=deadline)
        self._ctx.trace(TraceKind.RENEW, deadline=deadline)
        return True

    def grant(self, lease: StoreLease, now: float) -> None:
        """The member registered under ``lease`` at ``now``: the belief window opens."""
        with self.lock:
            self.lease = lease
            self.lease_lost = False
            self.deadline = now + lease.ttl_s * self.safety

    def lose_lease(self, lease: StoreLease | None = None) -> None:
        """The store says the lease is gone (``lease``: only if it is still that one)."""
        with self.lock:
            if lease is None or self.lease is lease:
                self.lease_lost = True

    def lapsed(self, now: float) -> bool:
        """The lease is held and its belief is over (the local deadline passed, or the store lost the lease)."""
        with self.lock:
            return self.lease is not None and (self.lease_lost or now >= self.deadline)

    def lapse_at(self) -> float:
        """When the belief lapses if nothing renews it (never, holding nothing)."""
        with self.lock:
            return self.deadline if (self.owned or self.lease is not None) else INF

    def within(self) -> contextlib.AbstractContextManager[None]:
        """A time limit for store calls: what is left of the belief window (none without a lease)."""
        with self.lock:
            left = None if self.lease is None else self.deadline - self._ctx.clock.now()
        return self._ctx.store.time_limit(left)

    # -- transitions of the belief --------------------------------------------------------------------------

    def believe(self, lease: StoreLease, claimed: Mapping[PartitionId, int]) -> bool:
        """Believe ``claimed`` (its claims landed under ``lease``); False when that lease ended meanwhile."""
        now = self._ctx.clock.now()
        with self.lock:
            if now >= self.deadline or self.lease is not lease:
                return False  # the lapse path runs at the next step
            self.owned.update(claimed)
        return True

    def drop(self, parts: Iterable[PartitionId]) -> dict[PartitionId, int]:
        """Stop believing ``parts`` (revoked): those that were believed, with their epochs."""
        with self.lock:
            return {p: self.owned.pop(p) for p in parts if p in self.owned}

    def fence(self, parts: Mapping[PartitionId, int], deadline: float) -> None:
        """A commit of each (partition, epoch) of ``parts`` was refused: the belief in it ends, on_lost follows on the
        stepping thread (``take_fenced``); ``deadline`` is the local deadline the commit was sent under."""
        with self.lock:
            for p, use in parts.items():
                if self.owned.get(p) == use:
                    del self.owned[p]
                    self.fenced[p] = use
                    self.fenced_deadline = max(self.fenced_deadline, deadline)

    def take_fenced(self, now: float) -> dict[PartitionId, int]:
        """The partitions fenced since the last call, sorted; the belief in them ended now, or at the deadline of the
        lease they were committed under if that came first (``belief_ended_at``)."""
        with self.lock:
            fenced, self.fenced = dict(sorted(self.fenced.items())), {}
            self.ended_at, self.fenced_deadline = min(now, self.fenced_deadline), -INF
        return fenced

    def end(self, now: float, reason: str) -> dict[PartitionId, int]:
        """The belief ends at once (a lapse, for ``reason``): every believed or fenced partition with its epoch,
        sorted; nothing is believed nor leased afterwards. Revoking the lease (it frees the owner records now instead
        of at its expiry) and recording the loss are left to ``clean_up``, retried until done."""
        with self.lock:
            # partitions a commit refused at the deadline (moved to ``fenced`` by the committer's thread) end here
            # too: their on_lost must not wait for the fenced branch, which runs only once the store answers again
            held = dict(sorted({**self.fenced, **self.owned}.items()))
            self.owned.clear()
            self.fenced, self.fenced_deadline = {}, -INF
            lease, self.lease = self.lease, None
            self.ended_at = min(now, self.deadline)
            self.deadline = -INF
        self.revoke_started = None
        self.renew_failing = False
        if lease is not None:
            self.dead_leases.append(lease)
        if held:
            fields = {"partitions": list(held), "epochs": list(held.values()), "reason": reason}
            self.unrecorded.append({"time": now, **fields})
        return held

    def clean_up(self) -> None:
        """Finish what lapses left undone: revoke the old leases, then record the losses, oldest first; a store that
        still does not answer raises StoreUnavailable (the caller retries). Revoking a lease that is gone already is
        not an error (the contract)."""
        while self.dead_leases:
            self._ctx.store.revoke(self.dead_leases[0])
            self.dead_leases.pop(0)
        while self.unrecorded:
            fields = dict(self.unrecorded[0])
            self._ctx.put_event(HistoryType.LOST, fields.pop("time"), **fields)
            self.unrecorded.pop(0)

    def leases(self) -> list[StoreLease]:
        """Every lease this member may still hold at the store: the lapsed ones not revoked yet, then the current."""
        lease = self.lease
        return [*self.dead_leases, *([lease] if lease is not None else [])]

    def clear(self) -> None:
        """The member stops: nothing is believed nor leased any more."""
        with self.lock:
            self.owned.clear()
            self.lease = None
            self.deadline = -INF


__all__ = ["INF", "Belief", "PartitionLease"]
