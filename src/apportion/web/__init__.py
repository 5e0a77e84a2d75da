"""The live dashboard (``apportion dashboard``): a read-only web page over one group, fed by the store's watches.

``Feed`` follows the group (one per server, whatever the number of browsers) and publishes its state; ``dashboard_app``
is the Starlette application (the page, its state as JSON and server-sent events, ``explain`` on click); ``serve``
runs it on uvicorn. Needs the ``dashboard`` extra (starlette, uvicorn).
"""

from apportion.web._feed import Feed
from apportion.web._server import allowed_hosts, dashboard_app, page, serve

__all__ = ["Feed", "allowed_hosts", "dashboard_app", "page", "serve"]
