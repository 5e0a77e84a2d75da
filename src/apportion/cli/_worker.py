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
from apportion.errors import Fenced, InvalidRequest
from apportion.group import ordinal_from_hostname
from apportion.store import connect
from apportion.worker import Group, Worker


@app.command()
@click.option("--store", "store_url", required=True, help="Store URL: memory://, sqlite:///path, etcd://host:port")
@click.option("--group", "group_name", required=True, help="Group name.")
@click.option("--id", "worker_id", default=None, help="This worker's id (unique in the group; default: --hostname).")
@click.option("--partitions", type=int, default=None, help="Partition count (default: the stored definition).")
@click.option("--strategy", default=None, help="Strategy when creating the group [sticky; coordinator: round_robin].")
@click.option("--settle", "settle_s", type=float, default=0.5, help="RST: round settle time (s).")
@click.option("--min-interval", "min_interval_s", type=float, default=1.0, help="MRI: min interval between rounds (s).")
@click.option("--heartbeat", "heartbeat_s", type=float, default=30.0, help="HBI: heartbeat round interval (s).")
@click.option("--ttl", "ttl_s", type=float, default=3.0, help="Member lease TTL (s).")
@click.option("--capacity", type=float, default=1.0, help="Capacity weight of this worker.")
@click.option("--update", is_flag=True, help="Overwrite the stored group definition with these settings.")
@click.option("--commit-every", type=float, default=0.0, help="Commit a checkpoint for owned partitions every N s.")
@click.option("--mode", type=click.Choice(["rounds", "coordinator", "static"]), default="rounds", help="Protocol.")
@click.option("--ordinal", type=int, default=None, help="static: this member's ordinal (0..replicas-1).")
@click.option(
    "--hostname", default=None, help="static: a StatefulSet pod name <name>-<ordinal> (instead of --ordinal)."
)
@click.option("--replicas", type=int, default=None, help="static: the replica count.")
@click.option("--min-members", type=int, default=1, help="coordinator: members needed before the table is created.")
@click.option("--rebalance", type=click.Choice(["automatic", "manual"]), default="automatic", help="coordinator.")
@click.option("--max-in-flight", type=int, default=4, help="coordinator: migrations in flight at most.")
def worker(
    store_url: str,
    group_name: str,
    worker_id: str | None,
    partitions: int | None,
    strategy: str | None,
    settle_s: float,
    min_interval_s: float,
    heartbeat_s: float,
    ttl_s: float,
    capacity: float,
    update: bool,
    commit_every: float,
    mode: str,
    ordinal: int | None,
    hostname: str | None,
    replicas: int | None,
    min_members: int,
    rebalance: str,
    max_in_flight: int,
) -> None:
    """Run a worker until SIGINT/SIGTERM. Each change is one JSON line on stdout
    ({"event": "assigned"|"revoked"|"lost"|"fenced"|"commit", "partitions": [...], "time": t}) and a log line."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")
    if hostname is not None:
        if ordinal is not None:
            raise InvalidRequest("hostname", "give either --ordinal or --hostname, not both")
        ordinal = ordinal_from_hostname(hostname)
    worker_id = worker_id or hostname
    if worker_id is None:
        raise InvalidRequest("id", "give --id (or --hostname in static mode)")
    if mode == "static" and (ordinal is None or replicas is None):
        raise InvalidRequest("mode", "static mode needs --replicas and --ordinal or --hostname name-<ordinal>")
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
            mode=mode,
            ordinal=ordinal,
            replicas=replicas,
            min_members=min_members,
            rebalance=rebalance,
            max_in_flight=max_in_flight,
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
