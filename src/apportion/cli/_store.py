"""The read-only open of a group for the commands that only look (``status``, ``route``, ``explain``, ``report``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from apportion.errors import InvalidRequest
from apportion.group import GroupConfig
from apportion.store import NoSuchStore, Store, connect, redact_url


@contextlib.contextmanager
def read_group(url: str, group: str) -> Iterator[Store]:
    """The store opened read-only (nothing created, nothing written), holding ``group``; otherwise
    ``no such group 'g' in <url>`` (InvalidRequest: exit 2)."""
    try:
        store = connect(url, read_only=True)
    except NoSuchStore as exc:
        raise InvalidRequest("", f"no such group {group!r} in {redact_url(url)} ({exc.reason})") from exc
    with store:
        if GroupConfig.find(store, group) is None:  # a corrupt definition: CorruptRecord naming it (exit 2)
            raise InvalidRequest("", f"no such group {group!r} in {redact_url(url)}")
        yield store


__all__ = ["read_group"]
