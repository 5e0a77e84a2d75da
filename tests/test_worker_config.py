"""`apportion worker` options from --config FILE.toml and APPORTION_* variables: command line > env > file > default."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from apportion import events
from apportion.cli._worker import worker


def resolve(args: list[str]) -> dict[str, Any]:
    """The worker's parameters as click resolves them (without running a worker)."""
    with worker.make_context("worker", list(args)) as ctx:
        return dict(ctx.params)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("APPORTION_"):
            monkeypatch.delenv(name)


def test_command_line_beats_environment_beats_file_beats_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "w.toml"
    config.write_text('store = "memory://file"\ngroup = "g-file"\nid = "w-file"\nttl = 9.0\nmin-interval = 2.5\n')
    monkeypatch.setenv("APPORTION_GROUP", "g-env")
    monkeypatch.setenv("APPORTION_ID", "w-env")
    monkeypatch.setenv("APPORTION_MAX_IN_FLIGHT", "7")
    params = resolve(["--config", str(config), "--id", "w-cli"])
    assert params["worker_id"] == "w-cli"  # command line
    assert params["group_name"] == "g-env"  # environment over file
    assert params["max_in_flight"] == 7  # environment over default
    assert params["store_url"] == "memory://file"  # file
    assert params["ttl_s"] == 9.0 and params["min_interval_s"] == 2.5  # file, converted
    assert params["settle_s"] == 0.5 and params["metrics_port"] is None  # defaults


def test_config_file_can_come_from_the_environment_and_use_a_worker_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "w.toml"
    config.write_text('[worker]\nstore = "memory://x"\ngroup = "g"\nupdate = true\nmode = "coordinator"\n')
    monkeypatch.setenv("APPORTION_CONFIG", str(config))
    params = resolve([])
    assert params["store_url"] == "memory://x" and params["update"] is True and params["mode"] == "coordinator"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "apportion.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=full,
        check=False,
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("store = [unclosed", "not valid TOML"),
        ('stor = "memory://x"', "unknown option 'stor'"),
        ('ttl = "soon"', "ttl"),
        ('mode = "chaos"', "mode"),
        (None, "w.toml"),
    ],
)
def test_a_bad_config_file_is_one_line_and_exit_2(tmp_path: Path, content: str | None, expected: str) -> None:
    config = tmp_path / "w.toml"
    if content is not None:
        config.write_text(content + "\n")
    done = _cli("worker", "--config", str(config), "--store", "memory://x", "--group", "g", "--id", "a")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("apportion: error: config:"), done.stderr
    assert expected in lines[0]


def test_a_worker_runs_from_a_config_file_and_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "w.toml"
    config.write_text(f'store = "sqlite:///{tmp_path}/s.db"\npartitions = 3\nsettle = 0.05\nmin-interval = 0.1\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "apportion.cli", "worker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")}
        | {"APPORTION_CONFIG": str(config), "APPORTION_GROUP": "g", "APPORTION_ID": "w1"},
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 20
        event: dict[str, Any] = {}
        while time.monotonic() < deadline and event.get("event") != "assigned":
            line = proc.stdout.readline()
            if not line:
                break
            event = events.parse(line) or {}
        assert event == {"event": "assigned", "partitions": [0, 1, 2], "time": event.get("time")}, event
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err


def test_watch_and_json_together_are_refused() -> None:
    done = _cli("status", "--store", "memory://x", "--group", "g", "--watch", "--json")
    assert done.returncode == 2 and "--watch" in done.stderr


CTRL_C_AT_SECOND_WAIT = """
import sys, time, types
import apportion.cli._status as status
from apportion.cli import main

waits = []

def sleep(seconds):
    waits.append(seconds)
    if len(waits) == 2:
        raise KeyboardInterrupt

status.time = types.SimpleNamespace(time=time.time, sleep=sleep)
sys.exit(main(sys.argv[1:]))
"""
"""`apportion ARGS` whose `status --watch` gets Ctrl-C at its second wait between refreshes (a fault the test
installs: the command itself has no option to stop)."""


def test_status_watch_redraws_the_tables_and_shows_json_offsets(tmp_path: Path) -> None:
    from apportion.store import connect
    from tests.group.harness import Harness

    url = f"sqlite:///{tmp_path}/s.db"
    with connect(url) as store:
        h = Harness()
        h.store = store  # type: ignore[assignment]
        a = h.add("a")
        h.run(2.0)
        a.commit(4, json.dumps({"offset": 1234}))
    # Ctrl-C at the second wait between refreshes: two tables drawn, then the exit a user's Ctrl-C takes
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_AT_SECOND_WAIT, "status", "--store", url, "--group", "g", "--watch",
         "--interval", "0.05"],
        capture_output=True, text=True, timeout=60, check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("APPORTION_")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "partitions" in done.stdout and "offset" in done.stdout and "1234" in done.stdout
    assert "updated" in done.stdout


def test_rack_reaches_the_strategy_high_availability_puts_standbys_on_another_rack(tmp_path: Path) -> None:
    """Issue 45.6: ``rack`` is what high_availability's standby placement compares, and `apportion worker` had no
    option for it. w1 and w2 on rack a, w3 on rack b, one standby per partition: every partition active on rack a
    has its standby on w3 (without racks they spread by load), and a blank rack is refused in one line."""
    from apportion.fleet import Fleet, worker_args
    from apportion.group import GroupConfig, group_status
    from apportion.group.internals import Keys
    from apportion.store import connect
    from apportion.waiting import wait_for
    from tests.cli.run import cli

    url = f"sqlite:///{tmp_path / 'store.db'}"
    config = GroupConfig(partitions=6, strategy="high_availability", stateful=True, options={"num_standby_replicas": 1})
    with connect(url) as store:
        store.put(Keys("g").resource, config.record())

    def placed() -> dict[str, set[str]] | None:
        """Each active member's standby holders, once every partition has an active and a standby."""
        with connect(url) as store:
            partitions = group_status(store, "g").partitions.values()
        roles = [{r["role"]: m for m, r in p.tags.items()} for p in partitions]
        if len(roles) != 6 or not all({"active", "standby"} <= set(r) for r in roles):
            return None
        if {r["active"] for r in roles} != {"w1", "w2", "w3"}:
            return None
        found: dict[str, set[str]] = {}
        for r in roles:
            found.setdefault(r["active"], set()).add(r["standby"])
        return found

    # one first round over all three (RST 2 s: started together, they all join it), so the actives are placed at
    # once (no learner: nothing was owned) and only the racks decide where the standbys go
    with Fleet(tmp_path / "logs", worker_args(url, "g", "--settle", "2", "--min-interval", "2")) as fleet:
        for wid, rack in (("w1", "a"), ("w2", "a"), ("w3", "b")):
            fleet.start(wid, "--rack", rack)
        wait_for("a plan with a standby for every partition", lambda: placed() is not None, 60)
        standbys = placed()
    assert standbys is not None and standbys["w1"] == standbys["w2"] == {"w3"}, standbys
    blank = cli("worker", "--store", "memory://r", "--group", "g", "--id", "w", "--partitions", "2", "--rack", " ")
    assert blank.code == 2 and "rack: a rack is a non-empty name" in blank.one_error_line()
