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
    "group_option",
    "option",
    "spark_master",
    "spark_options",
    "store_option",
    "timing_options",
]
