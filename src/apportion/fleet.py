"""A fleet of worker processes (`apportion worker` or `apportion pipeline run`): start, signal, read their event
lines, always clean up.

The one harness behind the demo, the process tests, the benches and the nemesis; it needs no extra (a fleet of
`apportion worker` processes runs without Spark). ``worker_args``, ``pipeline_args`` and ``kafka_pipeline_args`` (the
pipeline on Kafka) build the command lines. Each worker runs in its own session (``start_new_session``), so a signal
to its process group reaches its Spark JVM too; its stdout and stderr go to ``<logs>/<id>.log``, whose event lines
(``apportion.events``) are read incrementally by ``WorkerLog`` (``count_only`` kinds, such as the committer's one
``commit`` line per partition and batch, are counted without being parsed or kept: a large fleet writes thousands a
second). ``WorkerProcess.applied``
is what a worker's lines say it holds (assigned, less revoked and lost). ``Fleet`` is a context manager: on exit
every process still running is resumed (SIGCONT) and killed (SIGKILL), whatever happened.

    with Fleet(logs, pipeline_args(url, "g", log_dir, out_dir, "r", "--ttl", "2")) as fleet:
        w1 = fleet.start("w1")
        ...  w1.of("commit"), w1.signal(signal.SIGSTOP), fleet.check(["w1"]), fleet.stop_all(60)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from apportion import events
from apportion.errors import WorkerExited
from apportion.events import WorkerEvent


def worker_args(store_url: str, group: str, *options: str) -> list[str]:
    """The command line of `apportion worker` for a group, without ``--id`` (``Fleet.start`` adds it)."""
    return [sys.executable, "-m", "apportion.cli", "worker", "--store", store_url, "--group", group, *options]


def pipeline_args(
    store_url: str, group: str, input_dir: str | Path, output_dir: str | Path, resource: str, *options: str
) -> list[str]:
    """The command line of `apportion pipeline run` for a group, without ``--id`` (``Fleet.start`` adds it)."""
    return [
        sys.executable, "-m", "apportion.cli", "pipeline", "run", "--store", store_url, "--group", group,
        "--input", str(input_dir), "--output", str(output_dir), "--resource", resource, *options,
    ]  # fmt: skip


def kafka_pipeline_args(
    store_url: str, group: str, bootstrap: str, topics: Sequence[str], output_dir: str | Path, *options: str
) -> list[str]:
    """The command line of `apportion pipeline run --kafka` for a group over ``topics``, without ``--id``."""
    topic_options = [option for topic in topics for option in ("--topic", topic)]
    return [
        sys.executable, "-m", "apportion.cli", "pipeline", "run", "--store", store_url, "--group", group,
        "--kafka", bootstrap, *topic_options, "--output", str(output_dir), *options,
    ]  # fmt: skip


class WorkerLog:
    """A worker's JSON event lines, read incrementally: each refresh parses only what was appended since. Lines of a
    ``count_only`` kind are counted (``count``) but neither parsed nor kept in ``events``."""

    def __init__(self, path: Path, count_only: Collection[str] = ()) -> None:
        self.path = path
        self.events: list[dict[str, Any]] = []
        self._counts: Counter[str] = Counter()
        self._heads = tuple((events.head(kind), kind) for kind in sorted(count_only))
        self._offset = 0
        self._partial = b""

    def refresh(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return self.events
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        heads = self._heads
        for line in lines:
            if heads:
                text = line.lstrip()
                kind = next((k for h, k in heads if text.startswith(h)), None)
                if kind is not None:
                    self._counts[kind] += 1
                    continue
            event = events.parse(line)
            if event is not None:
                self.events.append(event)
                self._counts[event["event"]] += 1
        return self.events

    def of(self, kind: str) -> list[dict[str, Any]]:
        """Every event of type ``kind`` so far."""
        return [e for e in self.refresh() if e.get("event") == kind]

    def count(self, kind: str) -> int:
        """How many events of type ``kind`` so far (``count_only`` kinds too)."""
        self.refresh()
        return self._counts[kind]

    def lost(self) -> list[int]:
        """Every partition the worker reported through on_lost, in order (a partition once per report)."""
        found: list[int] = []
        for e in self.of(WorkerEvent.LOST):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                found.extend(int(p) for p in e["partitions"])
        return found

    def slowest_batch_s(self) -> float:
        """The longest micro-batch so far: Spark + write + commit, plus a pause before its commit."""
        slowest = pause = 0.0
        for e in self.refresh():
            if e.get("event") == WorkerEvent.PAUSING:
                pause = float(e.get("seconds", 0.0))
            elif e.get("event") == WorkerEvent.BATCH_DONE:
                took = sum(float(e.get(k, 0.0)) for k in ("spark_s", "write_s", "commit_s"))
                slowest, pause = max(slowest, took + pause), 0.0
        return slowest

    def frozen_in_window(self) -> bool:
        """True when the worker's last batch paused before committing and has not committed every partition."""
        events = self.refresh()
        last = max((i for i, e in enumerate(events) if e.get("event") == WorkerEvent.PAUSING), default=-1)
        if last < 0:
            return False
        batch = max((i for i, e in enumerate(events[:last]) if e.get("event") == WorkerEvent.BATCH), default=-1)
        written = sum(1 for e in events[batch + 1 : last] if e.get("event") == WorkerEvent.WRITTEN)
        after = [e.get("event") for e in events[last + 1 :]]
        return WorkerEvent.BATCH_DONE not in after and after.count(WorkerEvent.COMMIT) < written

    def text(self) -> str:
        with contextlib.suppress(OSError):
            return self.path.read_text(errors="replace")
        return ""

    def tail(self, lines: int = 15) -> str:
        text = self.text()
        return "\n".join(text.splitlines()[-lines:]) if text else "(no log)"


class WorkerProcess:
    """One worker process (a fleet may start several under one id, one after the other)."""

    def __init__(self, worker_id: str, proc: subprocess.Popen[bytes], log: WorkerLog, first_event: int = 0) -> None:
        self.id = worker_id
        self.proc = proc
        self.log = log
        self.first_event = first_event  # this process's events in ``log`` start at this index...
        self.end_event: int | None = None  # ...and end here (set when the fleet starts the id again)
        self._applied: set[int | str] = set()  # partition ids (apportion.group.PartitionId, a layer above)
        self._applied_upto = first_event

    def own_events(self) -> list[dict[str, Any]]:
        """The events this process wrote (not those of earlier or later processes of the same id)."""
        return self.log.refresh()[self.first_event : self.end_event]

    def applied(self) -> set[int | str]:
        """The partitions this process's event lines say it holds now: each ``assigned`` adds its partitions, each
        ``revoked`` and ``lost`` takes them away, in the order written (callbacks run one at a time on the worker
        thread). A partition the store names this worker the owner of, but missing here, is claimed and not (yet)
        applied. Read incrementally; a copy."""
        events = self.log.refresh()
        end = len(events) if self.end_event is None else self.end_event
        for e in events[self._applied_upto : end]:
            kind = e.get("event")
            if kind in (WorkerEvent.ASSIGNED, WorkerEvent.REVOKED, WorkerEvent.LOST):
                parts = e.get("partitions") or ()
                if kind == WorkerEvent.ASSIGNED:
                    self._applied.update(parts)
                else:
                    self._applied.difference_update(parts)
        self._applied_upto = max(self._applied_upto, end)
        return set(self._applied)

    @property
    def events(self) -> list[dict[str, Any]]:
        """This worker's JSON events so far (of every process of its id that wrote to the same log)."""
        return self.log.refresh()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return self.log.of(kind)

    def tail(self, lines: int = 15) -> str:
        return self.log.tail(lines)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int, *, group: bool = True) -> None:
        """Send ``sig`` to the worker's process group (its JVM too), or with ``group=False`` to the process alone."""
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)

    def stopped(self) -> bool:
        """True once the process is stopped (state T in /proc; where there is no /proc, once signalled)."""
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except OSError:
            return True
        return stat.rsplit(")", 1)[-1].split()[0] in ("T", "t")

    def kill(self) -> None:
        """SIGCONT + SIGKILL to the whole process group, and reap the process."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGCONT)
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class Fleet:
    """Worker processes started from one command line (``worker_args``, ``pipeline_args``) plus per-worker options.

    ``workers`` maps each id to its latest process; ``started`` keeps every process ever started (a restart under
    the same id appends to the same log). Leaving the ``with`` block kills whatever still runs. ``count_only``: event
    kinds the logs only count (see ``WorkerLog``).
    """

    def __init__(
        self,
        log_dir: Path,
        args: Sequence[str],
        env: dict[str, str] | None = None,
        *,
        count_only: Collection[str] = (),
    ) -> None:
        self.log_dir = Path(log_dir)
        self.args = list(args)
        self.count_only = tuple(count_only)
        # env's own keys win, PYSPARK_PYTHON among them (a caller passing os.environ after a Spark session set it)
        self.env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})}
        self.workers: dict[str, WorkerProcess] = {}
        self.started: list[WorkerProcess] = []
        self.logs: dict[str, WorkerLog] = {}
        self.log_dir.mkdir(parents=True, exist_ok=True)

    def log(self, worker_id: str) -> WorkerLog:
        """The event log of ``worker_id`` (one reader per id, shared by its restarts)."""
        if worker_id not in self.logs:
            self.logs[worker_id] = WorkerLog(self.log_dir / f"{worker_id}.log", self.count_only)
        return self.logs[worker_id]

    def start(self, worker_id: str, *extra: str, command: Sequence[str] | None = None) -> WorkerProcess:
        """Start (or restart) ``worker_id`` with the fleet's command line (or ``command``: another version's, say,
        in a rolling upgrade) and ``extra`` options. A restart must follow the previous process's exit (its events
        end where the new one's begin)."""
        log = self.log(worker_id)
        first = len(log.refresh())
        previous = self.workers.get(worker_id)
        if previous is not None:
            previous.end_event = first
        with open(self.log_dir / f"{worker_id}.log", "ab") as out:
            proc = subprocess.Popen(
                [*(self.args if command is None else command), "--id", worker_id, *extra],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=self.env,
                start_new_session=True,
            )
        worker = WorkerProcess(worker_id, proc, log, first)
        self.workers[worker_id] = worker
        self.started.append(worker)
        return worker

    def __getitem__(self, worker_id: str) -> WorkerProcess:
        return self.workers[worker_id]

    def events(self) -> list[dict[str, Any]]:
        """Every worker's events so far, each with its ``worker`` field."""
        return [{**e, "worker": wid} for wid, log in self.logs.items() for e in log.refresh()]

    def check(self, worker_ids: Iterable[str]) -> None:
        """Raise ``WorkerExited`` if one of ``worker_ids`` has exited (a wait on it could only time out)."""
        for wid in worker_ids:
            code = self.workers[wid].proc.poll()
            if code is not None:
                raise WorkerExited(f"worker {wid} exited with code {code}; the end of its log:\n{self.log(wid).tail()}")

    def stop_all(self, timeout_s: float, *, group: bool = True) -> dict[str, int | None]:
        """SIGCONT + SIGTERM (graceful leave) to every running worker; wait up to ``timeout_s``; exit codes by id
        (None: still running)."""
        for worker in self.workers.values():
            worker.signal(signal.SIGCONT, group=group)
            worker.signal(signal.SIGTERM, group=group)
        deadline = time.monotonic() + timeout_s
        for worker in self.workers.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        return {wid: worker.proc.poll() for wid, worker in self.workers.items()}

    def kill_all(self) -> None:
        for worker in self.started:
            worker.kill()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.kill_all()


__all__ = ["Fleet", "WorkerLog", "WorkerProcess", "kafka_pipeline_args", "pipeline_args", "worker_args"]
