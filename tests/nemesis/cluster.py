"""A 3-node etcd cluster and `apportion worker` processes, each on its own host (network namespace), and the run's
history on disk for the checker.

``Deployment.create(etcd_binary, directory, workers=["w0", "w1", "w2"])`` (a context manager) builds the network
(hosts ``e0..e2`` for etcd, one per worker and spares for joins), starts etcd with its default raft timings (heartbeat
100 ms, election 1 s, as a production cluster runs) and the workers, each given all three endpoints and committing
every owned partition every 0.2 s (the stand-in committer of ``apportion worker --commit-every``).

The history, all JSON lines, under ``directory/history``:

- ``<worker>.jsonl``: the worker's stdout, its own event lines (``assigned``, ``revoked``, ``lost``, ``commit`` with
  epoch and store revision, ``fenced``, ``stopped``) with its own timestamps; restarts append.
- ``nemesis.jsonl``: what the harness did and when: ``start``/``kill``/``stop`` of a process, ``fault`` and ``heal``.
- ``store.jsonl``: read at the end by the control host, every change etcd made under the group's prefix and to its
  commit records since revision 1 (its MVCC history: revision, put/delete, key, value, lease) — the store's own
  account, which the checker compares with what the workers say. Keys are relative to the group's prefix
  (``owner/3``; the owner and epoch records of a layout-2 group, which live beside it under ``.own/<group>/``, named
  the same way), commit records relative to ``/apportion/`` (``.commit/<group>/3``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import httpx

from apportion.store import connect
from apportion.waiting import wait_for
from tests.etcd_server import EtcdServer
from tests.nemesis.checker import read_jsonl
from tests.nemesis.history import dump_store_history
from tests.nemesis.netns import Host, Network

PARTITIONS = 12
COMMIT_EVERY_S = 0.2
CLIENT_PORT, PEER_PORT = 2379, 2380
APPORTION = str(Path(sys.executable).with_name("apportion"))
SKEWED_CLOCK = Path(__file__).with_name("skewed_clock")


class Journal:
    """``nemesis.jsonl``: the harness's own events, wall-clock stamped when they happen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] = path.open("a")

    def __call__(self, event: str, **fields: Any) -> None:
        self._file.write(json.dumps({"event": event, "time": round(time.time(), 3), **fields}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class WorkerProcess:
    """One `apportion worker` on its own host. Its stdout is read by a thread of the harness, which adds ``seen``
    (the harness's real clock when the line arrived) to each event line and appends it to the history file: a worker
    under ``faketime`` stamps ``time`` with its own faked clock, and the checker orders beliefs by ``seen``.

    ``clock``: ``"<offset s> x<rate>"`` (``"-20 x0.9"``: 20 s behind, running 10 % slow) for the worker's wall
    clock, the one its lease deadlines use (tests/nemesis/skewed_clock/sitecustomize.py; why not libfaketime: there)."""

    def __init__(
        self, name: str, host: Host, store_url: str, group: str, directory: Path, ttl_s: float, clock: str | None = None
    ) -> None:
        self.name, self.host, self.store_url, self.group, self.ttl_s = name, host, store_url, group, ttl_s
        self.clock = clock
        self.history = directory / "history" / f"{name}.jsonl"
        self.log = directory / "logs" / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def start(self, *, replace: bool = False) -> None:
        """``replace``: fence a live member of the same id (a restart after kill -9, before its lease expired)."""
        args = self.arguments(replace=replace)
        if self._reader is not None:
            self._reader.join(10)  # the previous incarnation's lines are all written
        with self.log.open("ab") as err:
            self.process = subprocess.Popen(  # a session of its own: kill -9 reaches its children (a JVM) too
                self.host.command(*args), stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        self._reader = threading.Thread(target=self._read, args=(self.process,), daemon=True)
        self._reader.start()

    def arguments(self, *, replace: bool) -> list[str]:
        """The worker's command line (run inside its host's namespace)."""
        args = [APPORTION, "worker", "--store", self.store_url, "--group", self.group, "--id", self.name,
                "--partitions", str(PARTITIONS), "--commit-every", str(COMMIT_EVERY_S), "--ttl", str(self.ttl_s),
                "--connect-timeout", "3600", *(["--replace"] if replace else [])]  # fmt: skip
        if self.clock is not None:
            args = ["env", f"PYTHONPATH={SKEWED_CLOCK}", f"APPORTION_TEST_CLOCK={self.clock}", *args]
        return args

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        with self.history.open("a") as out:
            for raw in process.stdout:
                seen = round(time.time(), 3)
                try:
                    value = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    out.write(json.dumps({**value, "seen": seen}) + "\n")
                    out.flush()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        if self.running and self.process is not None:
            self.process.send_signal(signum)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM (a graceful leave), SIGKILL if it has not left within ``timeout_s``."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        if self._reader is not None:
            self._reader.join(10)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # its session: the process and its children
            self.process.wait(10)
        if self._reader is not None:
            self._reader.join(10)

    def events(self) -> list[dict[str, Any]]:
        return read_jsonl(self.history)


class Deployment:
    """The network, the etcd members (``etcd[name]``) and the workers (``workers[name]``) of one run."""

    def __init__(self, network: Network, directory: Path, group: str, ttl_s: float) -> None:
        self.network = network
        self.directory = directory
        self.group = group
        self.ttl_s = ttl_s
        self.etcd: dict[str, EtcdServer] = {}
        self.workers: dict[str, WorkerProcess] = {}
        self.expected: set[str] = set()  # workers started and not stopped or killed since
        self.journal = Journal(directory / "history" / "nemesis.jsonl")

    @property
    def store_url(self) -> str:
        return "etcd://" + ",".join(member.endpoint for member in self.etcd.values())

    @classmethod
    @contextlib.contextmanager
    def create(
        cls,
        etcd_binary: str,
        directory: Path,
        workers: Sequence[str],
        *,
        spares: int = 1,
        ttl_s: float = 5.0,
        clocks: Mapping[str, str] | None = None,
    ) -> Iterator[Deployment]:
        """``clocks``: worker name -> libfaketime spec (see :class:`WorkerProcess`)."""
        (directory / "history").mkdir(parents=True, exist_ok=True)
        (directory / "logs").mkdir(parents=True, exist_ok=True)
        spare_names = [f"w{len(workers) + i}" for i in range(spares)]
        hosts = ["e0", "e1", "e2", *workers, *spare_names]
        with Network.create(hosts) as network:
            deployment = cls(network, directory, f"nemesis{time.time_ns()}", ttl_s)
            try:
                deployment._start_etcd(etcd_binary)
                for name in [*workers, *spare_names]:
                    host = network[name]
                    deployment.workers[name] = WorkerProcess(
                        name, host, deployment.store_url, deployment.group, directory, ttl_s, (clocks or {}).get(name)
                    )
                for name in workers:
                    deployment.start_worker(name)
                yield deployment
            finally:
                deployment.close()

    def _start_etcd(self, binary: str) -> None:
        names = ["e0", "e1", "e2"]
        initial = ",".join(f"{n}=http://{self.network[n].address}:{PEER_PORT}" for n in names)
        for n in names:
            host = self.network[n]
            self.etcd[n] = EtcdServer(
                binary, self.directory / "etcd" / n, n, CLIENT_PORT, PEER_PORT, initial,
                raft_args=(), host=host.address, wrap=host.command(),
            )  # fmt: skip
            self.etcd[n].log_path = self.directory / "logs" / f"{n}.log"
        for member in self.etcd.values():
            member.start()
        for member in self.etcd.values():
            member.wait_ready(60)

    # -- processes -----------------------------------------------------------------------------------------

    def start_worker(self, name: str, *, replace: bool = False) -> None:
        self.journal("start", target=name)
        self.workers[name].start(replace=replace)
        self.expected.add(name)

    def stop_worker(self, name: str) -> None:
        self.expected.discard(name)
        self.workers[name].stop()
        self.journal("stop", target=name)

    def kill_worker(self, name: str) -> None:
        self.expected.discard(name)
        self.workers[name].kill()
        self.journal("kill", target=name)

    def check_workers(self) -> None:
        """Every worker the harness started and has not stopped is still running; else AssertionError with its log."""
        for name in sorted(self.expected):
            worker = self.workers[name]
            if not worker.running:
                tail = "\n".join(worker.log.read_text(errors="replace").splitlines()[-15:])
                code = worker.process.returncode if worker.process is not None else None
                raise AssertionError(f"worker {name} exited by itself (exit {code}):\n{tail}")

    @staticmethod
    def sleep(seconds: float) -> None:
        """Hold a fault for ``seconds`` (its length, not a synchronisation)."""
        time.sleep(seconds)

    def leader(self, deadline_s: float = 30.0) -> str:
        """The etcd member that the reachable members agree is leader (polled until there is one)."""
        found: list[str] = []

        def agreed() -> bool:
            found.clear()
            for name, member in self.etcd.items():
                if not member.running or name in self.network.isolated:
                    continue
                with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                    status = member.status()
                    if status["leader"] != "0" and status["leader"] == status["member_id"]:
                        found.append(name)
            return len(found) == 1

        wait_for("one etcd leader among the reachable members", agreed, deadline_s)
        return found[0]

    # -- history -------------------------------------------------------------------------------------------

    def owners(self) -> dict[int, str]:
        """The live owner records now (partition -> member), read from the store by the control host."""
        with connect(self.store_url) as store:
            found = {}
            for prefix in (f"/apportion/.own/{self.group}/owner/", f"/apportion/{self.group}/owner/"):  # layout 2, 1
                found.update({int(kv.key[len(prefix) :]): json.loads(kv.value)["member"] for kv in store.range(prefix)})
            return found

    def dump_store_history(self) -> Path:
        """Write the group's store history to ``history/store.jsonl`` (``tests/nemesis/history.py``)."""
        return dump_store_history(self.store_url, self.group, self.directory / "history" / "store.jsonl")

    def close(self) -> None:
        self.network.heal_all()
        for worker in self.workers.values():
            worker.stop(10)
        for member in self.etcd.values():
            member.stop()
        self.journal.close()
