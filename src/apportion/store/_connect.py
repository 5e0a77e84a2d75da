"""Choose a backend by URL: ``memory://[name]``, ``sqlite:///path``, ``etcd://host:port[,host:port]``,
``postgresql://user:password@host:port/database[?schema=NAME]`` (also ``postgres://``).

Secrets: a URL may carry ``user:password@`` (``_redact``: the one place that makes a URL printable). :func:`connect`
raises its errors already redacted.
"""

from __future__ import annotations

from apportion.clock import Clock
from apportion.errors import ApportionError, InvalidRequest
from apportion.store._base import Store
from apportion.store._redact import redact, redact_url, url_secrets


def _redacted(exc: ApportionError, url: str) -> ApportionError:
    """``exc`` with its message redacted (the same type; the original is kept as the cause)."""
    secrets = url_secrets(url)
    text = str(exc)
    if redact(text, secrets) == text:
        return exc
    if isinstance(exc, InvalidRequest):
        return type(exc)(exc.field, redact(exc.reason, secrets))
    try:
        return type(exc)(redact(text, secrets))
    except TypeError:
        return ApportionError(redact(text, secrets))


def connect(url: str, *, clock: Clock | None = None, read_only: bool = False) -> Store:
    """Open the store named by ``url``. ``clock`` is honoured by backends that keep time themselves (memory).

    ``read_only``: never create or write anything (``status``, ``explain``, ``route``, ``report``). An SQLite file
    that does not exist raises :class:`~apportion.errors.NoSuchStore` instead of being created, as does a PostgreSQL
    schema (or database) without a store; etcd reads never write, and a ``memory://`` store lives only in this
    process."""
    if not isinstance(url, str) or "://" not in url:
        shown = redact_url(url) if isinstance(url, str) else url
        raise InvalidRequest(
            "url", f"{shown!r} is not a store URL (memory://, sqlite:///path, etcd://host:port, postgresql://host/db)"
        )
    if "\x00" in url:  # no file name, host or option holds one; sqlite3 and the OS raise ValueError for it
        raise InvalidRequest("url", f"{redact_url(url)!r} holds a NUL character")
    scheme = url.split("://", 1)[0].lower()
    try:
        if scheme == "memory":
            from apportion.store._memory import open_memory

            return open_memory(url, clock)
        if scheme == "sqlite":
            from apportion.store._sqlite import open_sqlite  # type: ignore[import-not-found,unused-ignore]

            return open_sqlite(url, clock, read_only=read_only)  # type: ignore[no-any-return,unused-ignore]
        if scheme in ("etcd", "etcds"):
            from apportion.store._etcd import open_etcd  # type: ignore[import-not-found,unused-ignore]

            return open_etcd(url)  # type: ignore[no-any-return,unused-ignore]
        if scheme in ("postgresql", "postgres"):
            try:
                from apportion.store._postgres import open_postgres  # type: ignore[import-not-found,unused-ignore]
            except ImportError as exc:
                raise InvalidRequest(
                    "url", f"a {scheme}:// store needs psycopg: pip install 'apportion[postgres]' ({exc})"
                ) from exc
            return open_postgres(url, read_only=read_only)  # type: ignore[no-any-return,unused-ignore]
    except ApportionError as exc:
        redacted = _redacted(exc, url)
        if redacted is exc:
            raise
        raise redacted from exc.__cause__  # not from exc: its message holds the password
    raise InvalidRequest(
        "url",
        f"unknown store scheme {scheme!r} (use memory://, sqlite:///path, etcd://host:port or postgresql://user@host:port/database)",
    )


def default_ttl_s(url: str) -> float | None:
    """The member lease TTL the backend named by ``url`` asks for (``Store.default_ttl_s``: 5 s on etcd), without
    opening it; None for a backend that asks for none (the group's default applies)."""
    if isinstance(url, str) and url.split("://", 1)[0].lower() in ("etcd", "etcds"):
        from apportion.store._etcd import EtcdStore  # type: ignore[import-not-found,unused-ignore]

        return EtcdStore.default_ttl_s  # type: ignore[no-any-return,unused-ignore]
    return None


__all__ = ["connect", "default_ttl_s"]
