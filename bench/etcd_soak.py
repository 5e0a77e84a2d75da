"""The etcd database under a committing fleet, with the settings README "Running etcd for apportion" gives (issue 27):
N real `apportion worker` processes x P partitions committing every 5 s on a 1-node etcd started with
``--auto-compaction-mode=periodic --auto-compaction-retention=1m --quota-backend-bytes=4294967296``; the database size
(``etcd_mvcc_db_total_size_in_bytes``) and its part in use every 30 s for ``--minutes``.

    PYTHONPATH=src:. .venv/bin/python bench/etcd_soak.py [--workers 32] [--partitions 16384] [--minutes 30]

Prints one JSON line per sample (minute, db MB, in use MB, commit lines so far, lost and fenced lines so far).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import httpx
from bench.scale_probe import start_staggered
from tests.etcd_server import EtcdServer

from apportion.fleet import Fleet, worker_args

SETTINGS = ["--auto-compaction-mode=periodic", "--auto-compaction-retention=1m", "--quota-backend-bytes=4294967296"]


def _sizes(client_url: str) -> tuple[float, float]:
    found = {}
    for line in httpx.get(client_url + "/metrics", timeout=30).text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("etcd_mvcc_db_total_size_in_bytes", "etcd_mvcc_db_total_size_in_use_in_bytes"):
            found[name] = float(value) / 1e6
    return found.get("etcd_mvcc_db_total_size_in_bytes", 0.0), found.get("etcd_mvcc_db_total_size_in_use_in_bytes", 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--partitions", type=int, default=16384)
    parser.add_argument("--minutes", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work, EtcdServer.single("/usr/bin/etcd", Path(work) / "etcd",
                                                                  args=SETTINGS) as server:  # fmt: skip
        options = ["--partitions", str(args.partitions), "--commit-every", "5"]
        ids = [f"w{i:02d}" for i in range(args.workers)]
        with Fleet(Path(work) / "logs", worker_args(server.url, "soak", *options), count_only=("commit",)) as fleet:
            start_staggered(fleet, ids, 0.1)
            began = time.monotonic()
            while (minute := (time.monotonic() - began) / 60) <= args.minutes:
                db, in_use = _sizes(server.client_url)
                counts = {k: sum(fleet[w].log.count(k) for w in ids) for k in ("commit", "lost", "fenced")}
                print(json.dumps({"minute": round(minute, 1), "db_mb": round(db, 1), "in_use_mb": round(in_use, 1),
                                  **counts}), flush=True)  # fmt: skip
                time.sleep(30)
            fleet.stop_all(60)


if __name__ == "__main__":
    main()
