"""Kafka topics as a group's resources: topic ``T`` with ``n`` partitions is the resource ``T`` (partition ids
``T-0`` .. ``T-<n-1>``), its partition count read from the broker.

- :func:`topic_resources` — the resources of some topics, as the broker has them now: a group's definition is
  ``GroupConfig(resources=topic_resources(kafka, ["orders"]))`` (or ``--kafka B --topic orders`` on the commands);
- :func:`sync_definition` — before a member joins, and whenever the watcher sees a change: a topic that grew on
  the broker grows in the stored definition (one compare-and-set; every member adopts it and a new round starts).
  A topic has no way to shrink in Kafka, so a broker count below the stored one means the topic was deleted and
  created again (its offsets and every checkpoint are meaningless now): one line, exit 1, the group untouched;
- :class:`TopicWatcher` — a thread beside a running worker that reads the counts every ``period_s`` (half the
  heartbeat, at most 5 s: a grown topic is a new round within one heartbeat) and syncs; a topic deleted or a broker
  that stays unreachable for ``grace_s`` ends the worker with that one line (``BrokerUnavailable``, exit 1); the
  partitions are released as in a graceful leave, nothing else is lost.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from apportion.errors import ApportionError, BrokerUnavailable, TopicUnavailable
from apportion.group import GroupConfig
from apportion.group.internals import Keys
from apportion.kafka._client import ErrorWatch, KafkaConfig, admin_client, topic_partitions
from apportion.model import Resource
from apportion.store import Put, Store, mod_revision_is
from apportion.worker import Worker

log = logging.getLogger("apportion.kafka")

MAX_PERIOD_S = 5.0
_CAS_ATTEMPTS = 10


def topic_resources(kafka: KafkaConfig, topics: Iterable[str]) -> tuple[Resource, ...]:
    """One resource per topic, named after it, with the partition count the broker has now (sorted by name)."""
    counts = topic_partitions(kafka, topics)
    return tuple(Resource(name, count) for name, count in sorted(counts.items()))


def resources_text(counts: Mapping[str, int]) -> str:
    """``--resources``' form of topic counts: ``orders:6,payments:4``."""
    return ",".join(f"{name}:{count}" for name, count in sorted(counts.items()))


def sync_definition(store: Store, group: str, counts: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """Grow the stored definition of ``group`` to the broker's ``counts`` (module docstring); the topics that grew,
    ``{topic: (stored, now)}``. Nothing is written when the group has no definition yet (its first member writes the
    broker's counts) or no topic grew; BrokerUnavailable when a topic has fewer partitions than the group stored."""
    key = Keys(group).resource
    for _ in range(_CAS_ATTEMPTS):
        kv = store.get(key)
        if kv is None:
            return {}
        stored = GroupConfig.from_record(kv)
        grown: dict[str, tuple[int, int]] = {}
        resources = []
        for r in stored.resources:
            now = counts.get(r.name)
            if now is not None and now < r.partitions:
                raise TopicUnavailable(
                    f"topic {r.name!r} has {now} partitions on the broker but group {group!r} stored {r.partitions}: "
                    "a Kafka topic cannot shrink (was it deleted and created again?); the group is left as it was"
                )
            if now is not None and now > r.partitions:
                grown[r.name] = (r.partitions, now)
                weights = None if r.weights is None else (*r.weights, *([1.0] * (now - r.partitions)))
                r = replace(r, partitions=now, weights=weights)
            resources.append(r)
        if not grown:
            return {}
        wanted = replace(stored, resources=tuple(resources), partitions=0)
        result = store.txn([mod_revision_is(key, kv.mod_revision)], [Put(key, wanted.record())])
        if result.succeeded:
            return grown
    raise BrokerUnavailable(f"could not record the grown topics of group {group!r}: the definition kept changing")


class TopicWatcher:
    """Follows the partition counts of a group's topics beside a running worker (module docstring). ``start(worker)``
    from ``on_started``; ``stop()`` when the worker has stopped; ``error`` is what ended it, if anything."""

    def __init__(
        self,
        kafka: KafkaConfig,
        topics: Iterable[str],
        store: Store,
        group: str,
        *,
        period_s: float | None = None,
        grace_s: float | None = None,
        on_grown: Callable[[dict[str, tuple[int, int]]], None] | None = None,
    ) -> None:
        self.kafka = kafka
        self.topics = sorted(set(topics))
        self.store = store
        self.group = group
        self.period_s = period_s
        self.grace_s = grace_s if grace_s is not None else max(30.0, 3 * kafka.connect_timeout_s)
        self.on_grown = on_grown
        self.error: ApportionError | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors = ErrorWatch()
        self._admin = admin_client(kafka, self._errors)

    @staticmethod
    def period_for(heartbeat_s: float) -> float:
        """Half the heartbeat, at most :data:`MAX_PERIOD_S`, at least 0.2 s."""
        return min(MAX_PERIOD_S, max(0.2, heartbeat_s / 2))

    def check(self) -> dict[str, tuple[int, int]]:
        """One look at the broker and one sync (raises what it finds wrong)."""
        counts = topic_partitions(self.kafka, self.topics, admin=self._admin)
        return sync_definition(self.store, self.group, counts)

    def start(self, worker: Worker) -> None:
        """Follow the topics beside ``worker`` (its ``on_started``); every ``period_s``, by default half the group's
        heartbeat (at most :data:`MAX_PERIOD_S`)."""
        if self.period_s is None:
            self.period_s = self.period_for(worker.effective.heartbeat_s)
        self._thread = threading.Thread(target=self._run, args=(worker,), name="apportion-topics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.kafka.connect_timeout_s + 5)

    def _run(self, worker: Worker) -> None:
        unreachable_since: float | None = None
        assert self.period_s is not None
        while not self._stop.wait(self.period_s):
            try:
                grown = self.check()
                unreachable_since = None
            except TopicUnavailable as exc:
                self._fail(worker, exc)
                return
            except BrokerUnavailable as exc:
                now = time.monotonic()
                unreachable_since = unreachable_since or now
                log.warning("%s", exc)
                if now - unreachable_since >= self.grace_s:
                    self._fail(worker, exc)
                    return
                continue
            except ApportionError as exc:  # the store: the member's own steps report it; try again next period
                log.debug("topic sync deferred: %s", exc)
                continue
            if grown:
                log.info("topics grew: %s", ", ".join(f"{t} {a}->{b}" for t, (a, b) in grown.items()))
                if self.on_grown is not None:
                    self.on_grown(grown)

    def _fail(self, worker: Worker, error: ApportionError) -> None:
        self.error = error
        log.error("%s", error)
        with contextlib.suppress(BaseException):
            worker.stop(0)


__all__ = ["TopicWatcher", "resources_text", "sync_definition", "topic_resources"]
