"""A real Apache Kafka for tests: KRaft brokers (no ZooKeeper) from Kafka's Maven artifacts, on free loopback ports.

``KafkaCluster.run(base, nodes=1)`` is a context manager: it resolves the broker's classpath (scripts/ensure-kafka.sh:
``mvn`` into Maven's cache, once), formats each node's storage with one cluster id (``kafka.tools.StorageTool
format``), starts every node as its own JVM (``kafka.Kafka``; each node is broker and controller, the controller
quorum is every node), waits with a deadline until every broker answers metadata with all brokers in it, and always
stops them (SIGTERM, then SIGKILL). A node's log is ``<base>/node<id>/server.log``.

Each broker listens on two client ports: PLAINTEXT (``bootstrap``) and SASL_PLAINTEXT with the PLAIN mechanism
(``sasl_bootstrap``; users ``alice``/``alice-secret`` and ``admin``/``admin-secret``), so the one session broker
also serves the test of wrong credentials. Fault tests use :meth:`KafkaCluster.kill` (SIGKILL one node),
:meth:`KafkaCluster.restart` and :meth:`KafkaCluster.tool` (a Kafka admin command, e.g. ``TopicCommand``).
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.etcd_server import free_ports

READY_DEADLINE_S = 90.0  # a cold JVM per node on a busy 2-core machine
ROOT = Path(__file__).resolve().parent.parent
ENSURE = ROOT / "scripts" / "ensure-kafka.sh"
SASL_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
HEAP = "-Xmx384m"

_LOG4J = """\
log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.BrokerServer=INFO
log4j.logger.kafka.server.ControllerServer=INFO
"""


def kafka_classpath() -> str:
    """The broker's classpath (scripts/ensure-kafka.sh resolves it once); RuntimeError with the script's own line
    when Java or Maven is missing or Maven Central cannot be reached."""
    done = subprocess.run(["bash", str(ENSURE)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip() or f"{ENSURE} failed ({done.returncode})")
    return Path(done.stdout.strip().splitlines()[-1]).read_text().strip()


@dataclass
class KafkaNode:
    """One KRaft node (broker and controller) of a :class:`KafkaCluster`."""

    node_id: int
    port: int  # PLAINTEXT
    sasl_port: int  # SASL_PLAINTEXT, PLAIN
    controller_port: int
    base: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.base / "server.log"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class KafkaCluster:
    """``nodes`` KRaft nodes (see the module docstring)."""

    def __init__(self, classpath: str, base: Path, nodes: int = 1) -> None:
        self.classpath = classpath
        self.base = base
        self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        ports = free_ports(3 * nodes)
        self.nodes = [
            KafkaNode(i + 1, ports[3 * i], ports[3 * i + 1], ports[3 * i + 2], base / f"node{i + 1}")
            for i in range(nodes)
        ]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    @property
    def sasl_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.sasl_port}" for n in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    def _properties(self, node: KafkaNode) -> str:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        replication = min(3, len(self.nodes))
        jaas = " ".join(f'user_{u}="{p}"' for u, p in SASL_USERS.items())
        return "\n".join(
            [
                "process.roles=broker,controller",
                f"node.id={node.node_id}",
                f"controller.quorum.voters={voters}",
                f"listeners=PLAINTEXT://127.0.0.1:{node.port},SASL_PLAINTEXT://127.0.0.1:{node.sasl_port},"
                f"CONTROLLER://127.0.0.1:{node.controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{node.port},SASL_PLAINTEXT://127.0.0.1:{node.sasl_port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
                "sasl.enabled.mechanisms=PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config="
                'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                f'password="{SASL_USERS["admin"]}" {jaas};',
                f"log.dirs={node.base / 'data'}",
                "num.partitions=1",
                f"default.replication.factor={replication}",
                f"min.insync.replicas={max(1, replication - 1)}",
                f"offsets.topic.replication.factor={replication}",
                "offsets.topic.num.partitions=5",
                f"transaction.state.log.replication.factor={replication}",
                "transaction.state.log.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=false",
                "log.flush.interval.messages=1000000",  # the page cache, as a deployment: fsync is not tested here
                "num.io.threads=2",
                "num.network.threads=2",
                "background.threads=2",
                "num.recovery.threads.per.data.dir=1",
                "",
            ]
        )

    def _java(self, node: KafkaNode, main: str, *args: str) -> list[str]:
        log4j = node.base / "log4j.properties"
        return [
            "java", HEAP, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
            f"-Dlog4j.configuration=file:{log4j}", "-Dlog4j2.level=WARN",
            "-cp", self.classpath, main, *args,
        ]  # fmt: skip

    def format(self) -> None:
        for node in self.nodes:
            node.base.mkdir(parents=True, exist_ok=True)
            (node.base / "server.properties").write_text(self._properties(node))
            (node.base / "log4j.properties").write_text(_LOG4J.format(log=node.log_path))
            command = self._java(
                node,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                self.cluster_id,
                "-c",
                str(node.base / "server.properties"),
            )
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise RuntimeError(f"formatting node {node.node_id} failed:\n{done.stdout}\n{done.stderr}")

    def start(self, node: KafkaNode) -> None:
        with (node.base / "stdout.log").open("ab") as out:
            node.process = subprocess.Popen(
                self._java(node, "kafka.Kafka", str(node.base / "server.properties")),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=node.base,
                start_new_session=True,
            )  # fmt: skip

    def wait_ready(self, deadline_s: float = READY_DEADLINE_S, nodes: list[KafkaNode] | None = None) -> None:
        """Until each of ``nodes`` (default: every live one) answers metadata listing every live broker."""
        from confluent_kafka.admin import AdminClient

        waiting = nodes if nodes is not None else [n for n in self.nodes if n.process is not None]
        expected = {n.node_id for n in self.nodes if n.alive}
        deadline = time.monotonic() + deadline_s
        while waiting:
            node = waiting[0]
            if not node.alive:
                raise RuntimeError(f"Kafka node {node.node_id} exited:\n{self.log_tail(node)}")
            admin = AdminClient(
                {"bootstrap.servers": f"127.0.0.1:{node.port}", "socket.timeout.ms": 2000, "log_level": 0}
            )
            with contextlib.suppress(Exception):
                brokers = set(admin.list_topics(timeout=2).brokers)
                if expected <= brokers:
                    waiting.pop(0)
                    continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kafka node {node.node_id} not ready within {deadline_s}s:\n{self.log_tail(node)}")
            time.sleep(0.3)

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (a crashed broker); :meth:`restart` brings it back with its data."""
        node = self.node(node_id)
        if node.process is not None and node.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGKILL)
            node.process.wait(30)

    def restart(self, node_id: int, deadline_s: float = READY_DEADLINE_S) -> None:
        node = self.node(node_id)
        self.kill(node_id)
        self.start(node)
        self.wait_ready(deadline_s, [node])

    def stop(self) -> None:
        for node in self.nodes:
            if node.alive:
                assert node.process is not None
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGTERM)
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(20)
                except subprocess.TimeoutExpired:
                    self.kill(node.node_id)

    def tool(self, main: str, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        """Run one of Kafka's admin commands (``org.apache.kafka.tools.TopicCommand``, ``...
        .consumer.group.ConsumerGroupCommand``) against this cluster, as its shell script would."""
        node = self.nodes[0]
        command = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Dlog4j.configuration=file:/dev/null",
                   "-cp", self.classpath, main, "--bootstrap-server", self.bootstrap, *args]  # fmt: skip
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=node.base)

    def log_tail(self, node: KafkaNode, lines: int = 40) -> str:
        texts = []
        for path in (node.base / "stdout.log", node.log_path):
            with contextlib.suppress(OSError):
                texts.append(f"--- {path}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(texts) or "(no log)"

    @classmethod
    @contextlib.contextmanager
    def run(cls, base: Path, nodes: int = 1, attempts: int = 2) -> Iterator[KafkaCluster]:
        """A fresh cluster under ``base``; stopped on exit. One that does not come up is stopped and started once
        more on other ports (free ports are free when picked, not always when the JVM binds them)."""
        classpath = kafka_classpath()
        for attempt in range(1, attempts + 1):
            cluster = cls(classpath, base / f"try{attempt}", nodes)
            try:
                cluster.format()
                for node in cluster.nodes:
                    cluster.start(node)
                cluster.wait_ready()
            except (RuntimeError, TimeoutError):
                cluster.stop()
                if attempt == attempts:
                    raise
                continue
            break
        try:
            yield cluster
        finally:
            cluster.stop()
