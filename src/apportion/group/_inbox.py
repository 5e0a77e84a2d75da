"""A member's watches and the events they bring, kept until its next step (``_ownership``).

``WatchInbox`` holds the watch of the group's prefix and, in a layout-2 group (``_keys``), the watch of the owner
records' deletions, which live beside it (a claim waiting for a partition another member holds is retried at that
record's deletion, ``_claims``; the ttl bounds a missed one); a watch the caller passes in (the simulator's) carries
both and stays the caller's. ``wait`` blocks the real worker's stepping thread until something is heard; ``drain``
hands the step what was heard since. Both watches follow one state machine::

    FOLLOWING --poll/wait raises Compacted (it resumed below the store's compaction point: events are lost)-->
        LOST (``lost``: trace "watch_lost"; both closed) --next step, within the belief--> new watches from now, then
        ``FencedMember._resync`` re-reads what the lost events would have told (the group's definition and the
        protocol's own keys, applied as their events) --> FOLLOWING
    LOST --the store does not answer--> LOST (retried at every step; beliefs and renewals go on meanwhile)
"""

from __future__ import annotations

import time

from apportion.errors import Compacted, StoreFull, StoreUnavailable
from apportion.group._context import MemberContext
from apportion.group._trace import TraceKind
from apportion.store import Event, Watch

OWNER_WAIT_SLICE_S = 0.02  # how often a member waiting for owner records to go looks at their watch (wait_events)


class WatchInbox:
    """The watches of one member and the events heard and not yet stepped on."""

    def __init__(self, ctx: MemberContext, watch: Watch | None) -> None:
        self._ctx = ctx
        self.watch = watch
        self.own_watch = watch is None  # opened here (else the caller's: it replaces a lost one itself)
        # a layout-2 group's owner records live outside the watched prefix (``_keys``): their deletions come from a
        # second watch of this member's own (a watch the caller passes in carries them: the simulator routes them)
        self.owner_watch: Watch | None = None
        self.pending: list[Event] = []
        self.failed: Compacted | None = None  # the watch lost events (``wait`` saw it): replace it
        self.resync_pending = False  # a new watch replaced a lost one: re-read what its events would have told

    def open(self) -> None:
        """Watch the group's prefix, unless watching already."""
        if self.watch is None:
            self.watch = self._ctx.store.watch(self._ctx.keys.prefix)

    def watch_owners(self) -> None:
        """Open the watch of the owner records' deletions where they live outside the watched prefix (layout 2),
        before the first claim, so that no release it waits for falls before it."""
        keys = self._ctx.keys
        if self.own_watch and self.owner_watch is None and keys.ownership != keys.prefix:
            self.owner_watch = self._ctx.store.watch(keys.owners, deletes_only=True)

    def wait(self, timeout_s: float, *, owners: bool) -> None:
        """Block (real time) until the watch has events or ``timeout_s`` passes (``FencedMember.wait_events``);
        ``owners``: the member waits for owner records to go, so their deletions wake it too."""
        if self.watch is None or self.failed is not None:
            time.sleep(max(0.0, timeout_s))  # no watch to wake us (the store did not answer): the step retries
            return
        try:
            if self.owner_watch is None or not owners:
                self.pending.extend(self.watch.wait(max(0.0, timeout_s)))
                return
            # waiting to claim partitions another member holds: their deletions wake us too (one watch blocks,
            # the other is looked at every OWNER_WAIT_SLICE_S: a wait on two watches of any backend)
            deadline = time.monotonic() + max(0.0, timeout_s)
            while True:
                events = self.watch.wait(min(OWNER_WAIT_SLICE_S, max(0.0, deadline - time.monotonic())))
                freed = self.owner_watch.poll()
                self.pending.extend(events)
                self.pending.extend(freed)
                if events or freed or time.monotonic() >= deadline:
                    return
        except Compacted as exc:
            self.failed = exc
        except StoreUnavailable as exc:
            self._ctx.trace(TraceKind.STORE_UNAVAILABLE, reason=str(exc), full=isinstance(exc, StoreFull))

    def drain(self) -> tuple[list[Event], Compacted | None]:
        """The events heard since the last drain (those waiting, then what the watches hold now) and, when a watch
        lost events, its error (the events before it are still good)."""
        events = self.pending
        self.pending = []
        failed, self.failed = self.failed, None
        if self.watch is not None and failed is None:
            try:
                events.extend(self.watch.poll())
                if self.owner_watch is not None:
                    events.extend(self.owner_watch.poll())
            except Compacted as exc:
                failed = exc
        return events, failed

    def lost(self, failed: Compacted) -> None:
        """A watch lost events: close both; the next step opens new ones and re-reads (``resync_pending``). A watch
        the caller passed in is the caller's to replace: the error goes to it."""
        if not self.own_watch:
            raise failed
        self.close()
        self.watch = self.owner_watch = None
        self.resync_pending = True

    def close(self) -> None:
        """Close the watches opened here."""
        if self.watch is not None and self.own_watch:
            self.watch.close()
        if self.owner_watch is not None:
            self.owner_watch.close()


__all__ = ["OWNER_WAIT_SLICE_S", "WatchInbox"]
