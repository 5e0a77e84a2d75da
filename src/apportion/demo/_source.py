"""The demo's input: seeded keyed records appended through the Python producer, part up front, part streamed."""

from __future__ import annotations

import threading
from pathlib import Path

from apportion.demo._config import GROUP, DemoConfig
from apportion.errors import ApportionError
from apportion.waiting import wait_for


class RecordSource:
    """The demo's input: seeded keyed records appended through the Python producer, in chunks.

    The first half is appended before the workers start; the rest streams in while the group churns, so that the
    faults hit workers in the middle of their batches.
    """

    def __init__(self, config: DemoConfig, log_dir: Path) -> None:
        from apportion.log import PartitionedLog, SeededRecords

        self.config = config
        self.log = PartitionedLog(log_dir)
        self.log.create(GROUP, config.partitions)
        self.records = SeededRecords(
            self.log, GROUP, config.records, keys=config.keys, seed=config.seed, batch_records=config.batch_records
        )
        self._thread: threading.Thread | None = None

    @property
    def produced(self) -> int:
        return self.records.produced

    def append(self, count: int) -> None:
        self.records.append(count)

    def stream(self, duration_s: float, chunk: int = 25_000) -> None:
        """Append the rest in the background, evenly over about ``duration_s`` seconds."""
        remaining = self.streamed_total - self.produced
        pause = duration_s / max(1, -(-remaining // chunk))

        self._thread = self.records.stream(self.streamed_total, chunk, pause, name="demo-producer")

    @property
    def streamed_total(self) -> int:
        """Records produced by the end of the stream; the rest is a reserve appended on demand (``finish``)."""
        return self.config.records - self.reserve

    @property
    def reserve(self) -> int:
        return min(self.config.records // 2, max(self.config.partitions * 250, self.config.records // 20))

    def finish(self, limit_s: float) -> None:
        """End the stream after its current chunk (failing after ``limit_s`` without it ending), then append what it
        had left and the reserve at once: fresh work for every partition, right now. The stream has done its part
        by then (input arriving through the join and the kill); waiting out its pace only kept the workers idle
        (about 45 s of a 118 s demo, issue 31)."""
        thread = self._thread
        if thread is not None:
            self.records.stop()
            wait_for(
                "the producer to end its chunk",
                lambda: not thread.is_alive(),
                limit_s,
                progress=lambda: self.produced,
            )
        if self.records.error is not None:
            raise ApportionError(f"demo: the producer failed: {self.records.error}") from self.records.error
        self.append(self.config.records - self.produced)
        if self.produced < self.config.records:
            raise ApportionError(f"demo: produced only {self.produced} of {self.config.records} records")

    def stop(self) -> None:
        self.records.stop()


__all__ = ["RecordSource"]
