"""The dashboard's HTTP face (Starlette on uvicorn): one page, its live state, and ``explain`` on demand.

Routes::

    GET /                      the page (page.html: plain JS and SVG, no external resources)
    GET /api/state             the feed's latest state (JSON)
    GET /api/events            server-sent events: ``event: state`` with the state, at every new version
    GET /api/explain/<p>       apportion explain for partition p (JSON); 400 for a partition the group lacks

Every browser's stream waits on the one :class:`~apportion.web.Feed` (no store call per browser); an explain opens
the store read-only for its one question. The server only reads; nothing here writes to the store.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import AsyncIterator
from importlib import resources
from types import FrameType
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from apportion.errors import ApportionError, InvalidRequest
from apportion.group import explain
from apportion.store import connect, redact, url_secrets
from apportion.web._feed import Feed

KEEPALIVE_S = 10.0  # a comment line this often keeps proxies and the browser from closing an idle stream
EXPLAIN_LIMIT_S = 10.0


def page() -> str:
    """The dashboard's HTML page."""
    return resources.files("apportion.web").joinpath("page.html").read_text(encoding="utf-8")


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


def allowed_hosts(host: str) -> list[str]:
    """The ``Host`` headers the server answers when bound to ``host``: only loopback names when it listens on
    loopback, so that a web page elsewhere cannot read it through a DNS name rebound to 127.0.0.1; any otherwise."""
    return list(LOOPBACK_NAMES) if host in LOOPBACK_NAMES or host.startswith("127.") else ["*"]


def dashboard_app(feed: Feed, hosts: list[str] | None = None) -> Starlette:
    """The ASGI application serving ``feed``'s group; ``hosts``: the ``Host`` headers it answers (default any)."""
    html = page()
    secrets = url_secrets(feed.url)

    async def index(request: Request) -> Response:
        return HTMLResponse(html, headers={"Cache-Control": "no-store"})

    async def state(request: Request) -> Response:
        _, payload = feed.wait_newer(1 << 62, 0.0)  # the latest, without waiting
        return Response(payload, media_type="application/json", headers={"Cache-Control": "no-store"})

    async def events(request: Request) -> Response:
        async def stream() -> AsyncIterator[str]:
            seen = -1
            yield "retry: 1000\n\n"
            while not feed.stopped:  # a stopping server ends its streams: no connection outlives it (see serve)
                version, payload = await anyio.to_thread.run_sync(
                    feed.wait_newer, seen, KEEPALIVE_S, abandon_on_cancel=True
                )
                if feed.stopped:
                    return
                if version == seen:
                    yield ": keep-alive\n\n"
                    continue
                seen = version
                yield f"event: state\nid: {version}\ndata: {payload}\n\n"

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    def ask(partition: str) -> tuple[int, dict[str, Any]]:
        try:
            with connect(feed.url, read_only=True) as store, store.time_limit(EXPLAIN_LIMIT_S):
                return 200, explain(store, feed.group, partition).to_json()
        except InvalidRequest as exc:
            return 400, {"error": redact(str(exc), secrets)}
        except ApportionError as exc:
            return 503, {"error": redact(str(exc), secrets)}

    async def why(request: Request) -> Response:
        # the id as the group names it (digits in a one-resource group, <resource>-<index> in a named one):
        # explain parses and checks it (400 for a partition the group lacks)
        code, body = await anyio.to_thread.run_sync(ask, str(request.path_params["partition"])[:200])
        return JSONResponse(body, status_code=code, headers={"Cache-Control": "no-store"})

    return Starlette(
        routes=[
            Route("/", index),
            Route("/api/state", state),
            Route("/api/events", events),
            Route("/api/explain/{partition}", why),
        ],
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts or ["*"])],
    )


class _Server(uvicorn.Server):
    """uvicorn's server, stopped by SIGINT/SIGTERM as a graceful end: the signal stops the feed, which ends every
    browser's event stream at once, so the shutdown finds no request running (uvicorn would otherwise wait
    ``timeout_graceful_shutdown`` for the streams, then log "Cancel N running task(s)"), and it is not raised again
    after the shutdown (uvicorn re-raises it: a traceback for SIGINT, death by SIGTERM): ``serve`` returns."""

    def __init__(self, config: uvicorn.Config, feed: Feed) -> None:
        super().__init__(config)
        self.feed = feed

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.feed.stop()
        self.force_exit = self.should_exit  # a second signal: stop waiting for anything
        self.should_exit = True


def serve(sock: socket.socket, feed: Feed) -> None:
    """Serve ``feed``'s dashboard on the bound, listening ``sock`` until SIGINT/SIGTERM (then return: a graceful
    stop, browsers connected or not); the feed is closed after. Bound to loopback, it answers only requests addressed
    to a loopback name (``allowed_hosts``)."""
    app = dashboard_app(feed, allowed_hosts(str(sock.getsockname()[0])))
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1, access_log=False)
    server = _Server(config, feed)
    # the server's handler from here on, not only once uvicorn installs it inside run(): a signal before that would
    # interrupt asyncio.run before the server's coroutine starts ("coroutine ... was never awaited")
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, server.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        feed.close()


__all__ = ["allowed_hosts", "dashboard_app", "page", "serve"]
