"""`apportion worker` — run one worker of a group; log each assignment change; SIGINT/SIGTERM leave gracefully."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Callable

import click

from apportion.cli._app import app
from apportion.errors import Fenced
from apportion.store import connect
from apportion.worker import Group, Worker


@app.command()
@click.option("--store", "store_url", required=True, help="Store URL: memory://, sqlite:///path, etcd://host:port")
@click.option("--group", "group_name", required=True, help="Group name.")
@click.option("--id", "worker_id", required=True, help="This worker's id (unique in the group).")
@click.option("--partitions", type=int, default=None, help="Partition count (default: the stored definition).")
@click.option("--strategy", default="sticky", help="Assignment strategy when creating/updating the group.")
@click.option("--settle", "settle_s", type=float, default=0.5, help="RST: round settle time (s).")
@click.option("--min-interval", "min_interval_s", type=float, default=1.0, help="MRI: min interval between rounds (s).")
@click.option("--heartbeat", "heartbeat_s", type=float, default=30.0, help="HBI: heartbeat round interval (s).")
@click.option("--ttl", "ttl_s", type=float, default=3.0, help="Member lease TTL (s).")
@click.option("--capacity", type=float, default=1.0, help="Capacity weight of this worker.")
@click.option("--update", is_flag=True, help="Overwrite the stored group definition with these settings.")
@click.option("--commit-every", type=float, default=0.0, help="Commit a checkpoint for owned partitions every N s.")
def worker(
    store_url: str,
    group_name: str,
    worker_id: str,
    partitions: int | None,
    strategy: str,
    settle_s: float,
    min_interval_s: float,
    heartbeat_s: float,
    ttl_s: float,
    capacity: float,
    update: bool,
    commit_every: float,
) -> None:
    """Run a worker until SIGINT/SIGTERM. Each change is one JSON line on stdout
    ({"event": "assigned"|"revoked"|"lost"|"fenced"|"commit", "partitions": [...], "time": t}) and a log line."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")
    store = connect(store_url)
    try:
        group = Group(
            store,
            group_name,
            partitions,
            strategy,
            settle_s=settle_s,
            min_interval_s=min_interval_s,
            heartbeat_s=heartbeat_s,
            ttl_s=ttl_s,
            update=update,
        )
        _run(group, worker_id, capacity, commit_every)
    finally:
        store.close()


def _emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "time": time.time(), **fields}), flush=True)


def _run(group: Group, worker_id: str, capacity: float, commit_every_s: float) -> None:
    stopping = threading.Event()
    holder: list[Worker] = []

    def callback(kind: str) -> Callable[[list[int]], None]:
        def cb(parts: list[int]) -> None:
            _emit(kind, partitions=parts)

        return cb

    def committer() -> None:
        """A stand-in for a pipeline: take the leases, process a batch (``commit_every_s``), commit with the epochs
        taken at the start — so a worker frozen mid-batch commits stale epochs when it resumes (and is Fenced)."""
        n = 0
        leases: dict[int, int] = {}
        while not stopping.wait(commit_every_s):
            if not holder:
                continue
            w = holder[0]
            for p, epoch in sorted(leases.items()):
                n += 1
                try:
                    w.commit(p, f"{worker_id}:{n}", epoch=epoch)
                except Fenced as exc:
                    _emit("fenced", partitions=[p], error=str(exc))
            leases = {}
            for p in w.owned():
                with contextlib.suppress(Fenced):
                    leases[p] = w.lease(p).epoch

    thread = threading.Thread(target=committer, daemon=True)
    if commit_every_s > 0:
        thread.start()
    try:
        group.run(
            worker_id,
            callback("assigned"),
            callback("revoked"),
            callback("lost"),
            capacity=capacity,
            on_started=holder.append,
        )
    finally:
        stopping.set()
        _emit("stopped")
