"""One consumer process as ``apportion kafka consume`` runs it: read the topics, wait for the store, join, consume.

``run_consumer(store_url, group, worker_id, requested, kafka=..., topics=..., handle=...)``:

1. reads the topics' partition counts from the broker (``topic_partitions``, within ``kafka.connect_timeout_s``):
   an unreachable broker, refused credentials or an unknown topic is one ``BrokerUnavailable`` line, exit 1 — a
   supervisor restarts the process and it may find them fixed;
2. connects to the store, waiting for it as ``apportion worker`` does (``apportion.runner.StartUp``), and grows the
   stored definition to a topic that grew while the group was down (``sync_definition``; a topic with fewer
   partitions than the group stored was deleted and created again: one line, exit 1, the group untouched), so
   that the definition this member asks for — the topics as resources, ``T:n``, partition ids ``T-0`` ..
   ``T-<n-1>`` — is the stored one;
3. runs the member as ``apportion worker`` runs its own (:func:`apportion.runner.run_worker`: metrics and probes,
   ``on_started``, the ``stopped`` line) with a :class:`TopicConsumer`'s callbacks until SIGINT/SIGTERM (a graceful
   leave: each partition's handled records committed before it is released), and a :class:`TopicWatcher` beside
   it: a topic grown on the broker is a new round within one heartbeat; a topic deleted ends the member gracefully
   and the run raises ``TopicUnavailable`` (exit 1); a handler that raises ends it the same way with that error.

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
from apportion.events import WorkerEvent
from apportion.group import Coordinator, GroupConfig, Mode, PartitionId, Rounds, Static
from apportion.kafka._client import KafkaConfig, topic_partitions, validate_topic
from apportion.kafka._consumer import DEFAULT_BATCH, DEFAULT_COMMIT_DELAY_S, Emit, Handle, TopicConsumer
from apportion.kafka._topics import TopicWatcher, resources_text, sync_definition
from apportion.runner import StartUp, run_worker
from apportion.store import Store, connect
from apportion.worker import JoinOptions, Worker

Requested = Mode | Callable[[str], GroupConfig | Mode]
"""A mode, or the topics' ``--resources`` text -> the requested definition (module docstring)."""


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def echo(partition: PartitionId, key: bytes | None, value: bytes | None) -> None:
    """The default handler: one ``message`` event line per record (key and value as text)."""
    events.emit(WorkerEvent.MESSAGE, partition=partition, key=_text(key), value=_text(value))


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
    options: JoinOptions | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    on_started: Callable[[Worker], None] | None = None,
) -> None:
    """Run consumer ``worker_id`` of ``group`` until SIGINT/SIGTERM (module docstring). Emits ``assigned``,
    ``revoked``, ``lost`` (as ``apportion worker``), ``consuming``, ``committed``, ``fenced``, ``commit_failed``,
    ``released`` and ``dropped`` (the consumer's), then ``stopped``. ``connect_timeout_s`` bounds the wait for the
    store (default: ``kafka.connect_timeout_s``, which bounds the broker's); ``options``, ``metrics_port`` and
    ``on_started`` are :func:`apportion.runner.run_worker`'s."""
    names = sorted({validate_topic(t) for t in topics})
    consumer = TopicConsumer(
        kafka, group, names, handle, batch=batch, commit_delay_s=commit_delay_s, start=start, emit=emit
    )
    counts = topic_partitions(kafka, names)  # the broker first: one that cannot be reached is one line at once
    resources = resources_text(counts)
    definition = (
        GroupConfig.request(store_url, requested, resources=resources)
        if isinstance(requested, Rounds | Coordinator | Static)
        else requested(resources)
    )
    wait_s = kafka.connect_timeout_s if connect_timeout_s is None else connect_timeout_s
    startup = StartUp(store_url, worker_id, wait_s)
    store: Store = startup.attempt(lambda: connect(store_url))
    try:
        startup.attempt(lambda: sync_definition(store, group, counts), store)
        watcher = TopicWatcher(kafka, names, store, group, period_s=watch_period_s)

        def started(worker: Worker) -> None:
            consumer.bind(worker)
            watcher.start(worker)
            if on_started is not None:
                on_started(worker)

        try:
            with consumer:
                run_worker(
                    store_url, group, worker_id, definition, emit=emit, ordinal=ordinal, update=update,
                    options=JoinOptions(**(options or {}), revoke_timeout_s=revoke_timeout_s),
                    connect_timeout_s=wait_s, metrics_port=metrics_port, metrics_host=metrics_host,
                    on_started=started, callbacks=(consumer.on_assigned, consumer.on_revoked, consumer.on_lost),
                    stopped=lambda: {"handled": consumer.handled},
                )  # fmt: skip
        finally:
            watcher.stop()
        for error in (consumer.error, watcher.error):  # the member left gracefully because of it
            if error is not None:
                raise error
    finally:
        store.close()


__all__ = ["Requested", "echo", "load_handler", "run_consumer"]
