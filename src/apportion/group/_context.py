"""What every part of a fenced member shares (``_ownership``): its store, its identity, its clock, the group's keys and
effective definition, its history recorder and its tracer.

One mutable value, made by ``FencedMember`` and handed to each of its collaborators (the belief, the claimer, the
watch inbox, the registration, the committer), so that a definition the member adopts (and the key layout that comes
with it, ``_keys``) is the one all of them use from then on: none keeps a copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from apportion.clock import Clock
from apportion.group._config import GroupConfig
from apportion.group._history import HistoryType, Recorder
from apportion.group._keys import Keys, owner_value
from apportion.group._trace import TraceKind, Tracer
from apportion.store import Store

_OWNER_VALUES = 4096  # owner values kept encoded (epoch -> bytes): more than a member's partitions change epochs


@dataclass(slots=True, eq=False)
class MemberContext:
    """A member's shared surroundings. ``keys``, ``config`` and ``config_revision`` change when the member adopts a
    definition."""

    store: Store
    group: str
    id: str
    clock: Clock
    keys: Keys
    config: GroupConfig
    recorder: Recorder
    tracer: Tracer | None
    config_revision: int = 0  # the mod_revision of the stored definition ``config`` is (0: not read yet)
    _owner_values: dict[int, bytes] = field(default_factory=dict)

    def owner_value(self, epoch: int) -> bytes:
        """This member's owner record at ``epoch`` (what a claim writes and every fence compares), encoded once."""
        value = self._owner_values.get(epoch)
        if value is None:
            if len(self._owner_values) >= _OWNER_VALUES:
                self._owner_values.clear()
            value = self._owner_values[epoch] = owner_value(self.id, epoch)
        return value

    def trace(self, kind: TraceKind, **fields: Any) -> None:
        if self.tracer is not None:
            self.tracer(kind, fields)

    def put_event(self, kind: HistoryType, now: float, **fields: Any) -> None:
        """Record one history event in a transaction of its own (nothing when recording is disabled)."""
        ops = self.recorder.put(kind, now, **fields)
        if ops:
            self.store.txn([], ops)


__all__ = ["MemberContext"]
