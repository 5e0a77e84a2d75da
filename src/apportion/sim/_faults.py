"""Fault doubles: a member's drifting clock and its view of the store that can be unreachable or hang.

:class:`DriftClock` is a member's clock in virtual time: its rate may drift (continuously, no jumps), and it knows
which of the member's threads runs and until when each is blocked in a hanging store call. :class:`FlakyStore`
wraps the shared memory store for one member: for a while every call fails at once (``down_until``: unavailable)
or gets no answer (``hang_until``: the call blocks its thread until the hang ends or the caller's time limit
passes, then raises ``StoreUnavailable``, the request lost). The event loop (``_sim``) sets both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import TracebackType

from apportion.clock import VirtualClock
from apportion.errors import StoreUnavailable
from apportion.store import Compare, Lease, MemoryStore, Op, Store, TxnResult, Watch

DEFAULT_CALL_TIMEOUT_S = 5.0  # a hanging call without a time limit waits this long (etcd's default)


class SimClock(VirtualClock):
    """The simulation's virtual clock: one thread moves and reads it, so reading takes no lock (the simulator reads
    it millions of times)."""

    def now(self) -> float:
        return self._now


class DriftClock:
    """A member's clock: local = anchor_local + (T - anchor_T) * rate, continuous when the rate changes.

    It also knows which of the member's threads is running (``thread``: step, keepalive or work) and until when
    each is blocked in a hanging store call (``blocked``): a blocked thread's time is the end of its call."""

    def __init__(self, base: VirtualClock) -> None:
        self.base = base
        self.rate = 1.0
        self._anchor_t = base.now()
        self._anchor_local = base.now()
        self.thread = "step"
        self.blocked: dict[str, float] = {}

    def global_now(self) -> float:
        """The global virtual time of the running thread (later than the simulation's while it is blocked)."""
        if not self.blocked:
            return self.base.now()
        return max(self.base.now(), self.blocked.get(self.thread, -math.inf))

    def blocked_until(self, thread: str) -> float:
        return self.blocked.get(thread, -math.inf)

    def now(self) -> float:
        return self._anchor_local + (self.global_now() - self._anchor_t) * self.rate

    def local(self, t: float) -> float:
        return self._anchor_local + (t - self._anchor_t) * self.rate

    def to_global(self, local: float) -> float:
        if local == math.inf or local == -math.inf:
            return local
        return self._anchor_t + (local - self._anchor_local) / self.rate

    def set_rate(self, rate: float) -> None:
        t = self.base.now()
        self._anchor_local = self.local(t)
        self._anchor_t = t
        self.rate = rate

    def sleep(self, seconds: float) -> None:  # pragma: no cover - the simulator never sleeps
        raise RuntimeError("simulated members never sleep")


class FlakyStore(Store):
    """A member's view of the shared store that can be made unavailable (fails at once) or hang (no answer) for a
    while. ``clock`` is the member's own clock, so ``time_limit`` works in the member's time."""

    def __init__(self, inner: MemoryStore, clock: DriftClock) -> None:
        self.inner = inner
        self.url = inner.url
        self.clock = clock
        self.member_clock = clock
        self.down_until = -math.inf
        self.hang_until = -math.inf
        self.deadline: float | None = None  # the time limit in force (the simulator steps members on one thread)

    def time_limit(self, seconds: float | None) -> _TimeLimit:  # type: ignore[override]
        """``Store.time_limit`` without its thread-local table: the simulation runs on one thread."""
        return _TimeLimit(self, None if seconds is None else self.clock.now() + max(0.0, seconds))

    def remaining_s(self, default: float) -> float:
        if self.deadline is None:
            return default
        return min(default, self.deadline - self.clock.now())

    @property
    def shared_store(self) -> MemoryStore:
        """Lets members share decoded plans across proxies of one store (see ``read_plan``)."""
        return self.inner

    def _check(self) -> None:
        clock = self.member_clock
        start = clock.global_now()
        if start > clock.base.now():
            # this thread already waited for an earlier call of the same step and is "ahead" of the simulation:
            # its next request cannot be applied at an earlier global time, so it is lost (a legal, pessimistic fate)
            raise StoreUnavailable("simulated: no answer from the store (request lost)")
        if start < self.hang_until:
            # no answer: the call returns (StoreUnavailable) when the hang ends or the caller's time limit passes,
            # whichever comes first; the request is lost either way (a model of a dropped connection)
            limit_s = self.remaining_s(DEFAULT_CALL_TIMEOUT_S) / clock.rate
            clock.blocked[clock.thread] = min(self.hang_until, start + max(0.0, limit_s))
            raise StoreUnavailable("simulated: no answer from the store")
        if start < self.down_until:
            raise StoreUnavailable("simulated: store unreachable from this member")

    def revision(self) -> int:
        self._check()
        return self.inner.revision()

    def _txn(self, compares: Sequence[Compare], on_success: Sequence[Op], on_failure: Sequence[Op]) -> TxnResult:
        self._check()
        return self.inner.txn(compares, on_success, on_failure)

    def _grant(self, ttl_s: float) -> Lease:
        self._check()
        return self.inner.grant(ttl_s)

    def keepalive(self, lease: Lease | int) -> float:
        self._check()
        return self.inner.keepalive(lease)

    def revoke(self, lease: Lease | int) -> None:
        self._check()
        self.inner.revoke(lease)

    def time_to_live(self, lease: Lease | int) -> float:
        self._check()
        return self.inner.time_to_live(lease)

    def _watch(self, key: str, start_revision: int | None, *, prefix: bool, deletes_only: bool) -> Watch:
        self._check()
        return self.inner.watch(key, start_revision, prefix=prefix, deletes_only=deletes_only)

    def _compact(self, revision: int) -> None:
        self.inner.compact(revision)

    def get(self, key: str):  # type: ignore[no-untyped-def]
        self._check()
        return self.inner.get(key)

    def range(self, prefix: str, limit: int | None = None):  # type: ignore[no-untyped-def]
        self._check()
        return self.inner.range(prefix, limit)


class _TimeLimit:
    __slots__ = ("_deadline", "_previous", "_store")

    def __init__(self, store: FlakyStore, deadline: float | None) -> None:
        self._store, self._deadline, self._previous = store, deadline, store.deadline

    def __enter__(self) -> None:
        self._previous, self._store.deadline = self._store.deadline, self._deadline

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._store.deadline = self._previous


__all__ = ["DEFAULT_CALL_TIMEOUT_S", "DriftClock", "FlakyStore", "SimClock"]
