"""`--mode rounds|coordinator|static` and each mode's options, declared once (``cli/_common.py``) for `apportion
worker`, `apportion pipeline run` and `apportion simulate` (issue 17, "every mode everywhere"). An option of another
mode is one error line, exit 2, whichever command and wherever it came from (command line, environment, config)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from apportion.sim import SimConfig, simulate
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


def test_a_stateful_pipeline_is_refused_outside_the_rounds_mode_before_spark_starts(tmp_path: Path) -> None:
    """The mode reaches the pipeline's group: standby and learner replicas exist only in the rounds mode."""
    for mode in (["--mode", "coordinator"], ["--mode", "static", "--hostname", "c-0"]):
        result = cli(*pipeline_args(tmp_path), *mode, "--state-dir", str(tmp_path / "state"))
        assert result.code == 2, result.stderr
        assert "state-dir: stateful partitions (standby and learner replicas) need the rounds mode" in (
            result.one_error_line()
        )


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
        (["--mode", "coordinator", "--grid", "grid.toml"], "--mode: a --grid's scenarios run in the rounds mode"),
    ],
)
def test_simulate_refuses_a_mode_option_it_cannot_honour_in_one_line(args: list[str], message: str) -> None:
    result = cli("simulate", *args)
    assert result.code == 2, result.stderr
    assert message in result.one_error_line()
