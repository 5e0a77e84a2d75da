"""Router benchmark: routes/s of ``apportion.Router`` (a watch-backed copy of the partition table) against a store
read per route (what ``apportion route`` did before: read the partition's table entry and owner record), in the
same run, on the same group, with the ratio.

Run: ``PYTHONPATH=src .venv/bin/python bench/router_bench.py [--routes N] [--partitions P] [--json]``

The group is a coordinator-mode table written directly (every entry ONLINE, an owner record bound to a live lease,
three registered members), on SQLite (one file, the default store) and on the in-process memory store. Keys are
``order-<i>``; both paths hash them with ``partition_for`` and decode the records the same way, so the difference is
the store read. Each column is the median of ``--repeat`` runs, the two alternating (the machine is shared: load
from other jobs then hits both alike). The Router's follower thread runs meanwhile (nothing changes: it only waits
on its watch, which on SQLite polls the file every 10 ms).
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from apportion import Router
from apportion.group import GroupConfig
from apportion.group.internals import Entry, Keys, TableState, decode, decode_owner, encode
from apportion.routing import partition_for
from apportion.store import Get, Put, Store, connect


def make_group(store: Store, partitions: int) -> None:
    keys = Keys("g")
    lease = store.grant(3600.0)
    members = ["w0", "w1", "w2"]
    ops = [Put(keys.resource, encode(GroupConfig(partitions=partitions, strategy="round_robin").to_json()))]
    ops += [Put(keys.member(m), encode({"capacity": 1.0}), lease.id) for m in members]
    ops.append(Put(keys.coordinator, encode({"member": "w0", "min_members": 3}), lease.id))
    store.txn([], ops)
    for start in range(0, partitions, 100):
        batch: list[Put] = []
        for p in range(start, min(start + 100, partitions)):
            m = members[p % 3]
            batch.append(Put(keys.table(p), encode(Entry(m, None, TableState.ONLINE).to_json())))
            batch.append(Put(keys.epoch(p), b"1"))
            batch.append(Put(keys.owner(p), encode({"epoch": 1, "member": m}), lease.id))
        store.txn([], batch)


def read_per_route(store: Store, partitions: int) -> Callable[[str], tuple[int, str | None, TableState | None]]:
    keys = Keys("g")

    def route(key: str) -> tuple[int, str | None, TableState | None]:
        p = partition_for(key, partitions)
        table, owner = store.txn([], [Get(keys.table(p)), Get(keys.owner(p))]).responses
        assert isinstance(table, list) and isinstance(owner, list)
        entry = Entry.from_json(decode(table[0].value, table[0].key)) if table else None
        if owner:
            decode_owner(owner[0])
        return p, None if entry is None else entry.owner, None if entry is None else entry.state

    return route


def rate(route: Callable[[str], object], keys: list[str]) -> float:
    start = time.perf_counter()
    for k in keys:
        route(k)
    return len(keys) / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routes", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5, help="alternating runs of each; the medians are shown")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    keys = [f"order-{i}" for i in range(args.routes)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, url in (("sqlite", f"sqlite:///{tmp}/bench.db"), ("memory", "memory://router-bench")):
            with connect(url) as store:
                make_group(store, args.partitions)
                per_read = read_per_route(store, args.partitions)
                with Router(store, "g") as router:
                    assert all(tuple(router.route(k)) == per_read(k) for k in keys[:200])  # the same answers
                    cached_runs, read_runs = [], []
                    for _ in range(args.repeat):  # alternated, so that load from other jobs hits both alike
                        cached_runs.append(rate(router.route, keys))
                        read_runs.append(rate(per_read, keys))
                    cached, reading = statistics.median(cached_runs), statistics.median(read_runs)
                rows.append({"store": name, "cached": cached, "read": reading, "ratio": cached / reading})
    if args.json:
        print(json.dumps(rows))
        return 0
    print(
        f"command: PYTHONPATH=src .venv/bin/python bench/router_bench.py --routes {args.routes} "
        f"--partitions {args.partitions}"
    )
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, {args.routes:,} routes per run, "
        f"median of {args.repeat} alternating runs\n"
    )
    print("| store | Router (cached table) | a store read per route | ratio |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['store']} | {r['cached']:,.0f} routes/s | {r['read']:,.0f} routes/s | {r['ratio']:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
