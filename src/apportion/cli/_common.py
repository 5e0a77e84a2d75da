"""The options several commands share, each declared once with one help text: ``--store``, ``--group``, the timings.

Every decorator takes ``env=True`` for a command whose options also read ``APPORTION_<LONG_NAME>`` from the
environment (``apportion worker``: ``--min-interval`` reads APPORTION_MIN_INTERVAL); :func:`option` is that rule for
any other option. Timing defaults come from :class:`apportion.group.GroupConfig` (the only place they are written).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from apportion.cli._app import remember_url
from apportion.errors import InvalidRequest
from apportion.group import GroupConfig

FC = TypeVar("FC", bound=Callable[..., Any] | click.Command)

ENV_PREFIX = "APPORTION"
STORE_HELP = "Store URL: memory://[name], sqlite:///relative.db, sqlite:////absolute.db, etcd://[user:pw@]host:port"


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
            "--settle", "settle_s", env=env, type=float, default=GroupConfig.DEFAULT_SETTLE_S,
            help="RST: round settle time (s).",
        ),
        option(
            "--min-interval", "min_interval_s", env=env, type=float, default=GroupConfig.DEFAULT_MIN_INTERVAL_S,
            help="MRI: min interval between rounds (s).",
        ),
        option(
            "--heartbeat", "heartbeat_s", env=env, type=float, default=GroupConfig.DEFAULT_HEARTBEAT_S,
            help="HBI: heartbeat round interval (s).",
        ),
        option(
            "--ttl", "ttl_s", env=env, type=float, default=None,
            help=f"Member lease TTL (s); default {GroupConfig.DEFAULT_TTL_S:g}, or 5 on etcd.",
        ),
    ]  # fmt: skip

    def apply(f: FC) -> FC:
        for decorator in reversed(decorators):  # so that --help lists them in this order
            f = decorator(f)
        return f

    return apply


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
    both are given, ``--spark`` is not an ``sc://`` URL or ``--master`` not a Spark master."""
    from apportion.spark import connect_address, validate_master

    if spark_url is None:
        return validate_master(master or default)
    if master is not None:
        raise InvalidRequest(
            "--spark", "give --master (a Spark of this process) or --spark (a shared server), not both"
        )
    connect_address(spark_url)  # sc://host:port, or InvalidRequest
    return spark_url


__all__ = [
    "ENV_PREFIX",
    "STORE_HELP",
    "directory_url",
    "group_option",
    "option",
    "spark_master",
    "spark_options",
    "store_option",
    "timing_options",
]
