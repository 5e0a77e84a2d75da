"""A member's fenced commits: its belief checked before each chunk is sent, then the store's fence (``_commits``).

``Committer.commit`` is ``FencedMember.commit_many`` (and ``commit``, its batch of one): the input checked
(``InvalidRequest``), each partition's epoch chosen (the one given, else the one believed now), the batch cut into
chunks that fit one transaction (``_commits.chunked``) and, chunk by chunk, the belief checked just before the chunk
is sent: a partition whose belief ended meanwhile (``on_lost``, the local deadline) is refused here and never sent.
The chunk's store calls run under what is left of the belief window (``store.time_limit``). A refused partition, by
the store or here, ends the belief in it (``Belief.fence``: the stepping thread calls ``on_lost`` and releases); a
refusal by the store is recorded as one ``fenced`` history event (best effort: it is only history). Runs on any
thread: what it shares with the stepping thread is the belief's, under its lock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from apportion.errors import InvalidRequest, StoreUnavailable
from apportion.group._belief import Belief
from apportion.group._commits import CommitResult, chunked, commit_record, commit_size, fence
from apportion.group._context import MemberContext
from apportion.group._history import HistoryType
from apportion.group._keys import PartitionId, sorted_pids
from apportion.group._trace import TraceKind


class Committer:
    """The commits of one member (the module docstring)."""

    def __init__(self, ctx: MemberContext, belief: Belief) -> None:
        self._ctx = ctx
        self._belief = belief

    def commit(
        self,
        checkpoints: Mapping[PartitionId, str],
        epochs: Mapping[PartitionId, int] | None,
        *,
        count: int,
        budget: int,
    ) -> tuple[CommitResult, StoreUnavailable | None]:
        """``commit_many`` in chunks of at most ``count`` partitions and ``budget`` bytes, and the StoreUnavailable
        that ended it early (``commit`` raises it; the partitions after it are not sent)."""
        ctx = self._ctx
        uses = self._epochs(checkpoints, epochs)
        fenced: dict[PartitionId, int | None] = {p: None for p, use in uses.items() if use is None}
        epoch_of = {p: use for p, use in uses.items() if use is not None}
        sending = sorted_pids(epoch_of)
        records = {p: commit_record(checkpoints[p], epoch_of[p], ctx.id) for p in sending}
        sizes = [commit_size(ctx.keys, p, records[p], ctx.owner_value(epoch_of[p])) for p in sending]
        committed: dict[PartitionId, int] = {}
        failed: dict[PartitionId, str] = {}
        error: StoreUnavailable | None = None
        for chunk in chunked(sending, sizes, count=count, budget=budget):
            if error is not None:  # the store did not answer: the rest is not sent (each would wait as long)
                failed.update(dict.fromkeys(chunk, str(error)))
                continue
            now = ctx.clock.now()
            deadline, send = self._belief.sendable(chunk, epoch_of, now)
            sent = frozenset(send)
            refused = {p: epoch_of[p] for p in chunk if p not in sent}  # the belief has ended: no store call
            self._fence_here(refused, now, deadline, rejected=False)
            fenced.update(refused)
            if not send:
                continue
            try:
                batch = {p: records[p] for p in send}
                with ctx.store.time_limit(deadline - now):
                    done, rejected = fence(ctx.store, ctx.keys, ctx.recorder, batch, epoch_of, ctx.owner_value, now)
            except StoreUnavailable as exc:
                error = exc
                failed.update(dict.fromkeys(send, str(exc)))
                continue
            for p, revision in done.items():
                ctx.trace(TraceKind.COMMIT, partition=p, epoch=epoch_of[p], revision=revision)
            committed.update(done)
            self._fence_here(rejected, now, deadline, rejected=True)
            fenced.update(rejected)
        return CommitResult(committed, fenced, failed, ctx.id), error

    def fence_only(self, partition: PartitionId, checkpoint: str, epoch: int, now: float) -> int:
        """The fence itself, without the local check of the belief (``FencedMember.commit_txn``): the store revision
        of the accepted commit; 0 when the store refused it."""
        ctx = self._ctx
        record = commit_record(checkpoint, epoch, ctx.id)
        chunk, epochs = {partition: record}, {partition: epoch}
        committed, _ = fence(ctx.store, ctx.keys, ctx.recorder, chunk, epochs, ctx.owner_value, now)
        for p, revision in committed.items():
            ctx.trace(TraceKind.COMMIT, partition=p, epoch=epoch, revision=revision)
        return committed.get(partition, 0)

    def _epochs(
        self, checkpoints: Mapping[PartitionId, str], epochs: Mapping[PartitionId, int] | None
    ) -> dict[PartitionId, int | None]:
        """Check a commit's input (InvalidRequest); each partition's epoch to commit under (the given one, else the
        one owned now; None: neither)."""
        if not isinstance(checkpoints, Mapping):
            raise InvalidRequest("checkpoints", "must map partitions to checkpoints")
        given: Mapping[PartitionId, int] = {} if epochs is None else epochs
        if not isinstance(given, Mapping):
            raise InvalidRequest("epochs", "must map partitions to epochs")
        extra = [p for p in given if p not in checkpoints]
        if extra:
            raise InvalidRequest("epochs", f"partitions {extra[:5]!r} have an epoch but no checkpoint")
        owned = self._belief.epochs_of(checkpoints)
        ctx = self._ctx
        uses: dict[PartitionId, int | None] = {}
        for p, checkpoint in checkpoints.items():
            if isinstance(p, bool) or not isinstance(p, int | str):  # True would pass for partition 1
                raise InvalidRequest("partition", f"{p!r} is not a partition id (an int or <resource>-<index>)")
            if not isinstance(checkpoint, str):
                raise InvalidRequest("checkpoint", f"must be a string (partition {p!r}: {type(checkpoint).__name__})")
            epoch = given.get(p)
            if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int)):
                raise InvalidRequest("epochs", f"partition {p!r}: an epoch is an int, got {epoch!r}")
            if epoch is None and p not in owned and ctx.config.check_pid(p) != p:
                # a partition never owned here and not the group's: "3" for 3, a typo (check_pid raises for most)
                raise InvalidRequest("partition", f"{p!r} is not a partition id of group {ctx.group!r}")
            uses[p] = owned.get(p) if epoch is None else epoch
        return uses

    def _fence_here(self, parts: Mapping[PartitionId, int], now: float, deadline: float, *, rejected: bool) -> None:
        """The partitions whose commit was refused (by the store: ``rejected``; else here, the belief having ended):
        this member's belief in (p, epoch) ends — the stepping thread calls ``on_lost`` and releases — and a
        refusal by the store is recorded (one ``fenced`` event; best effort, it is only history)."""
        if not parts:
            return
        self._belief.fence(parts, deadline)
        ctx = self._ctx
        for p, use in parts.items():
            ctx.trace(TraceKind.FENCED, partition=p, epoch=use)
        if rejected:
            with contextlib.suppress(StoreUnavailable), ctx.store.time_limit(max(0.0, deadline - ctx.clock.now())):
                ctx.put_event(HistoryType.FENCED, now, partitions=list(parts), epochs=list(parts.values()))


__all__ = ["Committer"]
