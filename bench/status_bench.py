"""`apportion status` and `apportion dashboard` at 100,000 partitions and 64 members (issue 27, item 6).

The group is written straight into each store by ``tests/group/large_group.py`` (the records the protocol leaves
at rest: definition, lease-bound registrations and owner records, epochs, one round's plan and participations, a
pipeline-style commit per partition, the claims' history events, ten minutes old: a group at rest); ``--unowned``
partitions of the plan have no owner record (a handoff in flight). Stores: a SQLite file and a fresh single-node
etcd (tests/etcd_server.py).

Each command runs as its own process (``python -m apportion.cli``, ``COLUMNS=120``), output to a pipe:

- ``status --json``, ``status`` (the table) and, when the source has it, ``status --all``: wall and CPU time
  (medians of ``--repeat``), output bytes and lines;
- ``dashboard --port 0 --refresh 1``: one server-sent-event client as a browser's; time from spawn to the first
  state event and its bytes; then ``--idle`` seconds without a change: events and bytes sent, the server's CPU
  seconds (/proc); then partition 0 moves to another member (owner/0 and epoch/0 rewritten, as a claim): time until
  an event shows its new owner.

``--against REV`` runs every measurement with the ``src/`` of git revision ``REV`` too (``git archive``), on the
same stores, alternating with this checkout.

    .venv/bin/python bench/status_bench.py [--stores sqlite,etcd] [--against REV] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # for tests.* (the group builder, real etcd servers)

from tests.conftest import etcd_binary
from tests.etcd_server import EtcdServer
from tests.group.large_group import build_group

from apportion.group.internals import Keys, encode
from apportion.store import Put, connect
from assign_bench import export_src  # bench/ is on sys.path: this script's folder

ROOT = Path(__file__).resolve().parent.parent
GROUP = "big"
FIRST_STATE_LIMIT_S = 180.0


def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "120"}


def run_status(src: Path, url: str, store_pid: int | None, *flags: str) -> dict[str, float]:
    """One ``apportion status`` process: wall and CPU seconds (and the etcd server's, ``store_pid``), stdout bytes
    and lines."""
    store0 = _cpu_s(store_pid) if store_pid else 0.0
    argv = [sys.executable, "-m", "apportion.cli", "status", "--store", url, "--group", GROUP, *flags]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, env=_env(src), capture_output=True, timeout=1800)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"status {' '.join(flags)} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    store_cpu = _cpu_s(store_pid) - store0 if store_pid else 0.0
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "store_cpu_s": store_cpu,
        "bytes": len(proc.stdout),
        "lines": proc.stdout.count(b"\n"),
    }


def has_all_flag(src: Path) -> bool:
    return "--all" in (src / "apportion" / "cli" / "_status.py").read_text()


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Events:
    """A server-sent-event stream read on this thread: ``next(deadline)`` gives (arrival time, data bytes)."""

    def __init__(self, url: str) -> None:
        self._client = httpx.Client(timeout=httpx.Timeout(600.0, connect=10.0))
        self._stream = self._client.stream("GET", url)
        self._response = self._stream.__enter__()
        self._lines = self._response.iter_lines()

    def next(self) -> tuple[float, str]:
        for line in self._lines:
            if line.startswith("data:"):
                return time.perf_counter(), line[5:]
        raise EOFError("the event stream ended")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stream.__exit__(None, None, None)
        self._client.close()


def _owner_of_0(data: str) -> str | None:
    state = json.loads(data)
    if state.get("status") != "ok":
        return None
    for row in state.get("partitions", []):
        if row.get("partition") == 0:
            return str(row.get("owner"))
    return None


def move(url: str, member: str, epoch: int) -> None:
    """Partition 0 claimed by ``member`` at ``epoch`` (owner/0 and epoch/0 in one transaction, as a claim)."""
    keys = Keys(GROUP)
    with connect(url) as store:
        registration = store.get(keys.member(member))
        assert registration is not None
        owner = Put(keys.owner(0), encode({"epoch": epoch, "member": member}), registration.lease)
        store.txn([], [owner, Put(keys.epoch(0), str(epoch).encode())])


def run_dashboard(src: Path, url: str, store_pid: int | None, idle_s: float, mover: str) -> dict[str, float]:
    """``apportion dashboard`` as its own process; see the module docstring."""
    argv = [sys.executable, "-m", "apportion.cli", "dashboard", "--store", url, "--group", GROUP, "--port", "0"]
    started = time.perf_counter()
    server = subprocess.Popen(argv, env=_env(src), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert server.stdout is not None
    events: Events | None = None
    try:
        printed = ""
        while "http://" not in printed:  # its address (after any warning line)
            ready, _, _ = select.select([server.stdout], [], [], 120)
            line = server.stdout.readline().decode() if ready else ""
            if not line:
                raise RuntimeError(f"dashboard did not start: {printed!r}")
            printed += line
        base = "http://" + printed.split("http://", 1)[1].split()[0]
        events = Events(base + "api/events")
        while True:  # the first state that shows the group (a state before the first snapshot has no status ok)
            at, data = events.next()
            if json.loads(data).get("status") == "ok" and json.loads(data).get("partitions"):
                break
            if at - started > FIRST_STATE_LIMIT_S:
                problem = json.loads(data).get("problem")
                raise RuntimeError(f"no snapshot of the group within {FIRST_STATE_LIMIT_S:g} s: {problem}")
        first_s, first_bytes = at - started, len(data.encode())
        cpu0, t0, sent, count = _cpu_s(server.pid), time.perf_counter(), 0, 0
        store0 = _cpu_s(store_pid) if store_pid else 0.0
        while time.perf_counter() - t0 < idle_s:
            _, data = events.next()
            sent += len(data.encode())
            count += 1
        idle = time.perf_counter() - t0
        idle_cpu = _cpu_s(server.pid) - cpu0
        idle_store_cpu = _cpu_s(store_pid) - store0 if store_pid else 0.0
        moved_at = time.perf_counter()
        move(url, mover, 2)
        while True:
            at, data = events.next()
            if _owner_of_0(data) == mover:
                break
            if at - moved_at > 600:
                raise RuntimeError("the move of partition 0 never showed")
        move(url, "w00", 3)  # back to its owner for the next run
        return {
            "first_s": first_s,
            "first_bytes": first_bytes,
            "idle_events_per_s": count / idle,
            "idle_bytes_per_s": sent / idle,
            "idle_cpu": idle_cpu / idle,
            "idle_store_cpu": idle_store_cpu / idle,
            "move_s": at - moved_at,
            "move_bytes": len(data.encode()),
        }
    finally:
        if events is not None:
            events.close()
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


@contextlib.contextmanager
def store_url(kind: str, directory: Path) -> Iterator[tuple[str, int | None]]:
    """The store's URL and its server's pid (None: SQLite, in the client's process)."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / 'big.db'}", None
        return
    binary = etcd_binary()
    if binary is None:
        raise SystemExit("etcd is not installed")
    with EtcdServer.single(binary, directory / "etcd") as server:
        assert server.process is not None
        yield server.url, server.process.pid


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="sqlite,etcd")
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--members", type=int, default=64)
    parser.add_argument("--unowned", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--table-repeat", type=int, default=1, help="runs of the full table (slow before)")
    parser.add_argument("--idle", type=float, default=15.0, help="dashboard: seconds measured without a change")
    parser.add_argument("--against", default=None, help="also measure the src/ of this git revision")
    parser.add_argument("--skip", default="", help="comma-separated: json,table,all,dashboard")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    results: list[tuple[str, str, str, dict[str, Any]]] = []  # a row is {"failed": reason} when it failed
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"this checkout": ROOT / "src"}
        if args.against:
            (Path(tmp) / "against").mkdir()
            sources[args.against] = export_src(args.against, Path(tmp) / "against")
        for kind in args.stores.split(","):
            with store_url(kind, Path(tmp)) as (url, store_pid):
                started = time.perf_counter()
                with connect(url) as store:
                    group = build_group(store, GROUP, members=args.members, partitions=args.partitions,
                                        unowned=args.unowned, now=time.time() - 600)  # fmt: skip
                built = time.perf_counter() - started
                print(f"{kind}: built {args.partitions:,} x {len(group.members)} in {built:.1f} s", flush=True)
                for name, src in sources.items():
                    cases: list[tuple[str, list[str], int]] = [("status --json", ["--json"], args.repeat)]
                    cases.append(("status", [], args.table_repeat))
                    if has_all_flag(src):
                        cases.append(("status --all", ["--all"], args.table_repeat))
                    for label, flags, repeat in cases:
                        if label.split()[-1].lstrip("-") in skip or (label == "status" and "table" in skip):
                            continue
                        try:
                            row = _median([run_status(src, url, store_pid, *flags) for _ in range(repeat)])
                        except RuntimeError as exc:
                            print(kind, name, label, "failed:", exc, flush=True)
                            results.append((kind, name, label, {"failed": str(exc).splitlines()[-1]}))
                            continue
                        results.append((kind, name, label, row))
                        print(kind, name, label, {k: round(v, 3) for k, v in row.items()}, flush=True)
                    if "dashboard" not in skip:
                        try:
                            row = run_dashboard(src, url, store_pid, args.idle, group.members[1])
                        except RuntimeError as exc:
                            print(kind, name, "dashboard failed:", exc, flush=True)
                            results.append((kind, name, "dashboard", {"failed": str(exc).splitlines()[-1]}))
                            continue
                        results.append((kind, name, "dashboard", row))
                        print(kind, name, "dashboard", {k: round(v, 3) for k, v in row.items()}, flush=True)
    load = os.getloadavg()[0]
    print(f"\npython {sys.version.split()[0]}; {args.partitions:,} partitions x {args.members} members, "
          f"{args.unowned} unowned; load average at the end {load:.1f}")  # fmt: skip
    print("\n| store | src | command | wall | CPU | etcd CPU | output |")
    print("|---|---|---|---:|---:|---:|---:|")
    for kind, name, label, row in results:
        if label == "dashboard":
            continue
        if "failed" in row:
            print(f"| {kind} | {name} | `{label}` | failed: {row['failed']} | | | |")
            continue
        out = f"{row['bytes'] / 1e6:.2f} MB, {int(row['lines']):,} lines"
        etcd = f"{row['store_cpu_s']:.2f} s" if kind == "etcd" else "-"
        print(f"| {kind} | {name} | `{label}` | {row['wall_s']:.2f} s | {row['cpu_s']:.2f} s | {etcd} | {out} |")
    print("\n| store | src | first state | first state size | idle: events/s, bytes/s, server CPU (etcd CPU) |"
          " a move shown after (event size) |")  # fmt: skip
    print("|---|---|---:|---:|---|---:|")
    for kind, name, label, row in results:
        if label != "dashboard":
            continue
        if "failed" in row:
            print(f"| {kind} | {name} | failed: {row['failed']} | | | |")
            continue
        print(
            f"| {kind} | {name} | {row['first_s']:.1f} s | {row['first_bytes'] / 1e6:.2f} MB | "
            f"{row['idle_events_per_s']:.2f}, {row['idle_bytes_per_s'] / 1e6:.2f} MB/s, {row['idle_cpu']:.0%}"
            + (f" ({row['idle_store_cpu']:.0%})" if kind == "etcd" else "")
            + " | "
            f"{row['move_s']:.1f} s ({row['move_bytes'] / 1e3:.0f} kB) |"
        )


if __name__ == "__main__":
    main()
