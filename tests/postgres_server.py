"""A real PostgreSQL server for tests: initdb into a temp dir, postgres on a free loopback port; stopped on exit.

``PostgresServer.start_new(binaries)`` is a context manager: it initialises a cluster (trust authentication for
loopback and the socket: tests set passwords on the roles they create when they need one), starts it and waits
(with a deadline) until it accepts connections. ``url(database)`` names a database as a store URL; ``create_database``
makes a fresh one (``CREATE DATABASE`` is cheap: a copy of ``template0``'s few MB), so each test gets its own.

PostgreSQL refuses to run as root. When the tests run as root (CI containers do), initdb and postgres run as the
``postgres`` user of Debian's package (``nobody`` when there is none) and the temp dir, made by ``mkdtemp`` in
``/tmp`` (not under pytest's root-only ``tmp_path``), is handed to that user. ``durable=True`` keeps ``fsync`` on
(the kill -9 test); otherwise fsync, full-page writes and synchronous commit are off: fine for throw-away data.
``kill()`` is SIGKILL of the postmaster and every child (a machine crash, as far as the server can tell: each child
is in a process group of its own, PostgreSQL's children call ``setsid``, so they are found by parent pid);
``start()`` again on the same data dir recovers from the WAL. ``freeze()``/``thaw()``: SIGSTOP/SIGCONT of them all.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

from apportion._ports import free_port
from tests.processes import descendants, file_tail, running

READY_DEADLINE_S = 30.0
SUPERUSER = "apportion"
DEFAULT_BIN = Path("/usr/lib/postgresql/15/bin")


def postgres_bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``postgres`` (Debian keeps them out of PATH), None when not installed."""
    candidates = [DEFAULT_BIN, *sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)]
    found = shutil.which("initdb")
    if found:
        candidates.insert(0, Path(found).resolve().parent)
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "postgres").exists():
            return directory
    return None


def _run_as() -> pwd.struct_passwd | None:
    """The unprivileged user to run the server as when we are root; None when we are not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' user exists to run PostgreSQL as")


class PostgresServer:
    """One PostgreSQL cluster in a temp dir (restartable on the same port and data dir)."""

    def __init__(self, bin_dir: Path, root: Path, *, durable: bool = False) -> None:
        self.bin_dir = bin_dir
        self.root = root
        self.data_dir = root / "data"
        self.socket_dir = root / "sock"
        self.log_path = root / "postgres.log"
        self.port = free_port()
        self.durable = durable
        self.user = _run_as()
        self.process: subprocess.Popen[bytes] | None = None

    def _popen_args(self) -> dict[str, object]:
        if self.user is None:
            return {}
        return {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}

    def init(self) -> None:
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            for path in (self.root, self.socket_dir):
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
        args = [str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", SUPERUSER, "--auth=trust",
                "--no-sync", "-E", "UTF8", "--locale=C"]  # fmt: skip
        done = subprocess.run(args, capture_output=True, cwd=self.root, check=False, **self._popen_args())  # type: ignore[call-overload]
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}): {done.stderr.decode(errors='replace')[-2000:]}")

    def start(self) -> None:
        if self.running:
            raise RuntimeError("postgres is already running")
        settings = {"listen_addresses": "127.0.0.1", "max_connections": "300", "shared_buffers": "32MB"}
        if not self.durable:
            settings.update(fsync="off", full_page_writes="off", synchronous_commit="off")
        args = [str(self.bin_dir / "postgres"), "-D", str(self.data_dir), "-k", str(self.socket_dir),
                "-p", str(self.port)]  # fmt: skip
        for name, value in settings.items():
            args += ["-c", f"{name}={value}"]
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self.process = subprocess.Popen(
                args, stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=self.root, start_new_session=True,
                **self._popen_args(),  # type: ignore[arg-type]
            )  # fmt: skip
        finally:
            os.close(log)
        self.wait_ready()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def admin_dsn(self, database: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={database} connect_timeout=2"

    def url(self, database: str, *, user: str = SUPERUSER, password: str | None = None, query: str = "") -> str:
        """The store URL of ``database`` on this server (``query``: URL options such as ``schema=x``)."""
        auth = user if password is None else f"{user}:{password}"
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}" + (f"?{query}" if query else "")

    def wait_ready(self, deadline_s: float = READY_DEADLINE_S) -> None:
        deadline = time.monotonic() + deadline_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if not self.running:
                code = self.process.returncode if self.process else None
                raise RuntimeError(f"postgres exited with {code}:\n{self.log_tail()}")
            try:
                with psycopg.connect(self.admin_dsn(), autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.Error as exc:
                last = exc
            time.sleep(0.05)
        raise TimeoutError(f"postgres not ready on port {self.port} within {deadline_s}s ({last}):\n{self.log_tail()}")

    def execute(self, sql: str, database: str = "postgres") -> None:
        """Run ``sql`` as the superuser (autocommit: CREATE DATABASE, CREATE ROLE, GRANT...)."""
        with psycopg.connect(self.admin_dsn(database), autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def create_database(self, name: str) -> str:
        self.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return name

    def kill(self) -> None:
        """SIGKILL the postmaster and every child and reap it; wait until the children are gone (a restart on the
        same data dir refuses to start while one of them still holds the shared memory)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)  # stopped, it forks no child between the look and the kill
            children = self._children()
            self._signal_all(signal.SIGKILL)
            self.process.wait(10)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(running(pid) for pid in children):
                time.sleep(0.01)

    def _children(self) -> list[int]:
        """The postmaster's processes (backends, checkpointer, WAL writer...): they call setsid, so a process group
        signal misses them."""
        assert self.process is not None
        return [pid for pid, _ in descendants(self.process.pid)]

    def _signal_all(self, signum: int) -> None:
        """``signum`` to the postmaster first (it forks no new child after a stop or a kill), then its children."""
        if not self.running:
            return
        assert self.process is not None
        children = self._children()
        self.process.send_signal(signum)
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def freeze(self) -> None:
        """SIGSTOP the postmaster and every child: sockets stay open, nothing answers (a hung host)."""
        self._signal_all(signal.SIGSTOP)

    def thaw(self) -> None:
        if self.running:
            for pid in self._children():  # children first: the postmaster would see them stopped otherwise
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """A fast shutdown (SIGINT: roll back open transactions, disconnect clients), SIGKILL if it takes > 10 s."""
        if not self.running:
            return
        assert self.process is not None
        self.thaw()
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_tail(self, lines: int = 20) -> str:
        return file_tail(self.log_path, lines)

    @classmethod
    @contextlib.contextmanager
    def start_new(cls, bin_dir: Path, *, durable: bool = False) -> Iterator[PostgresServer]:
        root = Path(tempfile.mkdtemp(prefix="apportion-pg-"))
        server = cls(bin_dir, root, durable=durable)
        try:
            server.init()
            server.start()
            yield server
        finally:
            server.stop()
            shutil.rmtree(root, ignore_errors=True)
