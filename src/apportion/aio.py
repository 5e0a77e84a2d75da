"""The asyncio face of a worker: ``AsyncWorker`` runs the same sync core and lets coroutines use it.

There is no second protocol here. An ``AsyncWorker`` wraps one :class:`apportion.worker.Worker` (the member stays the
one state machine, stepped by that worker's thread) and only moves work across threads so that the event loop never
blocks::

    async with AsyncWorker(group, "w1", on_assigned=start, on_revoked=finish, on_lost=drop) as worker:
        await worker.wait_until_stable(timeout_s=10)
        await worker.commit(p, "1200")
        async for change in worker.changes():   # Change(kind=assigned|revoked|lost, partitions, epochs)
            ...

Threads and who runs what::

    event loop:        your coroutines; the callbacks (awaited there, one at a time, in the member's order);
                       owned, lease(), changes(), wait_until_stable(), wait() — none of them calls the store
    worker thread:     the sync Worker's stepping loop. At a callback it submits the coroutine to the loop
                       (run_coroutine_threadsafe) and waits for its result: the member is blocked in that callback
                       exactly as it is in a sync callback that takes as long
    keepalive thread:  the sync Worker's lease renewal, unchanged
    executor threads:  commit, commit_many, checkpoint, stop (asyncio.to_thread): every blocking store call

Why it cannot deadlock: the loop never waits for a thread synchronously; it awaits a future, so it is free to run a
callback while ``stop()`` (in an executor thread) waits for the worker thread that waits for that callback. The
cycles left are a callback that waits for the worker itself: ``stop()`` called inside a callback only asks for the
stop (the leave follows once the callback returns), and ``wait_until_stable`` inside a callback returns False at its
timeout (nothing settles while the member waits for a callback). A loop that ends while the worker thread waits for
a callback does not hang it: ``asyncio.run`` ended without ``stop()`` cancels the callback, a loop stopped or closed
otherwise is seen within ``LOOP_CHECK_S`` (``RuntimeError``); either way the worker fails and gives its lease back
(``Worker``'s FAILED), as after a callback error. ``Group(...)`` reads the store when it is made: from a running
loop, make it in a thread (``await asyncio.to_thread(apportion.Group, store, ...)``).

Callbacks (``on_assigned``, ``on_revoked``, ``on_lost``) take the sorted partition ids and are awaited when they
return an awaitable (a plain function runs on the loop too). Their semantics are the sync Worker's: ``on_revoked``
runs while the partitions are still owned and they are released when it returns. A revocation that overruns
``revoke_timeout_s`` is not cancelled (a sync callback cannot be interrupted either): the lease stops being renewed
and lapses, the other members take the partitions, ``owned`` becomes empty at the local lease deadline and commits
are fenced; when the callback returns, on_lost reports the partitions and the worker registers again. A callback
that raises stops the worker with that error (``stop()`` and the ``async with`` block re-raise it).

``changes()`` is an async iterator of :class:`Change` values: what this worker holds at the call (one ``assigned``
change, when it holds anything), then every ``assigned``, ``revoked`` and ``lost`` change as it happens (a change is
sent when the member traces it: ``assigned`` just before ``on_assigned`` runs, ``revoked`` once ``on_revoked`` has
returned, ``lost`` just before ``on_lost``); it ends when the worker stops. Its queue keeps what the subscriber has
not read yet: leave the ``async for`` (or ``aclose()`` it) when no longer reading. ``owned`` is a property here (the
sync Worker's ``owned()`` is a method).

States of an AsyncWorker (those of the sync Worker, plus NEW)::

    NEW --start() / async with--> RUNNING --stop() / the block ends--> LEAVING --> STOPPED
    RUNNING --a callback raises, or the loop stops under a callback--> FAILED --> STOPPED
    RUNNING --the task running the block is cancelled--> LEAVING (the leave is shielded: a second cancellation waits
            for it too) --> STOPPED; CancelledError is raised again

There is no ``Group.join_async``: the group layer (``worker.py``) does not import the layers above it, and
``AsyncWorker(group, ...)`` takes ``Group.join``'s parameters (its :class:`apportion.JoinOptions` among them).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import enum
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Unpack

from apportion.errors import InvalidRequest
from apportion.group import (
    Callback,
    CommitResult,
    GroupConfig,
    PartitionId,
    PartitionLease,
    TraceKind,
)
from apportion.worker import Group, JoinOptions, Worker

AsyncCallback = Callable[[list[Any]], Awaitable[None] | None]
"""A callback of an AsyncWorker: ``callback(partitions)``, awaited when it returns an awaitable."""

LOOP_CHECK_S = 0.5
"""How often the worker thread, waiting for a callback, checks that the event loop still runs."""


class ChangeKind(enum.StrEnum):
    ASSIGNED = "assigned"
    REVOKED = "revoked"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class Change:
    """One ownership change of a worker: ``partitions`` (sorted) with their ``epochs`` (the same order); ``reason``
    says why a ``lost`` change happened (``fenced``, ``lease deadline passed``, ``lease lost``), else None."""

    kind: ChangeKind
    partitions: tuple[PartitionId, ...]
    epochs: tuple[int, ...]
    reason: str | None = None

    @property
    def leases(self) -> dict[PartitionId, int]:
        """partition -> epoch."""
        return dict(zip(self.partitions, self.epochs, strict=True))


_IN_CALLBACK: contextvars.ContextVar[AsyncWorker | None] = contextvars.ContextVar(
    "apportion_aio_callback", default=None
)


class AsyncWorker:
    """One running member of ``group`` driven from an event loop; see the module docstring. Parameters are
    :meth:`apportion.Group.join`'s; ``on_replicas``, ``replica_lags`` and ``restored`` stay plain functions called
    on the worker thread (quick reads, as with the sync Worker)."""

    def __init__(
        self,
        group: Group,
        worker_id: str,
        on_assigned: AsyncCallback | None = None,
        on_revoked: AsyncCallback | None = None,
        on_lost: AsyncCallback | None = None,
        **options: Unpack[JoinOptions],
    ) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._user_tracer = options.get("tracer")
        self._wake = asyncio.Event()  # set on the loop whenever the worker may have changed (stable, stopped)
        self._queues: set[asyncio.Queue[Change | None]] = set()
        self._held: dict[PartitionId, int] = {}  # what the changes sent so far say this worker holds (loop thread)
        self._started = False
        self._ended = False  # the member traced its stop (loop thread): every changes() has ended
        self._worker = Worker(
            group,
            worker_id,
            on_assigned=self._bridge(on_assigned),
            on_revoked=self._bridge(on_revoked),
            on_lost=self._bridge(on_lost),
            options={**options, "tracer": self._trace},
            on_wake=self._wake_from_thread,
        )

    # -- API -----------------------------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._worker.id

    @property
    def group(self) -> Group:
        return self._worker.group

    @property
    def worker(self) -> Worker:
        """The sync Worker underneath (its blocking methods must not run on the event loop)."""
        return self._worker

    @property
    def effective(self) -> GroupConfig:
        return self._worker.effective

    @property
    def owned(self) -> list[PartitionId]:
        """Partitions this worker believes it owns now (no store call: safe on the loop)."""
        return self._worker.owned()

    @property
    def error(self) -> BaseException | None:
        """The error that stopped the worker (a callback's), None otherwise."""
        return self._worker.error

    @property
    def stopped(self) -> bool:
        return self._worker.stopped

    def lease(self, partition: PartitionId) -> PartitionLease:
        """The ownership lease (partition, epoch, member) of an owned partition; raises Fenced if not owned."""
        return self._worker.lease(partition)

    async def start(self) -> AsyncWorker:
        """Start the worker's threads, bound to the running loop (``async with`` calls it)."""
        if self._started:
            raise InvalidRequest("start", f"worker {self.id} was started already")
        self._loop = asyncio.get_running_loop()
        self._started = True
        self._worker.start()  # starts its two threads, no store call: nothing to cancel half-way
        return self

    async def commit(self, partition: PartitionId, checkpoint: str, *, epoch: int | None = None) -> int:
        """``Worker.commit`` in an executor thread: fenced, returns the store revision; raises Fenced (the partition
        is then reported through on_lost) or StoreUnavailable."""
        return await asyncio.to_thread(self._worker.commit, partition, checkpoint, epoch=epoch)

    async def commit_many(
        self, checkpoints: Mapping[PartitionId, str], *, epochs: Mapping[PartitionId, int] | None = None
    ) -> CommitResult:
        """``Worker.commit_many`` in an executor thread: never raises Fenced nor StoreUnavailable (see
        ``CommitResult``)."""
        return await asyncio.to_thread(self._worker.commit_many, dict(checkpoints), epochs=epochs)

    async def checkpoint(self, partition: PartitionId) -> str | None:
        """The last committed checkpoint of ``partition``, whoever wrote it (a store read, in an executor thread)."""
        return await asyncio.to_thread(self._worker.checkpoint, partition)

    async def wait_until_stable(self, timeout_s: float) -> bool:
        """Wait until this worker holds exactly its planned partitions for the current round; False on timeout or
        once the worker has stopped."""
        worker = self._worker
        return await self._until(lambda: worker.settled() and not worker.stopped, timeout_s)

    async def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until the worker has stopped (a callback error, or ``stop()`` elsewhere); True if it has."""
        return await self._until(lambda: self._worker.stopped, timeout_s)

    async def changes(self) -> AsyncIterator[Change]:
        """What this worker holds now (one ``assigned`` change, if anything), then each ownership change as it
        happens, until the worker stops. Each call is a subscriber of its own."""
        self._running_loop()
        queue: asyncio.Queue[Change | None] = asyncio.Queue()  # None: the worker stopped
        if self._ended or self._worker.stopped:
            return
        if self._held:
            held = dict(sorted(self._held.items()))
            queue.put_nowait(Change(ChangeKind.ASSIGNED, tuple(held), tuple(held.values())))
        self._queues.add(queue)
        try:
            while (change := await queue.get()) is not None:
                yield change
        finally:
            self._queues.discard(queue)

    async def stop(self) -> None:
        """Leave gracefully (the sync Worker's leave: on_revoked, release, lease revoked) and wait for it; re-raise
        a callback error. Inside a callback it only asks for the leave, which follows once the callback returns."""
        if not self._started:
            return
        if _IN_CALLBACK.get() is self:
            self._worker.stop(0)  # the worker thread waits for this very callback: do not wait for it
            return
        await self._leave(self._worker.stop)

    async def __aenter__(self) -> AsyncWorker:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            await self.stop()
        else:  # the block's exception (CancelledError too) wins over a callback's; the leave is still graceful
            await self._leave(self._stop_quietly)

    # -- threads -------------------------------------------------------------------------------------------

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise InvalidRequest("start", f"worker {self.id} is not started: use `async with` or `await start()`")
        return self._loop

    async def _until(self, condition: Callable[[], bool], timeout_s: float | None) -> bool:
        """Wait on the loop until ``condition()`` (looked at whenever the worker wakes the loop); False once the
        worker has stopped without it, or at the timeout."""
        loop = self._running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            self._wake.clear()  # cleared before the look: a change after it sets the event again
            if condition():
                return True
            left = None if deadline is None else deadline - loop.time()
            if self._worker.stopped or (left is not None and left <= 0):
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), left)

    def _stop_quietly(self) -> None:
        with contextlib.suppress(Exception):  # a callback's error (logged by the worker): the block's is raised
            self._worker.stop()

    async def _leave(self, stop: Callable[[], None]) -> None:
        """Run ``stop`` in a thread and wait for it even if this task is cancelled meanwhile (a leave half waited
        for would leave the partitions to the lease's expiry); a cancellation is raised again once it is done."""
        leaving = asyncio.ensure_future(asyncio.to_thread(stop))
        cancelled = False
        while True:
            try:
                await asyncio.shield(leaving)
                break
            except asyncio.CancelledError:
                if leaving.done():
                    break
                cancelled = True
        leaving.result()
        if cancelled:
            raise asyncio.CancelledError

    def _bridge(self, callback: AsyncCallback | None) -> Callback | None:
        """The sync callback the Worker calls on its thread: run ``callback`` on the loop and wait for it."""
        if callback is None:
            return None

        def call(parts: list[Any]) -> None:
            loop = self._running_loop()
            future = asyncio.run_coroutine_threadsafe(self._run_callback(callback, parts), loop)
            while True:
                done, _ = concurrent.futures.wait([future], timeout=LOOP_CHECK_S)
                if done:
                    future.result()  # the callback's error, raised on the worker thread: it stops the worker
                    return
                if loop.is_closed() or not loop.is_running():
                    future.cancel()
                    raise RuntimeError(f"worker {self.id}: the event loop stopped while a callback was running")

        return call

    async def _run_callback(self, callback: AsyncCallback, parts: list[Any]) -> None:
        _IN_CALLBACK.set(self)
        result = callback(parts)
        if inspect.isawaitable(result):
            await result

    def _wake_from_thread(self) -> None:
        self._call_soon(self._wake.set)

    def _call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # closed meanwhile: nobody is left to tell
            return

    def _trace(self, kind: TraceKind, fields: Mapping[str, Any]) -> None:
        """The member's tracer (worker threads): the ownership changes go to the loop, everything to the user's."""
        if kind in (TraceKind.ASSIGNED, TraceKind.REVOKED, TraceKind.LOST) and fields.get("partitions"):
            self._call_soon(self._note, kind, list(fields["partitions"]), fields.get("epochs"), fields.get("reason"))
        elif kind == TraceKind.STOPPED:
            self._call_soon(self._end)
        if self._user_tracer is not None:
            self._user_tracer(kind, fields)

    def _note(self, kind: TraceKind, parts: list[PartitionId], epochs: list[int] | None, reason: str | None) -> None:
        """On the loop: keep what this worker holds (the epochs a revocation ends come from its assignment) and
        send the change to every subscriber."""
        if kind == TraceKind.ASSIGNED:
            known = epochs or [-1] * len(parts)
            self._held.update(zip(parts, known, strict=True))
            change = Change(ChangeKind.ASSIGNED, tuple(parts), tuple(known))
        else:
            ended = [self._held.pop(p, -1) for p in parts]
            change = Change(ChangeKind(kind.value), tuple(parts), tuple(epochs or ended), reason)
        for queue in self._queues:
            queue.put_nowait(change)

    def _end(self) -> None:
        self._ended = True
        self._held.clear()
        for queue in self._queues:
            queue.put_nowait(None)
        self._wake.set()


__all__ = ["LOOP_CHECK_S", "AsyncCallback", "AsyncWorker", "Change", "ChangeKind"]
