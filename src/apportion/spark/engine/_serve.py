"""A Spark Connect server that apportion's workers share (``apportion spark serve``): start, wait until ready, stop.

``ConnectServer(master, port)`` runs pyspark's bundled ``spark-submit --class ...SparkConnectServer`` (the Connect
jar ships with pyspark 4) in its own process group, bound to 127.0.0.1 (Connect has no authentication), UI off,
WARN-level logs into ``log_path``. ``start()`` checks Java, the port and that a ``spark://`` master answers first
(``SparkUnavailable`` / ``InvalidRequest``: one line each), then polls until the gRPC port accepts connections (the
server opens it only once its Spark session is up) or the deadline passes; ``check_session()`` opens a real session
in a child process (and warms the server: its first query pays for code generation). ``stop()`` sends SIGTERM to the
process group, then SIGKILL after ``stop_timeout_s``. As a context manager it starts and always stops::

    with ConnectServer("local[2]", port=15002) as server:
        run_pipeline_worker(PipelineRequest(..., pipeline=PipelineSettings(..., master=server.url)))

The server's Python workers (``mapInArrow`` of ``simulate --grid``) run ``sys.executable`` with this process's
environment, so they import the same apportion.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from apportion._ports import LOCALHOST, free_port
from apportion.errors import InvalidRequest, SparkUnavailable
from apportion.spark.engine._session import (
    DEFAULT_CONNECT_PORT,
    ENGINE_SETTINGS,
    SESSION_SETTINGS,
    accepts,
    reach_master,
    validate_master,
)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.netty.name = org.apache.spark.network
logger.netty.level = error
logger.rpc.name = org.apache.spark.sql.connect.utils.ErrorUtils
logger.rpc.level = fatal
"""
CHECK_SESSION = (
    "import sys; from pyspark.sql import SparkSession; "
    "s = SparkSession.builder.remote(sys.argv[1]).getOrCreate(); assert s.range(3).count() == 3"
)


def java_executable() -> str:
    """The ``java`` that spark-submit will run (``$JAVA_HOME/bin/java`` or the PATH's); ``SparkUnavailable``."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not os.access(found, os.X_OK):
        raise SparkUnavailable(
            "Java 17+ is not installed (the Spark Connect server needs it): install a JDK or set JAVA_HOME"
        )
    return found


def spark_submit() -> Path:
    """pyspark's bundled ``bin/spark-submit``."""
    from pyspark.find_spark_home import _find_spark_home

    path = Path(_find_spark_home()) / "bin" / "spark-submit"
    if not path.exists():
        raise SparkUnavailable(f"pyspark has no {path}: reinstall pyspark (pip install 'apportion[spark]')")
    return path


def check_port_free(host: str, port: int) -> None:
    """``InvalidRequest`` when ``host:port`` cannot be bound (in use, or not a port)."""
    if not 1024 <= port < 65536:  # Spark refuses a port below 1024 too, but only once its JVM has started
        raise InvalidRequest("--port", f"{port}: the server takes a TCP port from 1024 to 65535 (or 0: any free one)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            reason = "is in use (another server? choose another --port)" if exc.errno == errno.EADDRINUSE else str(exc)
            raise InvalidRequest("--port", f"{host}:{port} {reason}") from exc


class ConnectServer:
    """One Spark Connect server process (see the module docstring)."""

    def __init__(
        self,
        master: str = "local[2]",
        port: int = DEFAULT_CONNECT_PORT,
        *,
        driver_memory: str = "1g",
        log_path: str | Path | None = None,
        config: Mapping[str, str] | None = None,
        start_timeout_s: float = 300.0,
        stop_timeout_s: float = 30.0,
    ) -> None:
        self.master = validate_master(master)
        self.host = LOCALHOST
        self.port = free_port(self.host) if port == 0 else port  # 0: any free port (the demo, tests)
        self.driver_memory = driver_memory
        self.config = dict(config or {})
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._tmp = Path(tempfile.mkdtemp(prefix="apportion-connect-"))
        self.log_path = Path(log_path) if log_path is not None else self._tmp / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The ``sc://`` URL of this server (``--spark``)."""
        return f"sc://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def command(self) -> list[str]:
        settings = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": self.driver_memory,
            "spark.connect.grpc.binding.address": self.host,
            "spark.connect.grpc.binding.port": str(self.port),
            **ENGINE_SETTINGS,
            **SESSION_SETTINGS,
            **({"spark.driver.bindAddress": LOCALHOST, "spark.driver.host": LOCALHOST} if self._local else {}),
            **self.config,
        }
        conf = [arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")]
        return [str(spark_submit()), "--class", SERVER_CLASS, "--name", "apportion-connect", "--master", self.master,
                *conf]  # fmt: skip

    @property
    def _local(self) -> bool:
        """Whether the whole engine is on this machine's loopback (local mode, or a master on 127.0.0.1): then the
        driver binds to 127.0.0.1 too, so that nothing listens on another interface."""
        return self.master.startswith(("local", f"spark://{LOCALHOST}:", "spark://localhost:"))

    def start(self) -> ConnectServer:
        """Start the server and wait until its port accepts connections (see the module docstring)."""
        java_executable()
        check_port_free(self.host, self.port)
        reach_master(self.master)  # a spark:// master nobody answers at: seconds, not the JVM's 80
        command = self.command()
        (self._tmp / "log4j2.properties").write_text(LOG4J)
        env = {**os.environ, "SPARK_CONF_DIR": str(self._tmp), "PYSPARK_PYTHON": sys.executable}
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if self._local:
            env["SPARK_LOCAL_IP"] = LOCALHOST
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while not accepts(self.host, self.port, 0.5):
            code = None if self.proc is None else self.proc.poll()
            if code is not None:
                raise SparkUnavailable(f"the Spark Connect server exited with {code}: {self.last_log_line()}")
            if time.monotonic() > deadline:
                raise SparkUnavailable(
                    f"the Spark Connect server did not open {self.host}:{self.port} in {self.start_timeout_s:.0f}s "
                    f"(log: {self.log_path})"
                )
            time.sleep(0.2)

    def check_session(self, timeout_s: float = 120.0) -> float:
        """Open a session and run one query in a child Python process (this process stays free of Connect's
        process-wide state); returns the seconds it took. ``SparkUnavailable`` when it fails."""
        started = time.monotonic()
        try:
            done = subprocess.run(
                [sys.executable, "-c", CHECK_SESSION, self.url], capture_output=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise SparkUnavailable(f"no session on {self.url} within {timeout_s:.0f}s") from exc
        if done.returncode != 0:
            last = (done.stderr.decode(errors="replace").strip().splitlines() or ["(no output)"])[-1]
            raise SparkUnavailable(f"no session on {self.url}: {last}")
        return time.monotonic() - started

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Wait for the server to exit; its exit code (None if still running at the timeout)."""
        if self.proc is None:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.proc.wait(timeout_s)
        return None

    def stop(self) -> None:
        """SIGTERM to the server's process group (the JVM and its Python workers), SIGKILL after the timeout."""
        if self.proc is None:
            return
        for sig, wait_s in ((signal.SIGTERM, self.stop_timeout_s), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(wait_s)
                break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # any child left in the group (Python workers)
        with contextlib.suppress(OSError):  # the server's conf dir; kept when it holds the server's log
            (self._tmp / "log4j2.properties").unlink(missing_ok=True)
            self._tmp.rmdir()

    def last_log_line(self) -> str:
        with contextlib.suppress(OSError):
            lines = [ln for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
            errors = [ln for ln in lines if " ERROR " in ln or "Exception" in ln]
            return (errors or lines or ["(empty log)"])[-1].strip()
        return f"(no log at {self.log_path})"

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


__all__ = ["ConnectServer", "check_port_free", "java_executable", "spark_submit"]
