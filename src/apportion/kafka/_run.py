"""One consumer process as ``apportion kafka consume`` runs it: wait for the store, read the topics, join, consume.

``run_consumer(store_url, group, worker_id, requested, kafka=..., topics=..., handle=...)``:

1. connects to the store as ``apportion worker`` does (``apportion.runner.StartUp``: waits up to the connect
   timeout for a store that does not answer);
2. reads the topics' partition counts from the broker (``topic_partitions``, within ``kafka.connect_timeout_s``):
   an unreachable broker, refused credentials or an unknown topic is one ``BrokerUnavailable`` line, exit 1 — a
   supervisor restarts the process and it may find them fixed;
3. grows the stored definition to a topic that grew while the group was down (``sync_definition``; a topic with
   fewer partitions than the group stored was deleted and created again: one line, exit 1, the group untouched)
   and joins with the topics as the group's resources (``T:n``, partition ids ``T-0`` .. ``T-<n-1>``);
4. runs the member with a :class:`TopicConsumer`'s callbacks until SIGINT/SIGTERM (a graceful leave: each
   partition's handled messages committed before it is released), with a :class:`TopicWatcher` beside it: a topic
   grown on the broker is a new round within one heartbeat; a topic deleted ends the member gracefully and the
   run raises ``TopicUnavailable`` (exit 1).

``requested`` is the group's mode (``Rounds()``, ``Static(...)``, ``Coordinator(...)``: every other setting its
default) or a function from the topics as ``--resources`` text (``orders:6``) to the whole requested definition
(``GroupConfig``: strategy, timings), which is what the command passes: the partition counts are known only once
the broker has been asked, and they are the broker's, never the caller's.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable

from apportion import events
from apportion.errors import InvalidRequest
from apportion.group import GroupConfig, Mode, PartitionId
from apportion.kafka._client import KafkaConfig, topic_partitions, validate_topic
from apportion.kafka._consumer import DEFAULT_BATCH, DEFAULT_COMMIT_DELAY_S, Emit, Handle, TopicConsumer
from apportion.kafka._topics import TopicWatcher, resources_text, sync_definition
from apportion.runner import StartUp
from apportion.store import Store, connect
from apportion.worker import Group, Worker

Requested = Mode | Callable[[str], GroupConfig | Mode]
"""A mode, or the topics' ``--resources`` text -> the requested definition (module docstring)."""


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def echo(partition: PartitionId, key: bytes | None, value: bytes | None) -> None:
    """The default handler: one ``message`` event line per record (key and value as text)."""
    events.emit("message", partition=partition, key=_text(key), value=_text(value))


def load_handler(spec: str | None) -> Handle:
    """``module:function`` (``--handler``) as a handler called ``function(partition, key, value)``; None:
    :func:`echo`."""
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
    requested: Requested,
    *,
    kafka: KafkaConfig,
    topics: Iterable[str],
    handle: Handle = echo,
    emit: Emit = events.emit,
    ordinal: int | None = None,
    update: bool = False,
    start: str = "earliest",
    batch: int = DEFAULT_BATCH,
    commit_delay_s: float = DEFAULT_COMMIT_DELAY_S,
    connect_timeout_s: float | None = None,
    revoke_timeout_s: float = 10.0,
    watch_period_s: float | None = None,
) -> None:
    """Run consumer ``worker_id`` of ``group`` until SIGINT/SIGTERM (module docstring). Emits ``assigned``,
    ``revoked``, ``lost`` (as ``apportion worker``), ``consuming``, ``committed``, ``fenced``, ``commit_failed``,
    ``released`` and ``dropped`` (the consumer's), then ``stopped``. ``connect_timeout_s`` bounds the wait for the
    store (default: ``kafka.connect_timeout_s``, which bounds the broker's)."""
    names = sorted({validate_topic(t) for t in topics})
    consumer = TopicConsumer(
        kafka, group, names, handle, batch=batch, commit_delay_s=commit_delay_s, start=start, emit=emit
    )
    startup = StartUp(store_url, worker_id, kafka.connect_timeout_s if connect_timeout_s is None else connect_timeout_s)
    store: Store = startup.attempt(lambda: connect(store_url))
    try:
        counts = topic_partitions(kafka, names)
        resources = resources_text(counts)

        def open_group() -> Group:
            store.revision()  # the first request (an etcd store sends none when it is opened)
            sync_definition(store, group, counts)
            definition = (
                GroupConfig.request(store, requested, resources=resources)
                if isinstance(requested, Mode)
                else requested(resources)
            )
            return Group.of(store, group, definition, ordinal=ordinal, update=update)

        defined = startup.attempt(open_group, store)
        watcher = TopicWatcher(kafka, names, store, group, period_s=watch_period_s)

        def started(worker: Worker) -> None:
            consumer.bind(worker)
            startup.watch(worker)
            watcher.start(worker)

        try:
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
        finally:
            watcher.stop()
        for error in (consumer.error, watcher.error, startup.error):
            if error is not None:
                raise error
    finally:
        emit("stopped", handled=consumer.handled)
        store.close()


__all__ = ["Requested", "echo", "load_handler", "run_consumer"]
