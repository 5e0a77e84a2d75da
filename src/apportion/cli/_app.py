"""The click application: the commands (each imported when it runs) and what click raises, as exit codes.

What every other outcome becomes (exit codes, the one stderr line, masked passwords) is ``apportion.cli._outcome``.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from apportion.cli import _signals
from apportion.cli._outcome import (
    EXTRAS,
    error,
    finish,
    guarded,
    release,
    remember,
    remember_argv,
    scrub,
)

# commands that start Spark: the extra is checked before they do anything (the demo would spawn workers that each
# fail alone; report would read the store first)
SPARK_COMMANDS = (("demo",), ("report",), ("pipeline", "run"), ("spark", "serve"))


def require_extra(extra: str) -> None:
    """Import the modules of ``extra``: a missing one raises ModuleNotFoundError, which :func:`main` turns into
    ``pip install 'apportion[extra]'`` and exit 2."""
    for module, needed_by in EXTRAS.items():
        if needed_by == extra:
            importlib.import_module(module)


def remember_url(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Click callback of every ``--store`` option: its password is masked in everything printed afterwards."""
    remember(value)
    return value


def _redacting_log_records() -> None:
    """Every log record's message is redacted before any handler sees it (installed once per process)."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "apportion_redacts", False):
        return

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        message = record.getMessage()
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        return record

    make.apportion_redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make)


# every command -> the module that registers it on ``app``: imported when that command runs (or ``--help`` lists it),
# so `apportion assign` loads neither the group layers nor Spark's, rich's or another command's imports
COMMANDS = {
    "assign": "apportion.cli._assign",
    "dashboard": "apportion.cli._dashboard",
    "demo": "apportion.cli._demo",
    "demo-strategies": "apportion.cli._strategies_demo",
    "explain": "apportion.cli._explain",
    "kafka": "apportion.cli._kafka",
    "pipeline": "apportion.cli._pipeline",
    "rabbitmq": "apportion.cli._rabbitmq",
    "rebalance": "apportion.cli._rebalance",
    "report": "apportion.cli._report",
    "route": "apportion.cli._route",
    "scale": "apportion.cli._scale",
    "simulate": "apportion.cli._simulate",
    "spark": "apportion.cli._spark",
    "status": "apportion.cli._status",
    "subscribe": "apportion.cli._subscribe",
    "worker": "apportion.cli._worker",
}


class LazyGroup(click.Group):
    """A group whose commands (:data:`COMMANDS`) are imported by name when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(COMMANDS[cmd_name])  # registers it with @app.command()
        return self.commands.get(cmd_name)


@click.group(
    name="apportion",
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
@click.version_option(package_name="apportion")
def app() -> None:
    """Assign the partitions of a resource to a changing fleet of workers: balanced, sticky, exclusive.

    Add --debug to any command to see a traceback on error.
    """


def _needs_spark(args: list[str]) -> bool:
    """Whether ``args`` run a Spark command (not just its --help)."""
    words = tuple(a for a in args if not a.startswith("-"))
    return not {"-h", "--help"} & set(args) and any(words[: len(c)] == c for c in SPARK_COMMANDS)


def _usage_hint(exc: click.ClickException) -> str:
    ctx = getattr(exc, "ctx", None)
    return f" (see '{ctx.command_path} --help')" if isinstance(exc, click.UsageError) and ctx is not None else ""


def main(argv: list[str] | None = None) -> int:
    """Run the command, map errors to one stderr line and an exit code (in process: the tests call it so)."""
    try:
        return _main(argv)
    finally:
        release()


def run() -> NoReturn:
    """Console entry point (``apportion.cli.run`` calls it once the signal handling is in): :func:`main` as the whole
    process (SIGINT/SIGTERM: ``apportion.cli._signals``, exit code 128 + signal), ended by
    ``apportion.cli._outcome.finish``."""
    finish(_main(None))


def _main(argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    remember_argv(args)
    _redacting_log_records()
    return guarded(lambda: _invoke(args), debug, _click_outcome)


def _invoke(args: list[str]) -> object:
    if _needs_spark(args):
        require_extra("spark")
    with _signals.interruptible():
        return app.main(args=args, prog_name="apportion", standalone_mode=False)


def _click_outcome(exc: Exception, show_traceback: Callable[[], None]) -> int | None:
    """The exit code of what click raised (None: not click's)."""
    if isinstance(exc, click.exceptions.Exit):
        return int(exc.exit_code)
    if isinstance(exc, click.exceptions.Abort):
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click's word for a signal: the signal's exit, no line
            return _signals.exit_code(exc.__cause__)
        error("aborted")
        return 130
    if isinstance(exc, click.ClickException):
        show_traceback()
        error(exc.format_message() + _usage_hint(exc))
        return 2 if isinstance(exc, click.UsageError) else exc.exit_code
    return None
