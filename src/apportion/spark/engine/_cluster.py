"""A Spark standalone cluster on this machine's loopback, started from the pip package: one master and N workers,
each its own JVM in its own process group (``spark-class org.apache.spark.deploy.master.Master`` / ``...Worker``).

It exists for the tests and benchmarks that need a real cluster (executors in other JVMs than the driver, a worker
that can be killed mid-job); a production cluster is started by its operators (standalone, YARN, Kubernetes) and
apportion only needs its master URL (``apportion spark serve --master spark://host:7077``). Everything binds to
127.0.0.1, the web UIs on free ports; ``start()`` returns once the master lists every worker ALIVE (read from its
``/json/`` status page, not guessed from time). ``kill_worker(i)`` is ``kill -9`` of one worker JVM (its executors
exit when they lose it); ``stop()`` kills every process group::

    with StandaloneCluster(workers=2) as cluster, ConnectServer(cluster.url, config=cluster.executor_config()):
        ...
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from apportion._ports import LOCALHOST, free_port
from apportion.errors import SparkUnavailable
from apportion.spark.engine._serve import LOG4J, java_executable, spark_submit

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` and ``memory`` each) on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self,
        workers: int = 2,
        *,
        cores: int = 1,
        memory: str = "1g",
        directory: str | Path | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        if workers < 1 or cores < 1:
            raise ValueError("a cluster needs at least one worker with at least one core")
        self.workers, self.cores, self.memory = workers, cores, memory
        self.directory = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="apportion-spark-"))
        self.start_timeout_s = start_timeout_s
        self.port, self.ui_port = free_port(), free_port()
        self.master: subprocess.Popen[bytes] | None = None
        self.worker_procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """The master's URL (``--master`` of ``apportion spark serve``)."""
        return f"spark://{LOCALHOST}:{self.port}"

    def executor_config(self) -> dict[str, str]:
        """Settings for a driver on this cluster: one executor per worker with all of its cores and 512 MiB (the
        workers' default 1 GiB leaves room for its Python workers), every core of the cluster."""
        return {
            "spark.executor.cores": str(self.cores),
            "spark.executor.memory": "512m",
            "spark.cores.max": str(self.cores * self.workers),
        }

    def start(self) -> StandaloneCluster:
        java_executable()
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "log4j2.properties").write_text(LOG4J)
        try:
            self.master = self._spawn("master", MASTER_CLASS, "--host", LOCALHOST, "--port", str(self.port),
                                      "--webui-port", str(self.ui_port))  # fmt: skip
            self._wait("the master's status page", lambda: self.status() is not None)
            for i in range(self.workers):
                self.worker_procs.append(self._spawn(
                    f"worker-{i}", WORKER_CLASS, "--host", LOCALHOST, "--webui-port", str(free_port()),
                    "--cores", str(self.cores), "--memory", self.memory,
                    "--work-dir", str(self.directory / f"worker-{i}"), self.url,
                ))  # fmt: skip
            self._wait(f"{self.workers} alive workers", lambda: self.alive_workers() == self.workers)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, main_class: str, *args: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "SPARK_CONF_DIR": str(self.directory),
            "SPARK_LOCAL_IP": LOCALHOST,
            "SPARK_LOG_DIR": str(self.directory),
            "PYSPARK_PYTHON": sys.executable,  # the executors' Python workers run apportion's own environment
        }
        spark_class = spark_submit().with_name("spark-class")
        with open(self.directory / f"{name}.log", "ab") as log:
            return subprocess.Popen([str(spark_class), main_class, *args], stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)  # fmt: skip

    def _wait(self, what: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while not ready():
            for proc in (self.master, *self.worker_procs):
                if proc is not None and proc.poll() is not None:
                    raise SparkUnavailable(f"a Spark standalone process exited with {proc.returncode} "
                                           f"(logs in {self.directory})")  # fmt: skip
            if time.monotonic() > deadline:
                raise SparkUnavailable(f"no {what} within {self.start_timeout_s:.0f}s (logs in {self.directory})")
            time.sleep(0.2)

    def status(self) -> dict[str, object] | None:
        """The master's status (its ``/json/`` page), None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{LOCALHOST}:{self.ui_port}/json/", timeout=2) as response:
                answer = json.load(response)
        except (OSError, ValueError):
            return None
        return answer if isinstance(answer, dict) else None

    def alive_workers(self) -> int:
        """Workers the master lists as ALIVE now."""
        workers = (self.status() or {}).get("workers")
        if not isinstance(workers, list):
            return 0
        return sum(1 for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE")

    def worker_pid(self, index: int) -> int:
        return self.worker_procs[index].pid

    def kill_worker(self, index: int) -> None:
        """``kill -9`` of worker ``index``'s JVM only (its executors exit once they lose their worker)."""
        proc = self.worker_procs[index]
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def stop(self) -> None:
        """SIGKILL to every process group of the cluster (workers with their executors, then the master)."""
        for proc in (*self.worker_procs, *([self.master] if self.master is not None else [])):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


__all__ = ["MASTER_CLASS", "WORKER_CLASS", "StandaloneCluster"]
