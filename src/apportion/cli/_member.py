"""A group member's whole command-line surface, declared once: every command that runs one member of a group in this
process takes it (`apportion worker`, `apportion rabbitmq consume`, `apportion kafka consume`; `apportion pipeline
run` its first part), so what a member can be told is the same everywhere (issue 45.1: `rabbitmq consume` had no
``--replicas-from`` and no ``--metrics-port``, so no probes, and could not run in deploy/kubernetes' StatefulSet).

``@member_options()`` adds, each also read from ``APPORTION_<LONG_NAME>`` and from ``--config FILE.toml``:

    --config        a TOML file of these (and the command's other) options; command line > environment > file
    --store --group --id            where the group is and who this member is (``--id``: default ``--hostname``)
    --partitions    the group's partition count when it is created (``partitions=False``: a command whose count
                    comes from elsewhere, Kafka's topics)
    --strategy --settle --min-interval --heartbeat --ttl     the definition when the member creates the group
    --mode and each mode's options  (``_common.member_mode_options``)
    (``process=False`` stops here, without --config: `apportion pipeline run`, which runs its member its own way)
    --capacity --rack               how this member weighs in the strategies
    --update --replace              rewrite the stored definition; fence a live member with this id
    --history-retention --connect-timeout
    --metrics-port --metrics-host   Prometheus metrics and the probes /healthz, /readyz (the metrics extra)
    --replicas-from kubernetes      static mode: the group's count follows the pod's StatefulSet (``apportion.kube``)

The command receives them as one ``member: MemberArgs`` argument: ``member.id``, ``member.requested()`` (the
definition asked for), ``member.join_options()`` (:class:`apportion.JoinOptions`), ``member.replicas_follower()``
and ``member.process()`` (the keyword arguments :func:`apportion.runner.run_worker` takes for them).
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

import click

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
from apportion.cli._options import rack_name
from apportion.errors import InvalidRequest
from apportion.group import DEFAULT_RETENTION_S, GroupConfig, Mode, Static
from apportion.group.internals import MAX_SECONDS
from apportion.runner import DEFAULT_CONNECT_TIMEOUT_S
from apportion.worker import JoinOptions

if TYPE_CHECKING:
    from apportion.kube import ReplicasFollower

R = TypeVar("R")
MAX_CAPACITY = 1e12  # a capacity is a weight against the others': a larger one only overflows their sum
MAX_RETENTION_S = 30 * MAX_SECONDS  # 30 days of history (about 250 bytes per event in the store)


class ProcessOptions(TypedDict):
    """What ``MemberArgs.process`` gives: keyword arguments of :func:`apportion.runner.run_worker` (typed, so that
    mypy checks them against each command's run where they are spread)."""

    ordinal: int | None
    update: bool
    connect_timeout_s: float
    metrics_port: int | None
    metrics_host: str


@dataclass(frozen=True, slots=True)
class MemberArgs:
    """What :func:`member_options` parsed: one member of one group, as the command line described it."""

    store_url: str
    group_name: str
    worker_id: str | None
    partitions: int | None
    strategy: str | None
    settle_s: float
    min_interval_s: float
    heartbeat_s: float
    ttl_s: float | None
    mode: MemberMode
    # how the member's process runs (``member_options(process=False)``: not declared, these defaults)
    capacity: float = 1.0
    rack: str | None = None
    update: bool = False
    replace: bool = False
    history_retention_s: float = DEFAULT_RETENTION_S
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    replicas_from: str | None = None

    @property
    def id(self) -> str:
        """``--id``, or a static member's ``--hostname`` (InvalidRequest when there is neither)."""
        return member_id(self.worker_id, self.mode)

    def requested(self, resources: str | None = None) -> GroupConfig | Mode:
        """The definition this member asks for (``requested_definition``): the whole ``GroupConfig`` when
        ``--partitions`` (or the command's ``resources``) is given, else only the mode."""
        return requested_definition(
            self.store_url, self.mode.mode, partitions=self.partitions, resources=resources, strategy=self.strategy,
            settle_s=self.settle_s, min_interval_s=self.min_interval_s, heartbeat_s=self.heartbeat_s,
            ttl_s=self.ttl_s,
        )  # fmt: skip

    def join_options(self, **more: Any) -> JoinOptions:
        """How this member takes part (:class:`apportion.JoinOptions`), with the command's ``more`` (subscriptions,
        a revoke timeout)."""
        options = JoinOptions(
            capacity=self.capacity,
            rack=self.rack,
            replace=self.replace,
            history_retention_s=self.history_retention_s,
        )
        options.update(more)  # type: ignore[typeddict-item]
        return options

    def process(self) -> ProcessOptions:
        """The keyword arguments of :func:`apportion.runner.run_worker` (and of the commands' runs built on it) that
        these options decide: ``ordinal``, ``update``, ``connect_timeout_s``, ``metrics_port``, ``metrics_host``."""
        return {
            "ordinal": self.mode.ordinal,
            "update": self.update,
            "connect_timeout_s": self.connect_timeout_s,
            "metrics_port": self.metrics_port,
            "metrics_host": self.metrics_host,
        }

    def replicas_follower(self) -> ReplicasFollower | None:
        """``--replicas-from kubernetes``: the follower of this pod's StatefulSet, checked by one read before the
        member starts (a deployment mistake is one line, exit 2; see apportion.kube), stopped when the command ends;
        None without the option. Its ``start`` is an ``on_started``."""
        if self.replicas_from is None:
            return None
        if not isinstance(self.mode.mode, Static):
            raise InvalidRequest("replicas-from", f"only with --mode static (this is --mode {self.mode.mode.name})")
        if self.mode.hostname is None:
            raise InvalidRequest("replicas-from", "needs the pod's host name: --ordinal-from-hostname or --hostname")
        from apportion.kube import KubernetesReplicas, ReplicasFollower

        replicas = KubernetesReplicas.in_cluster(self.mode.hostname)
        replicas.read()
        follower = ReplicasFollower(replicas.read, self.store_url, self.group_name)
        click.get_current_context().call_on_close(follower.stop)  # however the command ends
        return follower


def _option(*decls: str, **kwargs: Any) -> Callable[[Any], Any]:
    """A member option: it also reads ``APPORTION_<LONG_NAME>`` (``--min-interval``: APPORTION_MIN_INTERVAL)."""
    return option(*decls, env=True, **kwargs)


def member_options(
    *,
    partitions: bool = True,
    partitions_help: str = "Partition count (default: the stored definition).",
    id_help: str = "This member's id",
    process: bool = True,
) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """The member surface (module docstring) as one decorator; the command gets ``member: MemberArgs``. Without
    ``partitions`` the command has no ``--partitions`` (``MemberArgs.partitions`` is None). Without ``process`` only
    who the member is and the definition it requests (``--store`` to the mode's options): a command that runs its
    member its own way (`apportion pipeline run`) has no ``--config``, ``--capacity`` to ``--replicas-from``."""
    member: list[Callable[[Any], Any]] = [
        store_option(env=True),
        group_option(env=True),
        _option("--id", "worker_id", default=None, help=f"{id_help} (unique in the group; default: --hostname)."),
        *([_option("--partitions", type=int, default=None, help=partitions_help)] if partitions else []),
        strategy_option(env=True),
        timing_options(env=True),
        member_mode_options(env=True),
    ]
    if not process:
        return _member_command(member, [f for f in _DEFINITION_FIELDS if f != "partitions" or partitions])
    config = click.option(
        "--config", "config_file", type=click.Path(dir_okay=False), default=None, is_eager=True,
        expose_value=False, callback=_load_config, envvar="APPORTION_CONFIG", show_envvar=True,
        help="A TOML file of these options (keys as the long option names; a [worker] table also works).",
    )  # fmt: skip
    decorators: list[Callable[[Any], Any]] = [
        config,
        *member,
        _option(
            "--capacity", type=Number(min=0, max=MAX_CAPACITY, min_open=True), default=1.0,
            help="Capacity weight of this member.",
        ),
        _option(
            "--rack", default=None,
            help="This member's failure domain (a zone, a host): high_availability puts a partition's standbys on "
            "other racks than its active.",
        ),
        _option("--update", is_flag=True, help="Overwrite the stored group definition with these settings."),
        _option("--replace", is_flag=True, help="Fence a live member with the same --id and take its place."),
        _option(
            "--history-retention", "history_retention_s", type=seconds(maximum=MAX_RETENTION_S),
            default=DEFAULT_RETENTION_S, show_default=True,
            help="Keep the group's history events this long (s); 0 records none.",
        ),
        _option(
            "--connect-timeout", "connect_timeout_s", type=seconds(positive=True), default=DEFAULT_CONNECT_TIMEOUT_S,
            show_default=True,
            help="At start-up, wait this long (s) for the store, logging each attempt, then fail (exit 1).",
        ),
        _option(
            "--metrics-port", type=click.IntRange(0, 65535), default=None,
            help="Serve Prometheus metrics and the probes /healthz, /readyz on this port (0: any free port, logged; "
            "needs the metrics extra).",
        ),
        _option(
            "--metrics-host", default="127.0.0.1", show_default=True,
            help="Address the metrics server binds (0.0.0.0: every interface).",
        ),
        _option(
            "--replicas-from", type=click.Choice(["kubernetes"]), default=None,
            help="static: follow the replica count of this pod's StatefulSet (spec.replicas, read through the API "
            "with the pod's service account; the kubernetes extra), as `apportion scale` sets it.",
        ),
    ]  # fmt: skip
    return _member_command(decorators, [f for f in MemberArgs.__dataclass_fields__ if f != "partitions" or partitions])


# what ``member_options(process=False)`` declares: who the member is and the definition it requests
_DEFINITION_FIELDS = (
    "store_url", "group_name", "worker_id", "partitions", "strategy", "settle_s", "min_interval_s", "heartbeat_s",
    "ttl_s", "mode",
)  # fmt: skip


def _member_command(
    decorators: list[Callable[[Any], Any]], names: list[str]
) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """``decorators`` (the options, in ``--help``'s order) on a command that gets the parameters ``names`` as one
    ``member: MemberArgs``."""

    def apply(f: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(f)
        def command(**kwargs: Any) -> R:
            given = {name: kwargs.pop(name) for name in names}
            given.setdefault("partitions", None)
            if "rack" in given:
                given["rack"] = rack_name(given["rack"])
            return f(member=MemberArgs(**given), **kwargs)

        decorated: Callable[..., R] = command
        for decorator in reversed(decorators):
            decorated = decorator(decorated)
        return decorated

    return apply


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


__all__ = ["MAX_CAPACITY", "MAX_RETENTION_S", "MemberArgs", "member_options"]
