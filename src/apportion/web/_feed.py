"""The dashboard's one reader of the store: a thread that follows the group and publishes what the page shows.

One ``Feed`` per server, whatever the number of browsers: it opens the store read-only (``connect(url,
read_only=True)``: nothing is ever created, written or expired), watches the group's prefix and its history prefix (a
commit, whose record lives beside the group's prefix, arrives as its transaction's history event; with the history
off, a new checkpoint shows at the next full read, ``RESYNC_S`` at the latest), and after each batch of changes (at
most every ``MIN_GAP_S``) or every ``refresh_s`` at the latest (a lease that expired with no writer to delete it, the
age of each member's last heartbeat) reads a ``group_status`` snapshot and publishes a new state: one JSON document,
serialised once, numbered by ``version``. The browsers' event streams wait on that number (``wait_newer``), so a
browser costs no store call.

The snapshot is of the feed's copy of the group's keys (``_Mirror``): one full read of the prefix, then the group
watch's events on top, so a snapshot costs the store one ``revision`` call and the members' lease reads, not a
range of every key (100,000 partitions: 300,000 keys, seconds of etcd's CPU). The copy is read again in full every
``RESYNC_S`` (or ``RESYNC_READS`` x its own time) at the latest, after a failure, and sooner when a member's lease
turns out gone: a read-only SQLite store hides the keys of an expired lease but no event says so.

What the feed remembers beyond a snapshot (the store keeps only the present):

- members it has seen: one that is no longer registered stays listed as dead (``gone_at``) for ``KEEP_DEAD_S``;
- the ownership timeline: per partition, who owned it from when to when (server time), over the last
  ``window_s``; at start it is filled from the history's claim/release/lost events;
- the last ``KEEP_PLANS`` round plans (the history's ``round_closed`` events: moves against the lower bound);
- the last ``KEEP_FAULTS`` faults: ``lost`` and ``fenced`` events of the history, and members whose registration
  vanished without a ``left`` event (lease expired) with ``failover_s``: the seconds from their last heartbeat seen
  (lease renewal) until every partition they owned had a live new owner (as the feed saw it: within ``refresh_s``).
  Coordinator mode's ``failed`` records come with each snapshot.

States of the feed::

    CONNECTING --store opened, watches open, history read--> FOLLOWING
    FOLLOWING --a read or a watch fails (StoreUnavailable, Compacted, ...)--> UNREACHABLE (published at once)
    FOLLOWING --a record that decides ownership is corrupt (CorruptRecord)--> ERROR (published at once)
    UNREACHABLE, ERROR --RETRY_S later: store opened again, watches reopened (the history's from where it
        stopped)--> FOLLOWING
    FOLLOWING --the SQLite file was deleted or replaced (StoreReplaced: "store file missing", "store replaced")-->
        UNREACHABLE; the next open that finds a file at the path follows it afresh (its history from the start,
        the old file's timeline, members and faults dropped) and lists a "replaced" fault saying so
    any --stop() or close()--> CLOSED

The published ``store`` is the URL with its password masked; error texts are masked the same way.

Large groups (issue 27): a snapshot of 100,000 partitions takes about a second of CPU even from the copy (300,000
keys decoded; an unchanged copy gives the last snapshot again, for free), so after a snapshot from the copy of ``d``
seconds the next waits ``READ_PAUSE x d`` (a change shows within about ``4 d``, and the feed uses at most a quarter
of a core); the time limit of a read grows with the last one's (the first full read gets ``FIRST_READ_LIMIT_S``).
A state lists at most ``LISTED`` partitions with their timeline: every partition up to that size, else the ones not
at rest (unowned, lapsing, moving, waiting for an ordinal, warming up learners, moving in the partition table)
first, then the latest to change owner, shown in partition order. ``partition_count`` and ``owned_count`` count them
all, ``listed`` says which are listed (``"all"`` or ``"not at rest, then the latest to change owner"``); each member
has ``partition_count`` (and its ``partitions`` only when every partition is listed); a fault or failed member lists
at most ``LISTED_FAULT_PARTITIONS`` of its partitions (``partition_count``: all). Measured before and after at
100,000 partitions: bench/README.md ("status and dashboard at 100,000 partitions").
"""

from __future__ import annotations

import bisect
import heapq
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from apportion.errors import ApportionError, Compacted, CorruptRecord, LeaseNotFound, StoreReplaced
from apportion.group import GroupStatus, HistoryType, PartitionId, checkpoint_offset, group_status, history
from apportion.group.internals import Keys, decode, not_at_rest, pid_of_text
from apportion.model import round_lower_bound
from apportion.store import (
    Compare,
    Event,
    EventType,
    KeyValue,
    Lease,
    NoSuchStore,
    Op,
    Store,
    TxnResult,
    Watch,
    connect,
    redact,
    redact_url,
    url_secrets,
)

log = logging.getLogger("apportion.dashboard")

MIN_GAP_S = 0.1  # at most ten snapshots a second, however busy the store
READ_PAUSE = 3.0  # after a snapshot that took d seconds, the next one waits READ_PAUSE x d: at most a quarter core
RETRY_S = 0.5  # pause before reconnecting after a failure
READ_LIMIT_S = 2.0  # a snapshot that takes longer (and 10 x the last one) means the store is unreachable
FIRST_READ_LIMIT_S = 300.0  # the first snapshot, whose size is not known yet (100,000 partitions on etcd: 10-40 s)
RESYNC_S = 60.0  # the copy of the group's keys is read again in full at least this often...
RESYNC_READS = 10  # ...and no more often than every RESYNC_READS x the time a full read takes
LISTED = 500  # partitions a state lists with their timeline (a larger group: those not at rest, then the latest moved)
LISTED_FAULT_PARTITIONS = 100  # partitions a fault or a failed member lists in a larger group's state
KEEP_DEAD_S = 600.0
KEEP_PLANS = 12
KEEP_FAULTS = 30
FAULT_TYPES = (HistoryType.LOST, HistoryType.FENCED)


def _mode(snapshot: GroupStatus) -> str:
    """The group's stored mode; for a definition stored before modes were (``mode`` None), what its keys suggest."""
    if snapshot.mode is not None:
        return snapshot.mode
    if snapshot.replicas is not None:
        return "static"
    if snapshot.coordinator is not None or snapshot.table:
        return "coordinator"
    return "rounds"


class _Mirror(Store):
    """The keys under ``prefixes`` as a full read gave them, with the watches' events since applied on top (an event
    newer than the copy of its key replaces or deletes it; each key's events come in revision order, so the copy
    ends as the store was at the last event). ``group_status`` reads it as a store: a range or get inside one of
    ``prefixes`` is answered from the copy; any other key, prefix or call goes to ``store`` itself."""

    def __init__(self, store: Store, prefixes: tuple[str, ...], kvs: list[KeyValue]) -> None:
        self.store = store
        self.url = store.url
        self.clock = store.clock
        self.prefixes = prefixes
        self.kvs = {kv.key: kv for kv in kvs}
        self._sorted: list[KeyValue] | None = None  # the values in key order, and the keys: rebuilt after a change
        self._keys: list[str] = []
        self.changes = 0  # events applied: a snapshot of an unchanged copy is the last one

    def apply(self, events: list[Event]) -> None:
        for event in events:
            key = event.kv.key
            have = self.kvs.get(key)
            if not key.startswith(self.prefixes) or (have is not None and event.revision <= have.mod_revision):
                continue  # an event the full read already holds
            if event.type is EventType.PUT:
                self.kvs[key] = event.kv
            elif have is not None:
                del self.kvs[key]
            else:
                continue
            self._sorted = None
            self.changes += 1

    def range(self, prefix: str, limit: int | None = None) -> list[KeyValue]:
        if not prefix.startswith(self.prefixes):
            return self.store.range(prefix, limit)
        if self._sorted is None:
            self._keys = sorted(self.kvs)
            self._sorted = [self.kvs[key] for key in self._keys]
        start = bisect.bisect_left(self._keys, prefix)
        end = bisect.bisect_left(self._keys, prefix + "\x7f", start)  # keys are printable ASCII, below 0x7f
        return self._sorted[start : end if limit is None else min(end, start + limit)]

    def get(self, key: str) -> KeyValue | None:
        return self.kvs.get(key) if key.startswith(self.prefixes) else self.store.get(key)

    def revision(self) -> int:
        return self.store.revision()

    def _txn(self, compares: Sequence[Compare], on_success: Sequence[Op], on_failure: Sequence[Op]) -> TxnResult:
        return self.store.txn(compares, on_success, on_failure)

    def _grant(self, ttl_s: float) -> Lease:
        return self.store.grant(ttl_s)

    def keepalive(self, lease: Lease | int) -> float:
        return self.store.keepalive(lease)

    def revoke(self, lease: Lease | int) -> None:
        self.store.revoke(lease)

    def time_to_live(self, lease: Lease | int) -> float:
        return self.store.time_to_live(lease)

    def _watch(self, key: str, start_revision: int | None, *, prefix: bool, deletes_only: bool) -> Watch:
        return self.store.watch(key, start_revision, prefix=prefix, deletes_only=deletes_only)

    def _compact(self, revision: int) -> None:
        self.store.compact(revision)


class Feed:
    """Follows ``group`` on the store at ``url`` (read-only) on a thread of its own; see the module docstring."""

    def __init__(
        self,
        url: str,
        group: str,
        *,
        refresh_s: float = 1.0,
        window_s: float = 300.0,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self.group = group
        self.keys = Keys(group)
        self._copied = (self.keys.prefix, self.keys.ownership)  # what the mirror holds (``_Mirror``)
        self.refresh_s = refresh_s
        self.window_s = window_s
        self._now = now
        self._secrets = url_secrets(url)
        self._cond = threading.Condition()
        self._closed = threading.Event()
        self._version = 0
        self._payload = "{}"
        self._state: dict[str, Any] = {}
        self._store: Store | None = None
        self._watches: list[Watch] = []
        self._started = now()
        self._problem: str | None = None
        self._status = "ok"
        self._replaced: str | None = None  # the store's file was deleted or replaced: start afresh on the next open
        self._full_reads = 0
        self._forget_store()
        self._thread = threading.Thread(target=self._run, name=f"dashboard-{group}", daemon=True)

    def _forget_store(self) -> None:
        """What the feed remembers of the store it follows: nothing yet."""
        self._history_revision = 0  # the last history event taken in
        self._snapshot: GroupStatus | None = None
        self._revision = 0
        self._members: dict[str, dict[str, Any]] = {}
        # member -> (read at: monotonic, and the feed's clock; seconds since its lease was renewed)
        self._heartbeats: dict[str, tuple[float, float, float | None]] = {}
        self._segments: list[dict[str, Any]] = []
        self._open: dict[PartitionId, dict[str, Any]] = {}  # partition -> its open timeline segment
        self._plans: list[dict[str, Any]] = []
        self._faults: list[dict[str, Any]] = []
        self._left: dict[str, float] = {}  # member -> time of its last "left" event
        self._changed: dict[PartitionId, float] = {}  # partition -> when its owner last changed (the feed's clock)
        self._read_s: float | None = None  # how long the last snapshot from the copy took (None: none yet)
        self._full_s: float | None = None  # how long the last full read took (it paces nothing: it is rare)
        self._mirror: _Mirror | None = None  # the group's keys as last read, with the watch's events since
        self._pending: list[Event] = []  # group watch events not applied to the mirror yet
        self._resync_at = 0.0  # monotonic: the next full read
        self._snapshot_of = (0, 0, 0)  # (full reads, changes to the copy, history revision) of the last snapshot
        self._restless: list[str] = []  # the last snapshot's partitions not at rest, in id order

    # -- the browsers' side ------------------------------------------------------------------------------------

    def start(self) -> Feed:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following and wake every ``wait_newer`` (at once: safe in a signal handler); :meth:`close` after."""
        self._closed.set()
        with self._cond:
            self._cond.notify_all()

    @property
    def stopped(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        self.stop()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5.0)
        self._disconnect()

    def wait_newer(self, seen: int, timeout_s: float) -> tuple[int, str]:
        """``(version, JSON state)`` as soon as the version is above ``seen`` (or after ``timeout_s``: the same)."""
        with self._cond:
            if self._version <= seen and not self._closed.is_set():
                self._cond.wait(timeout_s)
            return self._version, self._payload

    def state(self) -> dict[str, Any]:
        """The latest published state (a copy's worth: do not modify)."""
        with self._cond:
            return self._state

    # -- the reader thread -------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._closed.is_set():
            try:
                self._follow()
            except Exception as exc:  # the page must say so, never freeze on its last state
                ours = isinstance(exc, ApportionError)
                problem = self._clean(str(exc) if ours else f"{type(exc).__name__}: {exc}")
                if isinstance(exc, StoreReplaced):
                    self._replaced = problem
                elif self._replaced is not None and isinstance(exc, NoSuchStore):
                    problem = self._replaced  # still gone: "store file missing", as first seen
                if problem != self._problem:  # once per new problem, not at every retry
                    log.warning("dashboard for group %s: %s", self.group, problem, exc_info=not ours)
                self._problem = problem
                self._status = "unreachable" if ours and not isinstance(exc, CorruptRecord) else "error"
                self._disconnect()
                self._publish()
                self._closed.wait(RETRY_S)

    def _follow(self) -> None:
        if self._store is None:
            self._store = connect(self.url, read_only=True)
            if self._replaced is not None:
                self._follow_new_file(self._replaced)
        store = self._store
        if not self._watches:
            # the group's prefix and its ownership records (beside it in a layout-2 group: ``_keys``), copied
            self._watches = [store.watch(prefix) for prefix in self._copied]
            self._watches.append(self._history_watch(store))
        group_watch, owner_watch, history_watch = self._watches
        self._read(store)
        last = time.monotonic()
        while not self._closed.is_set():
            changes = group_watch.wait(min(self.refresh_s, 0.5)) + owner_watch.poll()
            self._pending += changes
            changed = bool(changes)
            events = history_watch.poll()
            if events:
                changed = True
                self._take_history(self._decode_events(events))
            since = time.monotonic() - last
            gap = max(MIN_GAP_S, READ_PAUSE * (self._read_s or 0.0))  # a slow snapshot: a longer pause
            if (changed and since >= gap) or since >= max(self.refresh_s, gap):
                self._read(store)
                last = time.monotonic()
            elif changed:  # too soon after the last read: wait out the gap, then read
                self._closed.wait(gap - since)
                self._read(store)
                last = time.monotonic()

    def _history_watch(self, store: Store) -> Watch:
        """The history's watch, from the first event not taken in yet (all of the history on the first open, or
        when the store compacted what was missed)."""
        if self._history_revision:
            try:
                return store.watch(self.keys.events, self._history_revision + 1)
            except Compacted:
                pass
        watch = store.watch(self.keys.events)
        taken = self._history_revision
        events = [e for e in history(store, self.group) if int(e["revision"]) > taken]
        if events:
            self._history_revision = max(int(e["revision"]) for e in events)
        self._seed_timeline(events)
        self._take_history(events)
        return watch

    def _follow_new_file(self, problem: str) -> None:
        """The store's file was deleted or replaced (``StoreReplaced``, SQLite) and a file is at its path again: the
        feed follows it, as ``apportion status`` would read it, and starts afresh: the old file's revisions, history
        and timeline say nothing of the new one (its history is read from its start). The page says so in its faults
        (``replaced``). Following rather than stopping on the old file: whoever replaced it (``mv new.db
        store.db``, a restore) means the new one to be the store, and every process that opens the store from now
        on reads that one."""
        self._forget_store()
        self._replaced = None
        reason = f"{problem}; following the new file (what the page showed of the old one is dropped)"
        self._faults.append(
            {"type": "replaced", "member": None, "time": self._now(), "partitions": [], "reason": reason}
        )

    def _disconnect(self) -> None:
        self._mirror, self._pending = None, []  # the events of a new watch start later: read everything again
        watches, self._watches = self._watches, []
        for watch in watches:
            watch.close()
        store, self._store = self._store, None
        if store is not None:
            store.close()

    def _clean(self, text: str) -> str:
        return " ".join(redact(text, self._secrets).split())

    # -- history events ----------------------------------------------------------------------------------------

    def _decode_events(self, events: list[Any]) -> list[dict[str, Any]]:
        """Stored history events (PUTs of the watch) as ``history()`` gives them: one dict per partition."""
        out: list[dict[str, Any]] = []
        for event in events:
            if event.type is not EventType.PUT:
                continue  # retention's deletes
            try:
                record = decode(event.kv.value, event.kv.key)
            except CorruptRecord as exc:
                log.warning("%s (event skipped)", exc)
                continue
            record["revision"] = event.kv.mod_revision
            self._history_revision = max(self._history_revision, event.kv.mod_revision)
            parts = record.pop("partitions", None)
            epochs = record.pop("epochs", None)
            if not isinstance(parts, list):
                out.append(record)
                continue
            for i, p in enumerate(parts):
                row = dict(record, partition=p)
                if isinstance(epochs, list) and i < len(epochs):
                    row["epoch"] = epochs[i]
                out.append(row)
        return out

    def _take_history(self, events: list[dict[str, Any]]) -> None:
        """Plans, faults and departures from history events (oldest first)."""
        grouped: dict[tuple[Any, ...], dict[str, Any]] = {}
        for e in events:
            kind = e.get("type")
            if kind == HistoryType.LEFT:
                self._left[str(e.get("member"))] = float(e.get("time") or 0.0)
            elif kind == HistoryType.ROUND_CLOSED:
                self._take_plan(e)
            elif kind in FAULT_TYPES:
                key = (e.get("revision"), e.get("member"), kind)
                fault = grouped.get(key)
                if fault is None:
                    fault = {
                        "type": kind,
                        "member": e.get("member"),
                        "time": e.get("time"),
                        "partitions": [],
                        "reason": e.get("reason"),
                    }
                    grouped[key] = fault
                    self._faults.append(fault)
                if e.get("partition") is not None:
                    fault["partitions"].append(e["partition"])
        self._faults = self._faults[-KEEP_FAULTS:]

    def _take_plan(self, e: dict[str, Any]) -> None:
        moves, min_moves, deferred = (int(e.get(k) or 0) for k in ("moves", "min_moves", "deferred"))
        plan = {
            "round": e.get("round"),
            "time": e.get("time"),
            "closer": e.get("member"),
            "participants": list(e.get("participants") or []),
            "moves": moves,
            "min_moves": min_moves,
            "deferred": deferred,
            "lower_bound": round_lower_bound(min_moves, deferred),
            "kept": bool(e.get("kept")),
        }
        others = [p for p in self._plans if p["round"] != plan["round"]]
        self._plans = [*others[-(KEEP_PLANS - 1) :], plan]

    def _seed_timeline(self, events: list[dict[str, Any]]) -> None:
        """The ownership timeline before the dashboard started, from claim/release/lost events (writer clocks)."""
        if self._segments:
            return
        start = self._now() - self.window_s
        for e in events:
            p, member, at = e.get("partition"), e.get("member"), e.get("time")
            if not isinstance(p, int | str) or isinstance(p, bool) or not isinstance(at, int | float):
                continue
            if e.get("type") == HistoryType.CLAIM:
                self._switch(p, str(member), float(at))
            elif e.get("type") in (HistoryType.RELEASE, HistoryType.LOST, HistoryType.FENCED):
                # not "migrated": the target acks what it holds
                segment = self._open.get(p)
                if segment is not None and segment["member"] == member:
                    self._switch(p, None, float(at))
        self._segments = [s for s in self._segments if s["end"] is None or s["end"] > start]

    def _switch(self, p: PartitionId, member: str | None, at: float) -> None:
        """Partition ``p`` is owned by ``member`` (None: nobody) from ``at``: close its open segment, open one."""
        segment = self._open.pop(p, None)
        self._changed[p] = at
        if segment is not None:
            segment["end"] = max(at, segment["start"])
        if member is not None:
            segment = {"partition": p, "member": member, "start": at, "end": None}
            self._open[p] = segment
            self._segments.append(segment)

    # -- snapshots ---------------------------------------------------------------------------------------------

    def _read(self, store: Store) -> None:
        full = self._mirror is None or time.monotonic() >= self._resync_at
        last = self._full_s if full else self._read_s or self._full_s
        limit = FIRST_READ_LIMIT_S if last is None else max(READ_LIMIT_S, 10 * last)
        started = time.monotonic()
        with store.time_limit(limit):
            if self._watches:
                self._pending += self._watches[0].poll() + self._watches[1].poll()
            revision = store.revision()
            if full or self._mirror is None:
                self._mirror = _Mirror(store, self._copied, [kv for p in self._copied for kv in store.range(p)])
                self._full_reads += 1
            mirror = self._mirror
            mirror.apply(self._pending)
            self._pending = []
            # commit records live beside the copied prefix: their transactions' history events count as changes
            seen = (self._full_reads, mirror.changes, self._history_revision)
            last_snapshot = self._snapshot
            fresh = last_snapshot is None or seen != self._snapshot_of
            if last_snapshot is None or fresh:  # a function of the keys alone: an unchanged copy, the last snapshot
                snapshot = group_status(mirror, self.group)
                self._snapshot_of = seen
                table = snapshot.table
                self._restless = [p for p, info in snapshot.partitions.items() if not_at_rest(info, table.get(p))]
            else:
                snapshot = last_snapshot
            registrations = {kv.key[len(self.keys.members) :]: kv for kv in mirror.range(self.keys.members)}
            heartbeats = self._read_heartbeats(store, registrations, snapshot)
        elapsed = time.monotonic() - started
        if full:
            self._full_s = elapsed
            self._resync_at = time.monotonic() + max(RESYNC_S, RESYNC_READS * elapsed)
        else:
            self._read_s = elapsed
        self._problem = None
        self._status = "ok"
        self._revision = revision
        self._snapshot = snapshot
        now = self._now()
        self._take_members(snapshot, registrations, heartbeats, now, fresh=fresh)
        for p, info in snapshot.partitions.items() if fresh else ():
            owner = info.owner
            pid = pid_of_text(str(p))
            segment = self._open.get(pid)
            if (segment["member"] if segment else None) != owner:
                self._switch(pid, owner, now)
        start = now - self.window_s
        self._segments = [s for s in self._segments if s["end"] is None or s["end"] > start]
        self._publish()

    def _read_heartbeats(
        self, store: Store, registrations: dict[str, Any], snapshot: GroupStatus
    ) -> dict[str, float | None]:
        """Seconds since each member last renewed its lease (its heartbeat): the lease's ttl minus what is left.
        Read at most once per ``refresh_s`` per member (a lease call each)."""
        ttl = None if snapshot.resource is None else snapshot.resource.ttl_s
        tick, now = time.monotonic(), self._now()
        out: dict[str, float | None] = {}
        for mid, kv in registrations.items():
            cached = self._heartbeats.get(mid)
            if cached is not None and tick - cached[0] < self.refresh_s:
                out[mid] = None if cached[2] is None else cached[2] + (now - cached[1])
                continue
            age: float | None = None
            if kv.lease and isinstance(ttl, int | float):
                try:
                    left = store.time_to_live(kv.lease)
                    age = max(0.0, float(ttl) - left)
                except LeaseNotFound:
                    left, age = 0.0, None
                if left <= 0.0:  # gone or going, maybe with no event to say so (read-only SQLite): read it all
                    self._resync_at = 0.0
            self._heartbeats[mid] = (tick, now, age)
            out[mid] = age
        for mid in set(self._heartbeats) - set(registrations):
            del self._heartbeats[mid]
        return out

    def _take_members(
        self,
        snapshot: GroupStatus,
        registrations: dict[str, Any],
        heartbeats: dict[str, float | None],
        now: float,
        *,
        fresh: bool = True,
    ) -> None:
        """Members from a snapshot (``fresh``: a new one; else the last one again: their partitions stand)."""
        for mid, info in snapshot.members.items():
            kv = registrations.get(mid)
            record: dict[str, Any] = {}
            if kv is not None:
                try:
                    record = decode(kv.value, kv.key)
                except CorruptRecord:
                    record = {}
            entry = self._members.setdefault(mid, {"id": mid, "gone_at": None, "since": now, "partitions": []})
            if not info.alive:
                continue  # a dead member keeps what it owned when last seen alive (its fault lists them)
            age = heartbeats.get(mid)
            entry.update(
                alive=True, gone_at=None, heartbeat_age_s=age, last_heartbeat_at=None if age is None else now - age
            )
            if fresh or "lapsing" not in entry:
                entry.update(
                    partitions=[pid_of_text(p) for p in info.partitions],  # group_status lists them in id order
                    lapsing=[pid_of_text(p) for p in info.lapsing],
                )
            for name in ("capacity", "rack", "host", "ordinal", "revoking"):
                if name in record:
                    entry[name] = record[name]
        for mid, entry in self._members.items():
            member = snapshot.members.get(mid)
            registered = member is not None and member.alive
            if registered or entry["gone_at"] is not None:
                continue
            entry.update(alive=False, gone_at=now, heartbeat_age_s=None)
            owned = list(entry["partitions"])
            left = self._left.get(mid)
            graceful = left is not None and left >= entry["since"] - 1.0
            if not graceful:
                self._faults.append(
                    {
                        "type": "expired",
                        "member": mid,
                        "time": now,
                        "partitions": owned,
                        "reason": "its lease expired (no heartbeat)",
                        "last_heartbeat_at": entry.get("last_heartbeat_at"),
                        "failover_s": None,
                    }
                )
        self._note_failovers(snapshot, now)
        for mid in [
            m for m, e in self._members.items() if e["gone_at"] is not None and now - e["gone_at"] > KEEP_DEAD_S
        ]:
            del self._members[mid]
        self._faults = self._faults[-KEEP_FAULTS:]

    def _note_failovers(self, snapshot: GroupStatus, now: float) -> None:
        """A member's expiry fault gets ``failover_s`` once every partition it owned has a live new owner."""
        alive = {m for m, info in snapshot.members.items() if info.alive}
        for fault in self._faults:
            if fault["type"] != "expired" or fault.get("failover_s") is not None:
                continue
            found = [snapshot.partitions.get(str(p)) for p in fault["partitions"]]
            owners = [None if info is None else info.owner for info in found]
            if all(o is not None and o != fault["member"] and o in alive for o in owners):
                since = fault["last_heartbeat_at"] if fault["last_heartbeat_at"] is not None else fault["time"]
                fault["failover_s"] = round(now - since, 3)

    # -- the published state -----------------------------------------------------------------------------------

    def _publish(self) -> None:
        state = self._compose()
        with self._cond:
            self._version += 1
            state["version"] = self._version
            self._state = state
            self._payload = json.dumps(state, sort_keys=True, default=str)
            self._cond.notify_all()

    def _compose(self) -> dict[str, Any]:
        snapshot = self._snapshot
        now = self._now()
        state: dict[str, Any] = {
            "group": self.group,
            "store": redact_url(self.url),
            "status": self._status,
            "problem": self._problem,
            "now": now,
            "started": self._started,
            "revision": self._revision,
            "window_s": self.window_s,
            "plans": list(reversed(self._plans)),
        }
        if snapshot is None:
            state.update(mode=None, resource=None, round=None, plan_round=None, waiting=None)
            state.update(partitions=[], partition_count=0, owned_count=0)
            state.update(listed="all", members=self._members_state(True), faults=self._faults_state(True), timeline=[])
            return state
        table = snapshot.table
        found = snapshot.partitions
        every = len(found) <= LISTED
        listed = list(found) if every else self._listed(snapshot, now)
        partitions = []
        for p in listed:
            info = found[p]
            row = {
                "partition": pid_of_text(p),
                "owner": info.owner,
                "epoch": info.epoch,
                "checkpoint": info.checkpoint,
                "offset": checkpoint_offset(info.checkpoint),
                "lapsing": info.lapsing,
                "standby": dict(info.standby),
                "learners": dict(info.learners),
                # high_availability: seed 2's task tags of each holder
                "tags": {mid: dict(flags) for mid, flags in info.tags.items()},
                "waiting_for": info.waiting_for,
                "moving_to": info.moving_to,
            }
            if p in table:
                row["table"] = table[p].to_json()
            partitions.append(row)
        shown = {row["partition"] for row in partitions}
        failed = {m: f.to_json() for m, f in snapshot.failed.items()}
        if not every:  # a failed member of a large group: the first of its partitions and how many
            failed = {m: {**f, **_bounded(f["partitions"])} for m, f in failed.items()}
        waiting = snapshot.waiting  # coordinator mode: below the minimum, or before the first table
        state.update(
            mode=_mode(snapshot),
            resource=None if snapshot.resource is None else snapshot.resource.to_json(),
            round=snapshot.round,
            plan_round=snapshot.plan_round,
            coordinator=snapshot.coordinator_id,
            replicas=snapshot.replicas,
            waiting=None if waiting is None else waiting.to_json(),
            failed=failed,
            partitions=partitions,
            partition_count=len(found),
            owned_count=sum(1 for info in found.values() if info.owner is not None),
            listed="all" if every else "not at rest, then the latest to change owner",
            members=self._members_state(every),
            faults=self._faults_state(every),
            timeline=[dict(seg) for seg in self._segments if every or seg["partition"] in shown],
        )
        return state

    def _listed(self, snapshot: GroupStatus, now: float) -> list[str]:
        """The ``LISTED`` partitions a large group's state shows: those not at rest, then the latest to change owner
        (within the window), in partition order."""
        chosen = set(self._restless[:LISTED])
        if len(chosen) < LISTED:
            start = now - self.window_s
            recent = heapq.nlargest(LISTED, ((at, p) for p, at in self._changed.items() if at >= start))
            for _, pid in recent:
                if len(chosen) >= LISTED:
                    break
                chosen.add(str(pid))
        return [p for p in snapshot.partitions if p in chosen]

    def _members_state(self, every: bool) -> list[dict[str, Any]]:
        out = []
        for _, entry in sorted(self._members.items()):
            member = dict(entry, partition_count=len(entry["partitions"]))
            if not every:
                member.pop("partitions")
                member.pop("lapsing", None)
            out.append(member)
        return out

    def _faults_state(self, every: bool) -> list[dict[str, Any]]:
        faults = reversed(self._faults)
        return [dict(f) if every else {**f, **_bounded(f["partitions"])} for f in faults]


def _bounded(partitions: list[Any]) -> dict[str, Any]:
    """A fault's partitions in a large group's state: the first ``LISTED_FAULT_PARTITIONS`` and the count."""
    return {"partitions": partitions[:LISTED_FAULT_PARTITIONS], "partition_count": len(partitions)}


__all__ = ["Feed"]
