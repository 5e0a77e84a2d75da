"""Stateful scale-up: how long each moved partition has no active, `high_availability` vs `sticky`, one run.

The same scenario for each strategy, on a fresh directory: ``--partitions`` partitions, ``--records`` records over
``--keys`` keys (a large per-partition state), three `apportion pipeline run --state-dir` workers process all of
it; then input keeps flowing while a fourth worker joins, until the group settles (balanced, no learner left).
`sticky` moves actives at once and the new owner restores the whole changelog before it can process;
`high_availability` warms learners first (``--max-warmup`` at a time, probing every ``--probing`` s) and moves an
active only when its learner is within ``--acceptable-lag``. Every worker restores at ``--restore-rate`` records/s
(the changelog bandwidth: a remote log, a busy disk), the same for both.

Per moved partition: unavailability = new owner's ``restored`` - old owner's ``revoked`` (``handoffs`` in
``apportion.spark.pipeline._stateful``); reported p50/p99/max, the records the new owner replayed, the rounds planned
after the join (probing rounds for `high_availability`) and the time from the join to the settled group.

    .venv/bin/python bench/stateful_bench.py [--records 400000] [--keys 400000] [--restore-rate 50000]

Prints one JSON object; ratio = sticky max unavailability / high_availability max unavailability.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from apportion.cli import main as cli
from apportion.fleet import Fleet, pipeline_args
from apportion.group import history, settled
from apportion.log import PartitionedLog, Producer
from apportion.spark import handoffs, uncommitted_records
from apportion.store import connect
from apportion.waiting import wait_for


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] if ordered else 0.0


@contextlib.contextmanager
def _steady_input(log: PartitionedLog, keys: int, per_s: int) -> Iterator[None]:
    stop = threading.Event()

    def run() -> None:
        with Producer(log, "r", batch_records=1000) as producer:
            i = 0
            while not stop.wait(0.1):
                chunk = per_s // 10
                producer.send_many((f"k{(i + j) * 7919 % keys}", f"v{i + j}") for j in range(chunk))
                i += chunk

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)


def scenario(strategy: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"apportion-stateful-{strategy}-") as tmp:
        root = Path(tmp)
        url = f"sqlite:///{root / 'store.db'}"
        produce = ["pipeline", "produce", "--input", str(root / "log"), "--resource", "r"]
        with contextlib.redirect_stdout(sys.stderr):
            cli([*produce, "--partitions", str(args.partitions), "--records", str(args.records),
                 "--keys", str(args.keys), "--seed", "5"])  # fmt: skip
        log = PartitionedLog(root / "log")
        extra = ["--strategy", strategy, "--restore-rate", str(args.restore_rate), "--restore-batch", "10000"]
        if strategy == "high_availability":
            extra += ["--option", f"max_warmup_replicas={args.max_warmup}",
                      "--option", f"acceptable_recovery_lag={args.acceptable_lag}",
                      "--option", f"probing_rebalance_interval_s={args.probing}"]  # fmt: skip
        command = pipeline_args(url, "g", root / "log", root / "out", "r", "--state-dir", str(root / "state"),
                                "--driver-memory", "768m", "--idle", "0.1", "--settle", "0.3", "--min-interval",
                                "0.6", "--ttl", "3", *extra)  # fmt: skip
        with Fleet(root / "logs", command) as workers:
            with connect(url) as store:
                members = {"w1", "w2", "w3"}
                for wid in sorted(members):
                    workers.start(wid)
                wait_for("3 workers to process the input",
                         lambda: sum(uncommitted_records(store, "g", log, "r").values()) == 0
                         and settled(store, "g", members), 600, poll_s=0.2)  # fmt: skip
                with _steady_input(log, args.keys, args.input_rate):
                    joined_at = store.revision()
                    workers.start("w4")
                    members.add("w4")
                    settle_s = wait_for("4 workers to settle", lambda: settled(store, "g", members), 600, poll_s=0.2)
                    wait_for("w4 to restore its actives", lambda: len([
                        h for h in handoffs(workers.events()) if h["target"] == "w4"]) >= args.partitions // 4,
                        120, poll_s=0.2)  # fmt: skip
                rounds = sum(
                    1 for e in history(store, "g") if e["type"] == "round_closed" and e["revision"] > joined_at
                )
            workers.stop_all(60)
        moved = [h for h in handoffs(workers.events()) if h["target"] == "w4"]
        gaps = [h["gap_s"] for h in moved]
        replayed = [h["records"] for h in moved]
        return {
            "strategy": strategy,
            "moved": len(moved),
            "unavailable_p50_s": round(_percentile(gaps, 0.5), 3),
            "unavailable_p99_s": round(_percentile(gaps, 0.99), 3),
            "unavailable_max_s": round(max(gaps, default=0.0), 3),
            "replayed_at_handoff_max": max(replayed, default=0),
            "state_records_per_partition": max((h["committed"] for h in moved), default=0),
            "rounds_after_join": rounds,
            "join_to_settled_s": round(settle_s, 1),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--keys", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--restore-rate", type=float, default=50_000.0, help="changelog records/s per worker")
    parser.add_argument("--input-rate", type=int, default=2_000, help="records/s during the scale-up")
    parser.add_argument("--max-warmup", type=int, default=2)
    parser.add_argument("--acceptable-lag", type=int, default=5_000)
    parser.add_argument("--probing", type=float, default=2.0)
    args = parser.parse_args()
    command = "bench/stateful_bench.py " + " ".join(sys.argv[1:])
    results = [scenario(s, args) for s in ("sticky", "high_availability")]
    sticky, ha = results
    ratio = sticky["unavailable_max_s"] / ha["unavailable_max_s"] if ha["unavailable_max_s"] else None
    print(json.dumps({"command": command, "results": results, "ratio_max": ratio and round(ratio, 1)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
