"""What the producer and the consumer agree on: the queue of a partition, how it is declared, how to connect.

Partition ``p`` is the queue the name template gives: ``{prefix}.{partition}`` by default (``orders.7``), or any
template of ``{prefix}`` and ``{partition}`` (``--queue-name``): seed 3's producers name their queues
``OrderEvents-P<p>``, which ``{prefix}-P{partition}`` gives, so they and apportion's consumers share queues (issue
45.4: the two names used to be called the same thing here, and were not). Producer and consumer must use the same
template. A queue is declared durable with ``x-single-active-consumer: true`` by whichever side comes first (the
declaration is idempotent; the same arguments on both sides, or RabbitMQ refuses the second with
PRECONDITION_FAILED). pika's exceptions are mapped to :class:`apportion.errors.BrokerUnavailable` here, at the
boundary (``broker_errors``).
"""

from __future__ import annotations

import contextlib
import string
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pika
import pika.exceptions

from apportion.errors import BrokerUnavailable, InvalidRequest

QUEUE_ARGUMENTS = {"x-single-active-consumer": True}
"""The arguments every partition queue is declared with: RabbitMQ delivers to one consumer of it at a time."""


DEFAULT_QUEUE_NAME = "{prefix}.{partition}"
"""The default queue name template: ``orders.7``."""

MAX_QUEUE_NAME_BYTES = 255  # AMQP's short string
_FIELDS = frozenset(("prefix", "partition"))
_WIDEST_PARTITION = "999999"  # the highest partition of a group (MAX_PARTITIONS - 1): the longest name's


def queue_name(prefix: str, partition: int | str, template: str = DEFAULT_QUEUE_NAME) -> str:
    """The queue of ``partition``: ``template`` (checked by :func:`validate_queue_name`) with its fields filled in;
    ``<prefix>.<partition>`` by default (``orders.7``), ``{prefix}-P{partition}`` gives seed 3's ``orders-P7``."""
    return template.format(prefix=prefix, partition=partition)


def validate_queue_name(template: str, prefix: str) -> str:
    """A queue name template: text with ``{partition}`` exactly once (so each partition has its own queue) and
    ``{prefix}`` at most once, no other field, conversion or format spec (``{{`` and ``}}`` are literal braces); and
    with ``prefix`` and the widest partition filled in, at most AMQP's 255 bytes. InvalidRequest naming
    ``queue-name`` otherwise."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise InvalidRequest("queue-name", f"{template!r:.80} is not a template: {exc}") from None
    fields = [name for _, name, _, _ in parts if name is not None]
    wrong = [name for name in fields if name not in _FIELDS]
    if wrong:
        raise InvalidRequest("queue-name", f"unknown field {{{wrong[0]}}}: only {{prefix}} and {{partition}}")
    if any((spec or conversion) for _, name, spec, conversion in parts if name is not None):
        raise InvalidRequest("queue-name", "a field takes no conversion or format spec: {prefix}, {partition}")
    if fields.count("partition") != 1 or fields.count("prefix") > 1:
        raise InvalidRequest(
            "queue-name", f"needs {{partition}} exactly once (and {{prefix}} at most once), got {template!r:.80}"
        )
    widest = queue_name(prefix, _WIDEST_PARTITION, template)
    if len(widest.encode()) > MAX_QUEUE_NAME_BYTES:
        raise InvalidRequest("queue-name", f"a queue name is at most {MAX_QUEUE_NAME_BYTES} bytes: {widest!r:.80}...")
    return template


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


__all__ = [
    "DEFAULT_QUEUE_NAME",
    "QUEUE_ARGUMENTS",
    "broker_errors",
    "connect_broker",
    "declare_queue",
    "queue_name",
    "validate_prefix",
    "validate_queue_name",
]
