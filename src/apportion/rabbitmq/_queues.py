"""What the producer and the consumer agree on: the queue of a partition, how it is declared, how to connect.

Partition ``p`` of a resource is the queue ``<prefix>.<p>`` (seed 3's ``OrderEvents-P<p>``), declared durable with
``x-single-active-consumer: true`` by whichever side comes first (the declaration is idempotent; the same
arguments on both sides, or RabbitMQ refuses the second with PRECONDITION_FAILED). pika's exceptions are mapped to
:class:`apportion.errors.BrokerUnavailable` here, at the boundary (``broker_errors``).
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pika
import pika.exceptions

from apportion.errors import BrokerUnavailable, InvalidRequest

QUEUE_ARGUMENTS = {"x-single-active-consumer": True}
"""The arguments every partition queue is declared with: RabbitMQ delivers to one consumer of it at a time."""


def queue_name(prefix: str, partition: int | str) -> str:
    """The queue of ``partition``: ``<prefix>.<partition>`` (``orders.7``)."""
    return f"{prefix}.{partition}"


def validate_prefix(prefix: str) -> str:
    """A queue-name prefix: non-empty, and short enough that ``<prefix>.<partition>`` fits AMQP's 255 bytes."""
    if not prefix or len(prefix.encode()) > 240:
        raise InvalidRequest("prefix", f"a queue prefix is 1 to 240 bytes, got {prefix!r}")
    return prefix


def declare_queue(channel: Any, name: str) -> None:
    """Declare ``name`` durable (it survives a broker restart) with :data:`QUEUE_ARGUMENTS`."""
    channel.queue_declare(queue=name, durable=True, arguments=dict(QUEUE_ARGUMENTS))


def connect_broker(url: str, *, heartbeat_s: int | None = None) -> Any:
    """A ``pika.BlockingConnection`` to ``url`` (``amqp://user:password@host:port/vhost``); BrokerUnavailable when it
    cannot be opened, InvalidRequest for a malformed URL."""
    form = "amqp://host[:port][/vhost], credentials before the host"
    try:
        # checked here first: pika indexes the parts of what it was given (``aaa`` raised IndexError in it)
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("amqp", "amqps") or not parts.hostname or (parts.port is not None and parts.port < 1):
            raise InvalidRequest("amqp", f"not an AMQP URL: expected {form} (amqps:// for TLS)")
        parameters = pika.URLParameters(url)
    except (ValueError, TypeError, IndexError) as exc:
        raise InvalidRequest("amqp", f"not an AMQP URL ({exc}): expected {form}") from exc
    parameters.connection_attempts = 1
    parameters.blocked_connection_timeout = 30
    if heartbeat_s is not None:
        parameters.heartbeat = heartbeat_s
    with broker_errors(f"cannot connect to RabbitMQ at {parameters.host}:{parameters.port}"):
        return pika.BlockingConnection(parameters)


@contextlib.contextmanager
def broker_errors(what: str) -> Iterator[None]:
    """Map pika's errors (and a dropped socket) inside the block to ``BrokerUnavailable("<what>: <why>")``."""
    try:
        yield
    except pika.exceptions.AMQPError as exc:
        reason = str(exc).strip() or "; ".join(str(arg) or repr(arg) for arg in exc.args)  # pika: str() is often empty
        raise BrokerUnavailable(f"{what}: {type(exc).__name__} {reason}".rstrip()) from exc
    except OSError as exc:
        raise BrokerUnavailable(f"{what}: {exc.strerror or exc}") from exc


__all__ = ["QUEUE_ARGUMENTS", "broker_errors", "connect_broker", "declare_queue", "queue_name", "validate_prefix"]
