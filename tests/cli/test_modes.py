"""`--mode rounds|coordinator|static` and each mode's options, declared once (``cli/_common.py``) for `apportion
worker`, `apportion pipeline run` and `apportion simulate` (issue 17, "every mode everywhere"). An option of another
mode is one error line, exit 2, whichever command and wherever it came from (command line, environment, config)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from apportion.errors import InvalidRequest
from apportion.group import Coordinator, GroupConfig, Mode, Rounds, Static
from apportion.group.internals import LEGACY_LAYOUT, Keys, encode
from apportion.model import Resource
from apportion.runner import StartUp
from apportion.sim import SimConfig, simulate
from apportion.store import connect
from apportion.worker import Group, Worker
from tests.cli.run import cli


def worker_args(tmp_path: Path) -> list[str]:
    return ["worker", "--store", f"sqlite:///{tmp_path / 'store.db'}", "--group", "g", "--id", "w", "--partitions", "4"]


def pipeline_args(tmp_path: Path) -> list[str]:
    return ["pipeline", "run", "--store", f"sqlite:///{tmp_path / 'store.db'}", "--group", "g", "--id", "w",
            "--input", str(tmp_path / "log"), "--output", str(tmp_path / "out")]  # fmt: skip


COMMANDS = {"worker": worker_args, "pipeline run": pipeline_args}

WRONG = [
    (["--ordinal", "1"], "--ordinal: only with --mode static (this is --mode rounds)"),
    (["--mode", "coordinator", "--hostname", "c-1"], "--hostname: only with --mode static (this is --mode coord"),
    (["--ordinal-from-hostname"], "--ordinal-from-hostname: only with --mode static"),
    (["--mode", "coordinator", "--replicas", "2"], "--replicas: only with --mode static"),
    (["--mode", "static", "--ordinal", "0", "--min-members", "2"], "--min-members: only with --mode coordinator"),
    (["--rebalance", "manual"], "--rebalance: only with --mode coordinator (this is --mode rounds)"),
    (["--mode", "static", "--ordinal", "0", "--max-in-flight", "4"], "--max-in-flight: only with --mode coordinator"),
    (["--first-settle", "5"], "--first-settle: only with --mode coordinator (this is --mode rounds)"),
    (["--mode", "static"], "static mode needs --ordinal, --hostname name-<ordinal> or --ordinal-from-hostname"),
    (["--mode", "static", "--hostname", "consumer"], "does not look like a StatefulSet pod name"),
    (["--mode", "static", "--hostname", "c-1", "--ordinal", "1"], "give one of --ordinal, --hostname"),
]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("args", "message"), WRONG)
def test_an_option_of_another_mode_is_one_error_line_with_exit_2(
    command: str, args: list[str], message: str, tmp_path: Path
) -> None:
    result = cli(*COMMANDS[command](tmp_path), *args)
    assert result.code == 2, result.stderr
    assert message in result.one_error_line()
    assert not (tmp_path / "store.db").exists()  # refused before the store is opened


def test_a_mode_option_from_the_environment_or_a_config_file_counts_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "worker.toml"
    config.write_text("min_members = 2\n")
    result = cli(*worker_args(tmp_path), "--config", str(config))
    assert "--min-members: only with --mode coordinator" in result.one_error_line()
    monkeypatch.setenv("APPORTION_ORDINAL", "1")
    result = cli(*worker_args(tmp_path), "--mode", "coordinator")
    assert "--ordinal: only with --mode static (this is --mode coordinator)" in result.one_error_line()
    monkeypatch.delenv("APPORTION_ORDINAL")
    monkeypatch.setenv("APPORTION_ORDINAL_FROM_HOSTNAME", "false")  # a flag set to false is not given: the error
    result = cli(*worker_args(tmp_path), "--connect-timeout", "nan")  # is the next one the worker checks
    assert "connect-timeout" in result.one_error_line()


def test_a_stateful_pipeline_is_accepted_in_every_mode(tmp_path: Path) -> None:
    """Issue 30.4: `--state-dir` with --mode coordinator or static was refused ("need the rounds mode"); it now passes
    the mode's checks, and the next check the worker makes before Spark starts (the input directory) is the error."""
    for mode in ([], ["--mode", "coordinator"], ["--mode", "static", "--hostname", "c-0"]):
        result = cli(*pipeline_args(tmp_path), *mode, "--state-dir", str(tmp_path / "state"))
        assert result.code == 2, result.stderr
        assert f"input: cannot read directory {tmp_path / 'log'}" in result.one_error_line()


# -- apportion simulate --mode ---------------------------------------------------------------------------------


def simulated(*args: str) -> dict[str, object]:
    result = cli("simulate", "--members", "3", "--partitions", "12", "--events", "8", "--seed", "5", *args)
    assert result.code == 0, result.stderr
    summary: dict[str, object] = json.loads(result.stdout)
    del summary["cpu_s"]
    return summary


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], {"mode": "rounds", "strategy": "sticky"}),
        (["--mode", "coordinator"], {"mode": "coordinator", "strategy": "round_robin"}),  # seed 1's default
        (["--mode", "coordinator", "--max-in-flight", "1"], {"mode": "coordinator", "strategy": "round_robin",
                                                             "max_in_flight": 1}),
        (["--mode", "coordinator", "--strategy", "sticky"], {"mode": "coordinator", "strategy": "sticky"}),
        (["--mode", "coordinator", "--first-settle", "2", "--start-gap", "0.6"], {"mode": "coordinator",
            "strategy": "round_robin", "first_settle_s": 2.0, "start_gap_s": 0.6}),  # issue 45.2
        (["--mode", "static"], {"mode": "static", "strategy": "sticky"}),
    ],
)  # fmt: skip
def test_simulate_runs_the_mode_it_is_given_as_the_python_simulator_does(
    args: list[str], expected: dict[str, Any]
) -> None:
    summary = simulated(*args)
    assert summary == simulate(SimConfig(members=3, partitions=12, events=8, seed=5, **expected)).summary()
    assert summary["mode"] == expected["mode"] and summary["ok"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-in-flight", "2"], "--max-in-flight: only with --mode coordinator (this is --mode rounds)"),
        (["--mode", "static", "--max-in-flight", "2"], "--max-in-flight: only with --mode coordinator"),
        (["--mode", "coordinator", "--max-in-flight", "0"], "max_in_flight: must be an integer >= 1"),
        (["--mode", "static", "--stateful"], "stateful: standby and learner replicas exist only in the rounds mode"),
        (["--mode", "coordinator", "--grid", "grid.toml"], "--mode: a --grid picks its modes in the grid file"),
        (["--mode", "coordinator", "--min-members", "0"], "min_members: must be an integer >= 1"),
        (["--replicas", "3"], "--replicas: only with --mode static (this is --mode rounds)"),
        (["--mode", "static", "--rebalance", "manual"], "--rebalance: only with --mode coordinator"),
        (["--mode", "coordinator", "--first-settle", "0"], "--first-settle"),
    ],
)
def test_simulate_refuses_a_mode_option_it_cannot_honour_in_one_line(args: list[str], message: str) -> None:
    result = cli("simulate", *args)
    assert result.code == 2, result.stderr
    assert message in result.one_error_line()


# -- the group's mode and partitions belong to its stored definition (issue 28 class 1) --------------------------


def stored_group(tmp_path: Path, config: GroupConfig, *, legacy: bool = False) -> str:
    """A group defined on a real SQLite store as a worker of its mode writes it (``legacy``: as a version that
    stored no mode wrote it)."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    record = config.to_json()
    del record["mode"]  # the older version's form: no mode, and layout 1 (``GroupConfig.record``)
    with connect(url) as store:
        store.put(Keys("g").resource, encode(record) if legacy else config.record())
    return url


def member(url: str, *args: str) -> list[str]:
    return ["worker", "--store", url, "--group", "g", "--id", "w", "--connect-timeout", "5", *args]


@pytest.mark.parametrize(
    ("stored", "args", "asked"),
    [
        (Rounds(), ["--mode", "static", "--ordinal", "0"], "static"),
        (Rounds(), ["--mode", "coordinator", "--partitions", "4"], "coordinator"),
        (Static(), [], "rounds"),
        (Coordinator(), ["--partitions", "4"], "rounds"),
        (Static(), ["--mode", "coordinator", "--partitions", "4", "--update"], "coordinator"),
    ],
)
def test_a_worker_of_another_mode_than_the_groups_is_refused_in_one_line_naming_both(
    stored: Mode, args: list[str], asked: str, tmp_path: Path
) -> None:
    """It used to run, get nothing and show its own mode's table on the group; ``--update`` cannot change a mode."""
    url = stored_group(tmp_path, GroupConfig(partitions=4, mode=stored))
    result = cli(*member(url, *args))
    assert result.code == 2, result.stderr
    message = f"group 'g' is a {stored.name} group; this worker asked for --mode {asked}"
    assert result.one_error_line() == f"apportion: error: mode: {message}"
    with connect(url) as store:
        assert GroupConfig.load(store, "g").mode == stored and not store.range(Keys("g").members)


NAMED = GroupConfig(resources=(Resource("a", 2),))


@pytest.mark.parametrize(
    ("stored", "args", "has", "asked"),
    [
        (GroupConfig(partitions=4), ["--partitions", "8"], "4 partitions", "8 partitions"),
        (NAMED, ["--resources", "a:2,b:2"], "resources a:2", "resources a:2,b:2"),
        (NAMED, ["--partitions", "2"], "resources a:2", "2 partitions"),
    ],
)
def test_a_worker_whose_partitions_differ_from_the_stored_definition_is_refused_without_update(
    stored: GroupConfig, args: list[str], has: str, asked: str, tmp_path: Path
) -> None:
    """It used to run silently on the stored partitioning."""
    url = stored_group(tmp_path, stored)
    result = cli(*member(url, *args))
    assert result.code == 2, result.stderr
    assert result.one_error_line() == (
        f"apportion: error: partitions: group 'g' has {has}; this worker asked for {asked} "
        "(a worker with --update rewrites the definition)"
    )
    with connect(url) as store:
        assert GroupConfig.load(store, "g") == stored


def run_until_registered(monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    """``apportion worker ARGS`` in this process, stopped (as SIGTERM would) once it has registered."""
    real_watch = StartUp.watch

    def stop_once_registered(self: StartUp, worker: Worker) -> None:
        real_watch(self, worker)

        def stop() -> None:
            if self._registered.wait(30):
                worker.stop(0)

        threading.Thread(target=stop, daemon=True).start()

    monkeypatch.setattr(StartUp, "watch", stop_once_registered)
    return cli(*args)


def test_update_still_rewrites_the_partitions_of_the_stored_definition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = stored_group(tmp_path, GroupConfig(partitions=4))
    result = run_until_registered(monkeypatch, *member(url, "--partitions", "8", "--update"))
    assert result.code == 0, result.stderr
    with connect(url) as store:
        assert GroupConfig.load(store, "g").partitions == 8


def test_a_definition_stored_before_modes_were_takes_the_first_workers_mode_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An old record has no mode: it reads as not recorded (not as rounds: it may be a static group's), the first
    worker of this version records its own, and from then on another mode is refused."""
    url = stored_group(tmp_path, GroupConfig(partitions=4, strategy="range"), legacy=True)
    with connect(url) as store:
        old = GroupConfig.load(store, "g")
        assert old.mode is None and old.partitions == 4 and old.strategy == "range"
    assert json.loads(cli("status", "--store", url, "--group", "g", "--json").stdout)["mode"] is None
    result = run_until_registered(monkeypatch, *member(url, "--mode", "static", "--ordinal", "0", "--replicas", "2"))
    assert result.code == 0, result.stderr
    with connect(url) as store:
        adopted = GroupConfig.load(store, "g")
        # an older group keeps its layout of the ownership records too (``_keys``)
        assert adopted == GroupConfig(partitions=4, strategy="range", mode=Static(2), layout=LEGACY_LAYOUT)
    assert json.loads(cli("status", "--store", url, "--group", "g", "--json").stdout)["mode"] == "static"
    again = cli(*member(url, "--partitions", "4"))
    assert again.code == 2
    assert "group 'g' is a static group; this worker asked for --mode rounds" in again.one_error_line()


@pytest.mark.parametrize(
    "args",
    [["--ordinal", "1" * 20], ["--ordinal", "1000000"], ["--hostname", "consumer-" + "9" * 20],
     ["--ordinal", "0", "--replicas", "1" * 20]],
)  # fmt: skip
def test_an_absurd_ordinal_or_replica_count_is_refused_before_the_store_is_opened(
    args: list[str], tmp_path: Path
) -> None:
    """A 20-digit --ordinal used to raise the group's replica count to 1e20 for good."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    result = cli(*member(url, "--partitions", "4", "--mode", "static", *args))
    assert result.code == 2, result.stderr
    assert "must be at most" in result.one_error_line()
    assert not (tmp_path / "store.db").exists()


def test_an_ordinal_is_bounded_in_the_python_api_too() -> None:
    with connect("memory://") as store, pytest.raises(InvalidRequest, match="ordinal: must be at most 999,999"):
        Group(store, "g", 4, mode=Static(), ordinal=10**20)
