"""Prometheus metrics for a worker: a tracer adapter (``MetricsTracer(kind, fields)``) that updates a registry.

Needs the optional ``prometheus-client`` (``pip install apportion[metrics]``); importing this module without it
raises :class:`apportion.errors.InvalidRequest` naming the extra. Wire it with ``Group.join(..., tracer=m)`` or
``apportion worker --metrics-port N [--metrics-host ADDR]`` (default 127.0.0.1; port 0 picks a free one and the
worker logs it). Metrics (all labelled ``group`` and ``member``)::

    apportion_owned_partitions        gauge     partitions this member holds now (assigned minus revoked/lost/fenced)
    apportion_rebalances_total        counter   applied plans that changed this member's partitions (revoke or new)
    apportion_rounds_total            counter   plans (rounds) this member applied, each round once
    apportion_commits_total           counter   fenced commits the store accepted
    apportion_fenced_commits_total    counter   commits refused because the epoch was stale
    apportion_lost_total              counter   partitions lost without a graceful revoke (lapse, fenced)
    apportion_handoff_seconds         histogram label ``phase``:
        release: "revoking" -> "released" of the same partitions (on_revoked callback + release txn), measured
                 on this member's clock; it is the giving side of a hand-off
        claim:   the plan that assigns a partition this member does not hold -> "assigned" (waiting for the
                 previous owner's release + the claim txn); rounds mode only (other modes have no plan event)

What the tracer cannot see is not measured: the time between another member's release and our claim across
machines is inside the "claim" phase, so the two phases are not additive.

The same port answers Kubernetes' probes (``serve``; the probes are set by ``set_probes``, ``apportion worker``
passes the worker's ``liveness`` and ``readiness``): ``GET /healthz`` is 200 ``ok`` while the process runs its
worker and the store answers, ``GET /readyz`` 200 ``ok`` once the member is registered and holds its current
assignment; otherwise 503 with the reason as the body (also 503 ``starting`` before the probes are set).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from apportion.clock import SYSTEM_CLOCK, Clock
from apportion.errors import InvalidRequest
from apportion.group import TraceKind

try:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise InvalidRequest("metrics", "prometheus-client is not installed: pip install 'apportion[metrics]'") from exc

HANDOFF_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

Probe = Callable[[], str | None]
"""A health probe: None when healthy, else the reason (the 503's body)."""


def _starting() -> str | None:
    return "starting"


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes arrive every few seconds: no access log on stderr."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class MetricsTracer:
    """Updates Prometheus metrics from a worker's protocol events; thread-safe (commits trace from other threads)."""

    def __init__(
        self, group: str, member: str, *, registry: CollectorRegistry | None = None, clock: Clock | None = None
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._clock = clock or SYSTEM_CLOCK
        self._lock = threading.Lock()
        labels = ("group", "member")
        r = self.registry
        self._owned_gauge = Gauge("apportion_owned_partitions", "Partitions owned now.", labels, registry=r)
        self._rebalances = Counter("apportion_rebalances", "Plans that changed the owned set.", labels, registry=r)
        self._rounds = Counter("apportion_rounds", "Rounds (plans) applied.", labels, registry=r)
        self._commits = Counter("apportion_commits", "Accepted fenced commits.", labels, registry=r)
        self._fenced = Counter("apportion_fenced_commits", "Commits refused: stale epoch.", labels, registry=r)
        self._lost = Counter("apportion_lost", "Partitions lost without a revoke.", labels, registry=r)
        self._handoff = Histogram(
            "apportion_handoff_seconds",
            "Hand-off latency: phase=release (revoking->released), phase=claim (plan->assigned).",
            (*labels, "phase"),
            buckets=HANDOFF_BUCKETS,
            registry=r,
        )
        self._labels = {"group": group, "member": member}
        self._owned: set[int] = set()
        self._revoking: dict[int, float] = {}
        self._wanted: dict[int, float] = {}
        self._last_round: int | None = None
        self._probes: dict[str, Probe] = {"/healthz": _starting, "/readyz": _starting}
        self._owned_gauge.labels(**self._labels).set(0)
        for metric in (self._rebalances, self._rounds, self._commits, self._fenced, self._lost):
            metric.labels(**self._labels)  # export zeros from the start
        # each handler returns nothing; unknown kinds are ignored
        self._handlers = {
            TraceKind.ASSIGNED: self._on_assigned,
            TraceKind.REVOKING: self._on_revoking,
            TraceKind.RELEASED: self._on_released,
            TraceKind.LOST: self._on_lost,
            TraceKind.COMMIT: self._on_commit,
            TraceKind.FENCED: self._on_fenced,
            TraceKind.PLAN: self._on_plan,
            TraceKind.STOPPED: self._on_stopped,
        }

    def __call__(self, kind: TraceKind, fields: Mapping[str, Any]) -> None:
        handler = self._handlers.get(kind)
        if handler is None:
            return
        with self._lock:
            handler(fields, self._clock.now())
            self._owned_gauge.labels(**self._labels).set(len(self._owned))

    def set_probes(self, *, live: Probe, ready: Probe) -> None:
        """What ``/healthz`` (``live``) and ``/readyz`` (``ready``) answer from now on."""
        self._probes = {"/healthz": live, "/readyz": ready}

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Expose ``/metrics``, ``/healthz`` and ``/readyz`` on ``addr``:``port`` (a daemon thread); return the port
        bound (``port=0`` picks a free one). The default address is the loopback: pass ``"0.0.0.0"`` to expose it."""
        metrics = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            probe = self._probes.get(environ.get("PATH_INFO", ""))
            if probe is None:
                return metrics(environ, start_response)  # type: ignore[no-any-return]
            try:
                reason = probe()
            except Exception as exc:  # a probe that fails is a failed probe, never a dead server
                reason = f"probe failed: {exc!r}"
            status = "200 OK" if reason is None else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [("ok" if reason is None else reason).encode() + b"\n"]

        family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0][0]
        server_class = type("_BoundServer", (_Server,), {"address_family": family})
        server: _Server = make_server(addr, port, app, server_class, handler_class=_QuietHandler)
        threading.Thread(target=server.serve_forever, name="apportion-metrics", daemon=True).start()
        return int(server.server_address[1])

    # -- handlers (under the lock) -------------------------------------------------------------------------

    def _parts(self, fields: Mapping[str, Any]) -> list[int]:
        return [int(p) for p in fields.get("partitions", ())]

    def _on_assigned(self, fields: Mapping[str, Any], now: float) -> None:
        for p in self._parts(fields):
            self._owned.add(p)
            started = self._wanted.pop(p, None)
            if started is not None:
                self._handoff.labels(**self._labels, phase="claim").observe(max(0.0, now - started))

    def _on_revoking(self, fields: Mapping[str, Any], now: float) -> None:
        for p in self._parts(fields):
            self._revoking.setdefault(p, now)

    def _on_released(self, fields: Mapping[str, Any], now: float) -> None:
        for p in self._parts(fields):
            self._owned.discard(p)
            started = self._revoking.pop(p, None)
            if started is not None:
                self._handoff.labels(**self._labels, phase="release").observe(max(0.0, now - started))

    def _on_lost(self, fields: Mapping[str, Any], now: float) -> None:
        parts = self._parts(fields)
        for p in parts:
            self._owned.discard(p)
            self._revoking.pop(p, None)
        if parts:
            self._lost.labels(**self._labels).inc(len(parts))

    def _on_commit(self, fields: Mapping[str, Any], now: float) -> None:
        self._commits.labels(**self._labels).inc()

    def _on_fenced(self, fields: Mapping[str, Any], now: float) -> None:
        self._fenced.labels(**self._labels).inc()
        # the partition is reported again through "lost" (reason fenced) at the next step: counted there

    def _on_plan(self, fields: Mapping[str, Any], now: float) -> None:
        rnd = fields.get("round")
        if rnd != self._last_round:
            self._last_round = None if rnd is None else int(rnd)
            self._rounds.labels(**self._labels).inc()
        assigned = {int(p) for p in fields.get("assigned", ())}
        new = sorted(assigned - self._owned)
        revoke = fields.get("revoke") or []
        if new or revoke:
            self._rebalances.labels(**self._labels).inc()
        self._wanted = {p: self._wanted.get(p, now) for p in new}

    def _on_stopped(self, fields: Mapping[str, Any], now: float) -> None:
        self._owned.clear()
        self._revoking.clear()
        self._wanted.clear()


__all__ = ["HANDOFF_BUCKETS", "MetricsTracer", "Probe"]
