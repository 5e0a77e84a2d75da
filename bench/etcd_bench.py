"""etcd backend benchmark: txn/s and watch latency p99 on a local single node and a 3-node cluster, as ratios to the
SQLite backend measured in the same run (memory shown for scale).

Run: ``.venv/bin/python bench/etcd_bench.py [--txns N] [--watch-samples N] [--json]``

- txn/s: sequential compare-and-set transactions (``mod_revision == last`` → put), one client, one key.
- watch latency: time from just before a put to the watcher (another thread's stream) receiving its event; p50/p99.
SQLite is measured when its backend exists (``apportion.store._sqlite``); otherwise its ratios are reported as null.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.etcd_server (real servers for benches)

from apportion.errors import ApportionError
from apportion.store import Put, Store, connect, mod_revision_is


def bench_txns(store: Store, count: int) -> float:
    """Sequential CAS transactions per second."""
    key = "/bench/txn"
    last = store.put(key, b"0")
    started = time.perf_counter()
    for i in range(count):
        result = store.txn([mod_revision_is(key, last)], [Put(key, str(i).encode())])
        if not result.succeeded:
            raise RuntimeError("benchmark CAS lost a race it cannot have")
        last = result.revision
    return count / (time.perf_counter() - started)


def bench_watch(store: Store, samples: int) -> dict[str, float]:
    """Watch latency in ms (put issued → event received), p50 and p99."""
    latencies: list[float] = []
    with store.watch("/bench/watch/") as watch:
        for i in range(samples):
            started = time.perf_counter()
            revision = store.put(f"/bench/watch/{i % 16}", b"x")
            deadline = started + 5.0
            seen = False
            while not seen and time.perf_counter() < deadline:
                seen = any(e.revision >= revision for e in watch.wait(1.0))
            if not seen:
                raise RuntimeError(f"watch event for revision {revision} not seen within 5 s")
            latencies.append((time.perf_counter() - started) * 1000)
    cuts = statistics.quantiles(latencies, n=100)
    return {"p50_ms": round(cuts[49], 3), "p99_ms": round(cuts[98], 3)}


def bench_backend(url: str, txns: int, samples: int) -> dict[str, Any]:
    with connect(url) as store:
        return {"txn_per_s": round(bench_txns(store, txns), 1), **bench_watch(store, samples)}


@contextmanager
def etcd_single(workdir: Path) -> Iterator[str]:
    from tests.conftest import etcd_binary
    from tests.etcd_server import EtcdServer

    binary = etcd_binary()
    if binary is None:
        raise SystemExit("etcd is not installed: run scripts/ensure-etcd.sh")
    with EtcdServer.single(binary, workdir / "single") as server:
        yield server.url


@contextmanager
def etcd_cluster(workdir: Path) -> Iterator[str]:
    from tests.conftest import etcd_binary
    from tests.etcd_server import EtcdServer

    binary = etcd_binary()
    if binary is None:
        raise SystemExit("etcd is not installed: run scripts/ensure-etcd.sh")
    with EtcdServer.cluster(binary, workdir / "cluster", n=3) as cluster:
        yield cluster.url


@contextmanager
def sqlite_url(workdir: Path) -> Iterator[str]:
    yield f"sqlite:///{workdir / 'bench.db'}"


@contextmanager
def memory_url(workdir: Path) -> Iterator[str]:
    yield "memory://"


BACKENDS: dict[str, Callable[[Path], Any]] = {
    "memory": memory_url,
    "sqlite": sqlite_url,
    "etcd-single": etcd_single,
    "etcd-3-node": etcd_cluster,
}


def run(txns: int, samples: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="apportion-bench-") as tmp:
        for name, opener in BACKENDS.items():
            try:
                with opener(Path(tmp)) as url:
                    results[name] = bench_backend(url, txns, samples)
            except (ApportionError, ImportError) as exc:  # e.g. the sqlite backend is not written yet
                results[name] = {"error": f"{type(exc).__name__}: {exc}"}
    base = results.get("sqlite", {})
    for name in ("etcd-single", "etcd-3-node"):
        row = results[name]
        ok = "txn_per_s" in row and "txn_per_s" in base
        row["txn_per_s_vs_sqlite"] = round(row["txn_per_s"] / base["txn_per_s"], 3) if ok else None
        row["watch_p99_vs_sqlite"] = round(row["p99_ms"] / base["p99_ms"], 3) if ok else None
    return results


def _ratio(row: dict[str, Any], name: str) -> str:
    if name not in row:
        return ""
    return "n/a" if row[name] is None else str(row[name])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--txns", type=int, default=500)
    parser.add_argument("--watch-samples", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    results = run(args.txns, args.watch_samples)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    header = ("backend", "txn/s", "watch p50 ms", "watch p99 ms", "txn/s / sqlite", "p99 / sqlite")
    print(f"{header[0]:<12} {header[1]:>9} {header[2]:>13} {header[3]:>13} {header[4]:>15} {header[5]:>13}")
    for name, row in results.items():
        if "error" in row:
            print(f"{name:<12} {row['error']}")
            continue
        print(
            f"{name:<12} {row['txn_per_s']:>9} {row['p50_ms']:>13} {row['p99_ms']:>13} "
            f"{_ratio(row, 'txn_per_s_vs_sqlite'):>15} {_ratio(row, 'watch_p99_vs_sqlite'):>13}"
        )


if __name__ == "__main__":
    main()
