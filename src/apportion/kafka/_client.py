"""How apportion reaches a Kafka cluster: the connection settings, the topics' partition counts, and the errors.

:class:`KafkaConfig` is what every Kafka command takes (``--kafka BOOTSTRAP``, SASL credentials, ``--kafka-option
key=value`` for anything else librdkafka accepts, ``--connect-timeout``); :meth:`KafkaConfig.client` gives the
confluent-kafka (librdkafka) settings. The password is never printed: ``repr`` hides it and the errors name the
user and the mechanism only.

:func:`topic_partitions` reads the partition counts of topics from the broker's metadata; a broker that cannot be
reached within the connect timeout, credentials the broker refuses, and a topic that does not exist are each one
:class:`apportion.errors.BrokerUnavailable` line (exit 1: a supervisor restarting the process may find them fixed),
librdkafka's own log lines silenced (they would repeat the same error every 50 ms).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from apportion.errors import BrokerUnavailable, InvalidRequest, TopicUnavailable

DEFAULT_CONNECT_TIMEOUT_S = 10.0
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
MAX_TOPIC_NAME = 128  # a resource name's limit (Kafka allows 249): partition ids are <topic>-<index>


def validate_topic(name: str) -> str:
    """A topic name apportion can use as a resource: Kafka's characters ``[A-Za-z0-9._-]``, 1-128 of them,
    starting with a letter or digit; InvalidRequest otherwise."""
    ok = 0 < len(name) <= MAX_TOPIC_NAME and name[0].isascii() and name[0].isalnum()
    if not ok or not all(c.isascii() and (c.isalnum() or c in "._-") for c in name):
        raise InvalidRequest(
            "topic", f"{name!r} must be 1-{MAX_TOPIC_NAME} characters [A-Za-z0-9._-] starting with one"
        )
    return name


@dataclass(frozen=True)
class KafkaConfig:
    """Where the cluster is and how to log in (module docstring)."""

    bootstrap: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    security_protocol: str | None = None  # default: SASL_PLAINTEXT with a username, PLAINTEXT without
    sasl_mechanism: str = "PLAIN"
    options: Mapping[str, str] = field(default_factory=dict)  # librdkafka settings, as given
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S

    def __post_init__(self) -> None:
        hosts = [h.strip() for h in self.bootstrap.split(",")]
        if not self.bootstrap.strip() or not all(h and ":" in h and h.rsplit(":", 1)[1].isdigit() for h in hosts):
            raise InvalidRequest("kafka", f"expected HOST:PORT[,HOST:PORT...], got {self.bootstrap!r}")
        if self.protocol not in SECURITY_PROTOCOLS:
            raise InvalidRequest("kafka-security-protocol", f"one of {', '.join(SECURITY_PROTOCOLS)}")
        if self.sasl_mechanism not in SASL_MECHANISMS:
            raise InvalidRequest("kafka-sasl-mechanism", f"one of {', '.join(SASL_MECHANISMS)}")
        if (self.username is None) != (self.password is None):
            raise InvalidRequest("kafka-username", "a SASL username and password go together")
        if not 0 < self.connect_timeout_s <= 3600:
            raise InvalidRequest("connect-timeout", f"must be > 0 and at most 3600 s, got {self.connect_timeout_s}")

    @property
    def protocol(self) -> str:
        if self.security_protocol is not None:
            return self.security_protocol.upper()
        return "SASL_PLAINTEXT" if self.username is not None else "PLAINTEXT"

    def client(self, **extra: Any) -> dict[str, Any]:
        """confluent-kafka's configuration for this cluster, with ``extra`` settings (``group.id``, ...)."""
        timeout_ms = int(self.connect_timeout_s * 1000)
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": self.protocol,
            "socket.connection.setup.timeout.ms": max(1000, timeout_ms),
            "log_level": 0,  # errors reach the user once, as BrokerUnavailable, not as librdkafka's log lines
        }
        if self.username is not None:
            config |= {"sasl.mechanism": self.sasl_mechanism, "sasl.username": self.username,
                       "sasl.password": self.password}  # fmt: skip
        return config | dict(self.options) | extra

    def kafka_python(self, **extra: Any) -> dict[str, Any]:
        """kafka-python's (and aiokafka's) keyword arguments for this cluster."""
        config: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap.split(","),
            "security_protocol": self.protocol,
        }
        if self.username is not None:
            config |= {"sasl_mechanism": self.sasl_mechanism, "sasl_plain_username": self.username,
                       "sasl_plain_password": self.password}  # fmt: skip
        return config | extra

    @property
    def who(self) -> str:
        """How errors name this cluster (the password never)."""
        login = f" as {self.username!r} ({self.sasl_mechanism})" if self.username is not None else ""
        return f"Kafka at {self.bootstrap}{login}"


class ErrorWatch:
    """librdkafka's ``error_cb``: keeps the last error a client reported (it reports authentication and connection
    failures there, not as exceptions of the call that waits for them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last: Any = None

    def __call__(self, error: Any) -> None:
        with self._lock:
            self.last = error

    def authentication_failed(self) -> bool:
        from confluent_kafka import KafkaError

        error = self.last
        return error is not None and error.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED)

    def failure(self, config: KafkaConfig, what: str) -> BrokerUnavailable:
        """The one line for a call that failed or timed out: authentication, else the last error, else a timeout."""
        if self.authentication_failed():
            return BrokerUnavailable(f"{what}: {config.who}: authentication failed (check the username and password)")
        reason = self.last.str() if self.last is not None else "no answer"
        return BrokerUnavailable(f"{what}: cannot reach {config.who} within {config.connect_timeout_s:g} s ({reason})")


def admin_client(config: KafkaConfig, errors: ErrorWatch) -> Any:
    """A confluent-kafka AdminClient for ``config`` reporting its errors to ``errors``."""
    from confluent_kafka.admin import AdminClient

    try:
        return AdminClient(config.client(error_cb=errors))
    except Exception as exc:  # a malformed --kafka-option: librdkafka refuses the configuration
        raise InvalidRequest("kafka-option", str(exc)) from exc


def topic_partitions(config: KafkaConfig, topics: Iterable[str], *, admin: Any = None) -> dict[str, int]:
    """Each topic's partition count, read from the cluster's metadata (module docstring for the errors)."""
    from confluent_kafka import KafkaException

    wanted = [validate_topic(t) for t in topics]
    errors = ErrorWatch()
    client = admin if admin is not None else admin_client(config, errors)
    try:
        metadata = client.list_topics(timeout=config.connect_timeout_s)
    except KafkaException as exc:
        client.poll(0)  # librdkafka serves error_cb only from poll(): the authentication failure is there
        if errors.last is None:
            errors.last = exc.args[0] if exc.args else None
        raise errors.failure(config, "cannot read the topics") from exc
    if errors.authentication_failed():
        raise errors.failure(config, "cannot read the topics")
    counts = {}
    for name in wanted:
        found = metadata.topics.get(name)
        if found is None or found.error is not None or not found.partitions:
            raise TopicUnavailable(f"topic {name!r} does not exist on {config.who}")
        counts[name] = len(found.partitions)
    return counts


def create_topic(config: KafkaConfig, topic: str, partitions: int, *, replication: int = 1) -> None:
    """Create ``topic`` with ``partitions`` partitions (``replication`` copies each); an unreachable broker, refused
    credentials, a topic that exists already or that the broker refuses are one ``BrokerUnavailable`` line."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    validate_topic(topic)
    if partitions < 1 or replication < 1:
        raise InvalidRequest("partitions", f"a topic needs >= 1 partitions and copies, got {partitions}/{replication}")
    errors = ErrorWatch()
    admin = admin_client(config, errors)
    topic_partitions(config, [], admin=admin)  # reachable, credentials accepted: or one line, within the timeout
    future = admin.create_topics([NewTopic(topic, partitions, replication)])[topic]
    try:
        future.result(timeout=max(30.0, config.connect_timeout_s))
    except KafkaException as exc:
        reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        raise BrokerUnavailable(f"cannot create topic {topic!r} on {config.who}: {reason}") from exc
    except TimeoutError as exc:  # concurrent.futures' (an alias of the builtin since 3.11)
        raise errors.failure(config, f"cannot create topic {topic!r}") from exc


__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "ErrorWatch",
    "KafkaConfig",
    "admin_client",
    "create_topic",
    "topic_partitions",
    "validate_topic",
]
