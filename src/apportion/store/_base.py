"""The store contract: an etcd-v3-shaped key-value store with revisions, CAS transactions, leases and watches.

Every backend subclasses :class:`Store` and passes the one conformance suite (``tests/store/test_contract.py``).
The store revision is the global order of all changes: seed 0's versionstamp.

Time limits: ``with store.time_limit(seconds):`` bounds every call the current thread makes on this store inside
the block (measured on ``store.clock``); a call that cannot finish by then raises ``StoreUnavailable`` instead of
waiting for the backend's own request timeout. A member uses it to keep every store call inside its belief window,
so the end of a belief (``on_lost``) is never delayed by a network that does not answer. ``time_limit(None)`` lifts
the limit inside the block. Backends read what is left with ``remaining_s(default)``.

Validation: the base class checks every request (keys, ops, values, ttl, limits, revisions) and raises
``InvalidRequest`` naming the field; a backend only executes requests that passed, in ``_txn``, ``_grant``,
``_watch`` (and ``_get``, ``_range`` when it has a faster read than a transaction). So every backend refuses the same
requests with the same words, and a new backend writes no checks of its own.

Lease state machine (all backends)::

    GRANTED --keepalive--> GRANTED (expiry pushed to now + ttl)
    GRANTED --revoke / now >= expiry--> GONE (its keys deleted, one DELETE event each, LeaseNotFound afterwards)
"""

from __future__ import annotations

import abc
import contextlib
import math
import threading
from collections.abc import Iterator, Sequence
from types import TracebackType

from apportion.clock import SYSTEM_CLOCK, Clock
from apportion.errors import InvalidRequest
from apportion.store._types import (
    Compare,
    Delete,
    Event,
    Get,
    KeyValue,
    Lease,
    Op,
    Put,
    TxnResult,
    validate_key,
)


class Watch(abc.ABC):
    """An ordered, gap-free stream of events for a key or prefix, from a start revision on."""

    @abc.abstractmethod
    def poll(self) -> list[Event]:
        """Return the events that arrived since the last call, without blocking (possibly none)."""

    @abc.abstractmethod
    def wait(self, timeout_s: float) -> list[Event]:
        """Block (real time) until at least one event arrives or ``timeout_s`` passes; return what arrived."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop watching; further polls return nothing."""

    def __iter__(self) -> Iterator[Event]:
        while True:
            yield from self.wait(1.0)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_limits = threading.local()  # per thread: {id(store): deadline on that store's clock}

# Keys (not prefixes) that passed ``validate_key``, for every store of the process (a key's validity is the key's
# alone): a member's transactions name the same few keys again and again, the simulator's a million times.
_VALID_KEYS: set[str] = set()
_VALID_KEYS_LIMIT = 1_000_000


def check_key(key: str, field_name: str = "key", *, prefix: bool = False) -> None:
    """``validate_key``, remembering the keys (not prefixes) that passed."""
    if type(key) is str and key in _VALID_KEYS:
        return  # a valid key is a valid prefix too
    validate_key(key, field_name, prefix=prefix)
    if not prefix:
        if len(_VALID_KEYS) >= _VALID_KEYS_LIMIT:
            _VALID_KEYS.clear()
        _VALID_KEYS.add(key)


_TARGETS = ("value", "mod_revision", "create_revision", "version")
_OPERATORS = ("==", "!=", "<", ">")


def check_compare(compare: Compare) -> None:
    """A compare's key, target, operator and operand (bytes for a value, an int for the others; InvalidRequest)."""
    check_key(compare.key, "compare.key")
    if compare.target not in _TARGETS:
        raise InvalidRequest("compare.target", f"unknown target {compare.target!r}")
    if compare.op not in _OPERATORS:
        raise InvalidRequest("compare.op", f"unknown operator {compare.op!r}")
    operand = compare.operand
    if compare.target == "value":
        if not isinstance(operand, bytes):
            raise InvalidRequest("compare.operand", "a value compare needs bytes")
    elif isinstance(operand, bool) or not isinstance(operand, int):
        raise InvalidRequest("compare.operand", f"a {compare.target} compare needs an int")


def validate_txn(compares: Sequence[Compare], on_success: Sequence[Op], on_failure: Sequence[Op]) -> None:
    """Check every compare and op of a transaction (InvalidRequest naming the field)."""
    for compare in compares:
        check_compare(compare)
    for op in (*on_success, *on_failure):
        if isinstance(op, Put):
            check_key(op.key, "op.key")
            if not isinstance(op.value, bytes):
                raise InvalidRequest("value", "must be bytes")
        elif isinstance(op, Delete | Get):
            check_key(op.key, "op.key", prefix=op.prefix)
        else:
            raise InvalidRequest("op", f"{op!r} is not a Put, Delete or Get")


def validate_ttl(ttl_s: float) -> float:
    """A lease's ttl: a finite number of seconds > 0 (InvalidRequest otherwise), as a float."""
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or not (math.isfinite(ttl_s) and ttl_s > 0):
        raise InvalidRequest("ttl_s", "must be a finite number > 0")
    return float(ttl_s)


def renew_interval_s(ttl_s: float) -> float:
    """The keepalive cadence of a lease of ``ttl_s``: a quarter ttl, its one definition. A lease holder asks its store,
    ``Store.renew_every_s`` (this, unless the backend needs it more often: 0.5 s at most on etcd): the worker's
    keepalive thread, the simulator's keepalive events and the tests' ``KeepAlive``; the coordinator steps at least
    this often."""
    return ttl_s / 4


class Store(abc.ABC):
    """A consistent store. Keys are '/'-separated printable strings, values bytes."""

    url: str
    clock: Clock = SYSTEM_CLOCK
    # The member lease TTL a group on this store gets unless it sets one: the belief window (ttl x 0.8) must outlast
    # what this backend can stall a renewal for (see each backend); None: the group's default (GroupConfig).
    default_ttl_s: float | None = None

    def renew_every_s(self, ttl_s: float) -> float:
        """How often a member holding a lease of ``ttl_s`` renews it on this backend (``renew_interval_s``: a quarter
        ttl, unless the backend needs it more often)."""
        return renew_interval_s(ttl_s)

    @contextlib.contextmanager
    def time_limit(self, seconds: float | None) -> Iterator[None]:
        """Bound this thread's calls on this store to ``seconds`` from now (``None``: no limit) inside the block."""
        table: dict[int, float] = _limits.__dict__.setdefault("deadlines", {})
        key = id(self)
        previous = table.get(key)
        if seconds is None:
            table.pop(key, None)
        else:
            table[key] = self.clock.now() + max(0.0, seconds)
        try:
            yield
        finally:
            if previous is None:
                table.pop(key, None)
            else:
                table[key] = previous

    def remaining_s(self, default: float) -> float:
        """Seconds this thread's next call may take: ``default``, or less when a ``time_limit`` is in force."""
        table: dict[int, float] = _limits.__dict__.get("deadlines", {})
        deadline = table.get(id(self))
        if deadline is None:
            return default
        return min(default, deadline - self.clock.now())

    @abc.abstractmethod
    def revision(self) -> int:
        """The current store revision (0 for an empty, never-written store)."""

    def txn(self, compares: Sequence[Compare], on_success: Sequence[Op], on_failure: Sequence[Op] = ()) -> TxnResult:
        """Atomically: if every compare holds run ``on_success`` else ``on_failure``. All writes of one txn share
        one new revision (no new revision when the branch writes nothing)."""
        validate_txn(compares, on_success, on_failure)
        return self._txn(compares, on_success, on_failure)

    @abc.abstractmethod
    def _txn(self, compares: Sequence[Compare], on_success: Sequence[Op], on_failure: Sequence[Op]) -> TxnResult:
        """``txn`` of a request that passed ``validate_txn``."""

    def grant(self, ttl_s: float) -> Lease:
        """Create a lease that expires ``ttl_s`` seconds from now unless kept alive."""
        return self._grant(validate_ttl(ttl_s))

    @abc.abstractmethod
    def _grant(self, ttl_s: float) -> Lease:
        """``grant`` of a valid ttl (a finite float > 0)."""

    @abc.abstractmethod
    def keepalive(self, lease: Lease | int) -> float:
        """Push the lease's expiry to now + ttl; return the ttl. Raise LeaseNotFound if it is gone."""

    @abc.abstractmethod
    def revoke(self, lease: Lease | int) -> None:
        """End the lease now and delete its keys. Revoking a lease that is gone is not an error."""

    @abc.abstractmethod
    def time_to_live(self, lease: Lease | int) -> float:
        """Seconds left before the lease expires; raise LeaseNotFound if it is gone."""

    def watch(
        self, key: str, start_revision: int | None = None, *, prefix: bool = True, deletes_only: bool = False
    ) -> Watch:
        """Watch ``key`` (a prefix unless ``prefix=False``) from ``start_revision`` (default: the next change).
        Raise Compacted when ``start_revision`` is at or below the compaction point. ``deletes_only``: deliver
        only DELETE events (etcd filters the PUTs out on the server, so they cost the watcher nothing: a member
        waiting for owner records to be freed is told of releases, not of every claim)."""
        check_key(key, "key", prefix=prefix)
        if start_revision is not None and (isinstance(start_revision, bool) or not isinstance(start_revision, int)):
            raise InvalidRequest("start_revision", "must be an integer")
        return self._watch(key, start_revision, prefix=prefix, deletes_only=deletes_only)

    @abc.abstractmethod
    def _watch(self, key: str, start_revision: int | None, *, prefix: bool, deletes_only: bool) -> Watch:
        """``watch`` of a valid key and start revision."""

    def compact(self, revision: int) -> None:
        """Forget history at and below ``revision``; watches starting there raise Compacted. InvalidRequest for a
        revision above the current one."""
        if isinstance(revision, bool) or not isinstance(revision, int):
            raise InvalidRequest("revision", "must be an integer")
        self._compact(revision)

    @abc.abstractmethod
    def _compact(self, revision: int) -> None:
        """``compact`` to an integer revision (the backend refuses a future one: it knows the current)."""

    def close(self) -> None:  # noqa: B027 - backends without resources need nothing
        """Release connections and background threads."""

    def refusing_writes(self) -> str | None:
        """Why this store refuses writes while it still answers (etcd's NOSPACE alarm: the ``StoreFull`` message),
        as this client last heard; None once a write is accepted again, and on backends that never refuse so.
        A worker logs the change (one line per outage); thread-safe."""
        return None

    # Conveniences expressed through txn; backends may override ``_get`` and ``_range`` for speed.

    def get(self, key: str) -> KeyValue | None:
        check_key(key, "key")
        return self._get(key)

    def _get(self, key: str) -> KeyValue | None:
        found = self._txn([], [Get(key)], ()).responses[0]
        assert isinstance(found, list)
        return found[0] if found else None

    def range(self, prefix: str, limit: int | None = None) -> list[KeyValue]:
        check_key(prefix, "prefix", prefix=True)
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidRequest("limit", "must be an integer >= 0")
        return self._range(prefix, limit)

    def _range(self, prefix: str, limit: int | None) -> list[KeyValue]:
        found = self._txn([], [Get(prefix, prefix=True)], ()).responses[0]
        assert isinstance(found, list)
        return found if limit is None else found[:limit]

    def put(self, key: str, value: bytes, lease: Lease | int | None = None) -> int:
        return self.txn([], [Put(key, value, lease_id(lease))]).revision

    def delete(self, key: str, *, prefix: bool = False) -> int:
        """Delete ``key`` (or a prefix); return how many keys were deleted."""
        deleted = self.txn([], [Delete(key, prefix=prefix)]).responses[0]
        assert isinstance(deleted, int)
        return deleted

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def lease_id(lease: Lease | int | None) -> int:
    """The numeric id of a lease argument (0 = no lease)."""
    if lease is None:
        return 0
    return lease.id if isinstance(lease, Lease) else int(lease)


__all__ = ["Store", "Watch", "check_key", "lease_id", "validate_ttl", "validate_txn"]
