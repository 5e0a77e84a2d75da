"""The consumer: a member of an apportion group reads exactly the Kafka partitions it owns, from the offsets its
group's store recorded, and records how far it got with fenced commits.

``TopicConsumer(kafka, group, topics, handle)`` gives a :class:`apportion.Worker` its three callbacks (``on_assigned``,
``on_revoked``, ``on_lost``) over a group whose resources are the topics (partition ``T-3`` is partition 3 of topic
``T``) and runs one I/O thread that alone touches its confluent-kafka ``Consumer`` (librdkafka's consumer must not
be called from two threads at once): the callbacks, which run on the worker thread, post a command to it and wait
until it is done. The consumer's ``group.id`` is the apportion group's name, but it never calls ``subscribe()``:
partitions are added and removed with ``incremental_assign``/``incremental_unassign`` as the worker's ownership
changes, so Kafka's group coordinator never assigns anything (it only keeps the offsets committed under the group).

One partition's states (the I/O thread moves them; the worker thread's callbacks trigger them)::

    (none) --on_assigned: read the checkpoint the partition's owners committed (fenced) to the store: the next
              offset to read (none: the earliest offset, or with start="latest" the partition's end now, recorded
              at the next commit); incremental_assign at that offset--> CONSUMING (epoch = the lease's)
    CONSUMING: fetched messages wait in order; one is handed to ``handle(partition, key, value)`` only while
               ``worker.lease(p)`` still has this epoch (the local belief: a member frozen past its deadline never
               starts another message when it resumes); every ``batch`` handled messages of a partition or
               ``commit_delay_s`` after the oldest, ONE fenced ``worker.commit_many`` for every partition with
               handled messages (checkpoint: the offset after the last handled; a partition with ``max_pending``
               fetched messages waiting is paused meanwhile), then per partition:
                 committed --> the same offsets committed to Kafka (async, best effort; module docstring)
                 fenced    --> DROPPED (the epoch no longer matches: its handled messages are forgotten)
                 failed    --> kept, committed again later (the store did not answer); no further message of the
                               partition is handled while ``batch`` of them wait for a commit
    CONSUMING --on_revoked--> no more messages handled, a last fenced commit of what was handled,
               incremental_unassign --> (none); the callback returns only then, so the partition is released (and
               another member may read it) after this member has stopped reading it: revoke-before-assign
    CONSUMING --on_lost, a fenced commit, or the belief ending before a message--> DROPPED: incremental_unassign at
               once, nothing committed (the next owner reads again from the store's checkpoint: the duplicates of
               at-least-once, at most ``batch`` messages per partition)

**The store wins.** Offsets are committed twice: to apportion's store (fenced: the commit is compared with the
partition's owner record, so it succeeds only for the owner of the current epoch) and then to Kafka's
``__consumer_offsets`` under the group's name, only so that Kafka's tools (``kafka-consumer-groups --describe``)
show the group's position and lag. Kafka's offset commit from a consumer that assigns partitions itself is not
fenced (there is no generation to check): any client with the group's id may write it, and an old owner's commit
still in flight — a member frozen past its ttl that resumes — can land after the new owner's and move it back. On
assignment this consumer therefore reads only the store's checkpoint, never Kafka's (the tests move Kafka's
offset back and check that nothing is read again).

**Duplicates.** A partition never has more than ``batch`` handled, uncommitted messages (no further one is handled
until a commit takes them), and a new owner starts at the last checkpoint the store accepted, which only the owner
of the current epoch can write. So a tenure that ends without its final commit — a kill -9, a lost lease, a fenced
commit, a belief that ended — makes the next owner handle again at most ``batch`` messages of that partition; a
graceful hand-over (revoke, leave) and a broker failure make none. Each key's messages are in one partition, read in
offset order by one owner at a time, so the first handling of each key's messages is in their order.

Why a fenced commit per batch, not only the lease check before each message: the lease is this process's belief,
right only while clocks drift by less than 20 % of the ttl; the commit is checked against the owner record by the
store itself. One store transaction per batch (``batch`` messages or ``commit_delay_s``, every partition at once)
is what it costs.

A handler that raises ends the consumer: what was handled before that message is committed (fenced), every
partition is unassigned, the worker is asked to leave gracefully and :attr:`TopicConsumer.error` says which message
failed (the message itself is not committed: the next owner handles it first). librdkafka retries a broker that
cannot be reached on its own (``apportion.kafka.TopicWatcher`` ends the worker when it stays away); a fatal error
or refused credentials end the consumer as ``BrokerUnavailable``.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from apportion.errors import ApportionError, BrokerUnavailable, CorruptRecord, Fenced, InvalidRequest
from apportion.events import Emit, WorkerEvent
from apportion.group import PartitionId, sorted_pids
from apportion.group.internals import Keys
from apportion.kafka._client import ErrorWatch, KafkaConfig, validate_topic
from apportion.model import split_partition_name
from apportion.worker import Worker

log = logging.getLogger("apportion.kafka")

Handle = Callable[[PartitionId, bytes | None, bytes | None], None]
"""``handle(partition, key, value)``: process one record (``orders-3``, the key's bytes or None, the value's bytes or
None for a tombstone); its offset is committed after this returns (and the batch's fence)."""

DEFAULT_BATCH = 100
DEFAULT_COMMIT_DELAY_S = 0.1
STARTS = ("earliest", "latest")
_IDLE_S = 0.05  # how long the I/O thread waits for the broker when it has nothing to do (a command's latency)
_FETCH = 500  # messages taken from librdkafka per consume() call
_COMMAND_TIMEOUT_S = 30.0
_CLOSING_S = 3.0  # at the end, how long to wait for Kafka to answer the offset commits still in flight


def _quiet(event: str, **fields: Any) -> None:
    """The default ``emit``: log at debug level."""
    log.debug("%s %s", event, fields)


def parse_checkpoint(group: str, partition: PartitionId, checkpoint: str | None) -> int | None:
    """A stored checkpoint as the next offset to read; None when there is none. CorruptRecord when it is not a
    non-negative integer (something else committed to this group: an offset cannot be guessed from it)."""
    if checkpoint is None:
        return None
    text = checkpoint.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        raise CorruptRecord(
            Keys(group).commit(partition), f"checkpoint {checkpoint[:40]!r} of {partition} is not a Kafka offset"
        )
    return int(text)


@dataclass(eq=False, slots=True)
class _Partition:
    """One owned partition's consumption (see the module docstring)."""

    pid: PartitionId
    topic: str
    index: int
    epoch: int
    done: int | None  # the offset after the last handled message: what a commit records (None: nothing yet)
    committed: int | None  # the store's checkpoint as this consumer last read or wrote it (None: none)
    expected: int | None  # the offset after the last message fetched: an older one is stale and skipped
    pending: deque[Any] = field(default_factory=deque)  # fetched, not handled yet, in offset order
    handled: int = 0  # handled, not committed yet
    unsaved: bool = False  # a start offset (start="latest") to record in the store at the next commit
    since: float = 0.0  # when the oldest uncommitted message was handled (monotonic)
    retry_at: float = 0.0  # a commit the store did not answer is tried again from then on (monotonic)
    paused: bool = False  # fetching paused: ``max_pending`` messages wait already


@dataclass(slots=True)
class _Command:
    kind: str  # "assign", "revoke", "lose"
    partitions: list[PartitionId]
    starts: dict[PartitionId, tuple[int, int | None]] = field(default_factory=dict)  # assign: (epoch, checkpoint)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class TopicConsumer:
    """Consumes the Kafka partitions a :class:`apportion.Worker` owns (module docstring). Use as a context manager
    around the worker's life: ``__enter__`` creates the Kafka consumer and starts the I/O thread, ``bind`` gives it
    the worker once it runs, ``__exit__`` unassigns whatever is still consumed and closes the consumer."""

    def __init__(
        self,
        kafka: KafkaConfig,
        group: str,
        topics: Iterable[str],
        handle: Handle,
        *,
        batch: int = DEFAULT_BATCH,
        commit_delay_s: float = DEFAULT_COMMIT_DELAY_S,
        start: str = "earliest",
        emit: Emit | None = None,
    ) -> None:
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 100_000:
            raise InvalidRequest("batch", f"must be 1..100000, got {batch!r}")
        if not 0 <= commit_delay_s <= 60:
            raise InvalidRequest("commit-delay", f"must be 0..60 s, got {commit_delay_s}")
        if start not in STARTS:
            raise InvalidRequest("start", f"one of {', '.join(STARTS)}, got {start!r}")
        self.kafka = kafka
        self.group = group
        self.topics = frozenset(validate_topic(t) for t in topics)
        if not self.topics:
            raise InvalidRequest("topic", "give at least one topic")
        self.handle = handle
        self.batch = batch
        self.commit_delay_s = commit_delay_s
        self.start = start
        self.max_pending = max(1000, 10 * batch)  # fetched, unhandled messages of a partition before it is paused
        self.emit = emit or _quiet
        self._worker: Worker | None = None
        self._bound = threading.Event()
        self._commands: queue.SimpleQueue[_Command] = queue.SimpleQueue()
        self._parts: dict[tuple[str, int], _Partition] = {}  # the I/O thread's alone
        self._consuming: tuple[PartitionId, ...] = ()  # a copy of its partitions for other threads, replaced whole
        self._consumer: Any = None
        self._errors = ErrorWatch()
        self._stopping = threading.Event()
        self._ended = threading.Event()
        self.error: ApportionError | None = None
        self.handled = 0  # messages handled, over the consumer's life (the I/O thread writes it)
        self.kafka_commit_errors = 0  # Kafka offset commits that failed (best effort: logged at debug level)
        self._kafka_in_flight = 0  # Kafka offset commits sent and not answered yet (the I/O thread's)
        self._thread = threading.Thread(target=self._run, name="apportion-kafka", daemon=True)

    # -- life cycle ------------------------------------------------------------------------------------------

    def __enter__(self) -> TopicConsumer:
        from confluent_kafka import Consumer

        settings = self.kafka.client(
            **{
                "group.id": self.group,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                # a stored offset the broker no longer has (retention): where to go instead
                "auto.offset.reset": self.start,
                "error_cb": self._errors,
                "on_commit": self._kafka_committed,
            }
        )
        try:
            self._consumer = Consumer(settings)
        except Exception as exc:  # a malformed --kafka-option: librdkafka refuses the configuration
            raise InvalidRequest("kafka-option", str(exc)) from exc
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stopping.set()
        self._thread.join(_COMMAND_TIMEOUT_S)

    def bind(self, worker: Worker) -> None:
        """The worker whose partitions this consumer follows (call it from ``Group.run``'s ``on_started``)."""
        self._worker = worker
        self._bound.set()

    @property
    def consuming(self) -> list[PartitionId]:
        """The partitions read now (a snapshot; thread-safe)."""
        return sorted_pids(self._consuming)

    # -- the worker's callbacks (worker thread) ----------------------------------------------------------------

    def on_assigned(self, partitions: list[PartitionId]) -> None:
        worker = self._bound_worker()
        starts = {}
        for p in partitions:
            self._topic_partition(p)  # a partition of another resource than the topics: refused here
            try:
                epoch = worker.lease(p).epoch
            except Fenced:  # lost again at once: on_lost follows, nothing to read
                continue
            starts[p] = (epoch, parse_checkpoint(self.group, p, worker.checkpoint(p)))
        self._post(_Command("assign", sorted_pids(list(starts)), starts))
        self.emit(WorkerEvent.ASSIGNED, partitions=partitions)

    def on_revoked(self, partitions: list[PartitionId]) -> None:
        self._post(_Command("revoke", partitions), quiet=True)
        self.emit(WorkerEvent.REVOKED, partitions=partitions)

    def on_lost(self, partitions: list[PartitionId]) -> None:
        self._post(_Command("lose", partitions), quiet=True)
        self.emit(WorkerEvent.LOST, partitions=partitions)

    def _bound_worker(self) -> Worker:
        if not self._bound.wait(_COMMAND_TIMEOUT_S) or self._worker is None:
            raise InvalidRequest("worker", "the consumer was never given its worker (call TopicConsumer.bind)")
        return self._worker

    def _topic_partition(self, partition: PartitionId) -> tuple[str, int]:
        parts = split_partition_name(partition) if isinstance(partition, str) else None
        if parts is None or parts[0] not in self.topics:
            raise InvalidRequest(
                "topic", f"partition {partition!r} is not one of the topics {', '.join(sorted(self.topics))}"
            )
        return parts[0], int(parts[1])

    def _post(self, command: _Command, *, quiet: bool = False) -> None:
        """Run ``command`` on the I/O thread and wait for it; raise what ended the consumer, if anything did. With
        ``quiet`` (a release), an ended consumer is not an error: it unassigned everything as it ended."""
        if self._ended.is_set():
            if quiet:
                return
            raise self._failure()
        self._commands.put(command)
        deadline = time.monotonic() + _COMMAND_TIMEOUT_S
        while not command.done.wait(0.05):
            if self._ended.is_set() and not command.done.is_set():
                if quiet:
                    return
                raise self._failure()
            if time.monotonic() > deadline:
                raise self._failure()
        if command.error is not None:
            raise command.error

    def _failure(self) -> ApportionError:
        if self.error is not None:
            return self.error
        return BrokerUnavailable("the Kafka consumer has stopped or did not answer in time")

    # -- the I/O thread ----------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            self.error = exc if isinstance(exc, ApportionError) else BrokerUnavailable(f"the Kafka consumer: {exc!r}")
            log.error("the Kafka consumer stopped: %s", self.error)
            with contextlib.suppress(Exception):
                self._flush(due_only=False)  # what was handled before the failure is kept
            for part in list(self._parts.values()):
                with contextlib.suppress(Exception):
                    self._drop(part, "failed")
            self._ended.set()
            worker = self._worker
            if worker is not None:
                with contextlib.suppress(BaseException):
                    worker.stop(0)  # a graceful leave: the partitions are released at once
        finally:
            self._ended.set()
            with contextlib.suppress(Exception):
                self._close()

    def _close(self) -> None:
        """Wait (a little) for the Kafka offset commits in flight, so that Kafka's tools show where the member
        stopped, then close: librdkafka's close does not wait for asynchronous commits."""
        deadline = time.monotonic() + min(_CLOSING_S, self.kafka.connect_timeout_s)
        while self._kafka_in_flight > 0 and time.monotonic() < deadline:
            self._consumer.poll(0.05)  # serves ``on_commit``
        self._consumer.close()

    def _loop(self) -> None:
        while True:
            self._run_commands()
            if self._stopping.is_set():
                for part in list(self._parts.values()):
                    self._drop(part, "stopping")
                return
            worked = self._handle_some()
            self._flush(due_only=True)
            self._check_errors()
            ready = any(p.pending and p.handled < self.batch for p in self._parts.values())
            self._fetch(0 if worked or ready else self._idle_s())

    def _idle_s(self) -> float:
        """Wait for the broker at most until the next commit is due (none while a command waits)."""
        if not self._commands.empty():
            return 0.0
        due = [max(p.since + self.commit_delay_s, p.retry_at) for p in self._parts.values() if p.handled or p.unsaved]
        if not due:
            return _IDLE_S
        return max(0.0, min(_IDLE_S, min(due) - time.monotonic()))

    def _check_errors(self) -> None:
        """End the consumer on what librdkafka reported that retrying cannot heal."""
        error = self._errors.last
        if error is None:
            return
        if self._errors.authentication_failed() or error.fatal():
            raise self._errors.failure(self.kafka, "the Kafka consumer stopped")

    def _fetch(self, timeout_s: float) -> None:
        from confluent_kafka import KafkaError

        for message in self._consumer.consume(num_messages=_FETCH, timeout=timeout_s):
            error = message.error()
            if error is not None:
                if error.fatal() or error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise BrokerUnavailable(f"reading from {self.kafka.who}: {error.str()}")
                log.debug("kafka: %s", error.str())  # a deleted topic, a leader moving: retried by librdkafka
                continue
            part = self._parts.get((message.topic(), message.partition()))
            if part is None:
                continue  # fetched before its partition was unassigned
            offset = message.offset()
            if part.expected is not None and offset < part.expected:
                continue  # stale: fetched for an earlier assignment of the partition
            part.pending.append(message)
            part.expected = offset + 1
            if len(part.pending) >= self.max_pending and not part.paused:
                self._consumer.pause([self._tp(part)])  # librdkafka resumes after the last message it gave
                part.paused = True

    def _run_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            try:
                if command.kind == "assign":
                    self._assign(command.starts)
                else:
                    parts = [
                        self._parts[tp] for tp in map(self._topic_partition, command.partitions) if tp in self._parts
                    ]
                    if command.kind == "revoke":
                        self._revoke(parts)
                    else:
                        for part in parts:
                            self._drop(part, "lost")
            except Exception as exc:  # the consumer's end (a broker error): the callback raises it
                command.error = exc
                raise
            finally:
                command.done.set()

    def _assign(self, starts: dict[PartitionId, tuple[int, int | None]]) -> None:
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

        adding = []
        for pid in sorted_pids(list(starts)):
            epoch, checkpoint = starts[pid]
            topic, index = self._topic_partition(pid)
            previous = self._parts.get((topic, index))
            if previous is not None:  # a new epoch of a partition still read: its old messages are stale
                self._drop(previous, "fenced")
            part = _Partition(pid, topic, index, epoch, done=checkpoint, committed=checkpoint, expected=checkpoint)
            offset: int = OFFSET_BEGINNING if checkpoint is None else checkpoint
            if checkpoint is None and self.start == "latest":
                offset = self._end_offset(topic, index)
                if offset != OFFSET_END:  # recorded at the next commit: a later owner starts from here too
                    part.done = part.expected = offset
                    part.unsaved = True
                    part.since = time.monotonic()
            self._parts[(topic, index)] = part
            adding.append(TopicPartition(topic, index, offset))
            where = "earliest" if offset == OFFSET_BEGINNING else "latest" if offset == OFFSET_END else offset
            self.emit(WorkerEvent.CONSUMING, partition=pid, epoch=epoch, offset=where)
        if adding:
            self._consumer.incremental_assign(adding)
        self._consuming = tuple(p.pid for p in self._parts.values())

    def _end_offset(self, topic: str, index: int) -> int:
        """The partition's end now (its high watermark); OFFSET_END (resolved by librdkafka, not recorded) when the
        broker does not answer in time."""
        from confluent_kafka import OFFSET_END, KafkaException, TopicPartition

        try:
            _, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, index), timeout=self.kafka.connect_timeout_s, cached=False
            )
            return int(high)
        except KafkaException as exc:
            log.warning("cannot read the end of %s-%d (%s): starting at its end as librdkafka finds it", topic, index,
                        exc)  # fmt: skip
            return int(OFFSET_END)

    def _handle_some(self) -> bool:
        """Handle fetched messages, partition after partition, while no command waits and no batch is full."""
        worker = self._worker
        if worker is None:
            return False
        worked = False
        for part in list(self._parts.values()):
            while part.pending and part.handled < self.batch and self._commands.empty():
                try:
                    current = worker.lease(part.pid).epoch
                except Fenced:
                    current = None
                if current != part.epoch:  # the belief ended (or moved on): never start another message
                    self._drop(part, "expired")
                    break
                message = part.pending[0]
                try:
                    self.handle(part.pid, message.key(), message.value())
                except Exception as exc:
                    raise ApportionError(
                        f"the handler failed on {part.pid} at offset {message.offset()}: {type(exc).__name__}: {exc}"
                    ) from exc
                part.pending.popleft()
                if not part.handled:
                    part.since = time.monotonic()
                part.handled += 1
                part.done = message.offset() + 1
                self.handled += 1
                worked = True
            if part.paused and len(part.pending) < self.max_pending // 2 and self._parts.get(self._key(part)) is part:
                self._consumer.resume([self._tp(part)])
                part.paused = False
        return worked

    def _flush(self, *, due_only: bool, only: list[_Partition] | None = None) -> None:
        """One fenced commit for every partition with handled messages (when one of them is due), then Kafka's."""
        candidates = only if only is not None else list(self._parts.values())
        parts = [p for p in candidates if p.handled or p.unsaved]
        if not parts:
            return
        now = time.monotonic()
        if due_only and not any(
            now >= p.retry_at and (p.handled >= self.batch or now - p.since >= self.commit_delay_s) for p in parts
        ):
            return
        worker = self._worker
        assert worker is not None  # a partition is assigned only once the worker is bound
        checkpoints = {p.pid: str(p.done) for p in parts}
        result = worker.commit_many(checkpoints, epochs={p.pid: p.epoch for p in parts})
        offsets = []
        for p in parts:
            if p.pid in result.committed:
                self.emit(WorkerEvent.COMMITTED, partition=p.pid, epoch=p.epoch, count=p.handled, checkpoint=p.done)
                p.committed = p.done
                p.handled = 0
                p.unsaved = False
                offsets.append(self._tp(p, p.done))
            elif p.pid in result.fenced:
                self.emit(WorkerEvent.FENCED, partition=p.pid, epoch=p.epoch, count=p.handled)
                self._drop(p, "fenced")
            else:  # the store did not answer: outcome unknown, commit again later (the lease decides meanwhile)
                p.retry_at = now + max(self.commit_delay_s, _IDLE_S)
                self.emit(WorkerEvent.COMMIT_FAILED, partition=p.pid, error=result.failed.get(p.pid))
        if offsets:
            self._commit_to_kafka(offsets)

    def _commit_to_kafka(self, offsets: list[Any]) -> None:
        """The store's offsets into ``__consumer_offsets`` too, for Kafka's tools (best effort: the store wins)."""
        from confluent_kafka import KafkaException

        try:
            self._consumer.commit(offsets=offsets, asynchronous=True)
            self._kafka_in_flight += 1
        except KafkaException as exc:
            self.kafka_commit_errors += 1
            log.debug("kafka offset commit not sent: %s", exc)

    def _kafka_committed(self, error: Any, partitions: list[Any]) -> None:
        """librdkafka's ``on_commit`` (served by ``consume`` and ``poll`` on the I/O thread)."""
        self._kafka_in_flight = max(0, self._kafka_in_flight - 1)
        if error is not None:
            self.kafka_commit_errors += 1
            log.debug("kafka offset commit failed: %s", error)

    def _revoke(self, parts: list[_Partition]) -> None:
        """Stop handling, commit what was handled (fenced), unassign, forget: revoke-before-assign."""
        self._flush(due_only=False, only=parts)
        still = [p for p in parts if self._parts.get(self._key(p)) is p]  # a fenced one was dropped already
        self._unassign(still)
        for p in still:  # ``uncommitted``: the store did not answer the last commit (the next owner reads them again)
            self.emit(WorkerEvent.RELEASED, partition=p.pid, epoch=p.epoch, checkpoint=p.committed,
                      uncommitted=p.handled, skipped=len(p.pending))  # fmt: skip

    def _drop(self, part: _Partition, why: str) -> None:
        """The epoch no longer matches (or the consumer stops): unassign, forget what was handled and not committed
        (the next owner reads it again from the store's checkpoint)."""
        if self._parts.get(self._key(part)) is not part:
            return
        self._unassign([part])
        self.emit(WorkerEvent.DROPPED, partition=part.pid, epoch=part.epoch, uncommitted=part.handled,
                  skipped=len(part.pending), reason=why)  # fmt: skip

    def _unassign(self, parts: list[_Partition]) -> None:
        if not parts:
            return
        paused = [self._tp(p) for p in parts if p.paused]
        if paused:  # a partition assigned again later must not start paused
            self._consumer.resume(paused)
        for p in parts:
            del self._parts[self._key(p)]
        self._consumer.incremental_unassign([self._tp(p) for p in parts])
        self._consuming = tuple(p.pid for p in self._parts.values())

    @staticmethod
    def _key(part: _Partition) -> tuple[str, int]:
        return part.topic, part.index

    @staticmethod
    def _tp(part: _Partition, offset: int | None = None) -> Any:
        from confluent_kafka import TopicPartition

        if offset is None:
            return TopicPartition(part.topic, part.index)
        return TopicPartition(part.topic, part.index, offset)


__all__ = ["DEFAULT_BATCH", "DEFAULT_COMMIT_DELAY_S", "STARTS", "Emit", "Handle", "TopicConsumer", "parse_checkpoint"]
