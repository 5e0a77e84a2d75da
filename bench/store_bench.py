"""Store benchmark: CAS txn/s per backend (1 process and 4 processes) against a raw ``sqlite3`` loop doing the same
transactions, and watch latency p50/p99 (writer in the same process, and in another process); etcd (a single node
and a 3-node cluster, real servers started with tests/etcd_server.py and always stopped) as ratios to SQLite.

Run: ``.venv/bin/python bench/store_bench.py [--txns N] [--watch-samples N] [--json]``

- txn/s: sequential compare-and-set transactions, ``txn([mod_revision == last], [put(key, i)])``, one key per
  process; with 4 processes the rate is the total over the wall time from a common start to the last finisher.
- raw sqlite3: the same transaction by hand on a minimal schema: ``BEGIN IMMEDIATE``; read the key's mod revision;
  compare; bump a global revision row; ``INSERT OR REPLACE`` the key; ``COMMIT`` (WAL, synchronous=NORMAL, like the
  backend). The backend additionally checks lease expiry and appends the change to its event history.
- watch latency: a writer puts ``time.time()`` every ~3.7 ms; the watcher (a thread here) reads its event and records
  now - that time. "other process" puts from a spawned process (the SQLite watch polls every 10 ms).

- etcd: ``etcd`` from PATH or /usr/bin/etcd; when it is missing the etcd rows are skipped (``--no-etcd`` skips them
  too). The ratios table divides each etcd figure by the SQLite backend's figure from the same run.

- postgresql: a fresh PostgreSQL server (``tests/postgres_server.py``: initdb in a temp dir, fsync and synchronous
  commit ON, as in production; always stopped) when Debian's postgresql is installed (``--no-postgres`` skips it).
  Its "x raw" columns divide by raw psycopg on the SAME server, not by raw sqlite3: ``BEGIN``; ``SELECT
  mod_revision ... FOR UPDATE``; compare; ``UPDATE meta SET revision = revision + 1 RETURNING revision``; ``UPDATE
  kv``; ``COMMIT`` (the raw sqlite3 loop's transaction, by hand), measured in turns with the backend (``ROUNDS``
  turns of ``txns / ROUNDS`` each: backend, raw, backend, raw, ...; a shared disk's flush cost moves by 5x between
  minutes, so loops measured one after the other disagree). A third figure, one autocommit statement ``UPDATE kv ...
  WHERE key = %s AND mod_revision = %s`` (a CAS without a global revision, no history), shows the floor.

Adding a backend: add a function ``url_factory(directory) -> context manager yielding a URL`` to ``BACKENDS``
with ``multi_process=True`` if separate processes can share it. Every column is measured through ``connect(url)``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # for tests.etcd_server (real etcd servers)

from tests.conftest import etcd_binary, postgres_bin
from tests.etcd_server import EtcdServer

from apportion.store import Put, connect, mod_revision_is

SPAWN = multiprocessing.get_context("spawn")
PROCESSES = 4
ROUNDS = 3  # postgresql: turns of the backend and raw psycopg, alternately


@dataclass(frozen=True)
class Backend:
    name: str
    url_factory: Callable[[Path], AbstractContextManager[str]]
    multi_process: bool  # can separate processes share one store at this URL?


@contextmanager
def memory_url(directory: Path) -> Iterator[str]:
    yield f"memory://bench-{uuid.uuid4().hex}"


@contextmanager
def sqlite_url(directory: Path) -> Iterator[str]:
    yield f"sqlite:///{directory / f'bench-{uuid.uuid4().hex}.db'}?timeout=30"


def _etcd() -> str:
    binary = etcd_binary()
    if binary is None:
        raise SystemExit("etcd is not installed: run scripts/ensure-test-tools.sh, or pass --no-etcd")
    return binary


@contextmanager
def etcd_single_url(directory: Path) -> Iterator[str]:
    with EtcdServer.single(_etcd(), directory / f"etcd-{uuid.uuid4().hex}") as server:
        yield server.url


@contextmanager
def etcd_cluster_url(directory: Path) -> Iterator[str]:
    with EtcdServer.cluster(_etcd(), directory / f"etcd-{uuid.uuid4().hex}", n=3) as cluster:
        yield cluster.url


@contextmanager
def postgres_url(directory: Path) -> Iterator[str]:
    from tests.postgres_server import PostgresServer

    bin_dir = postgres_bin()
    if bin_dir is None:
        raise SystemExit("PostgreSQL is not installed: run scripts/ensure-test-tools.sh, or pass --no-postgres")
    with PostgresServer.start_new(bin_dir, durable=True) as server:
        yield server.url(server.create_database("bench"))


BACKENDS = [
    Backend("memory", memory_url, multi_process=False),
    Backend("sqlite", sqlite_url, multi_process=True),
    Backend("etcd single node", etcd_single_url, multi_process=True),
    Backend("etcd 3-node cluster", etcd_cluster_url, multi_process=True),
    Backend("postgresql", postgres_url, multi_process=True),
]
ETCD = ("etcd single node", "etcd 3-node cluster")
POSTGRES = "postgresql"


# -- CAS transactions --------------------------------------------------------------------------------------------


def cas_loop(url: str, key: str, count: int) -> float:
    """``count`` sequential CAS transactions on ``key``; returns the elapsed seconds."""
    with connect(url) as store:
        last = store.put(key, b"0")
        started = time.perf_counter()
        for i in range(count):
            result = store.txn([mod_revision_is(key, last)], [Put(key, str(i).encode())])
            if not result.succeeded:
                raise RuntimeError(f"benchmark CAS on {key} lost a race it cannot have")
            last = result.revision
        return time.perf_counter() - started


RAW_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS meta (id INTEGER PRIMARY KEY, revision INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO meta VALUES (0, 0)",
    "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB, mod_revision INTEGER) WITHOUT ROWID",
]


def raw_url(directory: Path) -> str:
    path = directory / f"raw-{uuid.uuid4().hex}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    for statement in RAW_SCHEMA:
        conn.execute(statement)
    conn.close()
    return str(path)


def raw_cas_loop(path: str, key: str, count: int) -> float:
    """The same CAS transactions with bare sqlite3."""
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("BEGIN IMMEDIATE")
    revision = conn.execute("SELECT revision FROM meta WHERE id = 0").fetchone()[0] + 1
    conn.execute("UPDATE meta SET revision = ? WHERE id = 0", (revision,))
    conn.execute("INSERT OR REPLACE INTO kv VALUES (?, ?, ?)", (key, b"0", revision))
    conn.execute("COMMIT")
    last = revision
    started = time.perf_counter()
    for i in range(count):
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT mod_revision FROM kv WHERE key = ?", (key,)).fetchone()
        if row is None or row[0] != last:
            raise RuntimeError("raw CAS lost a race it cannot have")
        revision = conn.execute("SELECT revision FROM meta WHERE id = 0").fetchone()[0] + 1
        conn.execute("UPDATE meta SET revision = ? WHERE id = 0", (revision,))
        conn.execute("INSERT OR REPLACE INTO kv VALUES (?, ?, ?)", (key, str(i).encode(), revision))
        conn.execute("COMMIT")
        last = revision
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


PG_RAW_SCHEMA = """
CREATE SCHEMA IF NOT EXISTS raw;
CREATE TABLE IF NOT EXISTS raw.meta (id integer PRIMARY KEY, revision bigint NOT NULL);
INSERT INTO raw.meta VALUES (0, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS raw.kv (key text PRIMARY KEY, value bytea NOT NULL, mod_revision bigint NOT NULL)
"""


def pg_raw_cas_loop(url: str, key: str, count: int) -> float:
    """The same CAS transactions with bare psycopg on the same server: the global revision bumped under its row lock
    (the raw sqlite3 loop's transaction)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PG_RAW_SCHEMA)
        conn.execute("INSERT INTO raw.kv VALUES (%s, '0', 0) ON CONFLICT (key) DO UPDATE SET mod_revision = 0", (key,))
        conn.autocommit = False
        last = 0
        started = time.perf_counter()
        for i in range(count):
            row = conn.execute("SELECT mod_revision FROM raw.kv WHERE key = %s FOR UPDATE", (key,)).fetchone()
            if row is None or row[0] != last:
                raise RuntimeError("raw CAS lost a race it cannot have")
            revision = conn.execute("UPDATE raw.meta SET revision = revision + 1 WHERE id = 0 RETURNING revision")
            last = revision.fetchone()[0]  # type: ignore[index]
            conn.execute("UPDATE raw.kv SET value = %s, mod_revision = %s WHERE key = %s", (str(i).encode(), last, key))
            conn.commit()
        return time.perf_counter() - started


def pg_raw_update_loop(url: str, key: str, count: int) -> float:
    """The floor: one autocommit ``UPDATE ... WHERE mod_revision = last`` per CAS (no global revision, no history)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PG_RAW_SCHEMA)
        conn.execute("INSERT INTO raw.kv VALUES (%s, '0', 0) ON CONFLICT (key) DO UPDATE SET mod_revision = 0", (key,))
        started = time.perf_counter()
        for i in range(count):
            done = conn.execute(
                "UPDATE raw.kv SET value = %s, mod_revision = mod_revision + 1 WHERE key = %s AND mod_revision = %s",
                (str(i).encode(), key, i),
            )
            if done.rowcount != 1:
                raise RuntimeError("raw CAS lost a race it cannot have")
        return time.perf_counter() - started


def _child(loop: Callable[[str, str, int], float], target: str, key: str, count: int, start: Any, done: Any) -> None:
    start.wait()
    began = time.time()
    loop(target, key, count)
    done.put((began, time.time()))


def parallel_rate(loop: Callable[[str, str, int], float], target: str, count: int) -> float:
    """Total txn/s of ``PROCESSES`` spawned processes running ``loop`` on their own keys from a common start."""
    start = SPAWN.Event()
    done = SPAWN.Queue()
    workers = [
        SPAWN.Process(target=_child, args=(loop, target, f"/bench/p{i}", count, start, done)) for i in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    time.sleep(1.5)  # let the interpreters import before the common start
    start.set()
    spans = [done.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join(60)
        if worker.exitcode != 0:
            raise RuntimeError(f"a benchmark process failed (exit code {worker.exitcode})")
    wall = max(end for _, end in spans) - min(begin for begin, _ in spans)
    return float(PROCESSES * count / wall)


# -- watch latency -----------------------------------------------------------------------------------------------


def timestamp_writer(url: str, samples: int, ready: Any) -> None:
    with connect(url) as store:
        ready.wait()
        for i in range(samples):
            store.put(f"/bench/watch/{i % 16}", repr(time.time()).encode())
            time.sleep(0.0037)


def watch_latency(url: str, samples: int, other_process: bool) -> dict[str, float]:
    latencies: list[float] = []
    with connect(url) as store, store.watch("/bench/watch/") as watch:

        def consume() -> None:
            deadline = time.monotonic() + 60 + samples * 0.05
            while len(latencies) < samples and time.monotonic() < deadline:
                for event in watch.wait(0.5):
                    latencies.append((time.time() - float(event.kv.value)) * 1000)

        consumer = threading.Thread(target=consume)
        consumer.start()
        if other_process:
            ready = SPAWN.Event()
            writer = SPAWN.Process(target=timestamp_writer, args=(url, samples, ready))
            writer.start()
            ready.set()
            writer.join(600)
        else:
            local_ready = threading.Event()
            local_ready.set()
            timestamp_writer(url, samples, local_ready)
        consumer.join()
    if len(latencies) < samples:
        raise RuntimeError(f"watch saw {len(latencies)} of {samples} events")
    cuts = statistics.quantiles(latencies, n=100)
    return {"p50_ms": round(cuts[49], 2), "p99_ms": round(cuts[98], 2)}


# -- the run -----------------------------------------------------------------------------------------------------


def measure(backend: Backend, directory: Path, txns: int, watch_samples: int) -> dict[str, Any]:
    row: dict[str, Any] = {"backend": backend.name}
    with backend.url_factory(directory) as url:
        if backend.name == POSTGRES:  # against its raw peer, bare psycopg on the same server, in turns
            row.update(pg_in_turns(url, txns))
        else:
            row["txn_per_s_1p"] = round(txns / cas_loop(url, "/bench/one", txns))
            row["txn_per_s_4p"] = round(parallel_rate(cas_loop, url, txns)) if backend.multi_process else None
        row["watch_same_process"] = watch_latency(url, watch_samples, other_process=False)
        row["watch_other_process"] = (
            watch_latency(url, watch_samples, other_process=True) if backend.multi_process else None
        )
    return row


def pg_in_turns(url: str, txns: int) -> dict[str, Any]:
    """The backend and raw psycopg's txn loop on the same server in ``ROUNDS`` turns of ``txns / ROUNDS`` each
    (backend, raw, backend, raw, ...), so both see the same phases of a shared disk whose flush cost moves by 5x
    between minutes; the rates are totals over the turns, with each turn's ratio beside them."""
    per = max(1, txns // ROUNDS)
    seconds = {"backend_1p": 0.0, "raw_1p": 0.0, "backend_4p": 0.0, "raw_4p": 0.0}
    turns: list[dict[str, float]] = []
    for turn in range(ROUNDS):
        one = {
            "backend_1p": cas_loop(url, f"/bench/one-{turn}", per),
            "raw_1p": pg_raw_cas_loop(url, f"/bench/raw-one-{turn}", per),
            "backend_4p": PROCESSES * per / parallel_rate(cas_loop, url, per),
            "raw_4p": PROCESSES * per / parallel_rate(pg_raw_cas_loop, url, per),
        }
        for name, value in one.items():
            seconds[name] += value
        turns.append({
            "ratio_1p": round(one["raw_1p"] / one["backend_1p"], 2),
            "ratio_4p": round(one["raw_4p"] / one["backend_4p"], 2),
        })  # fmt: skip
    rate = {name: round((PROCESSES if name.endswith("4p") else 1) * per * ROUNDS / value)
            for name, value in seconds.items()}  # fmt: skip
    return {
        "txn_per_s_1p": rate["backend_1p"],
        "txn_per_s_4p": rate["backend_4p"],
        "turns": turns,
        "raw": {
            "txn_per_s_1p": rate["raw_1p"],
            "txn_per_s_4p": rate["raw_4p"],
            "update_per_s_1p": round(txns / pg_raw_update_loop(url, "/bench/upd-one", txns)),
            "update_per_s_4p": round(parallel_rate(pg_raw_update_loop, url, txns)),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--txns", type=int, default=20_000, help="CAS transactions per process")
    parser.add_argument("--watch-samples", type=int, default=1_000)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--no-etcd", action="store_true", help="skip the etcd rows")
    parser.add_argument("--no-postgres", action="store_true", help="skip the postgresql row")
    parser.add_argument("--only", help="comma-separated backend names to run (sqlite always runs: the reference)")
    args = parser.parse_args()
    backends = [b for b in BACKENDS if b.name not in ETCD or not (args.no_etcd or etcd_binary() is None)]
    if args.no_postgres or postgres_bin() is None:
        backends = [b for b in backends if b.name != POSTGRES]
    if args.only:
        wanted = {"sqlite", *(name.strip() for name in args.only.split(","))}
        backends = [b for b in backends if b.name in wanted]
    command = ".venv/bin/python bench/store_bench.py " + " ".join(sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="store-bench-") as name:
        directory = Path(name)
        raw = {
            "txn_per_s_1p": round(args.txns / raw_cas_loop(raw_url(directory), "/bench/one", args.txns)),
            "txn_per_s_4p": round(parallel_rate(raw_cas_loop, raw_url(directory), args.txns)),
        }
        rows = [measure(backend, directory, args.txns, args.watch_samples) for backend in backends]
    for row in rows:
        reference = row.get("raw", raw)  # postgresql: raw psycopg on the same server
        for column in ("txn_per_s_1p", "txn_per_s_4p"):
            row[f"ratio_{column[-2:]}_to_raw"] = round(row[column] / reference[column], 2) if row[column] else None
    sqlite_row = next(row for row in rows if row["backend"] == "sqlite")
    ratios = [etcd_ratios(row, sqlite_row) for row in rows if row["backend"] in ETCD]
    if args.json:
        print(json.dumps({"command": command.strip(), "raw_sqlite3": raw, "backends": rows, "etcd_to_sqlite": ratios},
                         indent=2))  # fmt: skip
        return
    print(f"command: {command.strip()}")
    print(f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, {args.txns} CAS txns per process")
    print("x raw: to the raw sqlite3 loop; postgresql's to raw psycopg on its own server (see below)")
    print()
    print(
        "| backend | txn/s 1 proc | x raw | txn/s 4 procs | x raw | watch p50/p99 same proc | watch p50/p99 other proc |"  # noqa: E501
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| raw sqlite3 loop | {raw['txn_per_s_1p']:,} | 1.00 | {raw['txn_per_s_4p']:,} | 1.00 | - | - |")
    for row in rows:

        def fmt(value: Any) -> str:
            return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)

        def lat(value: dict[str, float] | None) -> str:
            return "-" if value is None else f"{value['p50_ms']} / {value['p99_ms']} ms"

        print(
            f"| {row['backend']} | {fmt(row['txn_per_s_1p'])} | {fmt(row['ratio_1p_to_raw'])} | "
            f"{fmt(row['txn_per_s_4p'])} | {fmt(row['ratio_4p_to_raw'])} | {lat(row['watch_same_process'])} | "
            f"{lat(row['watch_other_process'])} |"
        )
    for row in rows:
        if "raw" in row:
            pg = row["raw"]
            print()
            print("postgresql: the backend against bare psycopg on the same server (fsync and synchronous commit on)")
            print()
            print("| loop | txn/s 1 proc | backend / it | txn/s 4 procs | backend / it |")
            print("|---|---:|---:|---:|---:|")
            print(f"| apportion postgresql backend | {row['txn_per_s_1p']:,} | 1.00 | {row['txn_per_s_4p']:,} | 1.00 |")
            one, four = (", ".join(str(turn[f"ratio_{n}"]) for turn in row["turns"]) for n in ("1p", "4p"))
            print(f"| each turn: backend / raw psycopg txn | | {one} | | {four} |")
            for label, key in (("raw psycopg txn (global revision)", "txn"), ("raw psycopg one UPDATE", "update")):
                one, four = pg[f"{key}_per_s_1p"], pg[f"{key}_per_s_4p"]
                print(
                    f"| {label} | {one:,} | {row['txn_per_s_1p'] / one:.2f} | {four:,} | "
                    f"{row['txn_per_s_4p'] / four:.2f} |"
                )
    if ratios:
        print()
        print("etcd / sqlite (same run): txn/s ratio > 1 = etcd faster; watch p99 ratio > 1 = etcd slower")
        print()
        print("| backend | txn/s 1 proc | txn/s 4 procs | watch p99 same proc | watch p99 other proc |")
        print("|---|---:|---:|---:|---:|")
        for ratio in ratios:
            print(
                f"| {ratio['backend']} | {ratio['txn_per_s_1p']} | {ratio['txn_per_s_4p']} | "
                f"{ratio['watch_p99_same_process']} | {ratio['watch_p99_other_process']} |"
            )
    print()
    print("goals: sqlite >= 0.5x raw sqlite3; postgresql >= 0.5x raw psycopg txn; watch p99 <= 50 ms")


def etcd_ratios(row: dict[str, Any], sqlite_row: dict[str, Any]) -> dict[str, Any]:
    """Each etcd figure divided by the SQLite backend's figure from the same run."""
    out: dict[str, Any] = {"backend": row["backend"]}
    for column in ("txn_per_s_1p", "txn_per_s_4p"):
        out[column] = round(row[column] / sqlite_row[column], 2)
    for column in ("watch_same_process", "watch_other_process"):
        out[f"watch_p99_{column[6:]}"] = round(row[column]["p99_ms"] / sqlite_row[column]["p99_ms"], 2)
    return out


if __name__ == "__main__":
    main()
