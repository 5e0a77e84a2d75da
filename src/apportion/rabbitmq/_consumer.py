"""The consumer of seed 3: a member of an apportion group consumes exactly the queues of the partitions it owns.

``QueueConsumer(url, prefix, handle)`` gives a :class:`apportion.Worker` its three callbacks (``on_assigned``,
``on_revoked``, ``on_lost``) and runs one AMQP thread that alone touches the connection (pika's connections are not
thread-safe): the callbacks, which run on the worker thread, post a command to it and wait until it is done. Each
owned partition is one channel (prefetch ``prefetch``) with one consumer on its queue (``<prefix>.<p>``, or what
``queue_template`` names: ``_queues``), so its acks and
requeues (``multiple``) never touch another partition's deliveries.

One queue's states (the AMQP thread moves them; the worker thread's callbacks trigger them)::

    (none) --on_assigned: open a channel, declare the queue, basic_consume--> CONSUMING (epoch = the lease's)
    CONSUMING: a delivery is queued locally; the loop hands it to ``handle(partition, body)`` only while
               ``worker.lease(p)`` still has this epoch (the local belief: a member frozen past its deadline never
               starts another message when it resumes); every ``batch`` handled messages or ``ack_delay_s`` after
               the oldest of them, ONE fenced ``worker.commit_many`` for every partition with handled messages
               (checkpoint: the count of messages acked so far), then per partition:
                 committed      --> basic_ack(the last handled, multiple)
                 fenced         --> DROPPED (the epoch no longer matches: nothing of it is acked)
                 failed         --> kept, committed again at the next flush (the store did not answer)
    CONSUMING --on_revoked--> basic_cancel (no new deliveries; pika requeues what it had not dispatched yet),
               a last fenced commit and ack of what was handled, basic_nack(requeue) of what was not, close the
               channel --> (none); the callback returns only then, so the partition is released (and another
               member may consume the queue) after this member has stopped consuming it: revoke-before-assign
    CONSUMING --on_lost, a fenced commit, or the belief ending before a message--> DROPPED: basic_cancel,
               basic_nack(requeue) of everything unacked, handled or not (they are redelivered to the next owner:
               the duplicates of at-least-once), close the channel --> (none)

Why a fenced commit per batch, not only the lease check before the ack: the lease is this process's belief, right
only while clocks drift by less than 20 % of the ttl; the commit is compared with the owner record at the store, so
an ack follows a write that the store accepted for this very epoch. One store transaction per batch (``batch``
messages or ``ack_delay_s``, every partition at once) is what it costs (bench/README.md).

A broker connection that fails ends the consumer: the AMQP thread stops, the next callback (or the graceful leave
it starts) raises ``BrokerUnavailable``, the worker stops with that error; RabbitMQ requeues every unacked message
of a closed connection. ``handle`` raising stops the consumer the same way (its message is requeued).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from apportion.errors import BrokerUnavailable, Fenced, InvalidRequest
from apportion.events import Emit, WorkerEvent
from apportion.group import PartitionId, sorted_pids
from apportion.rabbitmq._queues import (
    DEFAULT_QUEUE_NAME,
    broker_errors,
    connect_broker,
    declare_queue,
    queue_name,
    validate_prefix,
    validate_queue_name,
)
from apportion.worker import Worker

log = logging.getLogger("apportion.rabbitmq")

Handle = Callable[[PartitionId, bytes], None]
"""``handle(partition, body)``: process one message; it is acked after this returns (and the batch's fence)."""

DEFAULT_PREFETCH = 200
DEFAULT_BATCH = 100
DEFAULT_ACK_DELAY_S = 0.1
_IDLE_S = 0.05  # how long the AMQP thread waits for the broker when it has nothing to do
_COMMAND_TIMEOUT_S = 30.0


def _quiet(event: str, **fields: Any) -> None:
    """The default ``emit``: log at debug level."""
    log.debug("%s %s", event, fields)


@dataclass(eq=False, slots=True)
class _Queue:
    """One owned partition's consumption (see the module docstring)."""

    partition: PartitionId
    epoch: int
    channel: Any
    tag: str
    acked: int  # messages acked so far on this partition (the checkpoint), by every owner
    pending: deque[tuple[int, bytes]] = field(default_factory=deque)  # delivered, not handled: (tag, body)
    handled: int = 0  # handled, not acked yet
    last_handled: int = 0  # the delivery tag of the last handled message
    since: float = 0.0  # when the oldest handled, unacked message was handled (monotonic)
    retry_at: float = 0.0  # a commit the store did not answer is tried again from then on (monotonic)
    cancelled: bool = False  # basic_cancel sent: no more deliveries


@dataclass(slots=True)
class _Command:
    kind: str  # "assign", "revoke", "lose"
    partitions: list[PartitionId]
    epochs: dict[PartitionId, int] = field(default_factory=dict)  # assign: the lease of each partition
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class QueueConsumer:
    """Consumes the queues of the partitions a :class:`apportion.Worker` owns (module docstring). Use as a context
    manager around the worker's life: ``__enter__`` connects to the broker and starts the AMQP thread, ``bind``
    gives it the worker once it runs, ``__exit__`` drops whatever is still consumed and closes the connection."""

    def __init__(
        self,
        url: str,
        prefix: str,
        handle: Handle,
        *,
        prefetch: int = DEFAULT_PREFETCH,
        batch: int = DEFAULT_BATCH,
        ack_delay_s: float = DEFAULT_ACK_DELAY_S,
        emit: Emit | None = None,
        queue_template: str = DEFAULT_QUEUE_NAME,
    ) -> None:
        if prefetch < 1 or prefetch > 65535:
            raise InvalidRequest("prefetch", f"must be 1..65535, got {prefetch}")
        if batch < 1 or batch > prefetch:
            raise InvalidRequest("batch", f"must be 1..prefetch ({prefetch}), got {batch}")
        if not 0 <= ack_delay_s <= 60:
            raise InvalidRequest("ack-delay", f"must be 0..60 s, got {ack_delay_s}")
        self.url = url
        self.prefix = validate_prefix(prefix)
        self.queue_template = validate_queue_name(queue_template, self.prefix)
        self.handle = handle
        self.prefetch = prefetch
        self.batch = batch
        self.ack_delay_s = ack_delay_s
        self.emit = emit or _quiet
        self._worker: Worker | None = None
        self._bound = threading.Event()
        self._commands: queue.SimpleQueue[_Command] = queue.SimpleQueue()
        self._queues: dict[PartitionId, _Queue] = {}  # the AMQP thread's alone
        self._consuming: tuple[PartitionId, ...] = ()  # a copy of its keys for other threads, replaced whole
        self._connection: Any = None
        self._stopping = threading.Event()
        self._ended = threading.Event()
        self.error: BaseException | None = None
        self.handled = 0  # messages handled, over the consumer's life (the AMQP thread writes it)
        self._thread = threading.Thread(target=self._run, name="apportion-amqp", daemon=True)

    # -- life cycle ------------------------------------------------------------------------------------------

    def __enter__(self) -> QueueConsumer:
        self._connection = connect_broker(self.url)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stopping.set()
        self._wake()
        self._thread.join(_COMMAND_TIMEOUT_S)

    def bind(self, worker: Worker) -> None:
        """The worker whose partitions this consumer follows (call it from ``Group.run``'s ``on_started``)."""
        self._worker = worker
        self._bound.set()

    @property
    def consuming(self) -> list[PartitionId]:
        """The partitions whose queues are consumed now (a snapshot; thread-safe)."""
        return sorted_pids(self._consuming)

    # -- the worker's callbacks (worker thread) ----------------------------------------------------------------

    def on_assigned(self, partitions: list[PartitionId]) -> None:
        worker = self._bound_worker()
        epochs = {}
        for p in partitions:
            with contextlib.suppress(Fenced):  # lost again at once: on_lost follows, nothing to consume
                epochs[p] = worker.lease(p).epoch
        self._post(_Command("assign", sorted_pids(list(epochs)), epochs))
        self.emit(WorkerEvent.ASSIGNED, partitions=partitions)

    def on_revoked(self, partitions: list[PartitionId]) -> None:
        self._post(_Command("revoke", partitions))
        self.emit(WorkerEvent.REVOKED, partitions=partitions)

    def on_lost(self, partitions: list[PartitionId]) -> None:
        self._post(_Command("lose", partitions))
        self.emit(WorkerEvent.LOST, partitions=partitions)

    def _bound_worker(self) -> Worker:
        if not self._bound.wait(_COMMAND_TIMEOUT_S) or self._worker is None:
            raise InvalidRequest("worker", "the consumer was never given its worker (call QueueConsumer.bind)")
        return self._worker

    def _post(self, command: _Command) -> None:
        """Run ``command`` on the AMQP thread and wait for it; raise what ended the consumer, if anything did."""
        if self._ended.is_set():
            raise self._failure()
        self._commands.put(command)
        self._wake()
        deadline = time.monotonic() + _COMMAND_TIMEOUT_S
        while not command.done.wait(0.05):
            if self._ended.is_set() or time.monotonic() > deadline:
                raise self._failure()
        if command.error is not None:
            raise command.error

    def _failure(self) -> BrokerUnavailable:
        if isinstance(self.error, BrokerUnavailable):
            return self.error
        reason = repr(self.error) if self.error is not None else "it stopped or did not answer in time"
        return BrokerUnavailable(f"the RabbitMQ consumer has stopped: {reason}")

    def _wake(self) -> None:
        connection = self._connection
        if connection is not None and not self._ended.is_set():
            with contextlib.suppress(Exception):  # a closed connection: the thread is ending anyway
                connection.add_callback_threadsafe(lambda: None)

    # -- the AMQP thread ---------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            with broker_errors("the RabbitMQ connection failed"):
                self._loop()
        except BaseException as exc:
            self.error = exc
            log.error("the RabbitMQ consumer stopped: %s", exc)
            worker = self._worker
            if worker is not None:
                with contextlib.suppress(BaseException):
                    worker.stop(0)  # the worker leaves; its next callback raises this error
        finally:
            self._ended.set()
            self._close()

    def _loop(self) -> None:
        while True:
            self._run_commands()
            if self._stopping.is_set():
                for q in list(self._queues.values()):
                    self._drop(q, "stopping")
                return
            worked = self._handle_some()
            self._flush(due_only=True)
            busy = worked or any(q.pending and q.handled < self.batch for q in self._queues.values())
            self._connection.process_data_events(time_limit=0 if busy else self._idle_s())

    def _idle_s(self) -> float:
        """Wait for the broker at most until the oldest handled message's ack is due."""
        waiting = [q.since for q in self._queues.values() if q.handled]
        if not waiting:
            return _IDLE_S
        return max(0.0, min(_IDLE_S, min(waiting) + self.ack_delay_s - time.monotonic()))

    def _run_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            try:
                for p in command.partitions:
                    q = self._queues.get(p)
                    if command.kind == "assign":
                        self._consume(p, command.epochs[p])
                    elif q is not None and command.kind == "revoke":
                        self._revoke(q)
                    elif q is not None:
                        self._drop(q, "lost")
            except Exception as exc:  # the consumer's end (a broker error): the callback raises it
                command.error = exc
                raise
            finally:
                command.done.set()

    def _consume(self, partition: PartitionId, epoch: int) -> None:
        previous = self._queues.get(partition)
        if previous is not None:  # a new epoch of a partition still consumed: its old deliveries are stale
            self._drop(previous, "fenced")
        worker = self._worker
        assert worker is not None  # a command is posted only once the worker is bound
        try:
            acked = int(worker.checkpoint(partition) or 0)
        except ValueError:
            acked = 0  # a checkpoint this consumer did not write: count from 0
        name = queue_name(self.prefix, partition, self.queue_template)
        channel = self._connection.channel()
        channel.basic_qos(prefetch_count=self.prefetch)
        declare_queue(channel, name)
        q = _Queue(partition, epoch, channel, "", acked)

        def deliver(ch: Any, method: Any, properties: Any, body: bytes) -> None:
            q.pending.append((int(method.delivery_tag), body))

        q.tag = channel.basic_consume(name, deliver, auto_ack=False)
        self._queues[partition] = q
        self._consuming = tuple(self._queues)
        self.emit(WorkerEvent.CONSUMING, partition=partition, epoch=epoch, queue=name)

    def _handle_some(self) -> bool:
        """Handle delivered messages, partition after partition, while no command waits and no batch is full."""
        worker = self._worker
        if worker is None:
            return False
        worked = False
        for q in list(self._queues.values()):
            while q.pending and q.handled < self.batch and self._commands.empty():
                try:
                    current = worker.lease(q.partition).epoch
                except Fenced:
                    current = None
                if current != q.epoch:  # the belief ended (or moved on): never start another message
                    self._drop(q, "fenced")
                    break
                tag, body = q.pending.popleft()
                self.handle(q.partition, body)
                if not q.handled:
                    q.since = time.monotonic()
                q.handled += 1
                q.last_handled = tag
                self.handled += 1
                worked = True
        return worked

    def _flush(self, *, due_only: bool, only: _Queue | None = None) -> None:
        """One fenced commit for every partition with handled messages (when one of them is due), then ack or drop."""
        candidates = [only] if only is not None else list(self._queues.values())
        queues = [q for q in candidates if q.handled]
        if not queues:
            return
        now = time.monotonic()
        if due_only and not any(
            now >= q.retry_at and (q.handled >= self.batch or now - q.since >= self.ack_delay_s) for q in queues
        ):
            return
        worker = self._worker
        assert worker is not None
        checkpoints = {q.partition: str(q.acked + q.handled) for q in queues}
        result = worker.commit_many(checkpoints, epochs={q.partition: q.epoch for q in queues})
        for q in queues:
            if q.partition in result.committed:
                q.channel.basic_ack(delivery_tag=q.last_handled, multiple=True)
                q.acked += q.handled
                self.emit(WorkerEvent.ACKED, partition=q.partition, epoch=q.epoch, count=q.handled, checkpoint=q.acked)
                q.handled = 0
            elif q.partition in result.fenced:
                self._drop(q, "fenced")
            else:  # the store did not answer: outcome unknown, commit again later (the lease decides meanwhile)
                q.retry_at = now + max(self.ack_delay_s, _IDLE_S)
                self.emit(WorkerEvent.COMMIT_FAILED, partition=q.partition, error=result.failed.get(q.partition))

    def _revoke(self, q: _Queue) -> None:
        """Stop consuming, ack what was handled (fenced), requeue what was not, close: revoke-before-assign."""
        q.channel.basic_cancel(q.tag)  # pika requeues the deliveries it had not dispatched to ``deliver``
        q.cancelled = True
        self._flush(due_only=False, only=q)
        if self._queues.get(q.partition) is not q:
            return  # the last commit was fenced: dropped already
        requeued = len(q.pending) + q.handled
        if requeued:
            q.channel.basic_nack(delivery_tag=0, multiple=True, requeue=True)
        q.channel.close()
        del self._queues[q.partition]
        self._consuming = tuple(self._queues)
        self.emit(WorkerEvent.CANCELLED, partition=q.partition, epoch=q.epoch, requeued=requeued, checkpoint=q.acked)

    def _drop(self, q: _Queue, why: str) -> None:
        """The epoch no longer matches (or the consumer stops): requeue every unacked message, close the channel."""
        requeued = len(q.pending) + q.handled
        if q.channel.is_open:
            if not q.cancelled:
                q.channel.basic_cancel(q.tag)
                q.cancelled = True
            q.channel.basic_nack(delivery_tag=0, multiple=True, requeue=True)
            q.channel.close()
        self._queues.pop(q.partition, None)
        self._consuming = tuple(self._queues)
        self.emit(WorkerEvent.REQUEUED, partition=q.partition, epoch=q.epoch, count=requeued, reason=why)

    def _close(self) -> None:
        connection = self._connection
        if connection is not None and connection.is_open:
            with contextlib.suppress(Exception):
                connection.close()


__all__ = ["DEFAULT_ACK_DELAY_S", "DEFAULT_BATCH", "DEFAULT_PREFETCH", "Emit", "Handle", "QueueConsumer"]
