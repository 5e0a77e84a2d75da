"""The pipeline on a real Spark cluster: a standalone master and 2 workers on loopback (``StandaloneCluster``, all
from the pip package) behind one Spark Connect server, thin apportion workers as its clients. The issue-16 scenario:
kill -9 of a Spark worker JVM while a batch's task runs on it (held there by a gated transform), then kill -9 of an
apportion worker mid-batch, a SIGSTOP zombie and a late joiner; every record is committed exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apportion.fleet import WorkerProcess
from apportion.waiting import wait_for
from tests.conftest import jvm_options
from tests.spark.conftest import require_java
from tests.spark.test_pipeline import survive_kill_zombie_and_late_join, timeline

# its own xdist group: the cluster's JVMs replace the shared local session's while it runs
pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("cluster")]


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """(cluster, Connect server on it): 2 Spark workers of 1 core each; every process stopped by pid at the end."""
    require_java()
    from apportion.spark import ConnectServer, StandaloneCluster

    directory = tmp_path_factory.mktemp("cluster")
    config = {"spark.executor.extraJavaOptions": jvm_options()}  # the daemons: jvm_options() sets their variable
    with StandaloneCluster(workers=2, directory=directory / "spark") as cluster, ConnectServer(
        cluster.url, port=0, log_path=directory / "connect.log", config={**cluster.executor_config(), **config}
    ) as server:  # fmt: skip
        server.check_session()
        yield cluster, server


def _ancestors(pid: int) -> list[int]:
    found = []
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
        found.append(pid)
    return found


@pytest.mark.slow
def test_on_a_standalone_cluster_a_killed_spark_worker_a_killed_and_a_frozen_apportion_worker_lose_nothing(
    spark_cluster: tuple[Any, Any],
    tmp_path: Path,
    processes: list[WorkerProcess],
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster, server = spark_cluster
    gate = tmp_path / "gate"
    gate.mkdir()
    killed: list[int] = []

    def kill_the_spark_worker_under_a_running_task() -> None:
        wait_for(
            "a task of a first batch to run on an executor (held at the gate)",
            lambda: any(gate.glob("running-*")),
            300,
            context=lambda: timeline(processes),
        )
        # the pid is in the marker's name (its content could be read half-written: a CI run read '')
        python_worker = int(sorted(gate.glob("running-*"))[0].name.removeprefix("running-"))
        lineage = _ancestors(python_worker)
        index = next(i for i in range(cluster.workers) if cluster.worker_pid(i) in lineage)
        cluster.kill_worker(index)
        killed.append(index)
        wait_for("the master to see the worker gone", lambda: cluster.alive_workers() == cluster.workers - 1, 120)
        (gate / "release").touch()

    survive_kill_zombie_and_late_join(
        tmp_path,
        processes,
        capsys,
        engine=("--spark", server.url, "--transform", "tests.spark.gated_transform:gated"),
        env={"APPORTION_TEST_GATE": str(gate)},
        first_batches=kill_the_spark_worker_under_a_running_task,
        records=80_000,  # a first batch per partition to hold and kill under, then the rest (make test's time)
    )
    assert killed, "no Spark worker was killed"
    assert "Lost executor" in server.log_path.read_text(errors="replace"), "Spark never saw its executor die"
    # the job whose task ran on the killed worker either succeeded by Spark's retry or failed and was run again from
    # the commit: both leave exactly once (checked above); a failed attempt is reported, never committed
    failed = [e for w in processes for e in w.of("batch_failed")]
    assert all("failures" in e for e in failed)
