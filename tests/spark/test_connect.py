"""Thin workers over one shared Spark Connect server (``apportion spark serve``): two `apportion pipeline run
--spark sc://...` processes hold no JVM and still commit every record exactly once across a rebalance; `report` and
`simulate --grid` run through the same server; the server's command fails in one line when the port is taken or
Java is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from apportion.cli import main
from apportion.errors import SparkUnavailable
from apportion.fleet import Fleet, pipeline_args
from apportion.log import PartitionedLog
from apportion.spark import read_committed_arrow, spark_session, uncommitted_records
from apportion.store import connect
from apportion.waiting import wait_for
from tests.processes import descendants
from tests.spark.test_pipeline import assert_per_key_offset_order, timeline

# the thin-worker tests share one xdist worker and its Connect server (tests/spark/conftest.py), beside the group of
# the local session
pytestmark = pytest.mark.spark

RECORDS, PARTITIONS = 40_000, 4
TIMINGS = ["--settle", "0.3", "--min-interval", "0.6", "--ttl", "3"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """An apportion command in a child process (a Connect session never enters the test process, whose classic
    session the other Spark tests share)."""
    return subprocess.run([sys.executable, "-m", "apportion.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.soak  # make test keeps the property: test_pipeline's thin workers share this server under faults
def test_two_thin_workers_share_one_connect_server_and_commit_every_record_once(
    connect_server: Any, tmp_path: Path
) -> None:
    log_dir, out_dir, url = tmp_path / "log", tmp_path / "out", f"sqlite:///{tmp_path / 'store.db'}"
    produce = ["pipeline", "produce", "--input", str(log_dir), "--resource", "r", "--partitions", str(PARTITIONS)]
    assert main([*produce, "--records", str(RECORDS), "--seed", "3", "--batch-records", "2000"]) == 0
    log = PartitionedLog(log_dir)
    # batches of 5,000: two per partition (order across batches is kept), eight in all (the suite's budget)
    args = pipeline_args(url, "g", log_dir, out_dir, "r", "--spark", connect_server.url, "--batch-records", "5000",
                         "--idle", "0.1", *TIMINGS)  # fmt: skip
    with Fleet(tmp_path / "logs", args) as fleet, connect(url) as store:
        workers = [fleet.start("w1"), fleet.start("w2")]
        wait_for(
            "both workers to start",
            lambda: all(w.of("started") for w in workers),
            120,
            context=lambda: timeline(workers),
        )
        for w in workers:
            assert not [p for p in descendants(w.proc.pid) if p[1] == "java"], f"{w.id} started a JVM"
        wait_for(
            "all input committed, with partitions assigned to both workers",
            lambda: (
                sum(uncommitted_records(store, "g", log, "r").values()) == 0 and all(w.of("assigned") for w in workers)
            ),
            120,
            context=lambda: timeline(workers),
        )
        codes = fleet.stop_all(60)
    assert codes == {"w1": 0, "w2": 0}, timeline(workers)
    assert sum(int(e["records"]) for w in workers for e in w.of("batch_done")) >= RECORDS
    assert main(["pipeline", "verify", "--store", url, "--group", "g", "--input", str(log_dir), "--output",
                 str(out_dir), "--resource", "r"]) == 0  # fmt: skip
    with connect(url) as store:
        assert_per_key_offset_order(read_committed_arrow(store, "g", out_dir))

    done = run_cli("report", "--store", url, "--group", "g", "--out", str(tmp_path / "report"), "--spark",
                   connect_server.url)  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout[: done.stdout.rindex("}") + 1])
    assert summary["overlaps"] == 0 and (tmp_path / "report" / "index.html").exists()


def test_grid_runs_through_connect(connect_server: Any, tmp_path: Path) -> None:
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"strategies": ["sticky", "range"], "members": [3], "partitions": [8], "churn": [3],
                                "seeds": [1]}))  # fmt: skip
    done = run_cli("simulate", "--grid", str(grid), "--out", str(tmp_path / "grid"), "--spark", connect_server.url)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["scenarios"] == 2 and result["failed"] == 0


def test_serve_refuses_a_busy_port_and_a_missing_java_in_one_line(
    connect_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["spark", "serve", "--port", str(connect_server.port)]) == 2
    err = capsys.readouterr().err.strip()
    assert "is in use" in err and len(err.splitlines()) == 1
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert main(["spark", "serve", "--port", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert "Java 17+ is not installed" in err and len(err.splitlines()) == 1


def test_master_and_spark_are_exclusive_and_a_missing_server_fails_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["report", "--store", "memory://x", "--group", "g", "--out", str(tmp_path)]
    assert main([*common, "--master", "local[1]", "--spark", "sc://127.0.0.1:1"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main([*common, "--spark", "http://127.0.0.1:1"]) == 2
    assert "expected sc://host:port" in capsys.readouterr().err
    with pytest.raises(SparkUnavailable, match=r"no Spark Connect server at 127\.0\.0\.1:1"):
        spark_session("sc://127.0.0.1:1")  # fails before pyspark's own retries (a minute or more)


WARM_UP_TWICE = """
import sys
from apportion.spark import spark_session, transform, warm_up
from apportion.spark.pipeline import _pipeline

def other(df):
    return transform(df)

def no_job(*args):
    raise AssertionError("a warm-up ran the batch path on a server warmed up for its transform")

spark = spark_session(sys.argv[1])
warm_up(spark)  # runs the job unless another test's worker warmed this server up with it already
_pipeline.write_batch = no_job
warm_up(spark)
written = []
_pipeline.write_batch = lambda *args: written.append(args)
warm_up(spark, other)
assert len(written) == 1, "another transform was taken for warmed up by the first one's warm-up"
"""


def test_a_warm_up_runs_once_per_connect_server_and_transform(connect_server: Any) -> None:
    """The first warm-up of a transform on a Connect server runs the batch path; the next warm-up of the same
    transform runs no Spark job (its write would fail here); another transform runs its own. In a process of its
    own: this one may hold a classic session (no remote session beside it)."""
    done = subprocess.run(
        [sys.executable, "-c", WARM_UP_TWICE, connect_server.url], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
