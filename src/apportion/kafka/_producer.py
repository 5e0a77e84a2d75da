"""The producer: keyed records into a topic, each in the partition Kafka's own producers would choose for its key.

``Producer(config, topic)`` reads the topic's partition count from the broker (``topic_partitions``: an unreachable
broker, refused credentials or an unknown topic are one ``BrokerUnavailable`` line, within the connect timeout),
then :meth:`Producer.send` computes the partition itself (``_partitioner.partition_for_key``: murmur2, as the Java
client and librdkafka's ``murmur2_random``) and hands the record to librdkafka with that explicit partition.

Why an explicit partition rather than librdkafka's ``partitioner=murmur2_random``: both put a key in the same
partition (the tests check it on a real broker), but the explicit one (1) is known when ``send`` returns, so the
caller counts records per partition without waiting for delivery reports; (2) does not depend on a setting a
``--kafka-option partitioner=...`` could change, so apportion's producer cannot drift from the Java clients; and
(3) is the tested pure function, not a configuration string. What it gives up: the partition count is the one read
when the producer was made; a topic grown meanwhile gets keys routed by the old count until the next producer (a
librdkafka producer refreshes its metadata every 5 minutes, so it too routes by a stale count for a while; growing a
keyed topic moves keys either way, which is why Kafka's documentation warns against it).

Delivery: ``enable.idempotence`` (so ``acks=all``, retries, at most 5 requests in flight with sequence numbers: a
retried batch is neither duplicated nor reordered, each key's records stay in send order), ``send`` is asynchronous
and :meth:`Producer.flush` (and ``close``, and leaving the ``with`` block) waits until the broker has acknowledged
every record. A record the broker refused or that was not acknowledged within ``delivery_timeout_s``
(``message.timeout.ms``) is ``BrokerUnavailable`` at the next ``send`` or ``flush``: never a silent loss.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

from apportion.errors import BrokerUnavailable, InvalidRequest
from apportion.kafka._client import ErrorWatch, KafkaConfig, topic_partitions, validate_topic
from apportion.kafka._partitioner import KafkaKey, key_bytes, partition_for_key

DEFAULT_DELIVERY_TIMEOUT_S = 60.0
_FULL_WAIT_S = 0.1  # librdkafka's local queue is full: serve delivery reports this long, then try again


class Producer:
    """Sends keyed records to ``topic`` (module docstring); a context manager (flushes on exit). Not thread-safe:
    one producer per thread."""

    def __init__(
        self,
        config: KafkaConfig,
        topic: str,
        *,
        delivery_timeout_s: float = DEFAULT_DELIVERY_TIMEOUT_S,
        partitions: int | None = None,
    ) -> None:
        from confluent_kafka import Producer as KafkaProducer

        if not 0 < delivery_timeout_s <= 3600:
            raise InvalidRequest("delivery-timeout", f"must be > 0 and at most 3600 s, got {delivery_timeout_s}")
        self.config = config
        self.topic = validate_topic(topic)
        self.delivery_timeout_s = delivery_timeout_s
        self.partitions = partitions if partitions is not None else topic_partitions(config, [topic])[topic]
        self.sent = 0
        self.delivered = 0
        self._lock = threading.Lock()
        self._failure: BrokerUnavailable | None = None
        self._errors = ErrorWatch()
        settings = config.client(
            **{
                "enable.idempotence": True,
                "message.timeout.ms": int(delivery_timeout_s * 1000),
                "error_cb": self._errors,
            }
        )
        try:
            self._producer: Any = KafkaProducer(settings)
        except Exception as exc:  # a malformed --kafka-option: librdkafka refuses the configuration
            raise InvalidRequest("kafka-option", str(exc)) from exc

    def send(self, key: KafkaKey, value: bytes | None) -> int:
        """Queue one record for ``key``'s partition and return that partition; delivery is confirmed by
        :meth:`flush`. Raises the first delivery failure seen so far."""
        partition = partition_for_key(key, self.partitions)
        data = key_bytes(key)
        deadline = time.monotonic() + self.delivery_timeout_s
        while True:
            self._raise_failure()
            try:
                self._producer.produce(self.topic, value=value, key=data, partition=partition, on_delivery=self._done)
                break
            except BufferError:  # the local queue is full (the broker is slow or away): wait for room
                if time.monotonic() > deadline:
                    raise self._errors.failure(self.config, f"cannot send to topic {self.topic!r}") from None
                self._producer.poll(_FULL_WAIT_S)
        self.sent += 1
        self._producer.poll(0)  # serve the delivery reports that are ready
        return partition

    def flush(self) -> None:
        """Wait until every record sent was acknowledged by the broker; BrokerUnavailable for the first that was not
        (or when the delivery timeout passes with records still unacknowledged)."""
        left = self._producer.flush(self.delivery_timeout_s + 5)
        self._raise_failure()
        if left:
            raise self._errors.failure(self.config, f"{left} records to topic {self.topic!r} were not acknowledged")

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.close()
        else:  # the caller's error wins; still wait (bounded) for what was sent
            self._producer.flush(self.delivery_timeout_s + 5)

    def _done(self, error: Any, message: Any) -> None:
        """librdkafka's delivery report (served by ``poll``/``flush`` on the caller's thread)."""
        if error is None:
            self.delivered += 1
            return
        with self._lock:
            if self._failure is None:
                if self._errors.authentication_failed():
                    self._failure = self._errors.failure(self.config, f"cannot send to topic {self.topic!r}")
                else:
                    where = f"topic {self.topic!r} partition {message.partition()}"
                    self._failure = BrokerUnavailable(f"cannot deliver to {where} on {self.config.who}: {error.str()}")

    def _raise_failure(self) -> None:
        with self._lock:
            failure = self._failure
        if failure is not None:
            raise failure


__all__ = ["DEFAULT_DELIVERY_TIMEOUT_S", "Producer"]
