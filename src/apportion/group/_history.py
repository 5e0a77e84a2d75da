"""The group's history of protocol events, for analytics (``apportion report``) and operators.

Writers append events inside the transaction that makes them true (a claim's event is in the claim txn, a commit's
in the commit txn: one event per txn, naming its partitions and epochs, ``_commits``), so the history never shows
something that did not happen. Ordering is the store revision of the
event's key (the txn that wrote it); events of one txn keep their write order. Event types (``HistoryType``, whose
docstring says what each means and which word the member's trace and the worker's event lines use for it)::

    registered, left, round_opened, round_joined, round_closed, claim, release, commit, fenced, lost, migrated

One event is one JSON record, ``{"type", "member", "time", "seq", <the type's fields>}`` (canonical: sorted keys,
``_keys.encode``); ``HISTORY_FORMAT`` (1) is its version, in the code only: the records of every release so far are
byte for byte what this one writes (users' stores keep them for the retention, ``apportion report`` reads them back).
``history()`` gives them as dicts and not as a typed record: each type brings fields of its own (a round's movement
and subscriptions, a migration's source, a loss's reason), and a reader of an older or newer version's history must
keep what it does not know.

Retention is by time, not by count: an event is kept at least ``retention_s`` (default ``DEFAULT_RETENTION_S``, one
hour; 0 disables recording) and at most ``retention_s + 2 x BUCKET_S`` after its time (buckets are whole minutes,
checked once a minute). Layout::

    /apportion/.history/<group>/<bucket>/<member>/<time_us>-<seq>    one event (bucket: its minute, 12 digits)
    /apportion/<group>/history                                      {expired_before}: older events may be gone

Why this design (it is the simplest that is correct on every backend):

- Keys are ordered by time first (the bucket is the minute of the writer's clock, zero-padded), so the oldest events
  are the first keys, and one prefix delete removes a whole minute. The store contract has prefix deletes only (no
  ``[start, end)`` range delete) and leases need renewing or a grant per writer and bucket; a delete per minute
  needs neither.
- Any member prunes for the whole group (``Recorder.prune``, once per ``BUCKET_S`` from its protocol step): it reads
  the oldest key (``range(limit=1)``) and deletes its bucket while that bucket ended before ``now - retention_s``.
  So the events of members that left or crashed for good expire too, which a member pruning only its own could not
  do. The delete and the ``expired_before`` mark are one txn guarded by the mark's mod_revision, so the mark only
  grows and the report can say what may be missing.
- Events live outside the group's prefix ``/apportion/<group>/`` that every member watches and ``status`` reads, so
  neither the writes nor the prune deletes of a long history reach the members' watches or a status snapshot.

Store cost: about 250 bytes per event (key plus JSON value) plus ~10 per partition it names, i.e. ``events/s x
retention_s x that``. A commit txn records one event for all its partitions (up to 120; the checkpoints themselves
are not in it): 32 workers committing 16,384 partitions every 5 s record ~32 events/s, ~150 MB for the default hour
(an event per partition's commit was ~3,300 events/s, ~3 GB: beyond etcd's default quota of 2 GB).
Retention is measured on the pruning member's clock (skew shifts it by the skew). Keys of the former ring layout
(``/apportion/<group>/events/<id>/<slot>``) are neither read nor pruned.

``history()`` returns the events sorted by revision; ``history_expired_before()`` the mark.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import logging
import math
from typing import Any

from apportion.errors import CorruptRecord, InvalidRequest, StoreUnavailable
from apportion.group._keys import Keys, decode, encode
from apportion.store import Compare, Delete, KeyValue, Put, Store, absent, mod_revision_is

log = logging.getLogger("apportion.history")

HISTORY_FORMAT = 1
"""The version of a history event's record (the module docstring); not stored: the bytes are those of every release."""


class HistoryType(enum.StrEnum):
    """A history event's ``type``: a ``str`` enum, so the stored JSON is the plain word (old histories read as before).

    The member's trace (``TraceKind``) and the worker's event lines (``apportion.events.WorkerEvent``) use the same
    word for the same thing, except where the history is older: ``RELEASE`` is the trace's ``released`` (and the
    Kafka consumer's line ``released``); ``LEFT`` (a graceful leave, written just before the member's lease is
    revoked) is the trace's ``stopped`` (and the worker's last line, ``stopped``, when it left). The stored words stay:
    histories in users' stores must stay readable.
    """

    REGISTERED = "registered"  # the member's registration is written (start, after a lapse)
    LEFT = "left"  # it left gracefully (members/<id> said "left"; a crash writes no ``left``)
    ROUND_OPENED = "round_opened"  # rounds: it opened a round (``prev``: the revision of the one it followed)
    ROUND_JOINED = "round_joined"  # rounds: it joined one (``round``)
    ROUND_CLOSED = "round_closed"  # rounds: it wrote a round's plan (``round``, ``participants``, the movement)
    CLAIM = "claim"  # owner records written (``partitions``, ``epochs``)
    RELEASE = "release"  # owner records deleted (``partitions``, ``epochs``)
    COMMIT = "commit"  # fenced commits accepted (``partitions``, ``epochs``)
    FENCED = "fenced"  # commits refused: the epochs were stale (``partitions``, ``epochs``)
    LOST = "lost"  # on_lost: the lease lapsed or a commit was fenced (``partitions``, ``epochs``, ``reason``)
    MIGRATED = "migrated"  # coordinator: a migration was acknowledged (``partitions``, ``epochs``, ``source``)


EVENT_TYPES = tuple(HistoryType)
DEFAULT_RETENTION_S = 3600.0
BUCKET_S = 60  # whole seconds: bucket names are the bucket's first second
_BUCKET_DIGITS = 12


def _bucket(time: float) -> int:
    return int(max(time, 0.0) // BUCKET_S) * BUCKET_S


def _bucket_of(keys: Keys, key: str) -> int | None:
    """The bucket (first second) of an event key, None for anything else."""
    head = key[len(keys.events) :].partition("/")[0]
    return int(head) if len(head) == _BUCKET_DIGITS and head.isdigit() else None


class Recorder:
    """Builds the Put of a member's next history event (or nothing when recording is disabled) and prunes expired
    events of the whole group."""

    __slots__ = ("_keys", "_member", "_next_prune", "_seq", "retention_s")

    def __init__(self, keys: Keys, member_id: str, retention_s: float) -> None:
        if not (isinstance(retention_s, int | float) and not isinstance(retention_s, bool) and retention_s >= 0):
            raise InvalidRequest("history_retention_s", f"must be a number >= 0 (0 disables), got {retention_s!r}")
        self._keys = keys
        self._member = member_id
        self._seq = itertools.count()  # next() is atomic: commits may record from other threads
        self._next_prune = -math.inf
        self.retention_s = float(retention_s)

    def put(self, kind: HistoryType, time: float, **fields: Any) -> list[Put]:
        """Zero or one Put (append to the ops of the txn that makes the event true)."""
        if self.retention_s <= 0:
            return []
        seq = next(self._seq)
        record = {"type": kind, "member": self._member, "time": round(time, 6), "seq": seq, **fields}
        stamp = f"{int(max(time, 0.0) * 1e6):016d}-{seq}"
        key = f"{self._keys.events}{_bucket(time):0{_BUCKET_DIGITS}d}/{self._member}/{stamp}"
        return [Put(key, encode(record))]

    def prune(self, store: Store, now: float) -> int:
        """At most once per ``BUCKET_S``: delete the group's buckets that ended before ``now - retention_s``.
        Best effort (a store fault only postpones it); returns the number of event keys deleted."""
        if self.retention_s <= 0 or now < self._next_prune:
            return 0
        self._next_prune = now + BUCKET_S
        with contextlib.suppress(StoreUnavailable):
            return prune(store, self._keys, now - self.retention_s)
        return 0


def prune(store: Store, keys: Keys, cutoff: float) -> int:
    """Delete every bucket of events that ended at or before ``cutoff``, oldest first, and raise the
    ``expired_before`` mark to the end of the last one deleted; returns the number of event keys deleted."""
    deleted = 0
    while True:
        oldest = store.range(keys.events, limit=1)
        bucket = _bucket_of(keys, oldest[0].key) if oldest else None
        if bucket is None or bucket + BUCKET_S > cutoff:
            return deleted
        mark = store.get(keys.history)
        end = float(bucket + BUCKET_S)
        guard: Compare = absent(keys.history) if mark is None else mod_revision_is(keys.history, mark.mod_revision)
        ops: list[Delete | Put] = [Delete(f"{keys.events}{bucket:0{_BUCKET_DIGITS}d}/", prefix=True)]
        if mark is None or _expired_before(mark) < end:
            ops.append(Put(keys.history, encode({"expired_before": end})))
        result = store.txn([guard], ops)
        if result.succeeded:
            count = result.responses[0]
            deleted += count if isinstance(count, int) else 0
        # lost a race with another pruner: read again


def history_expired_before(store: Store, group: str) -> float | None:
    """The time before which events may have been deleted by retention (None: nothing was ever pruned)."""
    kv = store.get(Keys(group).history)
    return None if kv is None else _expired_before(kv)


def _expired_before(kv: KeyValue) -> float:
    """The ``history`` mark; a corrupt one is only bookkeeping: warned about and read as 0 (the next prune
    rewrites it)."""
    try:
        value = decode(kv.value, kv.key).get("expired_before", 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise CorruptRecord(kv.key, f"'expired_before' must be a number of seconds, got {value!r:.80}")
        return float(value)
    except CorruptRecord as exc:
        log.warning("%s (read as 0)", exc)
        return 0.0


def _event(kv: KeyValue) -> dict[str, Any] | None:
    """One stored event, or None (with a warning) when it is not one: a history event never stops anyone."""
    try:
        record = decode(kv.value, kv.key)
        parts, epochs, seq = record.get("partitions"), record.get("epochs"), record.get("seq", 0)
        if parts is not None and not (isinstance(parts, list) and all(_is_int(p) or isinstance(p, str) for p in parts)):
            raise CorruptRecord(kv.key, f"'partitions' must be a list of partition ids, got {parts!r:.80}")
        if epochs is not None and not (
            isinstance(epochs, list) and len(epochs) == len(parts or []) and all(_is_int(e) for e in epochs)
        ):
            raise CorruptRecord(kv.key, f"'epochs' must be a list, one per partition, got {epochs!r:.80}")
        if not _is_int(seq) or not isinstance(record.get("type", ""), str):
            raise CorruptRecord(kv.key, "'seq' must be an integer and 'type' a string")
        if not _is_int(record.get("round", 0)) or not isinstance(record.get("participants", []), list):
            raise CorruptRecord(kv.key, "'round' must be an integer and 'participants' a list")
    except CorruptRecord as exc:
        log.warning("%s (event skipped)", exc)
        return None
    return record


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def history(store: Store, group: str) -> list[dict[str, Any]]:
    """Every recorded event of ``group``, oldest first; an event about several partitions is expanded into one
    dict per partition (``partition``, ``epoch``). Each dict has ``revision``, ``time``, ``type``, ``member``."""
    keys = Keys(group)
    rows: list[tuple[int, str, int, dict[str, Any]]] = []
    for kv in store.range(keys.events):
        record = _event(kv)
        if record is None:
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


__all__ = [
    "BUCKET_S",
    "DEFAULT_RETENTION_S",
    "EVENT_TYPES",
    "HISTORY_FORMAT",
    "HistoryType",
    "Recorder",
    "history",
    "history_expired_before",
    "prune",
]
