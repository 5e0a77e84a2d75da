"""What the RabbitMQ process tests share: a fleet of `apportion rabbitmq consume` processes (static mode, SQLite), a
publisher thread, a sampler of RabbitMQ's consumers, and the checks of a run.

The checks (:meth:`Run.check`), over the consumers' event lines and the sampler's looks:

- **at least once**: every published ``(key, seq)`` has a ``processed`` line;
- **per-key order**: the *first* processing of each key's messages is in ``seq`` order (0, 1, 2, ... with no gap), by
  the system-wide monotonic clock; anything else is a redelivery of a message processed before (its duplicate);
- **duplicates bounded**: at most the prefetch per queue per fault that hit it (``max_duplicates``);
- **one consumer per queue**: RabbitMQ never listed two consumers on one queue, in the AMQP look every 50 ms
  (``queue_declare(passive)``'s consumer count) or in ``rabbitmqctl list_consumers`` every 2 s;
- **the fence**: per partition, the consumers' intervals (``consuming`` to ``cancelled``/``requeued``, or to the
  kill of their process) never overlap between two consumers, their epochs increase with time, and each
  ``processed`` line lies inside an interval of its consumer for that partition.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika

from apportion.fleet import Fleet, WorkerProcess
from apportion.rabbitmq import Producer, queue_name
from apportion.waiting import wait_for
from tests.rabbitmq_server import RabbitServer

ROOT = Path(__file__).resolve().parents[2]
GROUP = "orders"
TTL_S = 2.0
PREFETCH, BATCH = 20, 10
HANDLE_S = 0.002  # the handler's "work" per message


def consume_args(node: RabbitServer, prefix: str, store_url: str, partitions: int, mode: str) -> list[str]:
    """`apportion rabbitmq consume` in ``mode`` with the test handler, without ``--id``/``--ordinal``."""
    return [
        sys.executable, "-m", "apportion.cli", "rabbitmq", "consume", "--amqp", node.url, "--prefix", prefix,
        "--store", store_url, "--group", GROUP, "--partitions", str(partitions), "--mode", mode,
        "--ttl", f"{TTL_S:g}", "--settle", "0.3", "--min-interval", "0.6",
        "--handler", "tests.rabbitmq.handler:record", "--prefetch", str(PREFETCH), "--batch", str(BATCH),
        "--ack-delay", "0.5",
    ]  # fmt: skip


def scale(store_url: str, replicas: int) -> None:
    """`apportion scale` (what an operator runs with `kubectl scale`)."""
    subprocess.run(
        [sys.executable, "-m", "apportion.cli", "scale", "--store", store_url, "--group", GROUP, "--replicas",
         str(replicas)], check=True, capture_output=True, timeout=60, env=env(),
    )  # fmt: skip


def env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "APPORTION_TEST_HANDLE_S": f"{HANDLE_S:g}"}


class Publisher(threading.Thread):
    """Publishes ``{"key": "k<i>", "seq": n}`` for ``keys`` keys in turn, at most ``rate`` a second, until stopped;
    ``published`` counts per key (seq 0..count-1 were confirmed)."""

    def __init__(self, url: str, prefix: str, partitions: int, keys: int = 48, rate: float = 300.0) -> None:
        super().__init__(name="publisher", daemon=True)
        self.producer = Producer(url, prefix, partitions)
        self.keys = keys
        self.interval = 1.0 / rate
        self.published: Counter[str] = Counter()
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            i = 0
            next_at = time.monotonic()
            while not self._stop_event.is_set():
                key = f"k{i % self.keys}"
                self.producer.publish(key, json.dumps({"key": key, "seq": self.published[key]}).encode())
                self.published[key] += 1
                i += 1
                next_at += self.interval
                self._stop_event.wait(max(0.0, next_at - time.monotonic()))  # pacing, not synchronisation
        except BaseException as exc:
            self.error = exc
        finally:
            self.producer.close()

    def total(self) -> int:
        return sum(self.published.values())

    def finish(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(30)
        else:
            self.producer.close()  # never started
        assert self.error is None, f"the publisher failed: {self.error!r}"


class Sampler(threading.Thread):
    """Looks at every queue's consumer count: AMQP every 50 ms, ``rabbitmqctl list_consumers`` every 2 s; keeps
    each look where a queue had more than one consumer."""

    def __init__(self, node: RabbitServer, prefix: str, partitions: int) -> None:
        super().__init__(name="sampler", daemon=True)
        self.node = node
        self.queues = [queue_name(prefix, p) for p in range(partitions)]
        self.prefix = prefix
        self.looks = 0
        self.ctl_looks = 0
        self.violations: list[str] = []
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            connection = pika.BlockingConnection(pika.URLParameters(self.node.url))
            channel = connection.channel()
            next_ctl = time.monotonic()
            while not self._stop_event.wait(0.05):
                for name in self.queues:
                    count = channel.queue_declare(name, passive=True).method.consumer_count
                    if count > 1:
                        self.violations.append(f"{time.time():.3f} AMQP: {name} has {count} consumers")
                self.looks += 1
                if time.monotonic() >= next_ctl:
                    self._look_with_rabbitmqctl()
                    next_ctl = time.monotonic() + 2.0
            connection.close()
        except BaseException as exc:
            self.error = exc

    def _look_with_rabbitmqctl(self) -> None:
        per_queue = Counter(str(c["queue_name"]) for c in self.node.consumers())
        for name, count in per_queue.items():
            if name.startswith(self.prefix + ".") and count > 1:
                self.violations.append(f"{time.time():.3f} rabbitmqctl: {name} has {count} consumers")
        self.ctl_looks += 1

    def finish(self) -> None:
        self._stop_event.set()
        self.join(60)
        assert self.error is None, f"the sampler failed: {self.error!r}"


@dataclass
class Run:
    """One test's consumers, publisher and sampler (use :func:`run`)."""

    node: RabbitServer
    prefix: str
    store_url: str
    partitions: int
    fleet: Fleet
    publisher: Publisher
    sampler: Sampler
    killed: dict[int, float] = field(default_factory=dict)  # process id -> the wall time of its kill -9

    def start(self, ordinal: int, replicas: int) -> WorkerProcess:
        """Start (or restart) pod ``c<ordinal>`` with the pod template's ``--replicas``."""
        return self.fleet.start(f"c{ordinal}", "--ordinal", str(ordinal), "--replicas", str(replicas))

    def kill(self, worker: WorkerProcess) -> None:
        worker.kill()
        self.killed[worker.proc.pid] = time.time()

    def consuming(self) -> dict[int, set[str]]:
        """Partition -> the live consumers whose event lines say they consume its queue now."""
        found: dict[int, set[str]] = defaultdict(set)
        for worker in self.fleet.workers.values():
            if not worker.alive():
                continue
            now: set[int] = set()
            for e in worker.own_events():
                if e["event"] == "consuming":
                    now.add(int(e["partition"]))
                elif e["event"] in ("cancelled", "requeued"):
                    now.discard(int(e["partition"]))
            for p in now:
                found[p].add(worker.id)
        return found

    def wait_consumed(
        self, what: str, by: dict[str, Sequence[int]] | None = None, timeout_s: float = 60.0, *, each: int = 0
    ) -> None:
        """Until every partition's queue is consumed by one live consumer (and, with ``by``, by the one named; with
        ``each``, every live consumer consuming that many)."""

        def done() -> bool:
            now = self.consuming()
            if any(len(now.get(p, ())) != 1 for p in range(self.partitions)):
                return False
            if each and set(Counter(w for ws in now.values() for w in ws).values()) != {each}:
                return False
            return by is None or all(now[p] == {wid} for wid, parts in by.items() for p in parts)

        wait_for(what, done, timeout_s, poll_s=0.1, context=lambda: f"consuming: {dict(self.consuming())}")

    def processed(self) -> list[dict[str, Any]]:
        """Every ``processed`` line of every consumer process, each with its ``worker`` and ``pid``, by ``mono``."""
        lines = [
            {**e, "worker": w.id, "pid": w.proc.pid}
            for w in self.fleet.started
            for e in w.own_events()
            if e["event"] == "processed"
        ]
        return sorted(lines, key=lambda e: int(e["mono"]))

    def wait_processed_more(self, count: int, timeout_s: float = 60.0) -> None:
        """Until ``count`` more messages than now were processed."""
        target = self.count_processed() + count
        wait_for(f"{count} more processed messages", lambda: self.count_processed() >= target, timeout_s, poll_s=0.1)

    def count_processed(self) -> int:
        return sum(log.count("processed") for log in self.fleet.logs.values())

    def finish(self, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Stop publishing, wait until every published message was processed (``timeout_s`` without progress),
        stop sampling; the processed lines."""
        self.publisher.finish()
        published = {(k, s) for k, n in self.publisher.published.items() for s in range(n)}

        def missing() -> set[tuple[str, int]]:
            return published - {(e["key"], int(e["seq"])) for e in self.processed()}

        wait_for(
            f"all {len(published)} published messages processed",
            lambda: not missing(),
            timeout_s,
            poll_s=0.2,
            progress=self.count_processed,
            context=lambda: f"{len(missing())} missing, e.g. {sorted(missing())[:5]}; consuming {self.consuming()}",
        )
        self.sampler.finish()
        return self.processed()

    def check(self, processed: list[dict[str, Any]], max_duplicates: int) -> dict[str, int]:
        """Every check of the module docstring; returns what was counted."""
        first_seen: dict[str, int] = {}
        duplicates = 0
        out_of_order = []
        for e in processed:
            key, seq = e["key"], int(e["seq"])
            top = first_seen.get(key, -1)
            if seq > top:
                if seq != top + 1:
                    out_of_order.append(f"{key}: seq {seq} first processed after {top} (by {e['worker']})")
                first_seen[key] = seq
            else:
                duplicates += 1
        assert not out_of_order, "first processings out of order:\n" + "\n".join(out_of_order[:10])
        assert duplicates <= max_duplicates, f"{duplicates} duplicates, at most {max_duplicates} expected"
        assert not self.sampler.violations, "two consumers on one queue:\n" + "\n".join(self.sampler.violations[:10])
        assert self.sampler.looks > 0 and self.sampler.ctl_looks > 0
        fence_problems = self._fence_problems(processed)
        assert not fence_problems, "the fence:\n" + "\n".join(fence_problems[:10])
        return {"processed": len(processed), "duplicates": duplicates, "looks": self.sampler.looks}

    def _intervals(self) -> dict[int, list[tuple[float, float, str, int, int]]]:
        """Partition -> (start, end, worker, pid, epoch) of every consumption, by start."""
        found: dict[int, list[tuple[float, float, str, int, int]]] = defaultdict(list)
        for w in self.fleet.started:
            open_at: dict[int, tuple[float, int]] = {}
            pid = w.proc.pid
            for e in w.own_events():
                if e["event"] == "consuming":
                    open_at[int(e["partition"])] = (float(e["time"]), int(e["epoch"]))
                elif e["event"] in ("cancelled", "requeued") and int(e["partition"]) in open_at:
                    start, epoch = open_at.pop(int(e["partition"]))
                    found[int(e["partition"])].append((start, float(e["time"]), w.id, pid, epoch))
            end = self.killed.get(pid, float("inf"))
            for p, (start, epoch) in open_at.items():
                found[p].append((start, end, w.id, pid, epoch))
        return {p: sorted(spans) for p, spans in found.items()}

    def _fence_problems(self, processed: list[dict[str, Any]]) -> list[str]:
        problems = []
        intervals = self._intervals()
        for p, spans in intervals.items():
            for (_, e1, w1, pid1, ep1), (s2, _, w2, pid2, ep2) in itertools.pairwise(spans):
                if s2 < e1 and pid1 != pid2:
                    problems.append(f"partition {p}: {w1} (epoch {ep1}) until {e1:.3f}, {w2} from {s2:.3f}")
                if ep2 <= ep1:
                    problems.append(f"partition {p}: epoch {ep2} of {w2} after epoch {ep1} of {w1}")
        for e in processed:
            p, t = int(e["partition"]), float(e["time"])
            if not any(pid == e["pid"] and s <= t <= end + 0.001 for s, end, _, pid, _ in intervals.get(p, [])):
                problems.append(f"{e['worker']} processed {e['key']}/{e['seq']} of {p} at {t:.3f}, not consuming it")
        return problems


@contextlib.contextmanager
def run(
    node: RabbitServer, prefix: str, store_url: str, logs: Path, partitions: int = 12, mode: str = "static"
) -> Iterator[Run]:
    """A fleet of consumers (none started), a publisher (not started) and a running sampler; all stopped after."""
    fleet = Fleet(logs, consume_args(node, prefix, store_url, partitions, mode), env=env())
    publisher = Publisher(node.url, prefix, partitions)  # declares the queues
    sampler = Sampler(node, prefix, partitions)
    sampler.start()
    with fleet:
        try:
            yield Run(node, prefix, store_url, partitions, fleet, publisher, sampler)
        finally:
            with contextlib.suppress(AssertionError):
                publisher.finish()
            with contextlib.suppress(AssertionError):
                sampler.finish()
