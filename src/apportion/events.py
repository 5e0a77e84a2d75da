"""Worker event lines: the one JSON-line format of `apportion worker` and `apportion pipeline run`, written and read.

One event per line, one JSON object whose first key is its kind and whose second is its wall-clock time (Unix
seconds, to the millisecond), then the event's own fields::

    {"event": "assigned", "time": 1718000000.123, "partitions": [0, 3]}

``line`` formats one (what `apportion pipeline run` logs on stderr); ``emit`` writes one whole line to stdout (what
`apportion worker` prints); ``parse`` reads one back, None for any other line of a log (Spark's, a traceback);
``head`` is how every line of one kind begins (a reader that only counts a kind need not parse its lines).

``WorkerEvent`` names every kind: a ``str`` enum, so each line is byte for byte what the plain strings wrote (logs,
the nemesis checker, the demo and the tests read them), while an emit site that misspells a kind is a type error.
The format is ``EVENT_LINE_FORMAT`` (1): a change to a kind's name or to the line's shape bumps it; new kinds and new
fields do not, and a reader skips what it does not know.
"""

from __future__ import annotations

import enum
import json
import sys
import threading
import time
from typing import Any, Protocol

EVENT_LINE_FORMAT = 1
"""The version of the event line's format (the module docstring); not written on the line, whose bytes are those of
every release so far."""


class WorkerEvent(enum.StrEnum):
    """The kinds of event lines, and who writes each (``worker``: `apportion worker`; ``pipeline``: `apportion
    pipeline run`; ``rabbitmq``/``kafka``: their `consume` commands).

    One thing, several words: the lines are older than the group's history (``apportion.group.HistoryType``) and the
    member's trace (``apportion.group.TraceKind``), and their words stay as they are (old logs must stay readable).
    Where they mean the same:

    - ``STOPPED`` (the process ends its run) is the history's ``left`` and the trace's ``stopped`` when the member
      left gracefully;
    - ``RELEASED`` (the Kafka consumer gave a partition up, offsets committed) is the history's ``release`` (the
      trace's ``released``);
    - ``COMMIT`` is the history's and the trace's ``commit``; ``COMMITTED`` (Kafka) and ``ACKED`` (RabbitMQ) are the
      consumers' own commit of a batch, each also a ``commit`` in the history;
    - ``RELEASED`` (Kafka) and ``CANCELLED`` (RabbitMQ) are one thing, a revoked partition handed back after its last
      commit; ``DROPPED`` (Kafka) and ``REQUEUED`` (RabbitMQ) another, a partition given up without one (lost or
      fenced: its ``reason``);
    - ``ASSIGNED``, ``REVOKED``, ``LOST``, ``FENCED``, ``REPLICAS`` are the trace's kinds of the same names;
      ``ASSIGNED`` follows the history's ``claim``, ``LOST`` and ``FENCED`` are the history's ``lost`` and
      ``fenced``.
    """

    ASSIGNED = "assigned"  # every writer: on_assigned ran (partitions)
    REVOKED = "revoked"  # every writer: on_revoked ran (partitions)
    LOST = "lost"  # every writer: on_lost ran (partitions)
    COMMIT = "commit"  # worker (committer), pipeline: a fenced commit was accepted
    FENCED = "fenced"  # worker, pipeline, kafka: a commit was refused, the epoch is stale
    COMMIT_FAILED = "commit_failed"  # worker, kafka, rabbitmq: a commit did not reach the store (retried)
    STOPPED = "stopped"  # worker, pipeline: the run ended
    STARTED = "started"  # pipeline: warmed up, about to join
    BATCH = "batch"  # pipeline: a micro-batch began (its ranges)
    WRITTEN = "written"  # pipeline: a partition's output of the batch is written, not yet committed
    PAUSING = "pausing"  # pipeline: a test's pause before the commit
    COMMIT_UNKNOWN = "commit_unknown"  # pipeline: the store did not answer whether a commit landed
    BATCH_DONE = "batch_done"  # pipeline: a micro-batch ended (its timings)
    BATCH_ABORTED = "batch_aborted"  # pipeline: a batch stopped by the store's outage
    BATCH_FAILED = "batch_failed"  # pipeline: a batch failed (Spark's error)
    CLEANED = "cleaned"  # pipeline: uncommitted output of an earlier epoch deleted
    STORE_UNAVAILABLE = "store_unavailable"  # pipeline: the store stopped answering
    STORE_ANSWERS = "store_answers"  # pipeline: it answers again
    IDLE_EXIT = "idle_exit"  # pipeline: nothing to do for --exit-after-idle, it stops
    RESTORED = "restored"  # pipeline, stateful: a partition's state is up to its changelog
    REPLICAS = "replicas"  # pipeline, stateful: the standby and learner replicas it holds changed
    REPLICA_LAG = "replica_lag"  # pipeline, stateful: how far a replica is behind
    CONSUMING = "consuming"  # rabbitmq, kafka: a partition's queue or topic partition is being read
    MESSAGE = "message"  # rabbitmq, kafka: one message handled by the default handler
    ACKED = "acked"  # rabbitmq: a batch was acked, its checkpoint committed
    CANCELLED = "cancelled"  # rabbitmq: a revoked partition's queue consumer was cancelled after its last ack
    REQUEUED = "requeued"  # rabbitmq: a partition given up without an ack (lost or fenced), unacked requeued
    COMMITTED = "committed"  # kafka: a batch's offsets were committed, fenced
    RELEASED = "released"  # kafka: a revoked partition was given up, its offsets committed
    DROPPED = "dropped"  # kafka: a partition was dropped without a commit (lost or fenced)


class Emit(Protocol):
    """``emit(event, **fields)``: where a worker, pipeline or consumer sends its events (``emit`` prints them)."""

    def __call__(self, event: WorkerEvent, **fields: Any) -> None: ...


_LOCK = threading.Lock()


def line(event: WorkerEvent, **fields: Any) -> str:
    """One event as its JSON line, without the newline (fields JSON cannot encode are written as ``str``)."""
    return json.dumps({"event": event, "time": round(time.time(), 3), **fields}, default=str)


def emit(event: WorkerEvent, **fields: Any) -> None:
    """Write one whole event line to stdout and flush: callbacks and committers emit from different threads, and
    ``print`` writes the text and its newline apart, so unguarded lines could interleave and be lost to a reader."""
    text = line(event, **fields) + "\n"
    with _LOCK:
        sys.stdout.write(text)
        sys.stdout.flush()


def head(event: WorkerEvent | str) -> bytes:
    """The bytes every line of an ``event`` begins with (its kind is the first key), up to and including the comma."""
    return json.dumps({"event": event})[:-1].encode() + b","


def parse(text: str | bytes) -> dict[str, Any] | None:
    """The event on ``text`` (one line), or None when it is not an event line."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get("event"), str):
        return value
    return None


__all__ = ["EVENT_LINE_FORMAT", "Emit", "WorkerEvent", "emit", "head", "line", "parse"]
