"""Run one pipeline worker as ``apportion pipeline run`` does: Spark session, signals, warm-up, state, the batch loop.

``run_pipeline_worker(request)`` (a ``PipelineRequest``: the member, the definition it requests, the pipeline's
settings; ``_request``) checks its directories and the log before Spark starts, joins the group (created with these
settings if absent) and processes the partitions it owns in fenced micro-batches
(``apportion.spark.pipeline._pipeline``) until SIGTERM/SIGINT (a graceful leave), ``stop`` is set, or
``exit_idle_s`` passes without work. With ``state_dir`` the group is stateful: per-key aggregates per
partition in local stores backed by a fenced changelog (``apportion.spark.pipeline._stateful``), in every mode. The
owner of a partition restores its state from the changelog before its first batch of each epoch, whatever gave it the
partition; what differs by mode is what else happens: rounds mode keeps standby and learner replicas warm (seed 2),
coordinator mode acknowledges a migration only once the new owner has restored (seed 1: the table's ONLINE means
the state moved), static mode restores when the ordinal claims its block (a restarted pod that keeps its state
directory, as a StatefulSet's volume does, replays only the tail it lacks).

Events (one ``emit(event, **fields)`` each): ``started`` (after the warm-up, before joining; with the group's
``mode``), every event of the
``Pipeline``, then ``stopped`` with the batches and records it committed.

Imports are light (no pyarrow, no pyspark until a worker runs), so the CLI can use the directory checks anywhere.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from apportion.errors import InvalidRequest
from apportion.events import Emit, WorkerEvent
from apportion.spark.engine import connect_address, is_connect_url
from apportion.spark.pipeline._request import PipelineRequest
from apportion.spark.pipeline._sizing import STATEFUL_MAX_RECORDS, BatchSize, positive_seconds
from apportion.store import connect

if TYPE_CHECKING:
    from apportion.kafka import KafkaConfig
    from apportion.log import PartitionedLog
    from apportion.spark.pipeline._pipeline import FaultHook, Transform
    from apportion.spark.pipeline._source import Source


def writable_dir(path: str | Path, option: str) -> None:
    """Create ``path`` if needed and prove it takes a file (a read-only mount or /proc fails here, before Spark)."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".apportion-probe-"):
            pass
    except OSError as exc:
        raise InvalidRequest(option, f"cannot write to {path}: {exc.strerror or exc}") from exc


def readable_dir(path: str | Path, option: str) -> None:
    """``path`` must be an existing directory this user can list."""
    try:
        os.listdir(path)
    except OSError as exc:
        raise InvalidRequest(option, f"cannot read directory {path}: {exc.strerror or exc}") from exc


def run_pipeline_worker(
    request: PipelineRequest,
    *,
    emit: Emit | None = None,
    stop: threading.Event | None = None,
    signals: bool = True,
    fault: FaultHook | None = None,
) -> None:
    """Run the pipeline worker ``request`` describes (see the module docstring) in this process and return when it
    has left the group.

    ``resource`` defaults to the group name and ``partitions`` to the log's (given, it must match). The log's
    partitions and the requested definition (``request.requested``: the mode, ``Rounds()`` by default, the strategy,
    default the mode's, its options, the timings, ``ttl_s`` default the store's) are the definition this worker
    requests (``GroupConfig.request``), checked before Spark starts; it defines the group when it does not exist yet,
    and a group stored with another mode or other partitions is refused (``apportion.Group.of``). Stateful
    partitions (``state_dir``) work in every mode (the module docstring says how each one moves the state; standby
    and learner replicas exist only in the rounds mode). ``transform`` is a function ``f(df) -> df`` or its
    ``"module:function"`` name (default ``apportion.spark.transform``). ``emit`` receives every event (default: one
    JSON log line on ``apportion.pipeline``). ``signals``: SIGINT and SIGTERM set ``stop`` (main thread only; the
    handlers stay installed, so a signal during the process's exit is ignored too). ``fault`` is each
    ``Pipeline``'s fault-injection hook (tests). ``batch_records`` fixes each batch's records per partition; without
    it the size starts at 10,000 and follows ``batch_seconds`` (default 10 s, at most a third of
    ``revoke_timeout_s``; ``apportion.spark.pipeline._sizing``), which must be below ``revoke_timeout_s``.

    ``resources`` (several log resources, instead of ``resource``): the group is over these named resources (each
    with the log's partition count) and this worker runs one ``Pipeline`` per resource it subscribes to
    (``subscriptions``, default all) in one batch loop (``apportion.spark.pipeline._resources``); not stateful.

    ``kafka`` (the pipeline on Kafka, ``input_dir`` unused): ``resources`` are Kafka topics, the group's resources
    with the broker's partition counts (read before Spark starts: ``TopicUnavailable``, ``BrokerUnavailable``), one
    ``Pipeline`` per topic reading it with Spark's Kafka source (``apportion.spark.pipeline._kafka``); the JVM this
    worker starts carries Spark's Kafka connector (``kafka_jars``, else ``$APPORTION_KAFKA_JARS``, else Spark's
    package resolution: ``apportion.spark.engine._connector``), a Connect server must have it already (checked
    before joining). Not stateful yet."""
    from apportion.log import PartitionedLog
    from apportion.spark.engine import spark_session
    from apportion.spark.pipeline._pipeline import Pipeline, emit_log, joined, load_transform
    from apportion.spark.pipeline._pipeline import transform as default_transform
    from apportion.spark.pipeline._stateful import StatefulPartitions
    from apportion.worker import Group

    s, worker_id = request.pipeline, request.worker_id
    most = None if s.state_dir is None else STATEFUL_MAX_RECORDS
    positive_seconds("revoke_timeout", s.revoke_timeout_s)
    if s.slow_commit_s:  # 0: none
        positive_seconds("slow_commit", s.slow_commit_s)
    BatchSize(s.batch_records, s.batch_seconds, most=most)  # a bad size is refused before Spark starts
    if s.batch_seconds is not None and s.batch_seconds >= s.revoke_timeout_s:  # a default one follows it (``joined``)
        raise InvalidRequest(
            "batch_seconds",
            f"{s.batch_seconds:g} s is not below --revoke-timeout ({s.revoke_timeout_s:g} s): a revocation waits for "
            "the batch in flight",
        )
    stop = stop or threading.Event()
    emit = emit or emit_log

    def pipelines() -> dict[str, Any]:
        """The keyword arguments of every ``Pipeline`` (the transform loaded: once the directories are checked)."""
        function = load_transform(s.transform) if isinstance(s.transform, str) else s.transform or default_transform
        return dict(
            batch_records=s.batch_records, batch_seconds=s.batch_seconds, transform=function, emit=emit,
            worker_id=worker_id, slow_commit_s=s.slow_commit_s, fault=fault,
        )  # fmt: skip

    if s.kafka is not None:
        _run_kafka(request, s.kafka, pipelines(), stop, signals=signals)
        return
    if s.resources is not None:
        if s.state_dir is not None or s.resource is not None or request.requested.partitions is not None:
            raise InvalidRequest("resources", "several log resources take no --resource, --partitions or --state-dir")
        readable_dir(s.input_dir, "input")
        writable_dir(s.output_dir, "output")
        settings = pipelines()
        log = PartitionedLog(s.input_dir)
        counts = {name: log.partitions(name) for name in s.resources}
        _run_resources(request, log, counts, settings, stop, signals=signals)
        return
    resource = s.resource or request.group
    readable_dir(s.input_dir, "input")
    writable_dir(s.output_dir, "output")
    if s.state_dir is not None:
        writable_dir(s.state_dir, "state-dir")
    log = PartitionedLog(s.input_dir)
    n = log.partitions(resource)
    if request.requested.partitions is not None and request.requested.partitions != n:
        raise InvalidRequest(
            "partitions", f"the log resource {resource!r} has {n} partitions, not {request.requested.partitions}"
        )
    settings = pipelines()
    state = None
    if s.state_dir is not None:  # validated before Spark starts
        state = StatefulPartitions(
            log, resource, Path(s.state_dir) / worker_id, emit=emit, worker_id=worker_id,
            restore_batch=s.restore_batch, restore_rate=s.restore_rate,
        )  # fmt: skip
    definition = request.requested.config(request.store_url, partitions=n, stateful=s.state_dir is not None)
    with connect(request.store_url) as store:
        defined = Group.of(store, request.group, definition, ordinal=request.ordinal)  # another mode: refused
        spark = spark_session(s.master, s.driver_memory, f"apportion-pipeline-{worker_id}")
        if signals:
            _stop_on_signals(stop)  # after Spark, which installs its own SIGINT handler
        processor = Pipeline(spark, log, s.output_dir, resource, state=state, **settings)
        emit = processor.emit
        _started(emit, spark, settings["transform"], s.master, worker=worker_id, group=request.group,
                 mode=defined.mode.name, resource=resource, partitions=n)  # fmt: skip
        try:
            with joined(defined, worker_id, processor, revoke_timeout_s=s.revoke_timeout_s):
                processor.run(stop, idle_s=s.idle_s, exit_after_idle_s=s.exit_idle_s)
        finally:
            emit(WorkerEvent.STOPPED, worker=worker_id, batches=processor.batches, records=processor.records)
            if processor.state is not None:
                processor.state.close()
            with contextlib.suppress(Exception):  # the JVM may already be gone (signal to the process group)
                spark.stop()


def _run_kafka(
    request: PipelineRequest, kafka: KafkaConfig, settings: dict[str, Any], stop: threading.Event, *, signals: bool
) -> None:
    """``run_pipeline_worker`` on Kafka (its docstring): checked before Spark starts, then ``_run_resources``."""
    from apportion.kafka import topic_partitions
    from apportion.spark.engine import kafka_connector_config
    from apportion.spark.pipeline._kafka import KafkaSource

    s = request.pipeline
    refused = {"resource": s.resource, "partitions": request.requested.partitions, "state_dir": s.state_dir}
    given = [f"--{name.replace('_', '-')}" for name, value in refused.items() if value is not None]
    if given:
        raise InvalidRequest(
            "kafka",
            f"the pipeline on Kafka takes no {', '.join(given)} (its resources are the --topic topics; stateful "
            "partitions on Kafka are not there yet)",
        )
    topics = list(s.resources or ())
    if not topics:
        raise InvalidRequest("topic", "give at least one --topic (the topics the pipeline reads)")
    writable_dir(s.output_dir, "output")
    config = kafka_connector_config(s.kafka_jars)  # a jar that is not there: refused before Spark starts
    counts = topic_partitions(kafka, topics)  # an unknown topic, a broker away: one line before Spark starts
    source = KafkaSource(kafka)
    _run_resources(
        request, source, counts, settings, stop, signals=signals, spark_config=config,
        warm=lambda spark, function: source.warm_up(spark, min(counts), counts[min(counts)], function),
    )  # fmt: skip


def _run_resources(
    request: PipelineRequest,
    log: PartitionedLog | Source,
    counts: dict[str, int],
    settings: dict[str, Any],
    stop: threading.Event,
    *,
    signals: bool,
    spark_config: Mapping[str, str] | None = None,
    warm: Callable[[Any, Transform], float] | None = None,
) -> None:
    """``run_pipeline_worker`` over several resources of a log or Kafka topics (its docstring): ``spark_config``
    for the JVM it starts, ``warm(spark, transform)`` the warm-up before joining (default: ``warm_up``'s one-record
    log)."""
    from apportion.spark.engine import spark_session
    from apportion.spark.pipeline._pipeline import Pipeline, run_batches
    from apportion.spark.pipeline._resources import joined_resources
    from apportion.worker import Group

    s, worker_id = request.pipeline, request.worker_id
    mine = sorted(counts if s.subscriptions is None else s.subscriptions)
    unknown = [name for name in mine if name not in counts]
    if unknown:
        raise InvalidRequest("subscribe", f"{unknown} are not among the group's resources {sorted(counts)}")
    definition = request.requested.config(request.store_url, resources=counts)
    with connect(request.store_url) as store:
        defined = Group.of(store, request.group, definition, ordinal=request.ordinal)  # other resources: refused
        spark = spark_session(s.master, s.driver_memory, f"apportion-pipeline-{worker_id}", config=spark_config)
        if signals:
            _stop_on_signals(stop)
        pipelines = {name: Pipeline(spark, log, s.output_dir, name, **settings) for name in mine}
        emit = pipelines[mine[0]].emit
        _started(emit, spark, settings["transform"], s.master, warm=warm, worker=worker_id, group=request.group,
                 mode=defined.mode.name, resources=counts, subscriptions=mine)  # fmt: skip
        try:
            with joined_resources(defined, worker_id, pipelines, revoke_timeout_s=s.revoke_timeout_s):
                run_batches(list(pipelines.values()), stop, idle_s=s.idle_s, exit_after_idle_s=s.exit_idle_s)
        finally:
            batches = sum(p.batches for p in pipelines.values())
            emit(
                WorkerEvent.STOPPED,
                worker=worker_id,
                batches=batches,
                records=sum(p.records for p in pipelines.values()),
            )
            with contextlib.suppress(Exception):
                spark.stop()


def _started(
    emit: Emit,
    spark: Any,
    function: Transform,
    master: str,
    *,
    warm: Callable[[Any, Transform], float] | None = None,
    **fields: Any,
) -> None:
    """Warm the transform up on ``spark`` (``warm``, default ``warm_up``), then emit ``started`` with ``fields``, the
    warm-up time and the engine."""
    from apportion.spark.pipeline._pipeline import warm_up

    warm_s = (warm or warm_up)(spark, function)
    emit(WorkerEvent.STARTED, **fields, warm_up_s=round(warm_s, 2), spark=_engine(master))


def _stop_on_signals(stop: threading.Event) -> None:
    """SIGINT and SIGTERM set ``stop`` (a graceful leave); only the main thread can install handlers."""

    def _leave(signum: int, frame: FrameType | None) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _leave)


def _engine(master: str) -> str:
    """Where this worker's Spark runs, for its ``started`` event: the Connect server (host:port only: its URL may carry
    a token) or its own JVM's master."""
    if is_connect_url(master):
        host, port = connect_address(master)
        return f"connect sc://{host}:{port}"
    return f"own JVM {master}"


__all__ = ["PipelineRequest", "readable_dir", "run_pipeline_worker", "writable_dir"]
