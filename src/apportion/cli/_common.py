"""The options several commands share, each declared once with one help text: ``--store``, ``--group``, the timings,
``--mode`` and each mode's options (:func:`member_mode_options`: `apportion worker` and `apportion pipeline run`).
Every float option of every command has the type :class:`Number` (durations: :func:`seconds`): finite and in range.

Every decorator takes ``env=True`` for a command whose options also read ``APPORTION_<LONG_NAME>`` from the
environment (``apportion worker``: ``--min-interval`` reads APPORTION_MIN_INTERVAL); :func:`option` is that rule for
any other option. Timing defaults come from :class:`apportion.group.GroupConfig` (the only place they are written).
"""

from __future__ import annotations

import functools
import math
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from apportion.cli._app import remember_url
from apportion.errors import InvalidRequest
from apportion.group import Coordinator, GroupConfig, Mode, Static
from apportion.group.internals import MAX_SECONDS, POLICIES, mode_named, validate_ordinal
from apportion.group.internals import ordinal_from_hostname as parse_ordinal

FC = TypeVar("FC", bound=Callable[..., Any] | click.Command)
R = TypeVar("R")

ENV_PREFIX = "APPORTION"
STORE_HELP = (
    "Store URL: memory://[name], sqlite:///relative.db, sqlite:////absolute.db, etcd://[user:pw@]host:port, "
    "postgresql://[user:pw@]host:port/database[?schema=NAME]"
)


class Number(click.FloatRange):
    """The type of every float option: a finite number in its range. A plain ``float`` takes ``nan`` and ``inf``, and
    so does a ``FloatRange`` without a maximum (every comparison with ``nan`` is false): ``--refresh nan`` made the
    dashboard spin and ``--window inf`` serve JSON that browsers reject (issue 28). Refused here, from the command
    line, the environment or a config file alike: one line, exit 2."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):  # before the range: nan passes every range
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


def seconds(minimum: float = 0.0, *, positive: bool = False, maximum: float = MAX_SECONDS) -> Number:
    """The type of a duration option: finite, at least ``minimum`` (above it when ``positive``), at most a day."""
    return Number(min=minimum, max=maximum, min_open=positive)


def option(*decls: str, env: bool = False, **kwargs: Any) -> Callable[[FC], FC]:
    """``click.option``; with ``env`` it also reads ``APPORTION_<LONG_NAME>`` (shown in ``--help``)."""
    if env:
        flag = next(d for d in decls if d.startswith("--"))
        kwargs.setdefault("envvar", f"{ENV_PREFIX}_{flag[2:].replace('-', '_').upper()}")
        kwargs.setdefault("show_envvar", True)
    return click.option(*decls, **kwargs)


def store_option(*, env: bool = False) -> Callable[[FC], FC]:
    """``--store URL`` (required): its password, if any, is masked in everything the command prints."""
    return option("--store", "store_url", env=env, required=True, callback=remember_url, help=STORE_HELP)


def group_option(*, env: bool = False) -> Callable[[FC], FC]:
    """``--group NAME`` (required)."""
    return option("--group", "group_name", env=env, required=True, help="Group name.")


def timing_options(*, env: bool = False) -> Callable[[FC], FC]:
    """``--settle``, ``--min-interval``, ``--heartbeat``, ``--ttl``: the group's timings when a command creates it
    (``settle_s``, ``min_interval_s``, ``heartbeat_s``, ``ttl_s``; ``ttl_s`` None: the store's default)."""
    decorators = [
        option(
            "--settle", "settle_s", env=env, type=seconds(positive=True), default=GroupConfig.DEFAULT_SETTLE_S,
            help="RST: round settle time (s).",
        ),
        option(
            "--min-interval", "min_interval_s", env=env, type=seconds(positive=True),
            default=GroupConfig.DEFAULT_MIN_INTERVAL_S,
            help="MRI: min interval between rounds (s).",
        ),
        option(
            "--heartbeat", "heartbeat_s", env=env, type=seconds(positive=True), default=GroupConfig.DEFAULT_HEARTBEAT_S,
            help="HBI: heartbeat round interval (s).",
        ),
        option(
            "--ttl", "ttl_s", env=env, type=seconds(positive=True), default=None,
            help=f"Member lease TTL (s); default {GroupConfig.DEFAULT_TTL_S:g}, or 5 on etcd.",
        ),
    ]  # fmt: skip
    return _stack(decorators)


def _stack(decorators: list[Callable[[FC], FC]]) -> Callable[[FC], FC]:
    """One decorator applying ``decorators`` so that ``--help`` lists their options in this order."""

    def apply(f: FC) -> FC:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return apply


def strategy_option(*, env: bool = False) -> Callable[[FC], FC]:
    """``--strategy NAME`` when the command creates the group (default: ``GroupConfig.default_strategy(mode)``)."""
    return option(
        "--strategy", env=env, default=None, help="Strategy when creating the group [sticky; coordinator: round_robin]."
    )


def mode_option(*, env: bool = False) -> Callable[[FC], FC]:
    """``--mode rounds|coordinator|static`` (default rounds): the group protocol (``apportion.Group``'s ``mode``)."""
    return option(
        "--mode", env=env, type=click.Choice(GroupConfig.MODES), default="rounds", show_default=True,
        help="Protocol: rounds (seed 0), coordinator (seed 1) or static (seed 3).",
    )  # fmt: skip


def max_in_flight_option(*, env: bool = False) -> Callable[[FC], FC]:
    """``--max-in-flight N`` (coordinator mode)."""
    return option(
        "--max-in-flight", env=env, type=int, default=Coordinator.DEFAULT_MAX_IN_FLIGHT, show_default=True,
        help="coordinator: migrations in flight at most.",
    )  # fmt: skip


def min_members_option(*, env: bool = False) -> Callable[[FC], FC]:
    """``--min-members N`` (coordinator mode)."""
    return option(
        "--min-members", env=env, type=int, default=Coordinator.DEFAULT_MIN_MEMBERS, show_default=True,
        help="coordinator: members needed before the table is created.",
    )  # fmt: skip


def first_settle_option(*, env: bool = False) -> Callable[[FC], FC]:
    """``--first-settle SECONDS`` (coordinator mode): the first table's settle time (``Coordinator.first_settle_s``)."""
    return option(
        "--first-settle", "first_settle_s", env=env, type=seconds(positive=True), default=None,
        help=f"coordinator: lay out the first table once no member has registered for this long (s); default "
        f"{Coordinator.DEFAULT_FIRST_SETTLE_S:g}, or --settle when --min-members is above 1.",
    )  # fmt: skip


def rebalance_option(*, env: bool = False) -> Callable[[FC], FC]:
    """``--rebalance automatic|manual`` (coordinator mode)."""
    return option(
        "--rebalance", env=env, type=click.Choice(POLICIES), default=Coordinator.DEFAULT_REBALANCE,
        show_default=True, help="coordinator: re-plan on every membership change, or on `apportion rebalance`.",
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class MemberMode:
    """What ``--mode`` and its options ask for (:func:`member_mode_options`): the group's ``mode`` (a value of
    ``apportion.group``: stored with the definition), and what only this member is: a static member's ``ordinal``
    and ``hostname`` (a pod's name: its default id)."""

    mode: Mode
    ordinal: int | None
    hostname: str | None


def requested_definition(
    store_url: str,
    mode: Mode,
    *,
    partitions: int | None,
    resources: str | None,
    strategy: str | None,
    settle_s: float,
    min_interval_s: float,
    heartbeat_s: float,
    ttl_s: float | None,
) -> GroupConfig | Mode:
    """The definition a member command asks for, checked before the store is opened: a whole ``GroupConfig`` when
    ``--partitions`` or ``--resources`` is given (``GroupConfig.request``: ``--strategy`` defaults to the mode's,
    ``--ttl`` to the store's), else only the mode (the member joins the stored definition)."""
    if partitions is None and resources is None:
        return mode
    return GroupConfig.request(
        store_url, mode, partitions=partitions, resources=resources, strategy=strategy, settle_s=settle_s,
        min_interval_s=min_interval_s, heartbeat_s=heartbeat_s, ttl_s=ttl_s,
    )  # fmt: skip


# each mode's options: (parameter name, the option as typed, the mode it belongs to)
_MODE_PARAMETERS = (
    ("ordinal", "--ordinal", "static"),
    ("hostname", "--hostname", "static"),
    ("ordinal_from_hostname", "--ordinal-from-hostname", "static"),
    ("replicas", "--replicas", "static"),
    ("min_members", "--min-members", "coordinator"),
    ("rebalance", "--rebalance", "coordinator"),
    ("max_in_flight", "--max-in-flight", "coordinator"),
    ("first_settle_s", "--first-settle", "coordinator"),
)


def member_mode_options(*, env: bool = False) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """``--mode`` and every mode's options (static: ``--ordinal``, ``--hostname``, ``--ordinal-from-hostname``,
    ``--replicas``; coordinator: ``--min-members``, ``--rebalance``, ``--max-in-flight``, ``--first-settle``). The
    command receives them
    as one ``mode: MemberMode`` argument, checked by :func:`member_mode`."""
    decorators: list[Callable[[Any], Any]] = [
        mode_option(env=env),
        option("--ordinal", env=env, type=int, default=None, help="static: this member's ordinal (0, 1, ...)."),
        option(
            "--hostname", env=env, default=None,
            help="static: a StatefulSet pod name <name>-<ordinal> (instead of --ordinal).",
        ),
        option(
            "--ordinal-from-hostname", env=env, is_flag=True,
            help="static: read this machine's host name <name>-<ordinal>, as a StatefulSet pod (instead of --ordinal).",
        ),
        option(
            "--replicas", env=env, type=int, default=None,
            help="static: the replica count a new group starts with (default ordinal+1); `apportion scale` sets it.",
        ),
        min_members_option(env=env),
        rebalance_option(env=env),
        max_in_flight_option(env=env),
        first_settle_option(env=env),
    ]  # fmt: skip

    def apply(f: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(f)
        def command(**kwargs: Any) -> R:
            given = {name: kwargs.pop(name) for name in ("mode", *(p[0] for p in _MODE_PARAMETERS))}
            return f(mode=member_mode(click.get_current_context(), **given), **kwargs)

        decorated: Callable[..., R] = _stack(decorators)(command)
        return decorated

    return apply


def member_mode(
    ctx: click.Context,
    *,
    mode: str,
    ordinal: int | None,
    hostname: str | None,
    ordinal_from_hostname: bool,
    replicas: int | None,
    min_members: int,
    rebalance: str,
    max_in_flight: int,
    first_settle_s: float | None,
) -> MemberMode:
    """The options of :func:`member_mode_options` as a :class:`MemberMode`. InvalidRequest (exit 2) for a mode's
    option given (command line, environment or config file) with another ``--mode``, static mode without an
    ordinal, an ordinal or replica count out of range (``MAX_REPLICAS``), and what :func:`static_identity`
    refuses."""
    refuse_other_modes_options(ctx, mode)
    hostname, ordinal = static_identity(hostname, ordinal, from_machine=ordinal_from_hostname)
    if mode == "static":
        if ordinal is None:
            raise InvalidRequest(
                "mode", "static mode needs --ordinal, --hostname name-<ordinal> or --ordinal-from-hostname"
            )
        return MemberMode(Static(replicas), validate_ordinal(ordinal), hostname)
    if mode == "coordinator":
        return MemberMode(Coordinator(min_members, rebalance, max_in_flight, first_settle_s), None, None)
    return MemberMode(mode_named(mode), None, None)


def refuse_other_modes_options(ctx: click.Context, mode: str) -> None:
    """InvalidRequest (exit 2) when the command was given (command line, environment or config file) an option of
    another mode than ``mode``: ``--ordinal`` is static mode's, ``--max-in-flight`` coordinator mode's."""
    for name, flag, owner in _MODE_PARAMETERS:
        if name not in ctx.params or mode == owner or ctx.params[name] is False:
            continue  # a flag is given when it is set (APPORTION_ORDINAL_FROM_HOSTNAME=false sets nothing)
        if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT):
            raise InvalidRequest(flag, f"only with --mode {owner} (this is --mode {mode})")


def static_identity(hostname: str | None, ordinal: int | None, *, from_machine: bool) -> tuple[str | None, int | None]:
    """``(hostname, ordinal)`` from ``--hostname``, ``--ordinal`` or ``--ordinal-from-hostname`` (this machine's host
    name, as a StatefulSet pod reads it); at most one of them. InvalidRequest for a host name that is not
    ``<name>-<ordinal>``."""
    if sum((hostname is not None, ordinal is not None, from_machine)) > 1:
        raise InvalidRequest("hostname", "give one of --ordinal, --hostname and --ordinal-from-hostname")
    if from_machine:
        hostname = socket.gethostname()
    if hostname is not None:
        ordinal = parse_ordinal(hostname)
    return hostname, ordinal


def member_id(worker_id: str | None, mode: MemberMode) -> str:
    """``--id``, or a static member's ``--hostname`` (a pod's name); InvalidRequest when there is neither."""
    found = worker_id or mode.hostname
    if found is None:
        raise InvalidRequest("id", "give --id (or --hostname / --ordinal-from-hostname in static mode)")
    return found


def directory_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The callback of a directory option that takes a path or a ``file://`` URL (→ its absolute path). The
    pipeline's log, output and state directories are read and written both by the worker (offsets, clean-up, the
    stateful fold) and by Spark's executors, so they must be one file system both see at the same path (one machine,
    or a shared mount); a Hadoop URL (``hdfs://``, ``s3a://``) is refused: the worker's own I/O is local file I/O."""
    if value is None:
        return None
    scheme, sep, rest = value.partition("://")
    if not sep or "/" in scheme:
        return value
    if scheme != "file":
        raise click.BadParameter(
            f"{value!r}: only a path or a file:// URL (a directory the worker and Spark's executors both see at the "
            "same path, e.g. a shared mount)"
        )
    host, slash, path = rest.partition("/")
    if host not in ("", "localhost") or not slash:
        raise click.BadParameter(f"{value!r}: a file URL names a local absolute path, file:///dir")
    return "/" + path


def spark_options(default_master: str) -> Callable[[FC], FC]:
    """``--master`` (this process's own Spark: local[N], spark://...) and ``--spark sc://host:port`` (a shared Spark
    Connect server, ``apportion spark serve``: no JVM in this process); at most one. :func:`spark_master` resolves
    them into ``master`` and ``spark_url``."""
    master = option(
        "--master", default=None, help=f"Spark master of this process's own session (default {default_master})."
    )
    spark = option(
        "--spark", "spark_url", default=None, metavar="sc://HOST:PORT",
        help="A shared Spark Connect server (apportion spark serve) instead of a Spark of this process's own.",
    )  # fmt: skip

    def apply(f: FC) -> FC:
        return master(spark(f))

    return apply


def spark_master(master: str | None, spark_url: str | None, default: str) -> str:
    """What ``spark_session`` takes: the ``--spark`` URL, the ``--master``, or ``default``; ``InvalidRequest`` when
    both are given, ``--spark`` is not an ``sc://`` URL or ``--master`` not a Spark master; ``SparkUnavailable`` when
    a ``spark://`` master does not answer within 5 s (before the command starts anything)."""
    from apportion.spark import connect_address, reach_master, validate_master

    if spark_url is None:
        reach_master(validate_master(master or default))
        return master or default
    if master is not None:
        raise InvalidRequest(
            "--spark", "give --master (a Spark of this process) or --spark (a shared server), not both"
        )
    connect_address(spark_url)  # sc://host:port, or InvalidRequest
    return spark_url


__all__ = [
    "ENV_PREFIX",
    "STORE_HELP",
    "MemberMode",
    "Number",
    "directory_url",
    "first_settle_option",
    "group_option",
    "max_in_flight_option",
    "member_id",
    "member_mode",
    "member_mode_options",
    "mode_option",
    "option",
    "refuse_other_modes_options",
    "seconds",
    "requested_definition",
    "spark_master",
    "spark_options",
    "static_identity",
    "store_option",
    "strategy_option",
    "timing_options",
]
