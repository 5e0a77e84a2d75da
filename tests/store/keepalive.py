"""``KeepAlive``: keep a lease alive from a background thread, on any backend (a test helper: a worker renews its
member lease on its own keepalive thread, ``apportion.worker``).

The contract's ``Store.keepalive`` is explicit; a test that holds a lease for a while starts one of these. It calls
``keepalive`` every ``interval_s`` (default ``store.renew_every_s(ttl)``, the cadence a member renews at) in real
time. When the store
says the lease is gone (``LeaseNotFound``), it sets ``lost``, calls ``on_lost`` once and stops; a store that is
briefly unavailable is retried at the next tick (the lease survives as long as one keepalive lands within its TTL).

States::

    RUNNING --stop()--> STOPPED
    RUNNING --LeaseNotFound--> LOST (``lost`` set, ``on_lost(error)`` called) --> STOPPED
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType

from apportion.errors import InvalidRequest, LeaseNotFound, StoreUnavailable
from apportion.store import Lease, Store
from apportion.store._base import lease_id

log = logging.getLogger(__name__)


class KeepAlive:
    """Refresh ``lease`` on ``store`` every ``interval_s`` seconds until stopped or the lease is lost."""

    def __init__(
        self,
        store: Store,
        lease: Lease,
        *,
        interval_s: float | None = None,
        on_lost: Callable[[LeaseNotFound], None] | None = None,
    ) -> None:
        interval = store.renew_every_s(lease.ttl_s) if interval_s is None else interval_s
        if not interval > 0:
            raise InvalidRequest("interval_s", "must be > 0")
        self.store = store
        self.lease = lease
        self.interval_s = interval
        self.lost = threading.Event()
        self.error: LeaseNotFound | None = None
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"keepalive {lease_id(lease)}", daemon=True)

    def start(self) -> KeepAlive:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop refreshing (the lease then expires after its TTL unless revoked); waits for the thread."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.store.keepalive(self.lease)
            except LeaseNotFound as exc:
                self.error = exc
                self.lost.set()
                if self._on_lost is not None:
                    self._on_lost(exc)
                return
            except StoreUnavailable as exc:
                log.warning("keepalive of lease %d failed, retrying: %s", lease_id(self.lease), exc)

    def __enter__(self) -> KeepAlive:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


__all__ = ["KeepAlive"]
