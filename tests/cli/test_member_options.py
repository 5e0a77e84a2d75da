"""Issue 45.1: a group member's options are one shared set (``cli/_member.py``): `apportion rabbitmq consume` takes
`apportion worker`'s whole member surface — ``--replicas-from kubernetes``, ``--metrics-port`` and its probes,
``--capacity``, ``--rack``, ``--config``, ... — not a copy that drifts (it had neither ``--replicas-from`` nor
``--metrics-port``, so seed 3 could not run in a StatefulSet with probes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest

from apportion.cli._app import app
from apportion.cli._kafka_options import kafka_options
from tests.cli.run import cli


def options_of(*words: str) -> set[str]:
    command: click.Command | None = app
    for word in words:
        assert isinstance(command, click.Group)
        command = command.get_command(click.Context(command), word)
    assert command is not None
    return {opt for p in command.params if isinstance(p, click.Option) for opt in p.opts if opt.startswith("--")}


def kafka_option_names() -> set[str]:
    def nothing(**kwargs: Any) -> None: ...

    command = click.command()(kafka_options()(nothing))
    return {opt for p in command.params for opt in p.opts if opt.startswith("--")}


def test_rabbitmq_consume_takes_the_workers_whole_member_surface() -> None:
    worker, consume = options_of("worker"), options_of("rabbitmq", "consume")
    assert worker - consume == {"--resources", "--subscribe", "--commit-every", *kafka_option_names()}
    assert consume - worker == {"--amqp", "--prefix", "--queue-name", "--handler", "--prefetch", "--batch",
                                "--ack-delay"}  # fmt: skip
    assert {"--replicas-from", "--metrics-port", "--metrics-host", "--config", "--rack", "--capacity"} <= consume


CONSUME = ["rabbitmq", "consume", "--amqp", "amqp://127.0.0.1:1/%2F", "--prefix", "q", "--partitions", "4"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--id", "a", "--replicas-from", "kubernetes"], "replicas-from: only with --mode static (this is --mode rou"),
        (["--mode", "static", "--ordinal", "0", "--replicas-from", "kubernetes"], "needs the pod's host name"),
        (["--id", "a", "--rack", ""], "rack: a rack is a non-empty name"),
        (["--id", "a", "--metrics-port", "70000"], "--metrics-port"),
        (["--id", "a", "--first-settle", "3"], "--first-settle: only with --mode coordinator"),
    ],
)
def test_a_member_option_misused_on_consume_is_one_line_exit_2_as_on_worker(
    args: list[str], message: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    for command in (CONSUME, ["worker", "--partitions", "4"]):
        result = cli(*command, "--store", url, "--group", "g", *args)
        assert result.code == 2, (command, result.stderr)
        assert message in result.one_error_line()
    assert not (tmp_path / "a.db").exists()


def test_consume_reads_its_options_from_a_config_file_as_the_worker_does(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[worker]\nstore = "memory://c"\ngroup = "g"\nid = "a"\nrack = ""\n')
    result = cli(*CONSUME, "--config", str(config))
    assert result.code == 2 and "rack: a rack is a non-empty name" in result.one_error_line()
