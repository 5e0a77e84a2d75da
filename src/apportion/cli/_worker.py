"""`apportion worker` — run one worker of a group; log each assignment change; SIGINT/SIGTERM leave gracefully.

Parses the options (command line, ``APPORTION_*`` environment, ``--config`` TOML) and prints each change as one JSON
line; the run itself — waiting for the store, the committer, metrics — is :func:`apportion.runner.run_worker`.
"""

from __future__ import annotations

import logging
import sys
import tomllib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from apportion import events
from apportion.cli._app import app
from apportion.cli._common import (
    MemberMode,
    Number,
    group_option,
    member_id,
    member_mode_options,
    option,
    requested_definition,
    seconds,
    store_option,
    strategy_option,
    timing_options,
)
from apportion.cli._kafka_options import KafkaTopics, kafka_options
from apportion.cli._options import rack_name, resource_names
from apportion.errors import InvalidRequest
from apportion.group import DEFAULT_RETENTION_S, MAX_SECONDS, Static
from apportion.runner import DEFAULT_CONNECT_TIMEOUT_S, run_worker
from apportion.worker import JoinOptions

if TYPE_CHECKING:
    from apportion.kafka import TopicWatcher
    from apportion.kube import ReplicasFollower

FC = TypeVar("FC", bound=Callable[..., Any] | click.Command)
MAX_CAPACITY = 1e12  # a capacity is a weight against the others': a larger one only overflows their sum
MAX_RETENTION_S = 30 * MAX_SECONDS  # 30 days of history (about 250 bytes per event in the store)


def _option(*decls: str, **kwargs: Any) -> Callable[[FC], FC]:
    """A worker option that also reads ``APPORTION_<LONG_NAME>`` (``--min-interval``: APPORTION_MIN_INTERVAL)."""
    return option(*decls, env=True, **kwargs)


def _load_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """``--config FILE.toml``: its values become the defaults (so command line > environment > file > defaults)."""
    if value is None:
        return
    try:
        with open(value, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise InvalidRequest("config", f"{value}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidRequest("config", f"{value}: not UTF-8 text (a TOML file is)") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidRequest("config", f"{value}: not valid TOML: {exc}") from exc
    except RecursionError as exc:
        raise InvalidRequest("config", f"{value}: nested too deeply") from exc
    table = data.get("worker", data)
    if not isinstance(table, dict):
        raise InvalidRequest("config", f"{value}: [worker] must be a table")
    by_name: dict[str, click.Parameter] = {}
    for p in ctx.command.params:
        if p.name is None or p is param:
            continue
        by_name[p.name] = p
        for opt in p.opts:
            if opt.startswith("--"):
                by_name[opt[2:].replace("-", "_")] = p
    defaults: dict[str, Any] = dict(ctx.default_map or {})
    for key, raw in table.items():
        target = by_name.get(str(key).replace("-", "_"))
        if target is None or target.name is None:
            raise InvalidRequest("config", f"{value}: unknown option {key!r}")
        expected = _toml_type(target)
        if not isinstance(raw, expected[0]) or (isinstance(raw, bool) and bool not in expected[0]):
            raise InvalidRequest("config", f"{value}: {key} must be {expected[1]}, got {_toml_kind(raw)}")
        try:
            defaults[target.name] = target.type_cast_value(ctx, raw)
        except click.BadParameter as exc:
            raise InvalidRequest("config", f"{value}: {key}: {exc.message}") from exc
    ctx.default_map = defaults


def _toml_type(param: click.Parameter) -> tuple[tuple[type, ...], str]:
    """The TOML value types an option accepts: no silent conversion (``partitions = 4.7`` is not 4)."""
    if isinstance(param, click.Option) and param.is_flag:
        return (bool,), "true or false"
    if isinstance(param.type, click.types.IntParamType):  # IntRange too
        return (int,), "an integer"
    if isinstance(param.type, click.types.FloatParamType):
        return (int, float), "a number"
    return (str,), "a string"


def _toml_kind(value: object) -> str:
    kinds = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "an array"}
    return kinds.get(type(value), "a table" if isinstance(value, dict) else f"a {type(value).__name__}")


@app.command()
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    is_eager=True,
    expose_value=False,
    callback=_load_config,
    envvar="APPORTION_CONFIG",
    show_envvar=True,
    help="A TOML file of worker options (keys as the long option names; a [worker] table also works).",
)
@store_option(env=True)
@group_option(env=True)
@_option("--id", "worker_id", default=None, help="This worker's id (unique in the group; default: --hostname).")
@_option("--partitions", type=int, default=None, help="Partition count (default: the stored definition).")
@_option(
    "--resources",
    default=None,
    help="Several resources instead of --partitions: NAME:PARTITIONS,... (orders:6,payments:4); partition ids are "
    "then <resource>-<index>.",
)
@_option(
    "--subscribe",
    "subscriptions",
    default=None,
    help="The resources this worker consumes, NAME,... (default: all of the group's).",
)
@strategy_option(env=True)
@timing_options(env=True)
@_option(
    "--capacity",
    type=Number(min=0, max=MAX_CAPACITY, min_open=True),
    default=1.0,
    help="Capacity weight of this worker.",
)
@_option(
    "--rack",
    default=None,
    help="This worker's failure domain (a zone, a host): high_availability puts a partition's standbys on other racks "
    "than its active.",
)
@_option("--update", is_flag=True, help="Overwrite the stored group definition with these settings.")
@_option("--replace", is_flag=True, help="Fence a live member with the same --id and take its place.")
@_option("--commit-every", type=seconds(), default=0.0, help="Commit a checkpoint for owned partitions every N s.")
@member_mode_options(env=True)
@_option(
    "--history-retention",
    "history_retention_s",
    type=seconds(maximum=MAX_RETENTION_S),
    default=DEFAULT_RETENTION_S,
    show_default=True,
    help="Keep the group's history events this long (s); 0 records none.",
)
@_option(
    "--connect-timeout",
    "connect_timeout_s",
    type=seconds(positive=True),
    default=DEFAULT_CONNECT_TIMEOUT_S,
    show_default=True,
    help="At start-up, wait this long (s) for the store, logging each attempt, then fail (exit 1).",
)
@_option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on this port (0: any free port, logged; needs the metrics extra).",
)
@_option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics server binds (0.0.0.0: every interface).",
)
@_option(
    "--replicas-from",
    type=click.Choice(["kubernetes"]),
    default=None,
    help="static: follow the replica count of this pod's StatefulSet (spec.replicas, read through the API with the "
    "pod's service account; the kubernetes extra), as `apportion scale` sets it.",
)
@kafka_options()
def worker(
    store_url: str,
    group_name: str,
    worker_id: str | None,
    partitions: int | None,
    resources: str | None,
    subscriptions: str | None,
    strategy: str | None,
    settle_s: float,
    min_interval_s: float,
    heartbeat_s: float,
    ttl_s: float | None,
    capacity: float,
    rack: str | None,
    update: bool,
    replace: bool,
    commit_every: float,
    mode: MemberMode,
    history_retention_s: float,
    connect_timeout_s: float,
    metrics_port: int | None,
    metrics_host: str,
    replicas_from: str | None,
    kafka: KafkaTopics | None,
) -> None:
    """Run a worker until SIGINT/SIGTERM. Each change is one JSON line on stdout
    ({"event": "assigned"|"revoked"|"lost"|"commit"|"fenced"|"commit_failed", "partitions": [...], "time": t}; a
    commit also has its epoch and the store revision) and a log line.

    Every option can also come from the environment (APPORTION_STORE, APPORTION_GROUP, APPORTION_ID, ...) or from
    --config FILE.toml; precedence: command line > environment > file > defaults."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")
    watcher = None
    if kafka is not None:
        if partitions is not None or resources is not None:
            raise InvalidRequest("topic", "the topics are the group's resources: give no --partitions or --resources")
        watcher, resources = _topics_watcher(kafka.within(connect_timeout_s), store_url, group_name)
    requested = requested_definition(
        store_url,
        mode.mode,
        partitions=partitions,
        resources=resources,
        strategy=strategy,
        settle_s=settle_s,
        min_interval_s=min_interval_s,
        heartbeat_s=heartbeat_s,
        ttl_s=ttl_s,
    )
    follower = _replicas_follower(replicas_from, mode, store_url, group_name)
    run_worker(
        store_url,
        group_name,
        member_id(worker_id, mode),
        requested,
        ordinal=mode.ordinal,
        update=update,
        emit=events.emit,
        options=JoinOptions(
            capacity=capacity,
            rack=rack_name(rack),
            replace=replace,
            history_retention_s=history_retention_s,
            subscriptions=None if subscriptions is None else resource_names(subscriptions, "subscribe"),
        ),
        commit_every_s=commit_every,
        connect_timeout_s=connect_timeout_s,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        on_started=_both(follower, watcher),
    )
    if watcher is not None and watcher.error is not None:
        raise watcher.error  # a topic deleted (or the broker gone for good) while the worker ran: exit 1


def _topics_watcher(kafka: KafkaTopics, store_url: str, group_name: str) -> tuple[TopicWatcher, str]:
    """``--kafka``/``--topic``: the topics' partition counts read from the broker, the stored definition grown to
    them (a topic that grew while the group was down), and the watcher that follows them while the worker runs; and
    the topics as ``--resources``. An unreachable broker, refused credentials or an unknown topic: one line, exit 1."""
    from apportion.kafka import TopicWatcher, resources_text, sync_definition, topic_partitions
    from apportion.store import connect

    counts = topic_partitions(kafka.config, kafka.topics)
    store = connect(store_url)
    click.get_current_context().call_on_close(store.close)
    sync_definition(store, group_name, counts)
    watcher = TopicWatcher(kafka.config, kafka.topics, store, group_name)
    click.get_current_context().call_on_close(watcher.stop)
    return watcher, resources_text(counts)


def _both(follower: ReplicasFollower | None, watcher: TopicWatcher | None) -> Callable[[Any], None] | None:
    """One ``on_started`` for the replicas follower and the topic watcher, either of which may be absent."""
    starts = [part.start for part in (follower, watcher) if part is not None]
    if not starts:
        return None

    def started(worker: Any) -> None:
        for start in starts:
            start(worker)

    return started


def _replicas_follower(
    source: str | None, mode: MemberMode, store_url: str, group_name: str
) -> ReplicasFollower | None:
    """``--replicas-from kubernetes``: the follower of this pod's StatefulSet, checked by one read before the worker
    starts (a deployment mistake is one line, exit 2; see apportion.kube); None without the option."""
    if source is None:
        return None
    if not isinstance(mode.mode, Static):
        raise InvalidRequest("replicas-from", f"only with --mode static (this is --mode {mode.mode.name})")
    if mode.hostname is None:
        raise InvalidRequest("replicas-from", "needs the pod's host name: --ordinal-from-hostname or --hostname")
    from apportion.kube import KubernetesReplicas, ReplicasFollower

    replicas = KubernetesReplicas.in_cluster(mode.hostname)
    replicas.read()
    follower = ReplicasFollower(replicas.read, store_url, group_name)
    click.get_current_context().call_on_close(follower.stop)  # however the command ends
    return follower
