"""A member's registration: ``members/<id>``, bound to its lease, and who may hold that id (``_ownership``'s module
doc, "Member lifecycle").

One process per id: a member registers only where no other registration holds its id. A holder that is dead lets go
within its ttl; a live one makes this member fail after 1.5 ttl (an operator's mistake: two workers with one id)
unless ``replace`` fences it (its lease revoked, once, at the first start), and this member's record then names the
lease it replaced (``replaces``): the fenced process, registering again, finds its own lease named there and stops
with ``Fenced`` "replaced by another process", not the duplicate-id error that would tell the operator to --replace
it back.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from apportion.errors import CorruptRecord, Fenced, InvalidRequest
from apportion.group._context import MemberContext
from apportion.group._keys import decode
from apportion.group._trace import TraceKind
from apportion.store import KeyValue

ID_TAKEN_TTLS = 1.5  # how many ttl another registration may hold this member's id before it is a duplicate


class Registration:
    """Who holds this member's id, and what its ``members/<id>`` record says."""

    def __init__(self, ctx: MemberContext, *, replace: bool) -> None:
        self._ctx = ctx
        self.replace = replace
        self.taken_since: tuple[int, float] | None = None  # (lease, since when) of another holder of this id
        self.registered: int | None = None  # the lease of this member's latest registration
        self.replaced: int | None = None  # the lease of the holder this member fenced (--replace), in its record

    def id_free(self, now: float) -> bool:
        """True when no other registration holds this member's id (after fencing it, ``replace``); False while a
        holder may still be a dead one letting go. Raises Fenced when the holder replaced this very member, and
        InvalidRequest once the id has been taken for longer than a dead holder's lease could last."""
        ctx = self._ctx
        kv = ctx.store.get(ctx.keys.member(ctx.id))
        if kv is None:
            return True
        if self.registered is not None and _replaces(kv) == self.registered:
            # the holder fenced this member's registration (--replace): not a duplicate to fence back
            raise Fenced(f"member {ctx.id!r} of group {ctx.group!r}: replaced by another process with id {ctx.id!r}")
        if self.replace:  # revoking its lease fences the other holder: its owner records go, its renewals fail
            self.replaced = kv.lease
            ctx.store.revoke(kv.lease)
            ctx.trace(TraceKind.REPLACED, lease=kv.lease)
            return True
        if self.taken_since is None or self.taken_since[0] != kv.lease:
            self.taken_since = (kv.lease, now)
            ctx.trace(TraceKind.ID_TAKEN, lease=kv.lease)
        elif now - self.taken_since[1] > ctx.config.ttl_s * ID_TAKEN_TTLS:
            raise InvalidRequest(
                "worker_id",
                f"member {ctx.id!r} is already live in group {ctx.group!r} (stop it, or --replace to fence it)",
            )
        return False

    def registered_under(self, lease: int) -> None:
        """This member's registration under ``lease`` was written."""
        self.registered = lease
        self.replace = False  # fence a duplicate once, at the first start; never ping-pong with it afterwards
        self.taken_since = None

    def record(self, extra: dict[str, Any], *, revoking: bool, left: bool = False) -> dict[str, Any]:
        """The ``members/<id>`` record: the process, the protocol's ``extra`` fields, whether this member is inside
        ``on_revoked``, the lease it replaced, and ``left`` when it leaves gracefully."""
        info = {"pid": os.getpid(), "host": socket.gethostname(), **extra, "revoking": revoking}
        if self.replaced is not None:  # so that the fenced process, registering again, knows it was replaced
            info["replaces"] = self.replaced
        return {**info, "left": True} if left else info


def _replaces(kv: KeyValue) -> int | None:
    """The lease a ``members/<id>`` record says its process fenced (``replaces``: --replace), None when it fenced
    none (a corrupt record fenced none: registrations only inform)."""
    try:
        value = decode(kv.value, kv.key).get("replaces")
    except CorruptRecord:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


__all__ = ["ID_TAKEN_TTLS", "Registration"]
