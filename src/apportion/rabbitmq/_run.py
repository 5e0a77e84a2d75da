"""One consumer process as ``apportion rabbitmq consume`` runs it: wait for the store, join the group, consume.

``run_consumer(store_url, group, worker_id, requested, amqp_url=..., prefix=..., handle=...)`` connects to RabbitMQ
(a broker that cannot be reached is ``BrokerUnavailable`` at once: a supervisor restarts the process), then runs the
group's member as ``apportion worker`` runs its own (:func:`apportion.runner.run_worker`: the store waited for up to
``connect_timeout_s``, metrics and probes, ``on_started``) with a :class:`QueueConsumer`'s callbacks until
SIGINT/SIGTERM (a graceful leave: every queue is cancelled and its handled messages acked before the partitions are
released). ``requested`` is the group's definition as this member asks for it (a ``GroupConfig``, or only a mode).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from apportion import events
from apportion.errors import InvalidRequest
from apportion.events import WorkerEvent
from apportion.group import GroupConfig, Mode, PartitionId
from apportion.rabbitmq._consumer import (
    DEFAULT_ACK_DELAY_S,
    DEFAULT_BATCH,
    DEFAULT_PREFETCH,
    Emit,
    Handle,
    QueueConsumer,
)
from apportion.rabbitmq._queues import DEFAULT_QUEUE_NAME
from apportion.runner import DEFAULT_CONNECT_TIMEOUT_S, run_worker
from apportion.worker import JoinOptions, Worker


def echo(partition: PartitionId, body: bytes) -> None:
    """The default handler: one ``message`` event line per message (its body as text)."""
    events.emit(WorkerEvent.MESSAGE, partition=partition, body=body.decode("utf-8", errors="replace"))


def load_handler(spec: str | None) -> Handle:
    """``module:function`` (``--handler``) as a handler; None: :func:`echo`."""
    if spec is None:
        return echo
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise InvalidRequest("handler", f"expected MODULE:FUNCTION, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidRequest("handler", f"cannot import {module_name!r}: {exc}") from exc
    function = getattr(module, name, None)
    if not callable(function):
        raise InvalidRequest("handler", f"{module_name!r} has no function {name!r}")
    handle: Handle = function
    return handle


def run_consumer(
    store_url: str,
    group: str,
    worker_id: str,
    requested: GroupConfig | Mode,
    *,
    ordinal: int | None = None,
    update: bool = False,
    amqp_url: str,
    prefix: str,
    handle: Handle = echo,
    emit: Emit = events.emit,
    prefetch: int = DEFAULT_PREFETCH,
    batch: int = DEFAULT_BATCH,
    ack_delay_s: float = DEFAULT_ACK_DELAY_S,
    queue_template: str = DEFAULT_QUEUE_NAME,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    revoke_timeout_s: float = 10.0,
    options: JoinOptions | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    on_started: Callable[[Worker], None] | None = None,
) -> None:
    """Run consumer ``worker_id`` of ``group`` until SIGINT/SIGTERM (module docstring); emits ``assigned``,
    ``revoked``, ``lost`` (as ``apportion worker``), ``consuming``, ``acked``, ``cancelled``, ``requeued`` and
    ``commit_failed`` (the consumer's), then ``stopped``. The member is run as ``apportion worker`` runs its own
    (:func:`apportion.runner.run_worker`): ``options`` (capacity, rack, replace, history retention), ``metrics_port``
    (Prometheus metrics and the probes ``/healthz``, ``/readyz``) and ``on_started`` (``--replicas-from
    kubernetes``'s follower) are the same there and here."""
    consumer = QueueConsumer(
        amqp_url, prefix, handle, prefetch=prefetch, batch=batch, ack_delay_s=ack_delay_s, emit=emit,
        queue_template=queue_template,
    )  # fmt: skip

    def started(worker: Worker) -> None:
        consumer.bind(worker)
        if on_started is not None:
            on_started(worker)

    with consumer:  # the broker first: one that cannot be reached is BrokerUnavailable at once (exit 1)
        run_worker(
            store_url, group, worker_id, requested, emit=emit, ordinal=ordinal, update=update,
            options=JoinOptions(**(options or {}), revoke_timeout_s=revoke_timeout_s),
            connect_timeout_s=connect_timeout_s, metrics_port=metrics_port, metrics_host=metrics_host,
            on_started=started, callbacks=(consumer.on_assigned, consumer.on_revoked, consumer.on_lost),
            stopped=lambda: {"handled": consumer.handled},
        )  # fmt: skip


__all__ = ["echo", "load_handler", "run_consumer"]
