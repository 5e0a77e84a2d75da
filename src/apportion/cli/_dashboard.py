"""`apportion dashboard` — a live web page over one group: members, partitions, rounds, the ownership timeline and
recent faults, updated through server-sent events fed by the store's watches (``apportion.web``).

Read-only like ``status``: the store is opened read-only (nothing created, written or expired), an unknown group is
exit 2, the store's password is never shown. Bound to 127.0.0.1 by default: the page has no login, so give
``--host 0.0.0.0`` only on a network you trust. ``--port 0`` takes any free port; the first line printed is the
page's address.
"""

from __future__ import annotations

import errno
import socket

import click

from apportion.cli._app import app, require_extra
from apportion.cli._common import group_option, seconds, store_option
from apportion.cli._store import read_group
from apportion.errors import InvalidRequest
from apportion.store import redact_url


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; InvalidRequest (exit 2) when the port is taken or the address is
    not one of this machine's."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise InvalidRequest("host", f"{host!r}: {exc.strerror}") from exc
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(64)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise InvalidRequest("port", f"{port} is already in use on {host} (try another --port, or 0)") from exc
        raise InvalidRequest("host", f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


@app.command()
@store_option()
@group_option()
@click.option("--host", default="127.0.0.1", help="Address to serve on (the page has no login: keep it local).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, help="Port to serve on (0: any free port).")
@click.option("--refresh", "refresh_s", type=seconds(0.1), default=1.0, help="Re-read at least this often (s).")
@click.option("--window", "window_s", type=seconds(10), default=300.0, help="Timeline span (s).")
def dashboard(store_url: str, group_name: str, host: str, port: int, refresh_s: float, window_s: float) -> None:
    """Serve a live web dashboard of the group (read-only) until Ctrl-C."""
    require_extra("dashboard")
    from apportion.web import Feed, allowed_hosts, serve

    with read_group(store_url, group_name):
        pass  # exit 2 for an unknown store or group, before anything listens
    sock = listen(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    click.echo(
        f"apportion dashboard of group {group_name} on {redact_url(store_url)}: http://{shown}:{bound_port}/ "
        "(Ctrl-C stops)"
    )
    if allowed_hosts(str(bound_host)) == ["*"]:
        warning = f"the page has no login: whoever reaches port {bound_port} here can read it"
        click.echo(f"apportion: warning: {warning}", err=True)
    serve(sock, Feed(store_url, group_name, refresh_s=refresh_s, window_s=window_s).start())
