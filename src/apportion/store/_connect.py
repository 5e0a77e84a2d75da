"""Choose a backend by URL: ``memory://[name]``, ``sqlite:///path``, ``etcd://host:port[,host:port]``."""

from __future__ import annotations

from apportion.clock import Clock
from apportion.errors import InvalidRequest
from apportion.store._base import Store


def connect(url: str, *, clock: Clock | None = None) -> Store:
    """Open the store named by ``url``. ``clock`` is honoured by backends that keep time themselves (memory)."""
    if not isinstance(url, str) or "://" not in url:
        raise InvalidRequest("url", f"{url!r} is not a store URL (memory://, sqlite:///path, etcd://host:port)")
    scheme = url.split("://", 1)[0].lower()
    if scheme == "memory":
        from apportion.store._memory import open_memory

        return open_memory(url, clock)
    if scheme == "sqlite":
        from apportion.store._sqlite import open_sqlite  # type: ignore[import-not-found,unused-ignore]

        return open_sqlite(url, clock)  # type: ignore[no-any-return,unused-ignore]
    if scheme in ("etcd", "etcds"):
        from apportion.store._etcd import open_etcd  # type: ignore[import-not-found,unused-ignore]

        return open_etcd(url)  # type: ignore[no-any-return,unused-ignore]
    raise InvalidRequest("url", f"unknown store scheme {scheme!r} (use memory://, sqlite:///path or etcd://host:port)")


__all__ = ["connect"]
