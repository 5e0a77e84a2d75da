"""Fuzzing every option of every command (issue 28): the options are read from the click app itself, so a command or
option added later is fuzzed without a change here. Each value is drawn for the option's type — numbers that are not
finite, huge, negative or not numbers; hostile strings (long, non-ASCII, path traversal, malformed URLs); missing,
empty, corrupt and unreadable files and directories, a path leading out of the working directory — and whatever
comes in, the command exits 0, 1 or 2 with no traceback and, on error, exactly one ``apportion: error:`` line
(``tests.cli.run.check_exit``), and deletes nothing outside what it was given to write.

What would run for long once its input is valid is stopped at its door: the worker's run loop and metrics port
(``runner``), the dashboard's server and feed, a Spark session or Connect server, the demo and the pipeline worker:
each raises ``SystemExit(0)`` there (the command had accepted its input). ``status --watch`` is left out (it follows
the group until interrupted). ``APPORTION_FUZZ_EXAMPLES`` raises the number of examples (the 10-minute pass:
bench/README.md, "Fuzz pass").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apportion import runner
from apportion.cli import _app
from tests.cli.run import check_exit, cli

EXAMPLES = int(os.environ.get("APPORTION_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
LEFT_OUT = {("status", "--watch")}  # runs until interrupted


def _stop_here(*args: Any, **kwargs: Any) -> Any:
    raise SystemExit(0)


class _QuietFeed:
    """The dashboard's feed, constructed (its checks run) but never following the store."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def start(self) -> _QuietFeed:
        return self


@pytest.fixture(autouse=True)
def nothing_runs_for_long(monkeypatch: pytest.MonkeyPatch) -> None:
    import apportion.cli._demo as demo
    import apportion.cli._pipeline as pipeline
    import apportion.spark as spark
    import apportion.web as web

    monkeypatch.setattr(runner, "run_member", lambda *args, **kwargs: None)
    monkeypatch.setattr(runner, "serve_metrics", lambda *args, **kwargs: None)
    monkeypatch.setattr(web, "serve", _stop_here)
    monkeypatch.setattr(web, "Feed", _QuietFeed)
    monkeypatch.setattr(demo, "run_demo", _stop_here)
    monkeypatch.setattr(pipeline, "run_pipeline_worker", _stop_here)
    monkeypatch.setattr(spark, "spark_session", _stop_here)
    monkeypatch.setattr(spark, "ConnectServer", _stop_here)
    for name in list(os.environ):
        if name.startswith("APPORTION_"):
            monkeypatch.delenv(name)


def _commands() -> dict[tuple[str, ...], list[click.Parameter]]:
    """Every leaf command of the app (``pipeline run``, ``spark serve``, ...) with its parameters."""
    found: dict[tuple[str, ...], list[click.Parameter]] = {}

    def walk(path: tuple[str, ...], command: click.Command) -> None:
        if isinstance(command, click.Group):
            with click.Context(command) as ctx:
                for name in command.list_commands(ctx):
                    sub = command.get_command(ctx, name)
                    if sub is not None:
                        walk((*path, name), sub)
        else:
            found[path] = [p for p in command.params if not any((path[0], o) in LEFT_OUT for o in p.opts)]

    walk((), _app.app)
    return found


COMMANDS = _commands()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The fuzz's whole world: it runs four directories deep inside it, so that ``../../../..`` (a path leading
    out of the working directory) still lands inside it, on ``victim`` — never on the machine's own directories (a
    destructive option given a system path deletes it: ``demo --clean`` once did, as root)."""
    root = tmp_path_factory.mktemp("fuzz-sandbox")
    work = root / "a" / "b" / "c" / "d"
    work.mkdir(parents=True)
    (root / "victim").mkdir()
    (root / "victim" / "keep.txt").write_text("outside the working directory: no command may delete it")
    cwd = Path.cwd()
    os.chdir(work)  # relative paths and default outputs land here, not in the repository
    try:
        yield root
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def files(sandbox: Path) -> dict[str, str]:
    """Paths a user can meet: missing, empty, corrupt, a directory, unreadable, one leading out (``..``)."""
    root = sandbox / "files"
    root.mkdir()
    (root / "empty").write_bytes(b"")
    (root / "junk.db").write_bytes(b"SQLite format 3\x00" + os.urandom(200))
    (root / "junk.json").write_bytes(b'{"partitions": ')
    (root / "dir").mkdir()
    (root / "dir" / "_manifest.json").write_bytes(b"")
    locked = root / "locked"
    locked.write_text("x")
    locked.chmod(0)
    return {
        "missing": str(root / "nope" / "x"),
        "empty": str(root / "empty"),
        "junk.db": str(root / "junk.db"),
        "junk.json": str(root / "junk.json"),
        "dir": str(root / "dir"),
        "locked": str(locked),
        "outside": "../../../../victim",
    }


NUMBERS = ["nan", "inf", "-inf", "1e400", "-1", "0", "1e-320", "99999999999999999999", "2.5", "x", "", "1_000"]
STRINGS = [
    "a" * 10_000,
    ":" * 5_000 + "@",
    "sc://[::1:15002",
    "local[0]",
    "spark://127.0.0.1:1",
    "etcd://u:p@",
    "sqlite://",
    "memory://fuzz-every",
    "g",
    "w1",
    "orders:4,orders:4",
    "../x",
    "é²\u202e",
    "--",
    "-",
    "",
]


def _values(param: click.Parameter, files: dict[str, str]) -> st.SearchStrategy[str]:
    kind = param.type
    if isinstance(kind, click.Choice):
        return st.sampled_from([*map(str, kind.choices), "nope"])
    name = getattr(kind, "name", "")
    if name in ("integer", "float", "integer range", "float range") or "number" in name.lower():
        return st.sampled_from(NUMBERS)
    if isinstance(kind, click.Path | click.File) or any(w in " ".join(param.opts) for w in ("dir", "input", "out")):
        return st.sampled_from([*files.values(), "log"])
    if "--store" in param.opts:
        return st.sampled_from(["memory://fuzz-every", f"sqlite:///{files['junk.db']}", f"sqlite:///{files['dir']}",
                                "sqlite:///" + files["missing"], "etcd://127.0.0.1:1", "bogus://x", ""])  # fmt: skip
    return st.sampled_from(STRINGS) | st.text(max_size=12).filter(lambda t: "\x00" not in t)


@st.composite
def command_lines(draw: st.DrawFn, files: dict[str, str]) -> list[str]:
    path = draw(st.sampled_from(sorted(COMMANDS)))
    params = COMMANDS[path]
    args = list(path)
    options = [p for p in params if isinstance(p, click.Option)]
    arguments = [p for p in params if isinstance(p, click.Argument)]
    for _ in range(draw(st.integers(0, 6))):
        if not options:
            break
        option = draw(st.sampled_from(options))
        args.append(draw(st.sampled_from(option.opts)))
        if not option.is_flag:
            args.append(draw(_values(option, files)))
    for argument in arguments:
        if draw(st.booleans()):
            args.append(draw(_values(argument, files)))
    return args


@FUZZ
@given(data=st.data())
def test_every_option_of_every_command_exits_0_1_or_2_with_at_most_one_error_line(
    data: st.DataObject, files: dict[str, str], sandbox: Path
) -> None:
    args = data.draw(command_lines(files))
    check_exit(cli(*args, stdin=b'{"strategy": "sticky", "resources": {"t": 2}, "members": {"a": {}}}'))
    assert (sandbox / "victim" / "keep.txt").is_file(), f"apportion {' '.join(args)} deleted what lies outside"


def test_the_fuzzer_reaches_every_command() -> None:
    """A command the walk misses is a command nobody fuzzes."""
    assert {path[0] for path in COMMANDS} == set(_app.COMMANDS)
    assert ("pipeline", "run") in COMMANDS and ("spark", "serve") in COMMANDS
