"""Seed 3 on RabbitMQ: partitioned queues ``<prefix>.<p>`` (or a name template: seed 3's ``{prefix}-P{partition}``), a
producer that routes by THE routing hash, and a group member that consumes exactly the queues of the partitions it
owns (the ``rabbitmq`` extra: pika).

- :class:`Producer` — publishes each keyed message to ``<prefix>.<partition_for(key, n)>`` (durable queues with
  ``x-single-active-consumer``; publisher confirms) (``_producer.py``);
- :class:`QueueConsumer` — a worker's ``on_assigned``/``on_revoked``/``on_lost``: basic_consume on assignment,
  basic_cancel and ack of what was handled before a partition is released, requeue where the epoch no longer matches;
  acks fenced by one ``commit_many`` per batch (``_consumer.py``, its state machine in the docstring);
- :func:`run_consumer` — one consumer process, as ``apportion rabbitmq consume`` runs it (``_run.py``);
- :func:`queue_name`, :func:`declare_queue` — what both sides agree on (``_queues.py``).
"""

from apportion.rabbitmq._consumer import (
    DEFAULT_ACK_DELAY_S,
    DEFAULT_BATCH,
    DEFAULT_PREFETCH,
    Emit,
    Handle,
    QueueConsumer,
)
from apportion.rabbitmq._producer import Producer
from apportion.rabbitmq._queues import DEFAULT_QUEUE_NAME, QUEUE_ARGUMENTS, declare_queue, queue_name
from apportion.rabbitmq._run import echo, load_handler, run_consumer

__all__ = [
    "DEFAULT_ACK_DELAY_S",
    "DEFAULT_BATCH",
    "DEFAULT_PREFETCH",
    "DEFAULT_QUEUE_NAME",
    "QUEUE_ARGUMENTS",
    "Emit",
    "Handle",
    "Producer",
    "QueueConsumer",
    "declare_queue",
    "echo",
    "load_handler",
    "queue_name",
    "run_consumer",
]
