"""`apportion worker` — run one worker of a group; log each assignment change; SIGINT/SIGTERM leave gracefully."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
import threading
import time
import tomllib
from collections.abc import Callable
from typing import Any, TypeVar

import click

from apportion.cli._app import app, remember_url
from apportion.cli._store import STORE_HELP
from apportion.errors import Fenced, InvalidRequest, StoreUnavailable
from apportion.group import ordinal_from_hostname
from apportion.group._history import DEFAULT_RETENTION_S
from apportion.store import connect
from apportion.worker import Group, Tracer, Worker

FC = TypeVar("FC", bound=Callable[..., Any] | click.Command)


ENV_PREFIX = "APPORTION"


def _option(*decls: str, **kwargs: Any) -> Callable[[FC], FC]:
    """A worker option that also reads ``APPORTION_<LONG_NAME>`` (``--min-interval``: APPORTION_MIN_INTERVAL)."""
    flag = next(d for d in decls if d.startswith("--"))
    kwargs.setdefault("envvar", f"{ENV_PREFIX}_{flag[2:].replace('-', '_').upper()}")
    kwargs.setdefault("show_envvar", True)
    return click.option(*decls, **kwargs)


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


def _finite(name: str, value: float, *, positive: bool) -> None:
    """``--capacity``/``--commit-every``: a finite number (``inf`` or ``nan`` would break the arithmetic later)."""
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise InvalidRequest(name, f"must be a finite number {'> 0' if positive else '>= 0'}, got {value}")


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
@_option("--store", "store_url", required=True, callback=remember_url, help=STORE_HELP)
@_option("--group", "group_name", required=True, help="Group name.")
@_option("--id", "worker_id", default=None, help="This worker's id (unique in the group; default: --hostname).")
@_option("--partitions", type=int, default=None, help="Partition count (default: the stored definition).")
@_option("--strategy", default=None, help="Strategy when creating the group [sticky; coordinator: round_robin].")
@_option("--settle", "settle_s", type=float, default=0.5, help="RST: round settle time (s).")
@_option("--min-interval", "min_interval_s", type=float, default=1.0, help="MRI: min interval between rounds (s).")
@_option("--heartbeat", "heartbeat_s", type=float, default=30.0, help="HBI: heartbeat round interval (s).")
@_option("--ttl", "ttl_s", type=float, default=None, help="Member lease TTL (s); default 3, or 5 on etcd.")
@_option("--capacity", type=float, default=1.0, help="Capacity weight of this worker.")
@_option("--update", is_flag=True, help="Overwrite the stored group definition with these settings.")
@_option("--replace", is_flag=True, help="Fence a live member with the same --id and take its place.")
@_option("--commit-every", type=float, default=0.0, help="Commit a checkpoint for owned partitions every N s.")
@_option("--mode", type=click.Choice(["rounds", "coordinator", "static"]), default="rounds", help="Protocol.")
@_option("--ordinal", type=int, default=None, help="static: this member's ordinal (0..replicas-1).")
@_option("--hostname", default=None, help="static: a StatefulSet pod name <name>-<ordinal> (instead of --ordinal).")
@_option("--replicas", type=int, default=None, help="static: the replica count.")
@_option("--min-members", type=int, default=1, help="coordinator: members needed before the table is created.")
@_option("--rebalance", type=click.Choice(["automatic", "manual"]), default="automatic", help="coordinator.")
@_option("--max-in-flight", type=int, default=4, help="coordinator: migrations in flight at most.")
@_option(
    "--history-retention",
    "history_retention_s",
    type=click.FloatRange(min=0),
    default=DEFAULT_RETENTION_S,
    show_default=True,
    help="Keep the group's history events this long (s); 0 records none.",
)
@_option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on this port (needs the metrics extra).",
)
def worker(
    store_url: str,
    group_name: str,
    worker_id: str | None,
    partitions: int | None,
    strategy: str | None,
    settle_s: float,
    min_interval_s: float,
    heartbeat_s: float,
    ttl_s: float | None,
    capacity: float,
    update: bool,
    replace: bool,
    commit_every: float,
    mode: str,
    ordinal: int | None,
    hostname: str | None,
    replicas: int | None,
    min_members: int,
    rebalance: str,
    max_in_flight: int,
    history_retention_s: float,
    metrics_port: int | None,
) -> None:
    """Run a worker until SIGINT/SIGTERM. Each change is one JSON line on stdout
    ({"event": "assigned"|"revoked"|"lost"|"fenced"|"commit_failed", "partitions": [...], "time": t}) and a log line.

    Every option can also come from the environment (APPORTION_STORE, APPORTION_GROUP, APPORTION_ID, ...) or from
    --config FILE.toml; precedence: command line > environment > file > defaults."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")
    _finite("capacity", capacity, positive=True)
    _finite("commit-every", commit_every, positive=False)
    if hostname is not None:
        if ordinal is not None:
            raise InvalidRequest("hostname", "give either --ordinal or --hostname, not both")
        ordinal = ordinal_from_hostname(hostname)
    worker_id = worker_id or hostname
    if worker_id is None:
        raise InvalidRequest("id", "give --id (or --hostname in static mode)")
    if mode == "static" and (ordinal is None or replicas is None):
        raise InvalidRequest("mode", "static mode needs --replicas and --ordinal or --hostname name-<ordinal>")
    store = connect(store_url)
    try:
        group = Group(
            store,
            group_name,
            partitions,
            strategy,
            settle_s=settle_s,
            min_interval_s=min_interval_s,
            heartbeat_s=heartbeat_s,
            ttl_s=ttl_s,
            update=update,
            mode=mode,
            ordinal=ordinal,
            replicas=replicas,
            min_members=min_members,
            rebalance=rebalance,
            max_in_flight=max_in_flight,
        )
        tracer = None if metrics_port is None else _metrics(group, worker_id, metrics_port)
        _run(
            group,
            worker_id,
            capacity,
            commit_every,
            tracer,
            history_retention_s=history_retention_s,
            replace=replace,
        )
    finally:
        store.close()


def _metrics(group: Group, worker_id: str, port: int) -> Tracer:
    from apportion.metrics import MetricsTracer  # optional extra: raises InvalidRequest when missing

    tracer = MetricsTracer(group.name, worker_id, clock=group.clock)
    try:
        tracer.serve(port)
    except OSError as exc:
        raise InvalidRequest("metrics-port", f"cannot serve metrics on port {port}: {exc.strerror or exc}") from exc
    logging.getLogger("apportion.worker").info("metrics on http://0.0.0.0:%d/metrics", port)
    return tracer


_EMIT_LOCK = threading.Lock()


def _emit(event: str, **fields: object) -> None:
    """One whole JSON line per event: the callbacks and the committer emit from different threads, and ``print``
    writes the text and its newline separately, so unguarded lines could interleave and be lost to a reader."""
    line = json.dumps({"event": event, "time": time.time(), **fields}) + "\n"
    with _EMIT_LOCK:
        sys.stdout.write(line)
        sys.stdout.flush()


def _run(
    group: Group,
    worker_id: str,
    capacity: float,
    commit_every_s: float,
    tracer: Tracer | None = None,
    *,
    history_retention_s: float = DEFAULT_RETENTION_S,
    replace: bool = False,
) -> None:
    stopping = threading.Event()
    holder: list[Worker] = []

    def callback(kind: str) -> Callable[[list[int]], None]:
        def cb(parts: list[int]) -> None:
            _emit(kind, partitions=parts)

        return cb

    def committer() -> None:
        """A stand-in for a pipeline: take the leases, process a batch (``commit_every_s``), commit with the epochs
        taken at the start — so a worker frozen mid-batch commits stale epochs when it resumes (and is Fenced).
        A commit the store could not take (``StoreUnavailable``) is reported and retried with the next batch: the
        thread must outlive a slow or restarting store, or the worker would silently stop committing."""
        n = 0
        leases: dict[int, int] = {}
        while not stopping.wait(commit_every_s):
            if not holder:
                continue
            w = holder[0]
            retry: dict[int, int] = {}
            for p, epoch in sorted(leases.items()):
                n += 1
                try:
                    w.commit(p, f"{worker_id}:{n}", epoch=epoch)
                except Fenced as exc:
                    _emit("fenced", partitions=[p], error=str(exc))
                except StoreUnavailable as exc:
                    _emit("commit_failed", partitions=[p], error=str(exc))
                    retry[p] = epoch
            leases = retry
            for p in w.owned():
                with contextlib.suppress(Fenced):
                    leases.setdefault(p, w.lease(p).epoch)

    thread = threading.Thread(target=committer, daemon=True)
    if commit_every_s > 0:
        thread.start()
    try:
        group.run(
            worker_id,
            callback("assigned"),
            callback("revoked"),
            callback("lost"),
            capacity=capacity,
            on_started=holder.append,
            tracer=tracer,
            history_retention_s=history_retention_s,
            replace=replace,
        )
    finally:
        stopping.set()
        if thread.is_alive():
            thread.join(10)  # its commit in flight ends before the store is closed
        _emit("stopped")
