"""A service that owns partitions of a key space and serves the keys it owns; any other key is redirected (307) to
the instance that owns it, found with apportion.Router. Starlette on uvicorn (the `dashboard` extra).

    python aio_service.py --store sqlite:////tmp/keys.db --port 8001
    python aio_service.py --store sqlite:////tmp/keys.db --port 8002
    curl -i http://127.0.0.1:8001/keys/user-42     # 200 from its owner, else 307 to http://127.0.0.1:8002/...
"""

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

import apportion
from apportion.aio import AsyncWorker


def make_app(store_url: str, host: str, port: int) -> Starlette:
    me = f"{host}-{port}"  # the worker id is the address: an owner's id says where to redirect
    loaded: dict[int, dict[str, str]] = {}  # partition -> its keys' data (here: made up when it is assigned)

    async def on_assigned(partitions: list[int]) -> None:
        for p in partitions:
            loaded[p] = {}  # load the partition's data here (awaited: its keys are served once it returns)

    async def on_revoked(partitions: list[int]) -> None:
        for p in partitions:
            loaded.pop(p, None)  # flush what must be kept; the partition is released when this returns

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        with apportion.connect(store_url) as store:
            # Group and Router read the store when they are made: in a thread, not on the event loop
            group = await asyncio.to_thread(apportion.Group, store, "keys", 16, settle_s=0.2, min_interval_s=0.5)
            async with AsyncWorker(group, me, on_assigned, on_revoked, on_lost=on_revoked) as worker:
                await worker.wait_until_stable(timeout_s=30)  # the group's definition is stored, our share claimed
                with await asyncio.to_thread(apportion.Router, store, "keys") as router:
                    app.state.worker, app.state.router = worker, router
                    yield  # serve; on SIGINT/SIGTERM uvicorn returns here and the worker leaves gracefully

    async def get_key(request: Request) -> Response:
        key = request.path_params["key"]
        worker, router = request.app.state.worker, request.app.state.router
        route = router.route(key)  # the key's partition and its owner, from the router's copy: no store call
        if route.partition in worker.owned and route.partition in loaded:
            value = loaded[route.partition].setdefault(key, f"value of {key}")
            epoch = worker.lease(route.partition).epoch
            return JSONResponse({"key": key, "value": value, "partition": route.partition, "epoch": epoch, "by": me})
        if route.owner is None or route.owner == me:  # moving right now: ask the client to retry
            return JSONResponse({"key": key, "partition": route.partition}, 503, headers={"Retry-After": "1"})
        owner_host, _, owner_port = route.owner.rpartition("-")
        return RedirectResponse(f"http://{owner_host}:{owner_port}/keys/{key}", status_code=307)

    return Starlette(routes=[Route("/keys/{key}", get_key)], lifespan=lifespan)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="e.g. sqlite:////tmp/keys.db or etcd://127.0.0.1:2379")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args()
    uvicorn.run(make_app(args.store, args.host, args.port), host=args.host, port=args.port, log_level="warning")
