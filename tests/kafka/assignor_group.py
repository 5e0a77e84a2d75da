"""A consumer group on a real broker, driven one membership change at a time, for seed 4's assignor inside Kafka's
own group protocol: tests/kafka/test_assignor.py checks every step, bench/kafka_assignor_bench.py measures them.

Members are kafka-python consumers polling in threads of this process (several consumers, one assignor instance
each), a kafka-python consumer in a child process (``python -m tests.kafka.assignor_group``: SIGKILL is a crash, a
member that stops heartbeating without leaving), or aiokafka consumers as tasks of one event-loop thread. Each
reports its rebalance callbacks to one :class:`Recorder`: revoked (when), assigned (when, which partitions, the
assignor's generation), and, from apportion's assignor when it leads, the plan's stats.

:meth:`Group.step` makes one change (join, leave: ``close()`` sends LeaveGroup, crash) and waits until the group has
settled: every live member was assigned after the change (under Kafka's eager protocol every membership change is a
rebalance of every member), none is between its revoke and its assignment, all report the same generation, and their
partitions are the topic's, each exactly once. The :class:`Step` then says how many partitions moved (a partition
whose previous owner is still in the group and is not its owner now), the fewest any balanced assignment could move
(seed 4's closed form, :func:`lower_bound`, computed here, not by apportion), the members' sizes, and the time in
rebalance: from the first revoke callback to the last assignment callback after the change.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from apportion.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
SESSION_TIMEOUT_MS = 6000  # the broker's group.min.session.timeout.ms: a crash is noticed after this
HEARTBEAT_INTERVAL_MS = 500  # members notice a rebalance within this
MAX_POLL_INTERVAL_MS = 15000  # also the rebalance timeout: how long the broker waits for every member to rejoin
SETTLE_S = 60.0  # a step's limit, counted from the last callback seen (a busy 2-core machine, JVM and all)
# kafka-python assignors: apportion's (stale claims read by seed 4's rule, or by KIP-54's) and kafka-python's sticky
KINDS = ("apportion", "apportion-yield", "kafka-python-sticky")

# The join/leave/crash sequence of the test and the bench: five consumers join one by one, a sixth (a process)
# joins and crashes, one leaves, one joins, another leaves.
SEQUENCE: tuple[tuple[str, str], ...] = (
    ("join", "c0"),
    ("join", "c1"),
    ("join", "c2"),
    ("join", "c3"),
    ("join", "c4"),
    ("join", "p5"),
    ("crash", "p5"),
    ("leave", "c1"),
    ("join", "c6"),
    ("leave", "c3"),
)

T = TypeVar("T")


def lower_bound(claims: Mapping[str, Collection[T]], members: Sequence[str], total: int) -> int:
    """Seed 4's fewest moves of any balanced assignment of ``total`` partitions to ``members`` when each still
    holds ``claims[m]``: ``sum(o_i) - (sum(min(o_i, q)) + min(r, #{i: o_i > q}))``, ``q, r = divmod(total, N)``."""
    if not members:
        return 0
    q, r = divmod(total, len(members))
    owned = [len(claims.get(m, ())) for m in members]
    return sum(owned) - (sum(min(o, q) for o in owned) + min(r, sum(o > q for o in owned)))


def moves(before: Mapping[str, Collection[T]], after: Mapping[str, Collection[T]]) -> int:
    """Partitions whose previous owner is still a member (in ``after``) and is not their owner now."""
    owner = {p: m for m, ps in after.items() for p in ps}
    return sum(1 for m, ps in before.items() if m in after for p in ps if owner.get(p) != m)


# -- what members report ----------------------------------------------------------------------------------------------


class Sink(Protocol):
    def revoked(self, name: str, at: float) -> None: ...
    def assigned(self, name: str, at: float, partitions: list[int], generation: int) -> None: ...
    def planned(self, plan: Plan) -> None: ...
    def failed(self, name: str, error: str) -> None: ...


@dataclass
class MemberState:
    partitions: frozenset[int] | None = None  # None: never assigned
    generation: int = -1
    revoked_at: float = 0.0
    assigned_at: float = 0.0
    pending: bool = False  # revoked, not assigned since


@dataclass(frozen=True)
class Plan:
    """An ``assign`` call on the leader: when, its seconds and, from apportion's assignor, the plan's moves, their
    lower bound, max - min (None from kafka-python's) and the claimed partitions that did not count as stale."""

    leader: str
    at: float
    seconds: float
    moved: int | None = None
    min_moves: int | None = None
    spread: int | None = None
    stale: int = 0


class Recorder:
    """Every member's last callbacks (times on the system-wide monotonic clock, comparable across processes)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.members: dict[str, MemberState] = {}
        self.plans: list[Plan] = []
        self.errors: list[str] = []
        self.callbacks = 0  # progress of a wait

    def revoked(self, name: str, at: float) -> None:
        with self.lock:
            state = self.members.setdefault(name, MemberState())
            state.revoked_at, state.pending = at, True
            self.callbacks += 1

    def assigned(self, name: str, at: float, partitions: list[int], generation: int) -> None:
        with self.lock:
            state = self.members.setdefault(name, MemberState())
            state.partitions, state.generation, state.assigned_at, state.pending = (
                frozenset(partitions), generation, at, False,
            )  # fmt: skip
            self.callbacks += 1

    def planned(self, plan: Plan) -> None:
        with self.lock:
            self.plans.append(plan)

    def failed(self, name: str, error: str) -> None:
        with self.lock:
            self.errors.append(f"{name}: {error}")

    def describe(self, live: Collection[str]) -> str:
        with self.lock:
            lines = [f"errors: {self.errors}"] if self.errors else []
            for name in sorted(self.members):
                s = self.members[name]
                parts = "never assigned" if s.partitions is None else f"{len(s.partitions)} partitions"
                lines.append(f"  {name}{'' if name in live else ' (gone)'}: generation {s.generation}, {parts}, "
                             f"{'between revoke and assignment' if s.pending else 'assigned'}")  # fmt: skip
            return "\n".join(lines)


class LineSink:
    """A child process's sink: one JSON line per report on stdout, read back by :class:`ProcessMember`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def _emit(self, **fields: Any) -> None:
        with self.lock:
            sys.stdout.write(json.dumps(fields) + "\n")
            sys.stdout.flush()

    def revoked(self, name: str, at: float) -> None:
        self._emit(e="revoked", at=at)

    def assigned(self, name: str, at: float, partitions: list[int], generation: int) -> None:
        self._emit(e="assigned", at=at, partitions=partitions, generation=generation)

    def planned(self, plan: Plan) -> None:
        self._emit(e="planned", **dataclasses.asdict(plan))

    def failed(self, name: str, error: str) -> None:
        self._emit(e="failed", error=error)


# -- members ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Where:
    bootstrap: str
    topic: str
    group: str
    kind: str  # one of KINDS (kafka-python members) or "aiokafka"


def reporting(base: type[Any], name: str, sink: Sink, *args: Any) -> Any:
    """An instance of the assignor class ``base`` (``base(*args)``) whose ``assign`` (it runs on the leader) reports a
    :class:`Plan`: how long it took and, for apportion's, its plan's stats."""

    class Reporting(base):  # type: ignore[misc,valid-type]
        def assign(self, cluster: Any, members: Any) -> Any:
            started = time.perf_counter()
            answer = super().assign(cluster, members)
            took = time.perf_counter() - started
            last = getattr(self, "last_assignment", None)
            if last is None:
                sink.planned(Plan(name, time.monotonic(), took))
            else:
                stats = last.plan.stats
                sink.planned(Plan(name, time.monotonic(), took, stats.moved, stats.min_moves, stats.max - stats.min,
                                  last.stale))  # fmt: skip
            return answer

    return Reporting(*args)


def kafka_python_assignor(kind: str, name: str, sink: Sink) -> Any:
    """A fresh assignor instance for one consumer: apportion's or kafka-python's own sticky, reporting its plans."""
    if kind == "kafka-python-sticky":
        from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

        return reporting(StickyPartitionAssignor, name, sink)
    from apportion.kafka._assignor import KafkaPythonStickyAssignor

    return reporting(KafkaPythonStickyAssignor, name, sink, "yield" if kind == "apportion-yield" else "drop")


def consumer_settings(name: str, where: Where, assignor: Any) -> dict[str, Any]:
    """What both clients' consumers are made with: short timeouts (a crash noticed after the broker's minimum
    session timeout), no offset commits (nothing is read), one assignor instance of their own."""
    return {
        "bootstrap_servers": where.bootstrap, "group_id": where.group, "client_id": name,
        "partition_assignment_strategy": [assignor], "enable_auto_commit": False,
        "session_timeout_ms": SESSION_TIMEOUT_MS, "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
        "max_poll_interval_ms": MAX_POLL_INTERVAL_MS,
    }  # fmt: skip


def listener(base: type[Any], name: str, sink: Sink, assignor: Any) -> Any:
    """An instance of the client's ConsumerRebalanceListener (``base``) reporting to ``sink``: revoked, assigned
    (the partitions and the assignor's generation: it learns it just before this callback)."""

    class Listener(base):  # type: ignore[misc,valid-type]
        def on_partitions_revoked(self, revoked: Any) -> None:
            sink.revoked(name, time.monotonic())

        def on_partitions_assigned(self, assigned: Any) -> None:
            sink.assigned(name, time.monotonic(), sorted(tp.partition for tp in assigned), assignor.generation)

    return Listener()


def run_kafka_python(name: str, where: Where, sink: Sink, stop: threading.Event) -> None:
    """One kafka-python consumer until ``stop``: then ``close()``, which leaves the group."""
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    assignor = kafka_python_assignor(where.kind, name, sink)
    try:
        consumer = KafkaConsumer(**consumer_settings(name, where, assignor))
        consumer.subscribe([where.topic], listener=listener(ConsumerRebalanceListener, name, sink, assignor))
        try:
            while not stop.is_set():
                consumer.poll(timeout_ms=100)
        finally:
            consumer.close(autocommit=False)
    except Exception as exc:  # the test's wait says it with the other members' states
        sink.failed(name, repr(exc))


class ThreadMember:
    """A kafka-python consumer polling in a thread of this process."""

    def __init__(self, name: str, where: Where, sink: Sink) -> None:
        self.name = name
        self.stop = threading.Event()
        self.thread = threading.Thread(target=run_kafka_python, args=(name, where, sink, self.stop), daemon=True)
        self.thread.start()

    def leave(self) -> None:
        self.stop.set()
        self.thread.join(30)

    def crash(self) -> None:
        raise NotImplementedError("a thread cannot stop heartbeating without leaving: crash a ProcessMember")


class ProcessMember:
    """A kafka-python consumer in a child process; ``crash`` is SIGKILL (no LeaveGroup: noticed after the session
    timeout), ``leave`` is SIGTERM (the child closes its consumer: LeaveGroup)."""

    def __init__(self, name: str, where: Where, sink: Sink) -> None:
        self.name = name
        command = [sys.executable, "-m", "tests.kafka.assignor_group", name, where.bootstrap, where.topic, where.group,
                   where.kind]  # fmt: skip
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        self.reader = threading.Thread(target=self._read, args=(sink,), daemon=True)
        self.reader.start()

    def _read(self, sink: Sink) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(ValueError):
                report = json.loads(line)
                kind = report.pop("e")
                if kind == "revoked":
                    sink.revoked(self.name, report["at"])
                elif kind == "assigned":
                    sink.assigned(self.name, report["at"], report["partitions"], report["generation"])
                elif kind == "planned":
                    sink.planned(Plan(**report))
                else:
                    sink.failed(self.name, report["error"])

    def leave(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)

    def crash(self) -> None:
        self.process.kill()
        self.process.wait(30)


class AioLoop:
    """One asyncio event loop in a thread, for aiokafka members."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Any, timeout_s: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class AioMember:
    """An aiokafka consumer with apportion's assignor, a task of the :class:`AioLoop`; ``leave`` stops it."""

    def __init__(self, name: str, where: Where, sink: Sink, loop: AioLoop) -> None:
        self.name = name
        self.loop = loop
        self.stopping: asyncio.Event | None = None
        self.task = asyncio.run_coroutine_threadsafe(self._run(where, sink), loop.loop)

    async def _run(self, where: Where, sink: Sink) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.abc import ConsumerRebalanceListener

        from apportion.kafka._assignor import AiokafkaStickyAssignor

        name = self.name
        self.stopping = asyncio.Event()
        assignor = reporting(AiokafkaStickyAssignor, name, sink)
        try:
            consumer = AIOKafkaConsumer(**consumer_settings(name, where, assignor))
            consumer.subscribe([where.topic], listener=listener(ConsumerRebalanceListener, name, sink, assignor))
            await consumer.start()
            try:
                while not self.stopping.is_set():
                    await consumer.getmany(timeout_ms=100)
            finally:
                await consumer.stop()
        except Exception as exc:
            sink.failed(name, repr(exc))

    def leave(self) -> None:
        async def stop() -> None:
            if self.stopping is not None:
                self.stopping.set()

        self.loop.run(stop())
        self.task.result(30)

    def crash(self) -> None:
        raise NotImplementedError("aiokafka members leave; the crash is a kafka-python ProcessMember's")


Member = ThreadMember | ProcessMember | AioMember


# -- the group --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    event: str
    sizes: tuple[int, ...]  # the members' partition counts, by name
    moves: int
    lower_bound: int
    rebalance_s: float  # first revoke callback -> last assignment callback
    settle_s: float  # the change -> settled (a crash: the session timeout, then the rebalance)
    generation: int
    rounds: int  # the leader's assign calls meanwhile
    stale: int  # claimed partitions apportion's leader did not count for their generation meanwhile


@dataclass
class Group:
    """A topic's consumer group and its members (see the module docstring)."""

    where: Where
    partitions: int
    recorder: Recorder = field(default_factory=Recorder)
    members: dict[str, Member] = field(default_factory=dict)
    settled: dict[str, frozenset[int]] = field(default_factory=dict)
    aio: AioLoop | None = None

    def run(self, event: str, name: str) -> Step:
        """One change of :data:`SEQUENCE`: a name starting with ``p`` joins as a process."""
        if event == "join":
            return self.join(name, process=name.startswith("p"))
        if event == "leave":
            return self.leave(name)
        return self.crash(name)

    def join(self, name: str, process: bool = False) -> Step:
        def start() -> None:
            if self.where.kind == "aiokafka":
                if self.aio is None:
                    self.aio = AioLoop()
                self.members[name] = AioMember(name, self.where, self.recorder, self.aio)
            elif process:
                self.members[name] = ProcessMember(name, self.where, self.recorder)
            else:
                self.members[name] = ThreadMember(name, self.where, self.recorder)

        return self._step(f"join {name}", start)

    def leave(self, name: str) -> Step:
        return self._step(f"leave {name}", lambda: self.members.pop(name).leave())

    def crash(self, name: str) -> Step:
        return self._step(f"crash {name}", lambda: self.members.pop(name).crash())

    def close(self) -> None:
        for name in sorted(self.members):
            with contextlib.suppress(Exception):
                self.members.pop(name).leave()
        if self.aio is not None:
            self.aio.close()

    def _step(self, event: str, change: Callable[[], None]) -> Step:
        started = time.monotonic()
        change()
        live = set(self.members)
        settled_at = started + wait_for(
            f"the group to settle after {event}",
            lambda: self._settled(live, started) is not None,
            SETTLE_S,
            poll_s=0.02,
            progress=lambda: self.recorder.callbacks,
            context=lambda: self.recorder.describe(live),
        )
        found = self._settled(live, started)
        assert found is not None
        after, generation, first_revoke, last_assigned = found
        before = self.settled
        self.settled = after
        with self.recorder.lock:
            plans = [p for p in self.recorder.plans if p.at >= started]
        return Step(
            event,
            tuple(len(after[m]) for m in sorted(after)),
            moves(before, after),
            lower_bound({m: ps for m, ps in before.items() if m in after}, sorted(after), self.partitions),
            last_assigned - first_revoke,
            settled_at - started,
            generation,
            len(plans),
            sum(p.stale for p in plans),
        )

    def _settled(self, live: set[str], since: float) -> tuple[dict[str, frozenset[int]], int, float, float] | None:
        with self.recorder.lock:
            if self.recorder.errors:
                raise AssertionError(f"a member failed: {self.recorder.errors}")
            states = [self.recorder.members.get(m) for m in live]
            if not states or any(s is None or s.partitions is None or s.pending or s.assigned_at < since
                                 for s in states):  # fmt: skip
                return None
            ready = [s for s in states if s is not None and s.partitions is not None]
            if len({s.generation for s in ready}) != 1:
                return None
            every = [p for s in ready for p in s.partitions or ()]
            if len(every) != self.partitions or set(every) != set(range(self.partitions)):
                return None
            after = {m: self.recorder.members[m].partitions or frozenset() for m in live}
            revokes = [s.revoked_at for s in ready if s.revoked_at >= since]
            last = max(s.assigned_at for s in ready)
            return after, ready[0].generation, min(revokes, default=last), last


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    for future in admin.create_topics([NewTopic(topic, partitions)], operation_timeout=30).values():
        future.result(60)

    def known() -> bool:
        topics = admin.list_topics(topic, timeout=5).topics
        return topic in topics and len(topics[topic].partitions) == partitions

    wait_for(f"topic {topic} with {partitions} partitions", known, 30)


def _child(name: str, bootstrap: str, topic: str, group: str, kind: str) -> None:
    """A ProcessMember's process: one kafka-python consumer until SIGTERM (leave) or SIGKILL (crash)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    run_kafka_python(name, Where(bootstrap, topic, group, kind), LineSink(), stop)


if __name__ == "__main__":
    _child(*sys.argv[1:6])
    os._exit(0)
