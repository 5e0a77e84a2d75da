"""Seed 1's client: the partition of a key and who serves it, from a cached copy of the group's partition table.

``Router(store, group)`` opens a watch on the group's prefix and one on the owner records beside it (a layout-2
group keeps them outside the prefix: ``_keys``), then reads what routing needs in one read-only transaction (the
definition, ``members/``, ``coordinator``, ``table/``, ``owner/`` of either layout: one snapshot at revision R), and
from then on keeps that copy current from the watches: events at or below R are already in it, later ones are applied
in order (as ``_tracked`` does for a member). ``route(key)`` hashes the key (``apportion.routing.partition_for``) and
looks the partition up in memory: no store call per route. By default a background thread applies the events as
they arrive (``watch.wait``); ``follow=False`` leaves that to ``refresh()`` (a one-shot lookup such as
``apportion route``, and tests stepping a virtual clock). The copy lags the store by what the watch has not
delivered yet, like the seed's client that "periodically refreshes the partition table": a route may name an owner
that is handing the partition over; the owner's fenced commits, not the route, decide who may write.

What ``route`` returns (``Route``; it unpacks as ``(partition, owner, state)``, the seed's triple):

- coordinator mode (a table entry for the partition): ``owner`` is the member serving it now, the entry's ``owner``
  (also while it is MIGRATING away: the seed's source keeps the partition until the move completes), or its
  ``target`` while the entry is ASSIGNED with no owner yet; ``state`` the entry's ``TableState``;
- other modes: ``owner`` is the member the partition's owner record names (None: nobody holds it now), ``state``
  None;
- ``epoch``: the owner record's epoch when that record names ``owner``, else None.

In a group over named resources a key is routed within one of them (``route(key, resource="orders")``: the
partition ``orders-<partition_for(key, n_orders)>``, the same hash a producer of that resource uses); a one-resource
group needs no resource (and accepts its own group name).

``NotEnoughMembers`` while a coordinator-mode group is below its minimum cluster size (seed 1:
``minimumClusterSizeReached``): fewer live members than the ``min_members`` of the coordinator record (the last one
seen when no coordinator is elected at the moment; 1 when none was ever seen). The group is in coordinator mode once
it has a coordinator record or a partition table. A corrupt record that routing needs raises ``CorruptRecord`` naming
it, from ``route`` (the copy keeps the raw records and decodes a partition's on lookup, once per change).

States of a router::

    OPENING --watch opened, snapshot read at revision R--> FOLLOWING(R)
    FOLLOWING(r) --event at r' > r (follower thread, or refresh())--> FOLLOWING(r')
    FOLLOWING --the watch fails (store unreachable, history compacted)--> RESYNCING --new watch, snapshot--> FOLLOWING
    any --close()--> CLOSED
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from apportion.errors import ApportionError, CorruptRecord, InvalidRequest, NotEnoughMembers
from apportion.group._config import GroupConfig
from apportion.group._keys import LAYOUT, LEGACY_LAYOUT, Keys, PartitionId, decode, decode_owner
from apportion.group._table import Entry, TableState
from apportion.model import partition_name
from apportion.routing import Key, partition_for
from apportion.store import Event, EventType, Get, KeyValue, Store, Watch

log = logging.getLogger("apportion.router")

FOLLOW_SLICE_S = 0.1
"""How long the follower blocks on the group's watch before it looks at the owner records' (their changes reach the
copy within this)."""
RESYNC_PAUSE_S = 0.5
"""How long the follower waits before it opens a new watch and reads a new snapshot after its watch failed."""


@dataclass(frozen=True, slots=True)
class Route:
    """Where a key goes: its ``partition``, the member serving it (``owner``, None: nobody yet) and the partition
    table's ``state`` (coordinator mode, else None); ``epoch`` of the owner record naming ``owner`` (or None)."""

    partition: PartitionId
    owner: str | None
    state: TableState | None
    epoch: int | None = None

    def __iter__(self) -> Iterator[PartitionId | TableState | None]:
        return iter((self.partition, self.owner, self.state))


def _entry(kv: KeyValue) -> Entry:
    return Entry.from_json(decode(kv.value, kv.key), kv.key)


class Router:
    """Routes keys of ``group`` from a watch-backed copy of its partition table (see the module docstring)."""

    def __init__(self, store: Store, group: str, *, follow: bool = True) -> None:
        self.store = store
        self.group = group
        self.keys = Keys(group)
        # the owner records of either layout (``_keys``): routing follows the one the definition names
        self._layouts = {layout: Keys(group, layout) for layout in (LAYOUT, LEGACY_LAYOUT)}
        self._owner_roots = tuple(keys.owners for keys in self._layouts.values())
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._kvs: dict[str, KeyValue] = {}
        self._members: set[str] = set()
        self._decoded: dict[str, tuple[int, Any]] = {}  # key -> (mod_revision, decoded value)
        self._revision = 0
        self._min_members: int | None = None
        self._watches: list[Watch] = self._sync()
        self._thread: threading.Thread | None = None
        if follow:
            self._thread = threading.Thread(target=self._follow, name=f"router-{group}", daemon=True)
            self._thread.start()

    # -- the copy ------------------------------------------------------------------------------------------

    def _wanted(self, key: str) -> bool:
        k = self.keys
        return key in (k.resource, k.coordinator) or key.startswith((k.members, k.tables, *self._owner_roots))

    def _sync(self) -> list[Watch]:
        """Open the watches (the group's prefix; the owner records of a layout-2 group, which live beside it:
        ``_keys``), then read the snapshot they continue (so no change falls between them)."""
        watches = [self.store.watch(self.keys.prefix)]
        k = self.keys
        try:
            watches.append(self.store.watch(k.owners))
            result = self.store.txn(
                [],
                [
                    Get(k.resource),
                    Get(k.coordinator),
                    Get(k.members, prefix=True),
                    Get(k.tables, prefix=True),
                    *(Get(root, prefix=True) for root in self._owner_roots),
                ],
            )
        except BaseException:
            for watch in watches:
                watch.close()
            raise
        kvs = {kv.key: kv for found in result.responses if isinstance(found, list) for kv in found}
        if k.resource not in kvs:
            for watch in watches:
                watch.close()
            raise InvalidRequest("group", f"group {self.group!r} has no resource definition")
        with self._lock:
            self._kvs = kvs
            self._members = {key[len(k.members) :] for key in kvs if key.startswith(k.members)}
            self._decoded.clear()
            self._revision = result.revision
            self._note_coordinator(kvs.get(k.coordinator))
        return watches

    def _apply(self, events: list[Event]) -> None:
        with self._lock:
            for event in events:
                key = event.kv.key
                if event.revision <= self._revision:
                    continue  # already in the snapshot
                if not self._wanted(key):
                    continue
                if event.type is EventType.PUT:
                    self._kvs[key] = event.kv
                else:
                    self._kvs.pop(key, None)
                if key.startswith(self.keys.members):
                    mid = key[len(self.keys.members) :]
                    if event.type is EventType.PUT:
                        self._members.add(mid)
                    else:
                        self._members.discard(mid)
                elif key == self.keys.coordinator:
                    self._note_coordinator(self._kvs.get(key))

    def _note_coordinator(self, kv: KeyValue | None) -> None:
        """Remember the minimum cluster size the coordinator runs with (kept when it goes: a successor follows)."""
        if kv is None:
            return
        try:
            value = decode(kv.value, kv.key).get("min_members")
        except CorruptRecord as exc:  # the route that needs it says so
            log.warning("%s (router keeps min_members %s)", exc, self._min_members)
            return
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            self._min_members = value

    def refresh(self) -> None:
        """Apply what the watch has delivered (no store read on backends that push events: memory, etcd). The
        follower thread does this on its own; call it with ``follow=False``."""
        self._apply([event for watch in self._watches for event in watch.poll()])

    def _follow(self) -> None:
        while not self._closed.is_set():
            try:
                # one watch blocks, the owner records' is looked at every FOLLOW_SLICE_S (a wait on two watches)
                first, *others = self._watches
                events = first.wait(FOLLOW_SLICE_S) + [event for watch in others for event in watch.poll()]
                if not self._closed.is_set():
                    self._apply(events)
            except ApportionError as exc:
                log.warning("router for group %s: its watch failed (%s); reading the table again", self.group, exc)
                for watch in self._watches:
                    watch.close()
                while not self._closed.wait(RESYNC_PAUSE_S):
                    try:
                        self._watches = self._sync()
                        break
                    except ApportionError as again:
                        log.warning("router for group %s: %s", self.group, again)

    # -- lookups -------------------------------------------------------------------------------------------

    def _value(self, key: str, kv: KeyValue, decoder: Any) -> Any:
        """``decoder(kv)``, once per change of ``key`` (call with the lock held)."""
        memo = self._decoded.get(key)
        if memo is not None and memo[0] == kv.mod_revision:
            return memo[1]
        value = decoder(kv)
        self._decoded[key] = (kv.mod_revision, value)
        return value

    def route(self, key: Key, resource: str | None = None) -> Route:
        """The partition of ``key`` (in ``resource``, for a group over named resources) and who serves it, from the
        copy (no store call): see the module docstring. ``NotEnoughMembers`` below a coordinator's minimum cluster
        size; ``CorruptRecord`` naming a corrupt record; InvalidRequest for a missing or unknown ``resource``."""
        k = self.keys
        with self._lock:
            definition = self._kvs.get(k.resource)
            if definition is None:
                raise InvalidRequest("group", f"group {self.group!r} has no resource definition")
            config: GroupConfig = self._value(k.resource, definition, GroupConfig.from_record)
            p = _partition(config, self.group, key, resource)
            table_kv = self._kvs.get(k.table(p))
            owner_kv = self._kvs.get(self._layouts[config.layout].owner(p))
            entry: Entry | None = None
            if table_kv is not None:
                entry = self._value(table_kv.key, table_kv, _entry)
            record: tuple[str, int] | None = None
            if owner_kv is not None:
                record = self._value(owner_kv.key, owner_kv, decode_owner)
            if self._min_members is not None or entry is not None:  # coordinator mode (a table has every entry)
                live, minimum = len(self._members), self._min_members or 1
                if live < minimum:
                    raise NotEnoughMembers(
                        f"group {self.group!r} has {live} live member(s), below its minimum cluster size of "
                        f"{minimum} (min_members)"
                    )
        if entry is None:
            owner = None if record is None else record[0]
            return Route(p, owner, None, None if record is None else record[1])
        owner = entry.owner if entry.owner is not None else entry.target
        epoch = record[1] if record is not None and record[0] == owner else None
        return Route(p, owner, entry.state, epoch)

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        for watch in self._watches:
            watch.close()

    def __enter__(self) -> Router:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _partition(config: GroupConfig, group: str, key: Key, resource: str | None) -> PartitionId:
    if not config.named:
        if resource not in (None, group):
            raise InvalidRequest("resource", f"group {group!r} has one resource, named after it: not {resource!r}")
        return partition_for(key, config.partitions)
    names = config.resource_names()
    if resource is None:
        raise InvalidRequest("resource", f"group {group!r} has several resources: name one of {', '.join(names)}")
    found = next((r for r in config.resources if r.name == resource), None)
    if found is None:
        raise InvalidRequest("resource", f"{resource!r} is not a resource of group {group!r} ({', '.join(names)})")
    return partition_name(resource, partition_for(key, found.partitions))


__all__ = ["Route", "Router"]
