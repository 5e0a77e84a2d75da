"""Stateful pipelines: state restored from a fenced changelog; learners warm up before an active moves (seed 2)."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from apportion.group import settled
from apportion.log import PartitionedLog, Producer
from apportion.spark import Pipeline, verify
from apportion.spark.pipeline._output import Checkpoint, uncommitted_records
from apportion.spark.pipeline._pipeline import commit_task, joined
from apportion.spark.pipeline._stateful import StatefulPartitions, handoffs, reference_state, verify_state
from apportion.spark.state import PartitionState, changelog_resource, restore
from apportion.store import connect
from apportion.waiting import wait_for
from apportion.worker import Group
from tests.spark.test_pipeline_unit import write_output

pytestmark = pytest.mark.spark

BATCH = 300
OPTIONS = {"max_warmup_replicas": 2, "acceptable_recovery_lag": 50, "probing_rebalance_interval_s": 1.0}


class Events:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields: Any) -> None:
        with self._lock:
            self.items.append({"event": event, **fields})

    def of(self, kind: str, **match: Any) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.items if e["event"] == kind and all(e.get(k) == v for k, v in match.items())]


def stateful(spark: Any, log: PartitionedLog, out: Path, state: Path, wid: str, events: Events) -> Pipeline:
    partitions = StatefulPartitions(log, "r", state / wid, emit=events, worker_id=wid, restore_batch=500)
    return Pipeline(spark, log, out, "r", batch_records=BATCH, worker_id=wid, emit=events, state=partitions)


def test_a_joining_worker_warms_learners_and_takes_actives_only_when_ready(spark: Any, tmp_path: Path) -> None:
    log = PartitionedLog(tmp_path / "log")
    log.create("r", 4)
    with Producer(log, "r", batch_records=500) as producer:
        producer.send_many((f"k{i % 997}", f"v{i}" * (i % 5)) for i in range(8000))
    store = connect(f"memory://{uuid.uuid4().hex}")
    # ttl 6 s: both members renew from this process, beside its Spark driver and two batch loops folding state in
    # Python; with 3 s a busy CI machine let a's lease lapse once (a lost everything, b restored from scratch), which
    # is the protocol working, not what this test is about (the learners' warm-up)
    group = Group(
        store, "g", 4, "high_availability", settle_s=0.2, min_interval_s=0.4, ttl_s=6.0, stateful=True,
        options=OPTIONS,
    )  # fmt: skip
    out, state = tmp_path / "out", tmp_path / "state"
    events = Events()
    first = stateful(spark, log, out, state, "a", events)
    second = stateful(spark, log, out, state, "b", events)
    with joined(group, "a", first) as a:
        assert a.wait_until_stable(10), "worker a did not settle"
        while first.run_once() is not None:  # a processes everything: its state is the whole input
            pass
        assert sorted(a.owned()) == [0, 1, 2, 3]
        with Producer(log, "r", batch_records=500) as producer:  # more input arrives while b warms up
            producer.send_many((f"k{i % 997}", f"w{i}") for i in range(2000))
        stop = threading.Event()
        with joined(group, "b", second) as b:
            runners = [threading.Thread(target=pl.run, args=(stop,), kwargs={"idle_s": 0.05}) for pl in (first, second)]
            for t in runners:
                t.start()
            try:
                wait_for("2+2", lambda: len(b.owned()) == 2 and a.wait_until_stable(0) and b.wait_until_stable(0), 60)
                wait_for(
                    "all input processed", lambda: sum(uncommitted_records(store, "g", log, "r").values()) == 0, 60
                )
                wait_for("b to restore its actives", lambda: len(events.of("restored", worker="b")) >= 2, 30)
            finally:
                stop.set()
                for t in runners:
                    t.join(60)
    # every active b was given had a warm learner: b replayed only what the old owner committed since b's last
    # report (<= the acceptable lag then, plus the batches committed until the revocation), never the whole state
    given = {p for e in events.of("assigned", worker="b") for p in e["partitions"]}
    restored = {e["partition"]: e for e in events.of("restored", worker="b")}
    assert given and set(restored) == given, (given, restored)
    for e in restored.values():
        assert e["lag"] <= OPTIONS["acceptable_recovery_lag"] + 2 * BATCH and e["lag"] < e["committed"] / 2, e
    assert events.of("replicas", worker="b"), "b was never given learners"
    assert verify(store, "g", log, "r", out).ok
    report = verify_state(store, "g", log, "r")
    assert report.ok and report.records == 10_000 and report.keys > 0, report


def test_sticky_moves_a_cold_active_that_must_restore_everything(spark: Any, tmp_path: Path) -> None:
    log = PartitionedLog(tmp_path / "log")
    log.create("r", 2)
    with Producer(log, "r", batch_records=500) as producer:
        producer.send_many((f"k{i}", "x") for i in range(3000))
    store = connect(f"memory://{uuid.uuid4().hex}")
    group = Group(store, "g", 2, "sticky", settle_s=0.2, min_interval_s=0.4, ttl_s=3.0, stateful=True)
    out, state = tmp_path / "out", tmp_path / "state"
    events = Events()
    first = stateful(spark, log, out, state, "a", events)
    second = stateful(spark, log, out, state, "b", events)
    with joined(group, "a", first) as a:
        assert a.wait_until_stable(10)
        while first.run_once() is not None:
            pass
        with joined(group, "b", second) as b:
            wait_for("1+1", lambda: len(b.owned()) == 1 and a.wait_until_stable(0), 30)
            second.run_once()
    [moved] = events.of("restored", worker="b")
    keys = len(reference_state(log, "r", moved["partition"]))
    assert moved["lag"] == moved["records"] == keys > 1000  # the whole state, one changelog record per key
    assert verify_state(store, "g", log, "r").ok


def test_a_zombies_changelog_appends_are_never_restored(spark: Any, tmp_path: Path) -> None:
    """A writer appends to the changelog and is fenced at its commit: a restore from the checkpoint skips its
    records, and the new owner's next batch leaves a gap in the committed ranges, not a corruption."""
    from apportion.errors import Fenced
    from apportion.group import GroupConfig
    from apportion.spark.pipeline._pipeline import Task
    from tests.group.harness import Harness

    log = PartitionedLog(tmp_path / "log")
    log.create("r", 1)
    with Producer(log, "r", batch_records=10) as producer:
        producer.send_many((f"k{i % 3}", "ab") for i in range(20))
    h = Harness(GroupConfig(partitions=1, settle_s=0.5, min_interval_s=1.0, ttl_s=3.0))
    zombie = h.add("z")
    h.run(3)
    out = tmp_path / "out"
    z_state = StatefulPartitions(log, "r", tmp_path / "z", emit=Events())
    rows = log.read("r", 0, 0, 10)
    task = Task(0, zombie.lease(0).epoch, 0, 10, Checkpoint())
    staged = z_state.stage(0, rows, Checkpoint())
    rel = write_output(out, "r", task, rows)
    h.frozen.add("z")
    new_owner = h.add("n")
    h.run(8)  # z's lease expires, n takes the partition over
    with pytest.raises(Fenced):
        commit_task(zombie, task, rel, out, staged.changelog)
    assert log.end_offset(changelog_resource("r"), 0) == 3  # the zombie's three keys were appended, not committed

    n_state = StatefulPartitions(log, "r", tmp_path / "n", emit=Events())
    n_task = Task(0, new_owner.lease(0).epoch, 0, 10, Checkpoint())
    n_state.prepare(0, Checkpoint(), n_task.epoch)
    n_staged = n_state.stage(0, rows, Checkpoint())
    commit_task(new_owner, n_task, write_output(out, "r", n_task, rows), out, n_staged.changelog)
    n_state.committed(0, n_staged)
    assert n_staged.changelog == ((3, 6),)  # a gap where the zombie's records are
    with PartitionState.open(tmp_path / "fresh", 0) as fresh:
        assert restore(log, "r", 0, fresh, n_staged.changelog) == 3
        assert fresh.snapshot() == reference_state(log, "r", 0, 10) == n_state.store(0).snapshot()
    assert verify_state(h.store, "g", log, "r").ok


# -- real processes --------------------------------------------------------------------------------------------

PROCESS_OPTIONS = [
    "--strategy", "high_availability", "--option", "max_warmup_replicas=2", "--option", "num_standby_replicas=1",
    "--option", "acceptable_recovery_lag=2000", "--option", "probing_rebalance_interval_s=1.0",
    "--restore-batch", "20000",
]  # fmt: skip


def moves(workers: list[Any]) -> list[dict[str, Any]]:
    return handoffs({**e, "worker": w.id} for w in workers for e in list(w.events))


@pytest.mark.slow
# beside the Spark group (make test's longest), not in it: with the pipeline nemesis, on that xdist worker's own Connect
# server (four worker JVMs of their own took ~4 min of make test's 2 cores)
@pytest.mark.soak  # make test keeps the learners' warm-up before a move: test_a_joining_worker_warms_learners_...
def test_stateful_workers_scale_up_with_warm_learners_and_down_with_standbys(
    tmp_path: Path, processes: list[Any], capsys: pytest.CaptureFixture[str], connect_server: Any
) -> None:
    """Thin workers on one Spark Connect server: the state, its changelog and the fence stay in each worker."""
    import json
    import signal

    from apportion.cli import main
    from tests.spark.test_pipeline import pipeline_process, timeline

    partitions = 8
    log_dir, out_dir, url = tmp_path / "log", tmp_path / "out", f"sqlite:///{tmp_path / 'store.db'}"
    produce = ["pipeline", "produce", "--input", str(log_dir), "--resource", "r", "--partitions", str(partitions)]
    assert main([*produce, "--records", "120000", "--keys", "60000", "--seed", "3"]) == 0
    log = PartitionedLog(log_dir)
    # a batch on the shared server may queue behind the other workers' jobs: a revocation waits for it longer than
    # the default 10 s before it gives the lease up (a lapse would be a lost partition, not the handoff measured here)
    thin = ("--spark", connect_server.url, "--revoke-timeout", "60")
    state = ("--state-dir", str(tmp_path / "state"), *thin, *PROCESS_OPTIONS)

    def start(wid: str) -> Any:
        worker = pipeline_process(url, log_dir, out_dir, wid, extra=state)
        processes.append(worker)
        return worker

    for wid in ("w1", "w2", "w3"):
        start(wid)
    with connect(url) as store:
        members = {"w1", "w2", "w3"}
        wait_for(
            "3 workers to process the input and settle",
            lambda: sum(uncommitted_records(store, "g", log, "r").values()) == 0 and settled(store, "g", members),
            300,
        )
        stop_producing = threading.Event()

        def produce_more() -> None:  # input keeps flowing during the rebalances
            with Producer(log, "r", batch_records=200) as producer:
                i = 0
                # 4,000 records/s: the replicas' lags jump around the acceptable lag between their restores (and far
                # above it when a batch is slow). These strict settings failed before issue 18 item 5's fixes: a
                # member busy in a batch missed a plan or a probing round's join, and its partitions were re-planned
                # as orphans among the old members (a minute of churn, 3 moves for 2; a run that handed w4 an active
                # before it was warm is likely the same cause, not proven). One run since the fixes passed (load ~11)
                while not stop_producing.wait(0.1):
                    producer.send_many((f"k{(i + j) * 7919 % 60000}", f"more{i + j}") for j in range(400))
                    i += 400

        producer_thread = threading.Thread(target=produce_more, daemon=True)
        producer_thread.start()
        try:
            w4 = start("w4")
            members.add("w4")
            # its JVM start-up alone took ~60 s on a loaded 2-core machine: the settling is timed from its start
            wait_for("w4 to start", lambda: len(w4.of("started")) >= 1, 300, context=lambda: timeline(processes))
            wait_for(
                "4 workers to settle, no learner left",
                lambda: settled(store, "g", members),
                120,
                context=lambda: timeline(processes),
            )
            wait_for(
                "w4 to restore the state of its two actives",
                lambda: len(w4.of("restored")) >= 2,
                180,
                context=lambda: timeline(processes),
            )
            w4_learned = [e for e in w4.of("replicas") if e["learners"]]
            up = moves(processes)
            # scale down: a graceful leave; standbys of its partitions are warm and take over
            leaving_at = time.time()
            processes[0].signal(signal.SIGTERM)
            assert processes[0].proc.wait(60) == 0, processes[0].tail()
            members.discard("w1")
            wait_for(
                "3 workers to settle again",
                lambda: settled(store, "g", members),
                180,
                context=lambda: timeline(processes),
            )
        finally:
            stop_producing.set()
            producer_thread.join(30)
        wait_for("all input processed", lambda: sum(uncommitted_records(store, "g", log, "r").values()) == 0, 300)
    # (moves from w1 while the first three started are not scale-down: a learner that was vacuously ready when nothing
    # was committed yet may have a whole first batch to replay)
    down = [h for h in moves(processes) if h["source"] == "w1" and h["time"] >= leaving_at]
    for w in processes[1:]:
        w.signal(signal.SIGTERM)
    for w in processes[1:]:
        assert w.proc.wait(60) == 0, w.tail()

    timeline_text = timeline(processes)
    assert w4_learned, f"w4 was never given learners:\n{timeline_text}"
    moved_up = [h for h in up if h["target"] == "w4"]
    assert len(moved_up) == 2, f"{moved_up}\n{timeline_text}"
    slowest = {w.id: w.log.slowest_batch_s() for w in processes}
    for h in [*moved_up, *down]:
        # warm: the new owner replays only the tail (<= the acceptable lag at its last report plus the batches
        # committed until the revocation), never the whole state, so the partition is without an active for one
        # handoff (the batch in flight, release, claim) and a short restore. A batch takes seconds on a loaded
        # machine (a CI run beside other suites saw a 13.9 s gap against a fixed 10 s bound): the bound grows with
        # the slowest batches the two workers ran
        limit = 10.0 + 2 * (slowest[h["source"]] + slowest[h["target"]])
        assert h["records"] < h["committed"] / 2, h
        assert h["gap_s"] < limit, (h, limit)
    assert down, "w1's partitions were not taken over"

    capsys.readouterr()
    assert main(["pipeline", "verify", "--store", url, "--group", "g", "--input", str(log_dir), "--output",
                 str(out_dir), "--resource", "r", "--json"]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["state_ok"] and report["state_mismatched_keys"] == 0, report
    assert report["state_records"] == sum(log.end_offset("r", p) for p in range(partitions)) > 120_000


def test_handoffs_measure_the_gap_from_the_old_owners_revocation_to_the_new_owners_restore() -> None:
    events = [
        {"event": "restored", "worker": "a", "partition": 0, "time": 1.0},  # first owner: not a move
        {"event": "revoked", "worker": "a", "partitions": [0, 1], "time": 5.0},
        {"event": "restored", "worker": "b", "partition": 1, "time": 5.5},
        {"event": "restored", "worker": "c", "partition": 0, "time": 7.0},
        {"event": "revoked", "worker": "c", "partitions": [0], "time": 9.0},
        {"event": "restored", "worker": "c", "partition": 0, "time": 9.5},  # the same worker again: not a move
    ]
    found = {(h["partition"], h["source"], h["target"]): h["gap_s"] for h in handoffs(reversed(events))}
    assert found == {(1, "a", "b"): 0.5, (0, "a", "c"): 2.0}


def test_a_batch_is_staged_from_its_output_in_bounded_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker reads a stateful batch's rows back in chunks of at most ``STAGE_CHUNK_ROWS`` rows (key and value
    only), never the whole batch at once, and stages the same new values as a fold of the whole batch."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from apportion.spark.pipeline import _stateful
    from apportion.spark.state import fold

    monkeypatch.setattr(_stateful, "STAGE_CHUNK_ROWS", 7)
    seen: list[int] = []
    monkeypatch.setattr(_stateful, "fold", lambda rows: seen.append(rows.num_rows) or fold(rows))
    log = PartitionedLog(tmp_path / "log")
    log.create("r", 1)
    directory = tmp_path / "out" / "batch"
    directory.mkdir(parents=True)
    parts = [(0, 30), (30, 45)]  # two part files, as Spark may write for one task
    for first, end in parts:
        offsets = range(first, end)
        rows = pa.table({"offset": list(offsets), "key": [f"k{o % 4}" for o in offsets],
                         "value": ["x" * (o % 5) for o in offsets], "digest": ["d"] * len(offsets)})  # fmt: skip
        pq.write_table(rows, directory / f"part-{first:05d}.parquet")
    state = StatefulPartitions(log, "r", tmp_path / "state", emit=Events())
    count, staged = state.stage_output(0, directory, Checkpoint())
    whole = fold(pa.concat_tables(pq.read_table(f) for f in sorted(directory.iterdir())))
    assert count == 45 and max(seen) <= 7 and sum(seen) == 45
    assert dict(staged.updates) == whole
    assert state.stage_output(0, tmp_path / "out" / "absent", Checkpoint())[0] == 0  # no row written: nothing staged
    state.close()
