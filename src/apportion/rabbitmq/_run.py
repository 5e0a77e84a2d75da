"""One consumer process as ``apportion rabbitmq consume`` runs it: wait for the store, join the group, consume.

``run_consumer(store_url, group, worker_id, requested, amqp_url=..., prefix=..., handle=...)`` connects to the
store as ``apportion worker`` does (``apportion.runner.StartUp``: waits up to ``connect_timeout_s``), connects to
RabbitMQ (a broker that cannot be reached is ``BrokerUnavailable`` at once: a supervisor restarts the process),
then runs the group's member with a :class:`QueueConsumer`'s callbacks until SIGINT/SIGTERM (a graceful leave: every
queue is cancelled and its handled messages acked before the partitions are released). ``definition`` is
:class:`apportion.Group`'s keyword arguments (``partitions``, ``mode``, ``ordinal``, ``replicas``, the timings).
"""

from __future__ import annotations

import importlib

from apportion import events
from apportion.errors import InvalidRequest
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
from apportion.runner import DEFAULT_CONNECT_TIMEOUT_S, StartUp
from apportion.store import Store, connect
from apportion.worker import Group, Worker


def echo(partition: PartitionId, body: bytes) -> None:
    """The default handler: one ``message`` event line per message (its body as text)."""
    events.emit("message", partition=partition, body=body.decode("utf-8", errors="replace"))


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
) -> None:
    """Run consumer ``worker_id`` of ``group`` until SIGINT/SIGTERM (module docstring); emits ``assigned``,
    ``revoked``, ``lost`` (as ``apportion worker``), ``consuming``, ``acked``, ``cancelled``, ``requeued`` and
    ``commit_failed`` (the consumer's), then ``stopped``."""
    consumer = QueueConsumer(
        amqp_url, prefix, handle, prefetch=prefetch, batch=batch, ack_delay_s=ack_delay_s, emit=emit,
        queue_template=queue_template,
    )  # fmt: skip
    startup = StartUp(store_url, worker_id, connect_timeout_s)
    store: Store = startup.attempt(lambda: connect(store_url))
    try:

        def open_group() -> Group:
            store.revision()  # the first request (an etcd store sends none when it is opened)
            return Group.of(store, group, requested, ordinal=ordinal, update=update)

        defined = startup.attempt(open_group, store)

        def started(worker: Worker) -> None:
            consumer.bind(worker)
            startup.watch(worker)

        with consumer:
            defined.run(
                worker_id,
                consumer.on_assigned,
                consumer.on_revoked,
                consumer.on_lost,
                on_started=started,
                tracer=startup.tracer(None),
                revoke_timeout_s=revoke_timeout_s,
            )
        if startup.error is not None:
            raise startup.error
    finally:
        emit("stopped", handled=consumer.handled)
        store.close()


__all__ = ["echo", "load_handler", "run_consumer"]
