"""The demo's sizes and timings (``DemoConfig``) and the time limits it derives from what it observes (``Pace``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from apportion.errors import InvalidRequest
from apportion.fleet import WorkerLog

GROUP = "orders"
SOURCES = ("log", "kafka")  # apportion demo --source


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """Sizes and timings of the demo (defaults: the main job; tests run a smaller one)."""

    directory: Path
    records: int = 1_000_000
    partitions: int = 32
    workers: int = 3
    keys: int = 10_000
    batch_records: int = 20_000
    seed: int = 7
    ttl_s: float = 5.0
    stream_s: float = 60.0
    settle_s: float = 0.5
    min_interval_s: float = 1.0
    report: bool = True
    shared_spark: bool = True  # one Spark Connect server for all; False: a local[1] JVM per worker (the old design)
    spark_url: str | None = None  # a running Spark Connect server (sc://host:port) to share instead of starting one
    timeout_s: float = 180.0  # the floor of the start-up limit (x the load factor); others derive from observations
    source: str = "log"  # where the records go and the workers read them: apportion's Parquet log, or "kafka"
    bootstrap: str | None = None  # with source "kafka": a running broker (HOST:PORT) instead of one the demo starts

    def __post_init__(self) -> None:
        if self.records < 1:
            raise InvalidRequest("records", "must be >= 1")
        if self.partitions < 2:
            raise InvalidRequest("partitions", "must be >= 2")
        if self.workers < 2:
            raise InvalidRequest("workers", "must be >= 2 (one is killed, one frozen)")
        if self.source not in SOURCES:
            raise InvalidRequest("--source", f"one of {', '.join(SOURCES)}, got {self.source!r}")
        if self.bootstrap is not None and self.source != "kafka":
            raise InvalidRequest("--bootstrap", "is the Kafka demo's broker: it goes with --source kafka")
        if self.spark_url is not None and not self.shared_spark:
            raise InvalidRequest("--spark", "is the shared engine's server: it does not go with --engine per-worker")


@dataclass(slots=True)
class Pace:
    """The demo's time limits, from what it observed (never a fixed timeout tuned to an idle machine).

    ``protocol_s`` = ttl + settle + min interval (a lapse noticed plus a round); ``batch_s`` = the slowest batch
    any worker has logged; ``startup_s`` = how long the first Spark workers took to own every partition; ``load``
    = the 1-minute load average per core (>= 1). Each limit is a floor or a multiple of those, whichever is larger.
    """

    config: DemoConfig
    logs: dict[str, WorkerLog]
    startup_s: float = 0.0

    @property
    def protocol_s(self) -> float:
        c = self.config
        return c.ttl_s + c.settle_s + c.min_interval_s

    @property
    def load(self) -> float:
        try:
            return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
        except OSError:
            return 1.0

    @property
    def batch_s(self) -> float:
        return max((log.slowest_batch_s() for log in self.logs.values()), default=0.0)

    def startup(self) -> float:
        """Spark sessions starting (JVM, warm-up) and the first round: nothing to scale with yet but the load."""
        return self.config.timeout_s * self.load

    def spark_start(self) -> float:
        """One more worker's Spark session starting, or the first commits: like the first start-up."""
        return max(90.0, 2.0 * self.startup_s) * self.load

    def rebalance(self) -> float:
        """Ownership changing hands: leases lapse, rounds close, revocations wait for the batches in flight."""
        return max(60.0, 4.0 * self.protocol_s + 4.0 * self.batch_s) * self.load

    def batch(self) -> float:
        """A worker finishing the batch it is in (or starting its next one)."""
        return max(60.0, 4.0 * self.batch_s + 2.0 * self.protocol_s) * self.load


__all__ = ["GROUP", "SOURCES", "DemoConfig", "Pace"]
