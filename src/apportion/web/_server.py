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

import socket
from collections.abc import AsyncIterator
from importlib import resources
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
            while True:
                version, payload = await anyio.to_thread.run_sync(
                    feed.wait_newer, seen, KEEPALIVE_S, abandon_on_cancel=True
                )
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
                return 200, explain(store, feed.group, partition)
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


def serve(sock: socket.socket, feed: Feed) -> None:
    """Serve ``feed``'s dashboard on the bound, listening ``sock`` until SIGINT/SIGTERM; the feed is closed after.
    Bound to loopback, it answers only requests addressed to a loopback name (``allowed_hosts``)."""
    app = dashboard_app(feed, allowed_hosts(str(sock.getsockname()[0])))
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1, access_log=False)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        feed.close()


__all__ = ["allowed_hosts", "dashboard_app", "page", "serve"]
