"""The Kafka options every command that reaches Kafka shares: ``--kafka BOOTSTRAP``, ``--topic`` (repeatable),
SASL credentials and ``--kafka-option KEY=VALUE`` for anything else librdkafka takes. The command receives them as
one ``kafka: KafkaTopics | None`` argument (None: no ``--kafka``), checked here before anything is opened; the
command's own ``--connect-timeout`` bounds the wait for the cluster too (``KafkaTopics.within``).

The password is read from ``--kafka-password`` or, better, ``APPORTION_KAFKA_PASSWORD`` (a command line is visible
to every user of the machine); it is never printed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import click

from apportion.cli._common import option
from apportion.errors import InvalidRequest

R = TypeVar("R")


@dataclass(frozen=True)
class KafkaTopics:
    """``--kafka`` and ``--topic`` as one value: the cluster (an ``apportion.kafka.KafkaConfig``) and the topics."""

    config: Any  # apportion.kafka.KafkaConfig (imported when a command runs: the kafka extra may be absent)
    topics: tuple[str, ...]

    def within(self, connect_timeout_s: float) -> KafkaTopics:
        """The same, waiting ``connect_timeout_s`` for the cluster (the command's ``--connect-timeout``)."""
        return replace(self, config=replace(self.config, connect_timeout_s=connect_timeout_s))


def kafka_options(
    *, require: bool = False, topics_help: str = "A Kafka topic of the group (repeat for several)."
) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """The options above; ``require``: ``--kafka`` and at least one ``--topic`` are required."""
    decorators: list[Callable[[Any], Any]] = [
        option("--kafka", "kafka_bootstrap", env=True, required=require, default=None,
               help="Kafka bootstrap servers, HOST:PORT[,HOST:PORT...]: the group's resources are then --topic's "
                    "topics, their partition counts read from the broker."),
        option("--topic", "topics", env=True, multiple=True, help=topics_help),
        option("--kafka-username", env=True, default=None, help="SASL username (SASL_PLAINTEXT unless "
               "--kafka-security-protocol says SASL_SSL)."),
        option("--kafka-password", env=True, default=None,
               help="SASL password (prefer the environment variable: a command line is visible to all)."),
        option("--kafka-sasl-mechanism", env=True, default="PLAIN", show_default=True,
               type=click.Choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])),
        option("--kafka-security-protocol", env=True, default=None,
               type=click.Choice(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"], case_sensitive=False),
               help="Default: SASL_PLAINTEXT with a username, PLAINTEXT without."),
        option("--kafka-option", "kafka_settings", multiple=True, metavar="KEY=VALUE",
               help="Any other librdkafka setting (ssl.ca.location=..., client.id=...); repeatable."),
    ]  # fmt: skip

    def apply(f: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(f)
        def command(**kwargs: Any) -> R:
            given = {
                name: kwargs.pop(name)
                for name in (
                    "kafka_bootstrap", "topics", "kafka_username", "kafka_password", "kafka_sasl_mechanism",
                    "kafka_security_protocol", "kafka_settings",
                )
            }  # fmt: skip
            return f(kafka=kafka_topics(require=require, **given), **kwargs)

        decorated: Callable[..., R] = functools.reduce(lambda acc, d: d(acc), reversed(decorators), command)
        return decorated

    return apply


def kafka_topics(
    *,
    require: bool,
    kafka_bootstrap: str | None,
    topics: tuple[str, ...],
    kafka_username: str | None,
    kafka_password: str | None,
    kafka_sasl_mechanism: str,
    kafka_security_protocol: str | None,
    kafka_settings: tuple[str, ...],
) -> KafkaTopics | None:
    """The checked value of the options (InvalidRequest naming the option that is wrong)."""
    if kafka_bootstrap is None:
        if require:  # click 8.3+ takes required=True with default=None as given (the default None is a value)
            raise InvalidRequest("kafka", "give --kafka HOST:PORT[,HOST:PORT...] (the broker of the topics)")
        if topics:
            raise InvalidRequest("topic", "--topic needs --kafka BOOTSTRAP (the broker the topics are on)")
        return None
    if require and not topics:
        raise InvalidRequest("topic", "give at least one --topic")
    from apportion.kafka import KafkaConfig, validate_topic

    settings = {}
    for item in kafka_settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidRequest("kafka-option", f"expected KEY=VALUE, got {item!r}")
        settings[key.strip()] = value
    names = tuple(dict.fromkeys(validate_topic(t) for t in topics))
    config = KafkaConfig(
        kafka_bootstrap,
        username=kafka_username,
        password=kafka_password,
        security_protocol=kafka_security_protocol,
        sasl_mechanism=kafka_sasl_mechanism,
        options=settings,
    )
    return KafkaTopics(config, names)


__all__ = ["KafkaTopics", "kafka_options", "kafka_topics"]
