"""A smaller main job, end to end, as `make demo` runs it: real worker processes, real Spark, real faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


# The demo's workers and report are thin clients of the run's one Connect server (`apportion demo --spark`, in the
# thin-workers group that shares it): the demo starting a server of its own is what `make demo` runs every time, and
# a second JVM here cost make test ~26 s of start-up on 2 cores.
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.xdist_group("thin-workers")
@pytest.mark.timeout(1500)  # a backstop only: the demo's own waits scale with load (~2 min idle, ~7 min at load 20)
def test_small_demo_passes_every_check_and_writes_its_report(tmp_path: Path, connect_server: Any) -> None:
    directory = tmp_path / "demo"
    proc, summary = small_demo(directory, "--spark", connect_server.url)
    assert {
        "exactly once (count, checksum, order)",
        "state exactly once (changelog = reference)",
        "zero ownership overlaps",
        "join moves = lower bound",
    } <= passed(summary)
    assert summary["failover_s"] is not None
    assert Path(summary["report"]).exists()
    page = Path(summary["report"]).read_text().split("<body>", 1)[1]
    assert "✓</span> <b>exactly once (count, checksum, order)</b>" in page  # the report's headline verdict
    assert str(directory) not in page  # no file-system path on the page
    store = f"sqlite:///{directory.resolve() / 'apportion.db'}"
    assert summary["dashboard"] == f"apportion dashboard --store {store} --group orders"
    assert "watch it live in a browser" in proc.stdout
    # one shared Spark engine: every worker was a thin Connect client (no JVM of its own)
    engines = worker_engines(directory)
    assert len(engines) == 4 and all(e == {"connect"} for e in engines.values()), engines


def small_demo(directory: Path, *options: str, env: dict[str, str] | None = None) -> tuple[Any, dict[str, Any]]:
    """`apportion demo` at the tests' size with ``options``: its process and its JSON summary, every check passed."""
    proc = subprocess.run(
        [sys.executable, "-m", "apportion.cli", "demo", "--dir", str(directory), "--records", "40000",
         "--partitions", "8", "--batch-records", "2000", "--stream-seconds", "8", *options, "--json"],
        capture_output=True, text=True, timeout=1400, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, f"demo failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True
    return proc, summary


def passed(summary: dict[str, Any]) -> set[str]:
    return {c["name"] for c in summary["checks"] if c["ok"]}


def worker_engines(directory: Path) -> dict[str, set[str]]:
    """Each demo worker's Spark engines, from its ``started`` lines (``connect``: a thin client of a shared server)."""
    engines = {}
    for log in sorted((directory / "logs").glob("w*.log")):
        started = [json.loads(line) for line in log.read_text().splitlines() if '"started"' in line]
        engines[log.stem] = {e["spark"].split(" ")[0] for e in started}
    return engines


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """tests/kafka/conftest.py's single-node KRaft broker, for this module (imported here, not at the module's top:
    without the kafka extra only the Kafka demo is skipped)."""
    from tests.kafka import conftest as kafka_fixtures

    yield from kafka_fixtures._cluster(tmp_path_factory.mktemp("kafka"), 1)


# The same scenario and checks on Kafka (`apportion demo --source kafka`), on this module's session broker and the
# run's Connect server (--bootstrap, --spark: no JVM of the demo's own). make soak only: make test's budget is full,
# and tests/spark/test_pipeline_kafka.py covers the same faults there on a smaller fleet.
@pytest.mark.soak
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.xdist_group("thin-workers")
@pytest.mark.timeout(1500)
def test_small_kafka_demo_passes_every_check_but_the_state_ones_it_says_it_skips(
    tmp_path: Path, connect_server: Any, kafka: Any
) -> None:
    from tests.conftest import spark_kafka_jars

    jars = spark_kafka_jars()
    if jars is None:
        pytest.skip("Maven cannot resolve Spark's Kafka connector (scripts/ensure-spark-kafka.sh); CI runs these")
    directory = tmp_path / "demo"
    proc, summary = small_demo(
        directory, "--source", "kafka", "--bootstrap", kafka.bootstrap, "--spark", connect_server.url,
        env={**os.environ, "APPORTION_KAFKA_JARS": jars},
    )  # fmt: skip
    assert {
        "exactly once (count, checksum, order)",
        "zero ownership overlaps",
        "join moves = lower bound",
        "zombie loses its partitions, its late commit is fenced",
        "graceful stop",
    } <= passed(summary)
    assert not any("state" in c["name"] for c in summary["checks"])
    exactly_once = next(c for c in summary["checks"] if c["name"].startswith("exactly once"))
    assert exactly_once["detail"].startswith("40,000 in, 40,000 out, checksum equal"), exactly_once
    assert summary["failover_s"] is not None and Path(summary["report"]).exists()
    assert "state checks skipped: the pipeline on Kafka is not stateful" in proc.stdout
    assert f"Kafka broker at {kafka.bootstrap} (--bootstrap): nothing started" in proc.stdout
    assert not (directory / "kafka").exists()  # no broker of its own
    engines = worker_engines(directory)
    assert len(engines) == 4 and all(e == {"connect"} for e in engines.values()), engines


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--dir", "{tmp}"], "--clean"),  # the directory holds a file
        (["--spark", "sc://127.0.0.1:1", "--engine", "per-worker"], "does not go with --engine per-worker"),
        (["--spark", "http://127.0.0.1:15002"], "expected sc://host:port"),
        (["--source", "nope"], "'nope' is not one of 'log', 'kafka'"),
        (["--bootstrap", "127.0.0.1:9092"], "goes with --source kafka"),
        (["--source", "kafka", "--bootstrap", "nonsense"], "--bootstrap: expected HOST:PORT"),
    ],
)
def test_the_demo_refuses_bad_input_in_one_line_and_writes_nothing(
    tmp_path: Path, arguments: list[str], said: str
) -> None:
    (tmp_path / "something").write_text("x")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in arguments]
    proc = subprocess.run(
        [sys.executable, "-m", "apportion.cli", "demo", *argv], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 2, proc.stderr
    assert said in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["something"]  # no demo-output/ either


def test_the_kafka_demo_on_a_broker_that_does_not_answer_says_so_in_one_line_and_writes_nothing(
    tmp_path: Path,
) -> None:
    pytest.importorskip("confluent_kafka", reason="the kafka extra is not installed")
    proc = subprocess.run(
        [sys.executable, "-m", "apportion.cli", "demo", "--source", "kafka", "--bootstrap", "127.0.0.1:1"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and "--bootstrap: " in proc.stderr and "127.0.0.1:1" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_kafka_demo_without_java_or_maven_names_what_is_missing_in_one_line(tmp_path: Path) -> None:
    # the broker the demo starts comes from Maven Central with Maven and runs on Java: neither is on this PATH
    pytest.importorskip("confluent_kafka", reason="the kafka extra is not installed")
    env = {**os.environ, "PATH": str(tmp_path / "empty-bin")}
    proc = subprocess.run(
        [sys.executable, "-m", "apportion.cli", "demo", "--source", "kafka", "--dir", str(tmp_path / "demo")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "needs Java 17+" in proc.stderr and "apt-get install" in proc.stderr
    assert "Traceback" not in proc.stderr


# -- the demo's waits, without processes ----------------------------------------------------------------------


def _events(path: Path, *events: dict[str, object]) -> None:
    with open(path, "a") as handle:
        for e in events:
            handle.write(json.dumps(e) + "\n")


def test_a_wait_with_progress_fails_only_after_its_limit_without_progress() -> None:
    from apportion.errors import ApportionError
    from apportion.waiting import wait_for

    ticks = iter(range(1_000_000))
    polls = {"n": 0}

    def moving() -> int:
        return next(ticks)

    def done() -> bool:
        polls["n"] += 1
        return polls["n"] > 20

    assert wait_for("a moving thing", done, 0.05, poll_s=0.01, progress=moving) >= 0.0  # 0.2 s > limit: no failure
    with pytest.raises(ApportionError, match=r"waiting for a stuck thing"):
        wait_for("a stuck thing", lambda: False, 0.05, poll_s=0.01, progress=lambda: 1)


def test_a_wait_fails_at_once_with_the_log_tail_when_a_worker_it_needs_has_exited(tmp_path: Path) -> None:
    from apportion.errors import ApportionError
    from apportion.fleet import Fleet
    from apportion.waiting import wait_for

    fleet = Fleet(tmp_path / "logs", [sys.executable, "-c", "raise SystemExit(3)"])
    (tmp_path / "logs" / "w2.log").write_text("Traceback (most recent call last):\nFileNotFoundError: tmp\n")
    fleet.start("w2").proc.wait()
    with pytest.raises(ApportionError, match=r"(?s)waiting for w2's batch: worker w2 exited with code 3.*FileNotFound"):
        wait_for("w2's batch", lambda: False, 3600, alive=lambda: fleet.check(["w2"]))


def test_the_worker_log_is_read_incrementally_and_knows_when_a_freeze_landed_in_the_window(tmp_path: Path) -> None:
    from apportion.fleet import WorkerLog

    path = tmp_path / "w2.log"
    log = WorkerLog(path)
    assert log.count("batch") == 0  # no file yet
    _events(path, {"event": "batch"}, {"event": "written"}, {"event": "written"}, {"event": "pausing", "seconds": 1.5})
    assert log.frozen_in_window()
    _events(path, {"event": "commit"})
    assert log.frozen_in_window()  # one of two partitions still to commit: it will meet the fence
    with open(path, "a") as handle:
        handle.write('{"event": "commit"')  # a line being written: not parsed yet
    assert log.count("commit") == 1
    with open(path, "a") as handle:
        handle.write("}\n")
    assert log.count("commit") == 2 and not log.frozen_in_window()
    _events(
        path,
        {"event": "batch_done", "spark_s": 2.0, "write_s": 0.5, "commit_s": 0.1},
        {"event": "lost", "partitions": [3, 1]},
    )
    assert not log.frozen_in_window()
    assert log.slowest_batch_s() == pytest.approx(4.1)
    assert log.lost() == [3, 1]


def test_the_input_stream_ends_when_the_demo_asks_for_the_rest_and_the_rest_arrives_at_once(tmp_path: Path) -> None:
    # the zombie step needs every record in the log; it must not wait out the stream's pace (45 s of the main demo)
    from apportion.demo._config import DemoConfig
    from apportion.demo._source import LogRecords

    config = DemoConfig(tmp_path, records=20_000, partitions=4)
    source = LogRecords(config, tmp_path / "log")
    source.append(config.records // 2)
    source.stream(duration_s=3_600.0)  # a chunk every ~15 minutes: finish() must not wait for them
    source.finish(limit_s=30.0)  # before: waited for the stream's end (WaitTimeout here)
    assert source.produced == config.records
    assert sum(source.log.end_offset("orders", p) for p in range(4)) == config.records
