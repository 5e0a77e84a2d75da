"""A real RabbitMQ node for tests: Debian's ``rabbitmq-server`` on free loopback ports, everything in a temp dir.

``RabbitServer.run(tmp_dir)`` is a context manager: it starts a private node ``apportion-test-<pid>-<n>@localhost``
(AMQP, Erlang distribution and its own epmd on free ports: ``RABBITMQ_NODE_PORT``, ``RABBITMQ_DIST_PORT``,
``ERL_EPMD_PORT``; mnesia, logs, config, the enabled-plugins file and the Erlang cookie (``HOME``) in the temp dir,
so it never meets the system's node or another test's), waits with a deadline until it accepts AMQP, and always
stops it — the node, then its epmd. The epmd is started here, in the foreground, as the fixture's own child (the
one Erlang would start is a daemon that leaves the process group and outlives the test). No management plugin:
:meth:`consumers` and :meth:`queues` sample the broker with ``rabbitmqctl list_consumers`` / ``list_queues`` (~0.5 s
a call).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from apportion._ports import free_ports

READY_DEADLINE_S = 60.0  # a cold Erlang VM on a busy 2-core machine
BIN_DIR = Path("/usr/lib/rabbitmq/bin")  # Debian's: /usr/sbin/rabbitmq-server switches to the rabbitmq user
_COUNTER = itertools.count()


def rabbitmq_binary() -> str | None:
    """The server script to run directly (not Debian's su wrapper), or None when RabbitMQ is not installed."""
    direct = BIN_DIR / "rabbitmq-server"
    if direct.exists():
        return str(direct)
    return shutil.which("rabbitmq-server")


class RabbitServer:
    """One private RabbitMQ node (see the module docstring)."""

    def __init__(self, server: str, base: Path) -> None:
        self.server = server
        self.ctl = str(Path(server).with_name("rabbitmqctl"))
        self.base = base
        self.node_port, self.dist_port, self.epmd_port = free_ports(3)
        self.node = f"apportion-test-{os.getpid()}-{next(_COUNTER)}@localhost"
        self.process: subprocess.Popen[bytes] | None = None
        self.epmd: subprocess.Popen[bytes] | None = None
        self.log_path = base / "server.log"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.node_port}/%2F"

    def env(self) -> dict[str, str]:
        base = self.base
        return {
            **os.environ,
            "HOME": str(base),  # the Erlang cookie, shared by the node and rabbitmqctl
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),  # not /etc/rabbitmq's
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.node_port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_ALLOW_INPUT": "",
            "ERL_CRASH_DUMP": str(base / "erl_crash.dump"),  # a node that fails to boot writes one: not in the cwd
        }

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        (self.base / "rabbitmq-env.conf").write_text("")
        (self.base / "enabled_plugins").write_text("[].\n")
        (self.base / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.node_port}\n"
            "loopback_users = none\n"
            "log.console = false\n"
            "log.file.level = warning\n"
        )
        epmd = shutil.which("epmd") or "/usr/bin/epmd"
        with self.log_path.open("ab") as log:
            self.epmd = subprocess.Popen(
                [epmd, "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env(),
            )  # fmt: skip
            self.process = subprocess.Popen(
                [self.server], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env(),
                cwd=self.base,
                start_new_session=True,  # its Erlang VM, epmd and helpers in one process group: stopped together
            )  # fmt: skip

    def wait_ready(self, deadline_s: float = READY_DEADLINE_S) -> None:
        """Until a TCP connect and an AMQP handshake work on the node's port (pika, one attempt each)."""
        import pika

        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited with {self.process.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.node_port), timeout=0.5).close()
                try:
                    pika.BlockingConnection(pika.URLParameters(self.url + "?connection_attempts=1")).close()
                    return
                except pika.exceptions.AMQPError:
                    pass
            time.sleep(0.2)
        raise TimeoutError(f"RabbitMQ node {self.node} not accepting AMQP on {self.node_port} within {deadline_s}s:\n"
                           f"{self.log_tail()}")  # fmt: skip

    def ctl_json(self, *args: str) -> list[dict[str, Any]]:
        """``rabbitmqctl -n <node> -q <args> --formatter json`` parsed."""
        out = subprocess.run(
            [self.ctl, "-n", self.node, "-q", *args, "--formatter", "json"],
            env=self.env(), capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        value = json.loads(out or "[]")
        return value if isinstance(value, list) else []

    def consumers(self) -> list[dict[str, Any]]:
        """Every registered consumer: ``queue_name``, ``channel_pid``, ``consumer_tag``, ``active`` (SAC)."""
        return self.ctl_json("list_consumers", "queue_name", "channel_pid", "consumer_tag", "active")

    def queues(self) -> dict[str, dict[str, int]]:
        """Each queue's ``messages`` (ready + unacked), ``messages_unacknowledged`` and ``consumers``, by name."""
        rows = self.ctl_json("list_queues", "name", "messages", "messages_unacknowledged", "consumers")
        return {str(r["name"]): {k: int(v) for k, v in r.items() if k != "name"} for r in rows}

    def stop(self) -> None:
        """``rabbitmqctl stop`` (a clean shutdown), then the node's process group is killed, then its epmd."""
        if self.process is not None:
            self._stop_node()
        if self.epmd is not None and self.epmd.poll() is None:
            self.epmd.kill()
            self.epmd.wait(10)

    def _stop_node(self) -> None:
        assert self.process is not None
        if self.process.poll() is None:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                subprocess.run([self.ctl, "-n", self.node, "-q", "stop"], env=self.env(), capture_output=True,
                               timeout=30)  # fmt: skip
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(15)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # the VM's helpers (erl_child_setup, inet_gethost)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)

    def log_tail(self, lines: int = 30) -> str:
        texts = []
        for path in [self.log_path, *sorted((self.base / "log").glob("*.log"))]:
            with contextlib.suppress(OSError):
                texts.append(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(texts) or "(no log)"

    @classmethod
    @contextlib.contextmanager
    def run(cls, server: str, base: Path, attempts: int = 2) -> Iterator[RabbitServer]:
        """A fresh node under ``base``; stopped (with its epmd) on exit. A node that does not come up is stopped and
        started once more on other ports in another directory: the free ports are free when picked, not when the
        node binds them (another process on a busy machine can take one in between), and a boot once failed on
        ``{epmd_error, "localhost", nxdomain}`` while the machine's resolver files were being rewritten."""
        for attempt in range(1, attempts + 1):
            node = cls(server, base / f"node{attempt}")
            try:
                node.start()
                node.wait_ready()
            except (RuntimeError, TimeoutError):
                node.stop()
                if attempt == attempts:
                    raise
                continue
            break
        try:
            yield node
        finally:
            node.stop()
