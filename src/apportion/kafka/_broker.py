"""A local Apache Kafka: KRaft nodes (no ZooKeeper) from Kafka's Maven artifacts, on free loopback ports.

What `apportion demo --source kafka` starts (one node), and what the tests' brokers are made of (tests/kafka_server.py
adds SASL users; one node per session, three for the fault tests). ``KafkaCluster.run(base, nodes=1)`` is a context
manager: it resolves the broker's classpath (:func:`kafka_classpath`), formats each node's storage with one cluster
id (``kafka.tools.StorageTool format``), starts every node as its own JVM (``kafka.Kafka``; each node is broker and
controller, the controller quorum is every node), waits with a deadline until every broker answers metadata with all
brokers in it, and always stops them (SIGTERM, then SIGKILL), whatever happens in the block. A node's log is
``<base>/node<id>/server.log``. Each broker listens on PLAINTEXT (``bootstrap``) and, with ``sasl_users``, on
SASL_PLAINTEXT with the PLAIN mechanism too (``sasl_bootstrap``). :meth:`KafkaCluster.kill` (SIGKILL one node),
:meth:`KafkaCluster.restart` and :meth:`KafkaCluster.tool` (a Kafka admin command) serve fault tests.

The classpath: the same ``mvn dependency:build-classpath`` that scripts/ensure-kafka.sh ran, done from Python, over
the pom in this module (:data:`BROKER_POM`), into Maven's cache (``~/.m2``, once) and a file listing the jars in
``$APPORTION_KAFKA_CACHE`` (default ``~/.cache/apportion/kafka``) ``/classpath-<pom hash>.txt``. Decided so because
``apportion demo --source kafka`` is a command of the installed package, and an installed wheel has no scripts/ (nor
a pom beside it): the pom and the call must travel with the code. The script stays for the set-up (``make test``'s
ensure-test-tools.sh) and only calls this module's :func:`main` (which prints the file's path), so there is one pom
and one resolution. What it needs and cannot find (Java 17+, Maven, Maven Central) is one ``BrokerUnavailable`` line
naming it and how to get it (exit 1 in the CLI), never a stack trace.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from apportion._ports import free_ports
from apportion.errors import BrokerUnavailable

READY_DEADLINE_S = 90.0  # a cold JVM per node on a busy 2-core machine
MVN_TIMEOUT_S = 900.0
HEAP = "-Xmx384m"
CACHE_ENV = "APPORTION_KAFKA_CACHE"

BROKER_POM = """\
<!-- The Apache Kafka broker apportion runs locally (KRaft, no ZooKeeper), as Maven artifacts: apportion.kafka._broker
     resolves them into Maven's cache (~/.m2) and writes their classpath. kafka-tools adds the admin commands
     (kafka-topics' TopicCommand, kafka-consumer-groups' ConsumerGroupCommand); slf4j-reload4j gives the broker's
     slf4j a backend (configured by the log4j.properties each node is started with). -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>apportion.kafka</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <properties>
    <kafka.version>4.1.1</kafka.version>
  </properties>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>${kafka.version}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>${kafka.version}</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
  </dependencies>
</project>
"""

_LOG4J = """\
log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.BrokerServer=INFO
log4j.logger.kafka.server.ControllerServer=INFO
"""


@functools.cache
def require_java(major: int = 17) -> None:
    """Java ``major``+ on the PATH, or one ``BrokerUnavailable`` line saying what to install (checked once per process
    when found: it starts a JVM, and the tests start brokers many times)."""
    if shutil.which("java") is None:
        raise BrokerUnavailable(
            f"the local Kafka broker needs Java {major}+, and there is no java on the PATH "
            "(apt-get install -y openjdk-17-jre-headless)"
        )
    try:
        done = subprocess.run(["java", "-XshowSettings:properties", "-version"], capture_output=True, text=True,
                              timeout=120, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrokerUnavailable(f"the local Kafka broker needs Java {major}+: `java -version` failed ({exc})") from exc
    found = re.search(r"java\.specification\.version = (\d+)", done.stderr)
    if found is not None and int(found.group(1)) < major:
        raise BrokerUnavailable(f"the local Kafka broker needs Java {major}+, found Java {found.group(1)}")


def classpath_file() -> Path:
    """The file listing the broker's jars (module docstring), resolved with Maven the first time."""
    require_java()
    if shutil.which("mvn") is None:
        raise BrokerUnavailable(
            "the local Kafka broker is fetched from Maven Central with Maven, and there is no mvn on the PATH "
            "(apt-get install -y maven)"
        )
    cache = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "apportion" / "kafka")
    digest = hashlib.sha256(BROKER_POM.encode()).hexdigest()[:16]
    out = cache / f"classpath-{digest}.txt"
    if _lists_jars(out):
        return out
    pom = cache / f"broker-{digest}" / "pom.xml"
    pom.parent.mkdir(parents=True, exist_ok=True)
    pom.write_text(BROKER_POM)
    log = cache / "mvn.log"
    print("apportion: resolving Apache Kafka's broker from Maven Central (once; cached in ~/.m2)...", file=sys.stderr)
    command = ["mvn", "-q", "-B", "-f", str(pom), "dependency:build-classpath", f"-Dmdep.outputFile={out}.tmp"]
    try:
        with log.open("w") as handle:
            done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, timeout=MVN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise BrokerUnavailable(f"mvn did not resolve the Kafka broker within {MVN_TIMEOUT_S:g} s (see {log})") from exc
    if done.returncode != 0:
        errors = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("[ERROR]")]
        reason = errors[0][:300] if errors else f"exit code {done.returncode}"
        raise BrokerUnavailable(
            f"mvn could not resolve the Kafka broker from Maven Central (is it reachable? see {log}): {reason}"
        )
    Path(f"{out}.tmp").replace(out)
    return out


def _lists_jars(path: Path) -> bool:
    with contextlib.suppress(OSError):
        jars = path.read_text().strip().split(os.pathsep)
        return bool(jars) and all(os.path.isfile(jar) for jar in jars)
    return False


def kafka_classpath() -> str:
    """The broker's classpath (:func:`classpath_file`'s content)."""
    return classpath_file().read_text().strip()


@dataclass
class KafkaNode:
    """One KRaft node (broker and controller) of a :class:`KafkaCluster`."""

    node_id: int
    port: int  # PLAINTEXT
    sasl_port: int  # SASL_PLAINTEXT, PLAIN (0: none)
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
    """``nodes`` KRaft nodes (module docstring); ``sasl_users`` (user -> password) adds a SASL/PLAIN listener."""

    def __init__(self, classpath: str, base: Path, nodes: int = 1, sasl_users: Mapping[str, str] | None = None) -> None:
        self.classpath = classpath
        self.base = base
        self.sasl_users = dict(sasl_users or {})
        self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        per_node = 3 if self.sasl_users else 2
        ports = free_ports(per_node * nodes)
        self.nodes = []
        for i in range(nodes):
            own = ports[per_node * i : per_node * (i + 1)]
            sasl = own[2] if self.sasl_users else 0
            self.nodes.append(KafkaNode(i + 1, own[0], sasl, own[1], base / f"node{i + 1}"))

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    @property
    def sasl_bootstrap(self) -> str:
        if not self.sasl_users:
            raise BrokerUnavailable("this Kafka cluster has no SASL listener (started without sasl_users)")
        return ",".join(f"127.0.0.1:{n.sasl_port}" for n in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    def _properties(self, node: KafkaNode) -> str:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        replication = min(3, len(self.nodes))
        listeners = [f"PLAINTEXT://127.0.0.1:{node.port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        sasl: list[str] = []
        if self.sasl_users:
            listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{node.sasl_port}")
            protocols.append("SASL_PLAINTEXT:SASL_PLAINTEXT")
            admin, password = next(iter(self.sasl_users.items()))
            users = " ".join(f'user_{u}="{p}"' for u, p in self.sasl_users.items())
            sasl = [
                "sasl.enabled.mechanisms=PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config="
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="{admin}" password="{password}" {users};',
            ]
        return "\n".join(
            [
                "process.roles=broker,controller",
                f"node.id={node.node_id}",
                f"controller.quorum.voters={voters}",
                f"listeners={','.join(listeners)},CONTROLLER://127.0.0.1:{node.controller_port}",
                f"advertised.listeners={','.join(listeners)}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                f"listener.security.protocol.map={','.join(protocols)}",
                *sasl,
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
            properties = str(node.base / "server.properties")
            command = self._java(node, "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", properties)
            done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
            if done.returncode != 0:
                last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
                raise BrokerUnavailable(f"formatting Kafka node {node.node_id}'s storage failed: {last}")

    def start(self, node: KafkaNode) -> None:
        with (node.base / "stdout.log").open("ab") as out:
            node.process = subprocess.Popen(
                self._java(node, "kafka.Kafka", str(node.base / "server.properties")),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=node.base,
                start_new_session=True,
            )  # fmt: skip

    def wait_ready(self, deadline_s: float = READY_DEADLINE_S, nodes: list[KafkaNode] | None = None) -> None:
        """Until each of ``nodes`` (default: every started one) answers metadata listing every live broker;
        ``BrokerUnavailable`` with the node's log tail when one exits or the deadline passes."""
        from confluent_kafka.admin import AdminClient

        waiting = nodes if nodes is not None else [n for n in self.nodes if n.process is not None]
        expected = {n.node_id for n in self.nodes if n.alive}
        deadline = time.monotonic() + deadline_s
        while waiting:
            node = waiting[0]
            if not node.alive:
                raise BrokerUnavailable(f"Kafka node {node.node_id} exited:\n{self.log_tail(node)}")
            admin = AdminClient(
                {"bootstrap.servers": f"127.0.0.1:{node.port}", "socket.timeout.ms": 2000, "log_level": 0}
            )
            with contextlib.suppress(Exception):
                brokers = set(admin.list_topics(timeout=2).brokers)
                if expected <= brokers:
                    waiting.pop(0)
                    continue
            if time.monotonic() > deadline:
                raise BrokerUnavailable(
                    f"Kafka node {node.node_id} not ready within {deadline_s:g} s:\n{self.log_tail(node)}"
                )
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
        """SIGTERM every live node (a controlled shutdown), SIGKILL one that has not exited 20 s later."""
        for node in self.nodes:
            if node.alive and node.process is not None:
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
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=node.base, check=False)

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
            except BaseException as exc:
                cluster.stop()
                if attempt == attempts or not isinstance(exc, BrokerUnavailable):
                    raise
                continue
            break
        try:
            yield cluster
        finally:
            cluster.stop()


def main() -> int:
    """scripts/ensure-kafka.sh: print the classpath file's path, or one line and exit 1."""
    try:
        print(classpath_file())
    except BrokerUnavailable as exc:
        print(f"apportion: {exc}", file=sys.stderr)
        return 1
    return 0


__all__ = ["BROKER_POM", "KafkaCluster", "KafkaNode", "classpath_file", "free_ports", "kafka_classpath"]
