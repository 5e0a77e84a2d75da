"""``memory://`` — the in-process store: thread-safe, driven by an injected clock so simulation runs in virtual time.

Lease expiry is lazy, as in the SQLite backend: every operation first removes the leases whose expiry has passed
on the store's clock (and their keys, one revision per lease). ``memory://name`` connects to a named store shared
by every ``connect`` in the process; plain ``memory://`` creates a private one.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from apportion.clock import SYSTEM_CLOCK, Clock
from apportion.errors import Compacted, InvalidRequest, LeaseNotFound
from apportion.store._base import Store, Watch, lease_id
from apportion.store._types import (
    Compare,
    Delete,
    Event,
    EventType,
    Get,
    KeyValue,
    Lease,
    Op,
    Put,
    TxnResult,
)

DEFAULT_HISTORY = 200_000


@dataclass(slots=True)
class _LeaseState:
    ttl_s: float
    expires_at: float
    keys: set[str] = field(default_factory=set)


class _MemoryWatch(Watch):
    def __init__(self, store: MemoryStore, key: str, prefix: bool, deletes_only: bool = False) -> None:
        self._store = store
        self.key = key
        self.prefix = prefix
        self.deletes_only = deletes_only
        self._pending: deque[Event] = deque()
        self._cond = threading.Condition(store._lock)
        self._waiting = 0  # threads inside wait(): deliver notifies only when someone waits
        self.closed = False

    def matches(self, event: Event) -> bool:
        if self.deletes_only and event.type is not EventType.DELETE:
            return False
        key = event.kv.key
        return key.startswith(self.key) if self.prefix else key == self.key

    def deliver(self, event: Event) -> None:  # called with the store lock held
        self._pending.append(event)
        if self._waiting:
            self._cond.notify_all()

    def poll(self) -> list[Event]:
        with self._cond:
            self._store._expire_locked()
            return self._drain()

    def wait(self, timeout_s: float) -> list[Event]:
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            self._store._expire_locked()
            while not self._pending and not self.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                # Lease expiry is lazy: wake when the earliest lease is due (on the store's clock) to expire it.
                self._waiting += 1
                try:
                    self._cond.wait(min(remaining, self._store._seconds_to_next_expiry()))
                finally:
                    self._waiting -= 1
                self._store._expire_locked()
            return self._drain()

    def _drain(self) -> list[Event]:
        events = list(self._pending)
        self._pending.clear()
        return events

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._pending.clear()
            self._store._watches.discard(self)
            self._cond.notify_all()


class MemoryStore(Store):
    """A complete store in one process's memory."""

    def __init__(self, url: str = "memory://", clock: Clock = SYSTEM_CLOCK, history: int = DEFAULT_HISTORY) -> None:
        self.url = url
        self.clock = clock
        self._lock = threading.RLock()
        self._data: dict[str, KeyValue] = {}
        # Key index for ranges, by directory (a key up to its last "/"): a range reads only the directories under
        # its prefix (and the keys of its ancestors' directories that start with it), each sorted once per change.
        # One sorted index of every key made each range cost O(all keys) once anything was added or removed, and a
        # group's owner/epoch/commit keys outnumber the round keys its members range over by far.
        self._dirs: dict[str, set[str]] = {}
        self._dir_sorted: dict[str, list[str]] = {}  # cached sorted(self._dirs[d])
        self._dir_names: list[str] | None = []  # sorted directory names (None: to sort again)
        self._revision = 0
        self._compacted = 0
        self._history: deque[Event] = deque()
        self._history_limit = history
        self._leases: dict[int, _LeaseState] = {}
        self._expiries: list[tuple[float, int]] = []  # min-heap of (expires_at, lease id); stale entries skipped
        self._next_lease = 1
        self._watches: set[_MemoryWatch] = set()

    # -- reads ---------------------------------------------------------------------------------------------

    def revision(self) -> int:
        with self._lock:
            self._expire_locked()
            return self._revision

    def _get(self, key: str) -> KeyValue | None:
        with self._lock:
            self._expire_locked()
            return self._data.get(key)

    def _range(self, prefix: str, limit: int | None) -> list[KeyValue]:
        with self._lock:
            self._expire_locked()
            found = self._range_locked(prefix)
            return found if limit is None else found[:limit]

    def _sorted_dir(self, name: str) -> list[str]:
        keys = self._dir_sorted.get(name)
        if keys is None:
            keys = self._dir_sorted[name] = sorted(self._dirs[name])
        return keys

    def _range_locked(self, prefix: str) -> list[KeyValue]:
        dirs = self._dirs
        runs: list[list[str]] = []
        # directories that are proper prefixes of ``prefix``: their keys starting with it are contiguous when sorted
        i = prefix.find("/")
        while 0 <= i < len(prefix) - 1:
            name = prefix[: i + 1]
            if name in dirs:
                keys = self._sorted_dir(name)
                start = j = bisect.bisect_left(keys, prefix)
                while j < len(keys) and keys[j].startswith(prefix):
                    j += 1
                if j > start:
                    runs.append(keys[start:j])
            i = prefix.find("/", i + 1)
        names = self._dir_names
        if names is None:
            names = self._dir_names = sorted(dirs)
        for j in range(bisect.bisect_left(names, prefix), len(names)):
            name = names[j]
            if not name.startswith(prefix):
                break
            runs.append(self._sorted_dir(name))
        data = self._data
        if len(runs) == 1:
            return [data[key] for key in runs[0]]
        return [data[key] for key in sorted(itertools.chain.from_iterable(runs))]  # sorted runs: timsort merges

    # -- transactions --------------------------------------------------------------------------------------

    def _txn(self, compares: Sequence[Compare], on_success: Sequence[Op], on_failure: Sequence[Op]) -> TxnResult:
        with self._lock:
            self._expire_locked()
            succeeded = all(c.holds(self._data.get(c.key)) for c in compares)
            ops = on_success if succeeded else on_failure
            for op in ops:
                if isinstance(op, Put) and op.lease and op.lease not in self._leases:
                    raise LeaseNotFound(f"lease {op.lease} not found")
            writes = any(not isinstance(op, Get) for op in ops)
            revision = self._revision + 1 if writes else self._revision
            wrote = False
            responses: list[list[KeyValue] | int | None] = []
            for op in ops:
                if isinstance(op, Get):
                    responses.append(self._range_locked(op.key) if op.prefix else self._get_list(op.key))
                elif isinstance(op, Put):
                    self._put_locked(op, revision)
                    wrote = True
                    responses.append(None)
                else:
                    count = self._delete_locked(op, revision)
                    wrote = wrote or count > 0
                    responses.append(count)
            if wrote:
                self._revision = revision
            return TxnResult(succeeded, tuple(responses), self._revision)

    def _get_list(self, key: str) -> list[KeyValue]:
        kv = self._data.get(key)
        return [] if kv is None else [kv]

    def _put_locked(self, op: Put, revision: int) -> None:
        old = self._data.get(op.key)
        if old is None:
            self._index_add(op.key)
            kv = KeyValue(op.key, op.value, revision, revision, 1, op.lease)
        else:
            if old.lease and old.lease != op.lease and old.lease in self._leases:
                self._leases[old.lease].keys.discard(op.key)
            kv = KeyValue(op.key, op.value, old.create_revision, revision, old.version + 1, op.lease)
        if op.lease:
            self._leases[op.lease].keys.add(op.key)
        self._data[op.key] = kv
        self._emit(Event(EventType.PUT, kv))

    def _delete_locked(self, op: Delete, revision: int) -> int:
        keys = [kv.key for kv in self._range_locked(op.key)] if op.prefix else [op.key]
        count = 0
        for key in keys:
            old = self._data.pop(key, None)
            if old is None:
                continue
            self._index_remove(key)
            if old.lease and old.lease in self._leases:
                self._leases[old.lease].keys.discard(key)
            self._emit(Event(EventType.DELETE, KeyValue(key, b"", 0, revision, 0, 0)))
            count += 1
        return count

    def _index_add(self, key: str) -> None:
        name = key[: key.rfind("/") + 1]
        keys = self._dirs.get(name)
        if keys is None:
            keys = self._dirs[name] = set()
            self._dir_names = None
        keys.add(key)
        self._dir_sorted.pop(name, None)

    def _index_remove(self, key: str) -> None:
        name = key[: key.rfind("/") + 1]
        keys = self._dirs[name]
        keys.discard(key)
        self._dir_sorted.pop(name, None)
        if not keys:
            del self._dirs[name]
            self._dir_names = None

    def _emit(self, event: Event) -> None:
        self._history.append(event)
        if len(self._history) > self._history_limit:
            # Forget whole revisions only: a watch from a revision must get all of its events or raise Compacted.
            dropped = self._history.popleft()
            self._compacted = max(self._compacted, dropped.revision)
            while self._history and self._history[0].revision <= self._compacted:
                self._history.popleft()
        for watch in self._watches:
            if watch.matches(event):
                watch.deliver(event)

    # -- leases --------------------------------------------------------------------------------------------

    def _grant(self, ttl_s: float) -> Lease:
        with self._lock:
            self._expire_locked()
            lease = Lease(self._next_lease, ttl_s)
            self._next_lease += 1
            self._leases[lease.id] = _LeaseState(ttl_s, self.clock.now() + ttl_s)
            heapq.heappush(self._expiries, (self._leases[lease.id].expires_at, lease.id))
            return lease

    def keepalive(self, lease: Lease | int) -> float:
        with self._lock:
            self._expire_locked()
            state = self._lease_locked(lease)
            state.expires_at = self.clock.now() + state.ttl_s
            heapq.heappush(self._expiries, (state.expires_at, lease_id(lease)))
            return state.ttl_s

    def time_to_live(self, lease: Lease | int) -> float:
        with self._lock:
            self._expire_locked()
            return max(0.0, self._lease_locked(lease).expires_at - self.clock.now())

    def revoke(self, lease: Lease | int) -> None:
        with self._lock:
            self._expire_locked()
            self._end_lease_locked(lease_id(lease))

    def _lease_locked(self, lease: Lease | int) -> _LeaseState:
        state = self._leases.get(lease_id(lease))
        if state is None:
            raise LeaseNotFound(f"lease {lease_id(lease)} not found")
        return state

    def _end_lease_locked(self, lid: int) -> None:
        state = self._leases.pop(lid, None)
        if state is None or not state.keys:
            return
        revision = self._revision + 1
        for key in sorted(state.keys):
            self._delete_locked(Delete(key), revision)
        self._revision = revision

    def _prune_expiries_locked(self) -> None:
        """Drop heap entries superseded by a keepalive or belonging to ended leases."""
        heap = self._expiries
        while heap:
            at, lid = heap[0]
            state = self._leases.get(lid)
            if state is not None and state.expires_at == at:
                return
            heapq.heappop(heap)

    def _seconds_to_next_expiry(self) -> float:
        self._prune_expiries_locked()
        if not self._expiries:
            return float("inf")
        return max(0.001, self._expiries[0][0] - self.clock.now())

    def _expire_locked(self) -> None:
        """End every lease due on the store's clock, in id order. A min-heap of (expires_at, id) with lazy deletion
        keeps this O(log n) per expiry instead of a scan of all leases on every operation."""
        heap = self._expiries
        if not heap or heap[0][0] > self.clock.now():
            return
        now = self.clock.now()
        due: set[int] = set()
        while heap and heap[0][0] <= now:
            at, lid = heapq.heappop(heap)
            state = self._leases.get(lid)
            if state is not None and state.expires_at == at:
                due.add(lid)
        for lid in sorted(due):
            self._end_lease_locked(lid)

    # -- watches and history -------------------------------------------------------------------------------

    def _watch(self, key: str, start_revision: int | None, *, prefix: bool, deletes_only: bool) -> Watch:
        with self._lock:
            self._expire_locked()
            watch = _MemoryWatch(self, key, prefix, deletes_only)
            if start_revision is not None:
                if start_revision <= self._compacted:
                    raise Compacted(start_revision, self._compacted)
                for event in self._history:
                    if event.revision >= start_revision and watch.matches(event):
                        watch.deliver(event)
            self._watches.add(watch)
            return watch

    def _compact(self, revision: int) -> None:
        with self._lock:
            if revision > self._revision:
                raise InvalidRequest("revision", f"{revision} is in the future (current {self._revision})")
            self._compacted = max(self._compacted, revision)
            while self._history and self._history[0].revision <= revision:
                self._history.popleft()


_NAMED: dict[str, MemoryStore] = {}
_NAMED_LOCK = threading.Lock()


def open_memory(url: str, clock: Clock | None) -> MemoryStore:
    """``memory://`` → a private store; ``memory://name`` → the process-wide store of that name."""
    name = url[len("memory://") :]
    if not name:
        return MemoryStore(url, clock or SYSTEM_CLOCK)
    with _NAMED_LOCK:
        if name not in _NAMED:
            _NAMED[name] = MemoryStore(url, clock or SYSTEM_CLOCK)
        return _NAMED[name]


__all__ = ["MemoryStore", "open_memory"]
