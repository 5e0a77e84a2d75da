"""etcd space per commit (issue 27 item 4): how fast apportion's commits grow an etcd database that nobody compacts,
and what compaction + defragmentation give back. The numbers behind README "Running etcd for apportion".

Run: ``.venv/bin/python bench/etcd_space_bench.py [--partitions N] [--commits N] [--checkpoint-bytes N] [--json]``

A real single-node etcd (tests/etcd_server.py, always stopped) and one in-process worker owning ``--partitions``
partitions commit checkpoints of ``--checkpoint-bytes`` (``commit-000042`` padded; a pipeline's checkpoint, offsets
and output paths, is a few hundred) from 8 threads until ``--commits`` were accepted, twice: with the
group's history recording each commit (the default, ``--history-retention 3600``) and without (``0``). For each run:
the database file's growth per commit (``dbSize``, what ``--quota-backend-bytes`` is checked against), then the size
after ``compact`` to the current revision and ``defrag`` (the live data). The extrapolation applies bytes per commit
to a fleet committing ``--fleet-partitions`` partitions every ``--fleet-every`` seconds (issue 27: 16,384 every 5 s).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # for tests.etcd_server (real etcd servers)

from tests.conftest import etcd_binary
from tests.etcd_server import EtcdServer

from apportion.store import connect
from apportion.worker import Group

THREADS = 8


def run(binary: str, partitions: int, commits: int, size: int, retention_s: float) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        EtcdServer.single(binary, Path(tmp) / "etcd") as server,
        connect(server.url) as store,
    ):
        worker = Group(store, "g", partitions).join("w1", history_retention_s=retention_s)
        try:
            if not worker.wait_until_stable(60):
                raise RuntimeError("the worker did not take its partitions within 60 s")
            owned = worker.owned()
            before, revision = server.db_size(), store.revision()
            started = time.monotonic()
            counter = iter(range(commits))
            lock = threading.Lock()

            def commit() -> None:
                while True:
                    with lock:
                        n = next(counter, None)
                    if n is None:
                        return
                    worker.commit(owned[n % len(owned)], f"commit-{n:06d}".ljust(size, "x"))

            threads = [threading.Thread(target=commit) for _ in range(THREADS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - started
            after, revisions = server.db_size(), store.revision() - revision
        finally:
            worker.stop(30)
        server.compact()
        server.defragment()
        live = server.db_size()
    return {
        "checkpoint_bytes": size,
        "history_retention_s": retention_s,
        "commits": commits,
        "revisions": revisions,
        "commits_per_s": round(commits / elapsed),
        "db_bytes_before": before,
        "db_bytes_after": after,
        "bytes_per_commit": round((after - before) / commits),
        "db_bytes_after_compact_defrag": live,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--commits", type=int, default=20_000)
    parser.add_argument("--checkpoint-bytes", type=int, default=13)
    parser.add_argument("--fleet-partitions", type=int, default=16_384)
    parser.add_argument("--fleet-every", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    binary = etcd_binary()
    if binary is None:
        raise SystemExit("etcd is not installed (apt-get install -y etcd-server)")
    rate = args.fleet_partitions / args.fleet_every
    rows = []
    for retention in (3600.0, 0.0):
        row = run(binary, args.partitions, args.commits, args.checkpoint_bytes, retention)
        row["fleet_mb_per_min"] = round(row["bytes_per_commit"] * rate * 60 / 1e6)
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"fleet: {args.fleet_partitions} partitions committed every {args.fleet_every:g} s = {rate:.0f} commits/s")
    print(f"checkpoints of {args.checkpoint_bytes} bytes")
    print("history | commits | commits/s | bytes/commit | fleet MB/min uncompacted | db after -> compact+defrag")
    for r in rows:
        after, live = r["db_bytes_after"] / 1e6, r["db_bytes_after_compact_defrag"] / 1e6
        print(
            f"{r['history_retention_s']:>7g} | {r['commits']:>7} | {r['commits_per_s']:>9} | "
            f"{r['bytes_per_commit']:>12} | {r['fleet_mb_per_min']:>24} | {after:.1f} MB -> {live:.1f} MB"
        )


if __name__ == "__main__":
    main()
