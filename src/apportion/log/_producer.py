"""The Python producer: routes records by THE routing hash (``apportion.routing``) and appends them in batches."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable
from types import TracebackType

from apportion.errors import InvalidRequest
from apportion.log._log import Appended, PartitionedLog, records_table
from apportion.routing import partition_for, partitions_for

Record = tuple[str, str | None] | tuple[str, str | None, int | None]


class Producer:
    """Buffers records per partition (``partition_for(key, n)``) and appends each buffer as one segment.

    A partition's buffer is appended when it reaches ``batch_records``, on ``flush()`` and when a ``with`` block ends
    without an exception. Records of one producer keep their order within a partition. Not thread-safe: use one
    producer per thread (any number of producers, in any processes, may append to the same log).
    """

    def __init__(self, log: PartitionedLog, resource: str, *, batch_records: int = 10_000) -> None:
        if isinstance(batch_records, bool) or not isinstance(batch_records, int) or batch_records < 1:
            raise InvalidRequest("batch_records", f"must be an int >= 1, got {batch_records!r}")
        self.log = log
        self.resource = resource
        self.partitions = log.partitions(resource)
        self.batch_records = batch_records
        self._buffers: dict[int, list[Record]] = {}
        self._appended: list[Appended] = []

    def send(self, key: str, value: str | None, ts_ms: int | None = None) -> int:
        """Buffer one record; returns its partition."""
        _check_record(key, value)
        partition = partition_for(key, self.partitions)
        self._buffer(partition, (key, value, ts_ms))
        return partition

    def send_many(self, records: Iterable[Record]) -> None:
        """Buffer many (key, value[, ts_ms]) records, hashing their keys in one vectorised batch."""
        batch = list(records)
        for record in batch:
            _check_record(record[0], record[1])
        for partition, record in zip(partitions_for([r[0] for r in batch], self.partitions), batch, strict=True):
            self._buffer(partition, record)

    def _buffer(self, partition: int, record: Record) -> None:
        buffer = self._buffers.setdefault(partition, [])
        buffer.append(record)
        if len(buffer) >= self.batch_records:
            self._append(partition)

    def _append(self, partition: int) -> None:
        buffer = self._buffers.pop(partition, [])
        if buffer:
            appended = self.log.append(self.resource, partition, records_table(buffer))
            if appended is not None:
                self._appended.append(appended)

    def flush(self) -> list[Appended]:
        """Append every buffered record; returns what was appended since the previous flush, by partition."""
        for partition in sorted(self._buffers):
            self._append(partition)
        done, self._appended = self._appended, []
        return sorted(done, key=lambda a: (a.partition, a.first_offset))

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.flush()


def synthetic_records(rng: random.Random, key_count: int, first: int, count: int) -> list[tuple[str, str]]:
    """``count`` seeded sample records numbered from ``first`` (for the demo, benchmarks and ``pipeline produce``):
    key ``key-<n>`` with n uniform below ``key_count``, value ``v-<i>-<8 hex digits>``. Same rng state, same records."""
    if isinstance(key_count, bool) or not isinstance(key_count, int) or key_count < 1:
        raise InvalidRequest("keys", f"must be an int >= 1, got {key_count!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InvalidRequest("records", f"must be an int >= 0, got {count!r}")
    return [
        (f"key-{rng.randrange(key_count)}", f"v-{i}-{rng.getrandbits(32):08x}") for i in range(first, first + count)
    ]


class SeededRecords:
    """``total`` seeded sample records (``synthetic_records``) appended to ``resource`` in chunks, in order: the same
    seed gives the same records whatever the chunk sizes (the demo's and the nemesis's input). ``sink`` sends each
    chunk somewhere else than the log (``log`` then None): the demo's Kafka topic."""

    def __init__(
        self,
        log: PartitionedLog | None,
        resource: str,
        total: int,
        *,
        keys: int,
        seed: int,
        batch_records: int = 10_000,
        sink: Callable[[list[tuple[str, str]]], object] | None = None,
    ) -> None:
        if (log is None) == (sink is None):
            raise InvalidRequest("log", "give the log to append to or a sink, one of them")
        self.log = log
        self.sink = sink
        self.resource = resource
        self.total = total
        self.keys = keys
        self.batch_records = batch_records
        self.rng = random.Random(seed)
        self.produced = 0
        self.error: BaseException | None = None  # what ended ``stream``'s thread, if anything did
        self._stop = threading.Event()

    def stream(self, up_to: int, chunk: int, every_s: float, name: str = "producer") -> threading.Thread:
        """Append ``chunk`` records every ``every_s`` seconds in a (daemon) thread until ``up_to`` are produced or
        ``stop()``; a failure ends the thread and is kept in ``error``. Nothing else may append meanwhile."""

        def run() -> None:
            try:
                while self.produced < min(up_to, self.total) and not self._stop.wait(every_s):
                    self.append(min(chunk, up_to - self.produced))
            except BaseException as exc:  # kept for the caller: nothing is lost silently
                self.error = exc

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """End ``stream``'s thread after its current chunk."""
        self._stop.set()

    def append(self, count: int) -> int:
        """Append the next ``count`` records (fewer at the end); returns how many."""
        count = min(count, self.total - self.produced)
        if count <= 0:
            return 0
        records = synthetic_records(self.rng, self.keys, self.produced, count)
        if self.sink is not None:
            self.sink(records)
        else:
            assert self.log is not None  # __init__: one of them
            with Producer(self.log, self.resource, batch_records=self.batch_records) as producer:
                producer.send_many(records)
        self.produced += count
        return count


def _check_record(key: object, value: object) -> None:
    if not isinstance(key, str):
        raise InvalidRequest("key", f"log keys are strings, got {type(key).__name__}")
    if value is not None and not isinstance(value, str):
        raise InvalidRequest("value", f"log values are strings (or None), got {type(value).__name__}")
