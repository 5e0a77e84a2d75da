"""The producer of seed 3: each message goes to the queue of its key's partition, by THE routing hash.

``Producer(url, prefix, partitions)`` declares the ``partitions`` queues ``<prefix>.<p>`` (or those
``queue_template`` names, seed 3's ``{prefix}-P{partition}``: ``apportion.rabbitmq._queues``) and turns publisher
confirms on, so :meth:`Producer.publish` returns only once RabbitMQ has taken the message (persistent, into a
durable queue: written to disk) and raises ``BrokerUnavailable`` when it refused it or could not route it. The
partition is ``apportion.routing.partition_for(key, partitions)``: what the ``Router``, Spark's ``route`` and the
pipeline compute for the same key, so one key's messages are always in one queue, in the order they were published
(seed 3 hashes with MD5 and a modulo; see the README's seed map).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import pika

from apportion.errors import InvalidRequest
from apportion.rabbitmq._queues import (
    DEFAULT_QUEUE_NAME,
    broker_errors,
    connect_broker,
    declare_queue,
    queue_name,
    validate_prefix,
    validate_queue_name,
)
from apportion.routing import Key, partition_for

PERSISTENT = 2  # AMQP delivery mode: the broker writes the message to disk (in a durable queue)


class Producer:
    """Publishes keyed messages into the queue of ``partition_for(key, partitions)`` (``<prefix>.<p>`` by default);
    a context manager (closes the connection). Not thread-safe: one producer per thread."""

    def __init__(self, url: str, prefix: str, partitions: int, *, queue_template: str = DEFAULT_QUEUE_NAME) -> None:
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise InvalidRequest("partitions", f"must be a positive integer, got {partitions!r}")
        self.prefix = validate_prefix(prefix)
        self.queue_template = validate_queue_name(queue_template, self.prefix)
        self.partitions = partitions
        self._properties = pika.BasicProperties(delivery_mode=PERSISTENT)
        self._connection: Any = connect_broker(url)
        try:
            with broker_errors("cannot declare the partition queues"):
                self._channel: Any = self._connection.channel()
                for p in range(partitions):
                    declare_queue(self._channel, queue_name(prefix, p, self.queue_template))
                self._channel.confirm_delivery()
        except BaseException:
            self.close()
            raise

    def publish(self, key: Key, body: bytes) -> int:
        """Publish ``body`` to the queue of ``key``'s partition and wait for the broker's confirm; the partition."""
        partition = partition_for(key, self.partitions)
        name = queue_name(self.prefix, partition, self.queue_template)
        with broker_errors(f"cannot publish to {name}"):
            self._channel.basic_publish("", name, body, properties=self._properties, mandatory=True)
        return partition

    def close(self) -> None:
        with broker_errors("cannot close the connection"):
            if self._connection.is_open:
                self._connection.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


__all__ = ["PERSISTENT", "Producer"]
