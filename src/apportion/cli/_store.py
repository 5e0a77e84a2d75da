"""The ``--store`` option every command shares, and the read-only open of a group for the commands that only look."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

from apportion.cli._app import remember_url
from apportion.errors import InvalidRequest
from apportion.group import Keys
from apportion.store import Store
from apportion.store._connect import NoSuchStore, connect, redact_url

FC = TypeVar("FC", bound=Callable[..., Any] | click.Command)

STORE_HELP = "Store URL: memory://[name], sqlite:///relative.db, sqlite:////absolute.db, etcd://[user:pw@]host:port"


def store_option(**kwargs: Any) -> Callable[[FC], FC]:
    """``--store URL`` (required): its password, if any, is masked in everything the command prints."""
    kwargs.setdefault("help", STORE_HELP)
    return click.option("--store", "store_url", required=True, callback=remember_url, **kwargs)


@contextlib.contextmanager
def read_group(url: str, group: str) -> Iterator[Store]:
    """The store opened read-only (nothing created, nothing written), holding ``group``; otherwise
    ``no such group 'g' in <url>`` (InvalidRequest: exit 2)."""
    try:
        store = connect(url, read_only=True)
    except NoSuchStore as exc:
        raise InvalidRequest("", f"no such group {group!r} in {redact_url(url)} ({exc.reason})") from exc
    with store:
        if store.get(Keys(group).resource) is None:
            raise InvalidRequest("", f"no such group {group!r} in {redact_url(url)}")
        yield store


__all__ = ["STORE_HELP", "read_group", "store_option"]
