"""The group's history of protocol events, for analytics (``apportion report``) and operators.

Writers append events inside the transaction that makes them true (a claim's event is in the claim txn, a commit's
in the commit txn), so the history never shows something that did not happen. Ordering is the store revision of the
event's key (the txn that wrote it); events of one txn keep their write order.

Size is bounded: each member id owns a ring of ``size`` keys ``events/<id>/<slot>``; the ``seq``-th event of a member
goes to slot ``seq % size`` and overwrites the oldest. So the history keeps about the last ``size`` events per member
id (default 1000; 0 disables recording), and ``history()`` returns them sorted by revision. Event types::

    registered, left, round_opened, round_joined, round_closed, claim, release, commit, fenced, lost
"""

from __future__ import annotations

import itertools
from typing import Any

from apportion.group._keys import Keys, decode, encode
from apportion.store import Put, Store

EVENT_TYPES = (
    "registered",
    "left",
    "round_opened",
    "round_joined",
    "round_closed",
    "claim",
    "release",
    "commit",
    "fenced",
    "lost",
)


class Recorder:
    """Builds the Put of a member's next history event (or nothing when recording is disabled)."""

    __slots__ = ("_keys", "_member", "_seq", "size")

    def __init__(self, keys: Keys, member_id: str, size: int) -> None:
        self._keys = keys
        self._member = member_id
        self._seq = itertools.count()  # next() is atomic: commits may record from other threads
        self.size = size

    def put(self, kind: str, time: float, **fields: Any) -> list[Put]:
        """Zero or one Put (append to the ops of the txn that makes the event true)."""
        if self.size <= 0:
            return []
        seq = next(self._seq)
        record = {"type": kind, "member": self._member, "time": round(time, 6), "seq": seq, **fields}
        key = self._keys.event(self._member, seq % self.size)
        return [Put(key, encode(record))]


def history(store: Store, group: str) -> list[dict[str, Any]]:
    """Every recorded event of ``group``, oldest first; an event about several partitions is expanded into one
    dict per partition (``partition``, ``epoch``). Each dict has ``revision``, ``time``, ``type``, ``member``."""
    keys = Keys(group)
    rows: list[tuple[int, str, int, dict[str, Any]]] = []
    for kv in store.range(keys.events):
        try:
            record = decode(kv.value)
        except ValueError:
            continue
        record["revision"] = kv.mod_revision
        rows.append((kv.mod_revision, str(record.get("member", "")), int(record.get("seq", 0)), record))
    rows.sort(key=lambda row: row[:3])
    out: list[dict[str, Any]] = []
    for _, _, _, record in rows:
        parts = record.pop("partitions", None)
        epochs = record.pop("epochs", None)
        if parts is None:
            out.append(record)
            continue
        for i, p in enumerate(parts):
            row = dict(record)
            row["partition"] = p
            if epochs is not None:
                row["epoch"] = epochs[i]
            out.append(row)
    return out


__all__ = ["EVENT_TYPES", "Recorder", "history"]
