"""`apportion worker` — run one worker of a group; log each assignment change; SIGINT/SIGTERM leave gracefully.

Start-up and a store that cannot be reached (``_StartUp``)::

    OPENING      connect(url), first request, read the group's definition; each attempt bounded by
                 min(1 s, what is left of --connect-timeout)
      --StoreUnavailable--> log "waiting for store <url>: <reason>", pause (0.1 s doubling to 2 s), OPENING again
    REGISTERING  the member's steps until FencedMember._start has registered it (trace "registered"); a step that
                 meets StoreUnavailable is retried by the member itself, logged here like an attempt
    STARTED      from then on the member's lease logic applies: renewal failures, on_lost, registering again; each
                 change is one log line (worker.py logs them; "registered again" is logged here)
    OPENING/REGISTERING --(--connect-timeout passes)--> FAILED: the worker stops, exit 1 with one line
                 "cannot reach the store <url> within N s (--connect-timeout): <reason>"

A live member holding the same id is not a store fault: the member decides about it (refused after 1.5 ttl, exit 2),
whatever --connect-timeout says.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from apportion import events
from apportion.cli._app import app, remember_url
from apportion.cli._store import STORE_HELP
from apportion.errors import Fenced, InvalidRequest, StoreUnavailable
from apportion.group import ordinal_from_hostname
from apportion.group._history import DEFAULT_RETENTION_S
from apportion.store import Store, connect
from apportion.store._connect import redact_url
from apportion.worker import Group, Tracer, Worker

FC = TypeVar("FC", bound=Callable[..., Any] | click.Command)
T = TypeVar("T")

log = logging.getLogger("apportion.worker")

DEFAULT_CONNECT_TIMEOUT_S = 30.0
_FIRST_PAUSE_S = 0.1
_MAX_PAUSE_S = 2.0
_ATTEMPT_S = 1.0


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
    "--connect-timeout",
    "connect_timeout_s",
    type=float,
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
    connect_timeout_s: float,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Run a worker until SIGINT/SIGTERM. Each change is one JSON line on stdout
    ({"event": "assigned"|"revoked"|"lost"|"fenced"|"commit_failed", "partitions": [...], "time": t}) and a log line.

    Every option can also come from the environment (APPORTION_STORE, APPORTION_GROUP, APPORTION_ID, ...) or from
    --config FILE.toml; precedence: command line > environment > file > defaults."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")
    _finite("capacity", capacity, positive=True)
    _finite("commit-every", commit_every, positive=False)
    _finite("connect-timeout", connect_timeout_s, positive=True)
    if hostname is not None:
        if ordinal is not None:
            raise InvalidRequest("hostname", "give either --ordinal or --hostname, not both")
        ordinal = ordinal_from_hostname(hostname)
    worker_id = worker_id or hostname
    if worker_id is None:
        raise InvalidRequest("id", "give --id (or --hostname in static mode)")
    if mode == "static" and (ordinal is None or replicas is None):
        raise InvalidRequest("mode", "static mode needs --replicas and --ordinal or --hostname name-<ordinal>")

    def define(store: Store) -> Group:
        return Group(
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

    if partitions is not None:
        # The whole definition is checked before the store is opened, so a mistyped option never creates a store
        # file: the same constructor against an empty in-memory store (constructing a Group writes nothing).
        with connect("memory://") as scratch:
            define(scratch)
    startup = _StartUp(store_url, worker_id, connect_timeout_s)
    store = startup.attempt(lambda: connect(store_url))
    try:

        def open_group() -> Group:
            store.revision()  # the first request (an etcd store sends none when it is opened)
            return define(store)

        group = startup.attempt(open_group, store)
        tracer = None if metrics_port is None else _metrics(group, worker_id, metrics_port, metrics_host)
        _run(
            group,
            worker_id,
            capacity,
            commit_every,
            tracer,
            history_retention_s=history_retention_s,
            replace=replace,
            startup=startup,
        )
    finally:
        store.close()


class _StartUp:
    """The worker's start-up (states in the module docstring): waits for a store that does not answer, logging
    ``waiting for store <url>: <reason>`` per attempt (and per change of reason), and fails after ``timeout_s``.
    Thread-safe: the member's steps report through :meth:`tracer` on the worker thread."""

    def __init__(self, url: str, worker_id: str, timeout_s: float) -> None:
        self.url = redact_url(url)
        self.worker_id = worker_id
        self.timeout_s = timeout_s
        self.error: StoreUnavailable | None = None
        self._deadline = time.monotonic() + timeout_s
        self._lock = threading.Lock()
        self._registered = threading.Event()
        self._pause = _FIRST_PAUSE_S
        self._next_log = 0.0
        self._reason: str | None = None
        self._last = ""  # the member's last start-up trace: "store_unavailable" or "id_taken"

    def _left(self) -> float:
        return self._deadline - time.monotonic()

    def attempt(self, call: Callable[[], T], store: Store | None = None) -> T:
        """``call()`` until it does not raise StoreUnavailable; each try bounded on ``store`` by min(1 s, what is
        left); after the deadline, StoreUnavailable (exit 1) with the last reason."""
        while True:
            try:
                if store is None:
                    return call()
                with store.time_limit(min(_ATTEMPT_S, max(self._left(), 0.001))):
                    return call()
            except StoreUnavailable as exc:
                pause = self._failed(str(exc))
                if self._left() <= 0:
                    raise self._give_up() from exc
            time.sleep(min(pause, max(self._left(), 0.0)))

    def _failed(self, reason: str) -> float:
        """Log one ``waiting for store`` line when the reason changed or the pause since the last line is over; the
        pause doubles with each line (0.1 s to 2 s). Returns the pause before the next attempt."""
        now = time.monotonic()
        with self._lock:
            pause = self._pause
            if reason != self._reason or now >= self._next_log:
                self._reason = reason
                self._next_log = now + pause
                self._pause = min(pause * 2, _MAX_PAUSE_S)
                log.warning("waiting for store %s: %s", self.url, reason)
        return pause

    def _give_up(self) -> StoreUnavailable:
        return StoreUnavailable(
            f"cannot reach the store {self.url} within {self.timeout_s:g} s (--connect-timeout): "
            f"{self._reason or 'no answer yet'}"
        )

    def tracer(self, inner: Tracer | None) -> Tracer:
        """The member's tracer: notes its registration and, before it, every step that met StoreUnavailable."""

        def trace(kind: str, fields: Mapping[str, Any]) -> None:
            if kind == "registered":
                self._on_registered(fields)
            elif kind in ("store_unavailable", "id_taken") and not self._registered.is_set():
                self._last = kind
                if kind == "store_unavailable":
                    self._failed(str(fields.get("reason") or "the store did not answer"))
            if inner is not None:
                inner(kind, fields)

        return trace

    def _on_registered(self, fields: Mapping[str, Any]) -> None:
        with self._lock:
            if self.error is not None:
                return  # gave up already: the worker is stopping
            again = self._registered.is_set()
            self._registered.set()
        if again:
            log.warning("worker %s registered again (lease %s)", self.worker_id, fields.get("lease"))
        else:
            log.info("worker %s registered with %s (lease %s)", self.worker_id, self.url, fields.get("lease"))

    def watch(self, worker: Worker) -> None:
        """Stop ``worker`` (and fail the command) if it has not registered by the deadline because the store does not
        answer; runs on a daemon thread."""

        def monitor() -> None:
            if self._registered.wait(max(self._left(), 0.0)):
                return
            while not worker.stopped:
                with self._lock:
                    if self._registered.is_set():
                        return
                    if self._last != "id_taken":
                        self.error = self._give_up()
                if self.error is not None:
                    with contextlib.suppress(BaseException):
                        worker.stop(0)  # sets the stop flag; the run loop ends, the worker leaves
                    return
                self._registered.wait(0.2)  # the member decides about a live twin itself

        threading.Thread(target=monitor, name=f"apportion-startup-{self.worker_id}", daemon=True).start()


def _metrics(group: Group, worker_id: str, port: int, host: str = "127.0.0.1") -> Tracer:
    from apportion.metrics import MetricsTracer  # optional extra: raises InvalidRequest when missing

    tracer = MetricsTracer(group.name, worker_id, clock=group.clock)
    where = f"[{host}]" if ":" in host else host
    try:
        bound = tracer.serve(port, host)
    except OSError as exc:
        raise InvalidRequest("metrics-port", f"cannot serve metrics on {where}:{port}: {exc.strerror or exc}") from exc
    log.info("metrics on http://%s:%d/metrics", where, bound)
    return tracer


def _emit(event: str, **fields: object) -> None:
    """One whole event line on stdout (``apportion.events``: safe from the callbacks' and the committer's threads)."""
    events.emit(event, **fields)


def _run(
    group: Group,
    worker_id: str,
    capacity: float,
    commit_every_s: float,
    tracer: Tracer | None = None,
    *,
    history_retention_s: float = DEFAULT_RETENTION_S,
    replace: bool = False,
    startup: _StartUp | None = None,
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

    def started(worker: Worker) -> None:
        holder.append(worker)
        if startup is not None:
            startup.watch(worker)

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
            on_started=started,
            tracer=tracer if startup is None else startup.tracer(tracer),
            history_retention_s=history_retention_s,
            replace=replace,
        )
        if startup is not None and startup.error is not None:
            raise startup.error
    finally:
        stopping.set()
        if thread.is_alive():
            thread.join(10)  # its commit in flight ends before the store is closed
        _emit("stopped")
