"""A member's copy of a few store keys, kept current by the watch it already has: read once, then follow events.

Every member watches its group's whole prefix from before its first read (``FencedMember._start`` creates the watch,
then reads), so each change after a read reaches the member as an event. A tracked key or prefix is therefore read
from the store only when its copy is unknown: at start, after a lapse, or when the member has a reason to doubt it
(a transaction that compared it failed). Reads are snapshots at a store revision (a read-only txn returns it);
events at or below that revision are already in the copy and are ignored, later ones are applied in order. So the
copy is always the store's state as of some revision at or after the last read, never older — it lags the store by
at most what the watch has not delivered yet, which is what any watcher sees.

States of a copy::

    UNKNOWN --get/items: read (one store call)--> KNOWN(revision R)
    KNOWN(R) --event at revision r > R--> KNOWN(r)         (events at r <= R: already in the copy)
    any --forget() (start, lapse, a failed compare)--> UNKNOWN
"""

from __future__ import annotations

from apportion.store import Event, EventType, Get, KeyValue, Store


class TrackedKey:
    """One key as of the newest revision this member knows."""

    __slots__ = ("_known", "_kv", "_revision", "key")

    def __init__(self, key: str) -> None:
        self.key = key
        self._kv: KeyValue | None = None
        self._revision = 0
        self._known = False

    def get(self, store: Store) -> KeyValue | None:
        """The key's value (None: absent), read from the store only when the copy is unknown."""
        if not self._known:
            result = store.txn([], [Get(self.key)])
            found = result.responses[0]
            self._kv = found[0] if isinstance(found, list) and found else None
            self._revision = result.revision
            self._known = True
        return self._kv

    def on_event(self, event: Event) -> bool:
        """Apply a watched change of this key; True when the copy changed."""
        if not self._known or event.kv.key != self.key or event.revision <= self._revision:
            return False
        self._kv = event.kv if event.type is EventType.PUT else None
        self._revision = event.revision
        return True

    def wrote(self, kv: KeyValue) -> None:
        """This member's own successful write (its event will follow and be ignored)."""
        if kv.mod_revision > self._revision:
            self._kv, self._revision = kv, kv.mod_revision

    def forget(self) -> None:
        self._known = False


class TrackedPrefix:
    """Every key under a prefix as of the newest revision this member knows."""

    __slots__ = ("_known", "_kvs", "_revision", "prefix")

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._kvs: dict[str, KeyValue] = {}
        self._revision = 0  # of the read: later changes come as events
        self._known = False

    def items(self, store: Store) -> list[KeyValue]:
        """The keys under the prefix, sorted, read from the store only when the copy is unknown."""
        if not self._known:
            result = store.txn([], [Get(self.prefix, prefix=True)])
            found = result.responses[0]
            self._kvs = {kv.key: kv for kv in found} if isinstance(found, list) else {}
            self._revision = result.revision
            self._known = True
        return [self._kvs[key] for key in sorted(self._kvs)]

    def on_event(self, event: Event) -> bool:
        """Apply a watched change under the prefix; True when the copy changed. Changes after the read apply in
        watch order (several keys of one txn share a revision: all of them apply)."""
        key = event.kv.key
        if not self._known or not key.startswith(self.prefix) or event.revision <= self._revision:
            return False
        if event.type is EventType.PUT:
            self._kvs[key] = event.kv
        else:
            self._kvs.pop(key, None)
        return True

    def forget(self) -> None:
        self._known = False


__all__ = ["TrackedKey", "TrackedPrefix"]
