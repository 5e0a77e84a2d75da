"""The dashboard's update latency and store cost: store change → server-sent event in the browser's stream.

A SQLite store holds a group of 8 partitions; a writer commits a new checkpoint offset to partition 0 (one store
transaction), and K event-stream clients (httpx, as a browser's EventSource reads ``/api/events``) each note when a
state showing that offset arrives. Latency = arrival - commit (one process, one monotonic clock). The feed's
snapshot reads are counted by its state version. K = 1 is the baseline; K = 10 and 1 alternate, medians of 3 runs.

    .venv/bin/python bench/dashboard_bench.py
"""

from __future__ import annotations

import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from apportion.group import GroupConfig
from apportion.group.internals import Keys, encode
from apportion.store import connect
from apportion.web import Feed, dashboard_app

CHANGES = 40


def _serve(feed: Feed) -> tuple[str, uvicorn.Server, threading.Thread]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(dashboard_app(feed), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread


def _client(base: str, seen: dict[int, float], lock: threading.Lock, stop: threading.Event) -> None:
    with httpx.stream("GET", f"{base}/api/events", timeout=30) as stream:
        for line in stream.iter_lines():
            if stop.is_set():
                return
            if not line.startswith("data:"):
                continue
            offset = next(p["offset"] for p in json.loads(line[5:])["partitions"] if p["partition"] == 0)
            if offset is not None:
                with lock:
                    seen.setdefault(offset, time.monotonic())


def run(clients: int, directory: Path) -> dict[str, float]:
    url = f"sqlite:///{directory / f'bench-{clients}-{time.monotonic_ns()}.db'}"
    keys = Keys("g")
    with connect(url) as writer:
        writer.put(keys.resource, encode(GroupConfig(partitions=8).to_json()))
        feed = Feed(url, "g", refresh_s=1.0).start()
        base, server, thread = _serve(feed)
        stop = threading.Event()
        seen: list[dict[int, float]] = [{} for _ in range(clients)]
        locks = [threading.Lock() for _ in range(clients)]
        readers = [
            threading.Thread(target=_client, args=(base, seen[i], locks[i], stop), daemon=True) for i in range(clients)
        ]
        for r in readers:
            r.start()
        time.sleep(1.0)  # every stream open
        version0 = feed.state()["version"]
        started = time.monotonic()
        latencies: list[float] = []
        for i in range(1, CHANGES + 1):
            at = time.monotonic()
            # a checkpoint record of the layout before, under the group's prefix (still read: apportion.group._keys);
            # a member's commit writes beside the prefix and wakes the feed by its history event instead
            writer.put(keys.legacy_commit(0), encode({"checkpoint": json.dumps({"offset": i}), "epoch": 1}))
            deadline = at + 10
            while any(i not in s for s in seen) and time.monotonic() < deadline:
                time.sleep(0.002)
            for s, lock in zip(seen, locks, strict=True):
                with lock:
                    if i in s:
                        latencies.append(s[i] - at)
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        reads = feed.state()["version"] - version0
        stop.set()
        server.should_exit = True
        thread.join(5)
        feed.close()
    latencies.sort()
    return {
        "clients": clients,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1000,
        "delivered": len(latencies) / (clients * CHANGES),
        "reads_per_s": reads / elapsed,
    }


def main() -> None:
    rows: dict[int, list[dict[str, float]]] = {1: [], 10: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(3):
            for k in (1, 10):
                rows[k].append(run(k, Path(tmp)))
    print(f"python {sys.version.split()[0]}; {CHANGES} changes per run, medians of 3 runs (K=1 and K=10 alternate)")
    print("| clients | change → event p50 | p99 | delivered | feed snapshot reads/s |")
    print("|---:|---:|---:|---:|---:|")
    med: dict[int, dict[str, float]] = {}
    for k, runs in rows.items():
        med[k] = {name: statistics.median(r[name] for r in runs) for name in runs[0]}
        m = med[k]
        print(f"| {k} | {m['p50_ms']:.1f} ms | {m['p99_ms']:.1f} ms | {m['delivered']:.0%} | {m['reads_per_s']:.1f} |")
    print(
        f"ratios 10 clients / 1 client: p50 {med[10]['p50_ms'] / med[1]['p50_ms']:.2f}x, "
        f"snapshot reads {med[10]['reads_per_s'] / med[1]['reads_per_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
