"""A member's subscriptions in a group over named resources: its own, and an operator's that replace them.

``Subscriptions`` is shared by the rounds and coordinator members (the static mode has none)::

    own      what the member was started with (``--subscribe``, ``Group.join(subscriptions=...)``), or set later by
             ``subscribe()`` (``Worker.subscribe``)
    operator ``subscriptions/<id>`` (``apportion subscribe``) while it exists: it replaces ``own``, also across
             restarts; deleted (``--clear``), ``own`` applies again; one that does not fit the group is ignored
             with a warning (it only steers)
    current  what the member consumes now: set by ``take()`` on the stepping thread, which then revokes what no
             longer fits and announces ``current`` (``members/<id>``, participation records)

``subscribe`` and ``on_record`` may run on any thread (a user's, or the stepping thread's watch events); ``take``
hands the latest wanted value over once, when it differs from ``current``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from apportion.errors import CorruptRecord, InvalidRequest
from apportion.group._config import GroupConfig
from apportion.group._keys import Keys, PartitionId, decode, encode, subscribed, validate_member_id
from apportion.store import KeyValue, Store

log = logging.getLogger(__name__)

Wanted = frozenset[str] | None


class Subscriptions:
    """One member's subscriptions (module docstring). Thread-safe."""

    def __init__(self, config: GroupConfig, keys: Keys, member_id: str, subscriptions: Sequence[str] | None) -> None:
        self.current: Wanted = config.subscriptions(None if subscriptions is None else list(subscriptions))
        self.own: Wanted = self.current
        self.key = keys.subscription(member_id)
        self._member = member_id
        self._pending: tuple[Wanted] | None = None
        self._lock = threading.Lock()

    def subscribe(self, config: GroupConfig, subscriptions: Sequence[str] | None) -> None:
        """The member's own subscriptions from now on (InvalidRequest when they do not fit the group)."""
        wanted = config.subscriptions(None if subscriptions is None else list(subscriptions))
        with self._lock:
            self.own = wanted
            self._pending = (wanted,)

    def on_record(self, config: GroupConfig, kv: KeyValue | None) -> None:
        """The operator's record ``subscriptions/<id>`` was written (``kv``) or deleted (None)."""
        try:
            wanted = self.own
            if kv is not None:
                wanted = config.subscriptions(decode(kv.value, kv.key).get("subscriptions"))
        except (CorruptRecord, InvalidRequest) as exc:
            log.warning("member %s: %s (operator's subscriptions ignored)", self._member, exc)
            return
        with self._lock:
            self._pending = (wanted,)

    def take(self) -> tuple[Wanted] | None:
        """On the stepping thread: the new subscriptions, now current, when a change is waiting; else None."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None or pending[0] == self.current:
            return None
        self.current = pending[0]
        return pending

    @property
    def waiting(self) -> bool:
        return self._pending is not None

    def allows(self, pid: PartitionId) -> bool:
        return subscribed(self.current, pid)

    def record(self) -> dict[str, Any]:
        """The ``subscriptions`` field of a registration or participation record (none: every resource)."""
        return {} if self.current is None else {"subscriptions": sorted(self.current)}

    @staticmethod
    def shown(wanted: Wanted) -> list[str] | None:
        return None if wanted is None else sorted(wanted)


def set_subscriptions(store: Store, group: str, member_id: str, subscriptions: Sequence[str] | None) -> None:
    """An operator's subscriptions for ``member_id`` (``apportion subscribe``): they replace the member's own while
    the record exists; ``None`` deletes it (the member goes back to its own). Checked against the group's resources
    (InvalidRequest); the member need not be live (it takes them up when it starts)."""
    validate_member_id(member_id)
    key = Keys(group).subscription(member_id)
    if subscriptions is None:
        store.delete(key)
        return
    config = GroupConfig.load(store, group)
    wanted = config.subscriptions(list(subscriptions))
    store.put(key, encode({"subscriptions": sorted(wanted or ())}))


__all__ = ["Subscriptions", "set_subscriptions"]
