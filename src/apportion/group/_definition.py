"""The group's definition a member starts with: the requested one checked against the stored one, the stored one
created, updated or completed (``apportion.group._config``: requested and effective definitions).

``Definition.load`` runs at every start of a member (``FencedMember._start``), before it registers. A group keeps the
key layout it was created with, an update included (``_keys``). At the first start only, the requested definition is
checked against the stored one (``GroupConfig.check_join``: another mode, or other partitions without ``update``,
raise InvalidRequest and the member stops before registering); a stored definition that records no mode (an older
version's) gets this member's, once. A definition changed later by another member is adopted, whatever it says.
"""

from __future__ import annotations

from dataclasses import replace

from apportion.errors import CorruptRecord, StoreUnavailable
from apportion.group._config import GroupConfig
from apportion.group._context import MemberContext
from apportion.group._keys import LAYOUT, LEGACY_LAYOUT, Keys
from apportion.store import Put, absent, mod_revision_is


class Definition:
    """The requested definition of one member and what it does with the stored one."""

    def __init__(self, ctx: MemberContext, requested: GroupConfig, *, update: bool, partitions_given: bool) -> None:
        self._ctx = ctx
        self.requested = requested
        self._update = update  # replace the stored definition with the requested one (once, at the first start)
        self._partitions_given = partitions_given
        self._joined = False  # the requested definition was checked against the stored one (the first start)

    def load(self) -> tuple[GroupConfig, int, bool]:
        """Read the group's definition (create it when absent; ``update``: replace it): the definition to adopt, the
        revision of its record, and True when this member rewrote it (an update)."""
        ctx = self._ctx
        store, group, resource = ctx.store, ctx.group, ctx.keys.resource
        kv = store.get(resource)
        if kv is None:
            wanted = self.requested.record()
            result = store.txn([absent(resource)], [Put(resource, wanted)])
            if result.succeeded:
                self._joined = True
                return self.requested, result.revision, False
            kv = store.get(resource)
            if kv is None:
                raise StoreUnavailable("resource definition vanished while being created")
        try:
            stored: GroupConfig | None = GroupConfig.from_record(kv)
        except CorruptRecord:
            if not self._update:
                raise  # this worker stops (exit 2) naming the key; ``--update`` is the way out (below)
            stored = None
        if not self._joined:
            if stored is not None:
                self.requested.check_join(stored, group, update=self._update, partitions=self._partitions_given)
            self._joined = True
            if stored is not None and stored.mode is None and not self._update:  # an older version's: this mode, once
                adopted = replace(stored, mode=self.requested.mode).record()
                store.txn([mod_revision_is(resource, kv.mod_revision)], [Put(resource, adopted)])
                kv = store.get(resource) or kv
                stored = GroupConfig.from_record(kv)
        wanted_config = replace(self.requested, layout=self._layout_of(stored))
        if self._update and kv.value != wanted_config.record():
            result = store.txn([mod_revision_is(resource, kv.mod_revision)], [Put(resource, wanted_config.record())])
            self._update = False
            if result.succeeded:
                return wanted_config, result.revision, True
            kv = store.get(resource) or kv
            stored = GroupConfig.from_record(kv)
        self._update = False
        if stored is None:  # pragma: no cover - an update either wrote the definition or read another's
            stored = GroupConfig.from_record(kv)
        return stored, kv.mod_revision, False

    def _layout_of(self, stored: GroupConfig | None) -> int:
        """The layout of the group: its stored definition's; when that is corrupt (an update replaces it), layout 1
        if epoch records exist where layout 1 keeps them (epochs outlive their owners), else the current one."""
        if stored is not None:
            return stored.layout
        legacy = Keys(self._ctx.group, LEGACY_LAYOUT)
        return LEGACY_LAYOUT if self._ctx.store.range(legacy.epochs, limit=1) else LAYOUT


__all__ = ["Definition"]
