"""The click application and the one place where errors become exit codes.

Exit codes: 0 success, 2 a user mistake (InvalidRequest, a usage error, a missing optional extra), 1 a runtime fault
(the store, the file system, a full stdout). Every error is one line on stderr, ``apportion: error: ...``, never a
traceback; ``--debug`` anywhere on the command line shows the traceback. Whatever is printed about a store URL has
its password masked (``apportion.store.redact``): the URLs the command was given (``--store``, from the
command line, the environment or a config file) are remembered as they are parsed, and every error line and log
record is redacted with them.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import traceback
from typing import Any, NoReturn

import click

from apportion.cli import _signals
from apportion.errors import ApportionError

# optional dependency (top-level module) -> the extra that installs it
EXTRAS = {
    "pyspark": "spark",
    "pyarrow": "spark",
    "pandas": "spark",
    "matplotlib": "spark",
    "grpc": "spark",  # Spark Connect (--spark sc://..., apportion spark serve)
    "httpx": "etcd",
    "prometheus_client": "metrics",
    "starlette": "dashboard",
    "uvicorn": "dashboard",
    "pika": "rabbitmq",
    "kubernetes": "kubernetes",
}

_SECRETS: list[str] = []
_UNREAD: list[str] = []  # values remembered whose secrets are not in _SECRETS yet (see scrub)
# commands that start Spark: the extra is checked before they do anything (the demo would spawn workers that each
# fail alone; report would read the store first)
SPARK_COMMANDS = (("demo",), ("report",), ("pipeline", "run"), ("spark", "serve"))


def require_extra(extra: str) -> None:
    """Import the modules of ``extra``: a missing one raises ModuleNotFoundError, which :func:`main` turns into
    ``pip install 'apportion[extra]'`` and exit 2."""
    for module, needed_by in EXTRAS.items():
        if needed_by == extra:
            importlib.import_module(module)


def _remember(value: object) -> None:
    if isinstance(value, str):
        _UNREAD.append(value)


def remember_url(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Click callback of every ``--store`` option: its password is masked in everything printed afterwards."""
    _remember(value)
    return value


def scrub(text: str) -> str:
    """``text`` with every store password this command has seen masked. The values remembered are searched for
    passwords here, when something is first printed: a command that prints nothing but its output (`apportion
    assign`) does not load the store layer."""
    from apportion.store import redact, url_secrets

    while _UNREAD:
        _SECRETS.extend(s for s in url_secrets(_UNREAD.pop(0)) if s not in _SECRETS)
    return redact(text, _SECRETS)


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


# what an error line echoes: a longer word (a value the user gave: a group name, a URL) is cut to ECHO_CHARS, the
# whole line to LINE_CHARS (each with the length it had), so that a hostile value of a megabyte prints one short line
ECHO_CHARS = 200
LINE_CHARS = 2000


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}...({len(text):,} characters)"


def _error(message: str) -> None:
    """One line on stderr, whatever the message holds (redacted first, then cut: a cut never splits a secret)."""
    line = _cut(" ".join(_cut(word, ECHO_CHARS) for word in scrub(message).split()), LINE_CHARS)
    with contextlib.suppress(OSError, ValueError):
        print(f"apportion: error: {line}", file=sys.stderr, flush=True)


def _usage_hint(exc: click.ClickException) -> str:
    ctx = getattr(exc, "ctx", None)
    return f" (see '{ctx.command_path} --help')" if isinstance(exc, click.UsageError) and ctx is not None else ""


def _flush_stdout() -> str | None:
    """Flush stdout now, while an error can still be reported (a full disk, /dev/full, a closed pipe); on failure
    point stdout at /dev/null so that the interpreter's own flush at exit does not print a second error."""
    try:
        sys.stdout.flush()
        return None
    except (OSError, ValueError) as exc:
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return f"cannot write to stdout: {reason}"


def _remember_argv(args: list[str]) -> None:
    """Secrets in the raw arguments too (so even a usage error that echoes one masks it)."""
    for arg in args:
        _remember(arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg)


# what a command asked to outlive it (:func:`keep_until_exit`)
_KEPT: list[object] = []


def keep_until_exit(*objects: object) -> None:
    """Let ``objects`` (a big request and its plan) outlive the command: when the command is its own process
    (:func:`run`) they are never freed, the process ends with ``os._exit`` once stdout and stderr are flushed (freeing
    a million tuples one by one is ~8 % of `apportion assign` at 1,000,000 partitions); called in process
    (:func:`main`) they are freed when it returns."""
    _KEPT.extend(objects)


def main(argv: list[str] | None = None) -> int:
    """Run the command, map errors to one stderr line and an exit code (in process: the tests call it so)."""
    try:
        return _main(argv)
    finally:
        _KEPT.clear()


def run() -> NoReturn:
    """Console entry point (``apportion.cli.run`` calls it once the signal handling is in): :func:`main` as the whole
    process (SIGINT/SIGTERM: ``apportion.cli._signals``, exit code 128 + signal). When the
    command kept objects for the exit (:func:`keep_until_exit`) and stdout was flushed without error, the process ends
    at once (``os._exit``): nothing else is open then (the command read its input whole and closed it, it logs
    nothing), so only the freeing of those objects and the interpreter's teardown are skipped."""
    code = _main(None)
    if _signals.interrupted():
        _signals.end_children()  # what the way out did not stop (see apportion.cli._signals)
    if _KEPT:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _main(argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    _remember_argv(args)
    _redacting_log_records()
    code = _run(args, debug)
    problem = _flush_stdout()
    if problem is not None:
        _KEPT.clear()  # the normal exit: the interpreter's own flush finds stdout pointed at /dev/null
        if code == 0:
            _error(problem)
        return code or 1
    return code


def _run(args: list[str], debug: bool) -> int:
    def show_traceback() -> None:
        if debug:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(scrub(traceback.format_exc()))

    try:
        if _needs_spark(args):
            require_extra("spark")
        with _signals.interruptible():
            result = app.main(args=args, prog_name="apportion", standalone_mode=False)
    except ApportionError as exc:
        show_traceback()
        _error(str(exc))
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click's word for a signal: the signal's exit, no line
            return _signals.exit_code(exc.__cause__)
        _error("aborted")
        return 130
    except click.ClickException as exc:
        show_traceback()
        _error(exc.format_message() + _usage_hint(exc))
        return 2 if isinstance(exc, click.UsageError) else exc.exit_code
    except KeyboardInterrupt as exc:  # SIGINT or SIGTERM (apportion.cli._signals): nothing to add to the ^C
        return _signals.exit_code(exc)
    except SystemExit as exc:  # a command that chose its exit code
        if isinstance(exc.code, str):
            _error(exc.code)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except ModuleNotFoundError as exc:
        show_traceback()
        top = (exc.name or "").split(".")[0]
        if top not in EXTRAS:
            _error(f"internal error: {exc} (a bug: please report it; --debug shows the traceback)")
            return 1
        extra = EXTRAS[top]
        _error(f"this command needs the {extra} extra ({top} is not installed): pip install 'apportion[{extra}]'")
        return 2
    except OSError as exc:  # an environment fault: a disk, a pipe, a file system
        show_traceback()
        where = f": {exc.filename}" if exc.filename else ""
        _error(f"{exc.strerror or exc}{where}")
        return 1
    except MemoryError:
        show_traceback()
        _error("out of memory")
        return 1
    except Exception as exc:  # never a traceback without --debug; tests assert this line never appears
        show_traceback()
        _error(f"internal error: {type(exc).__name__}: {exc} (a bug: please report it; --debug shows the traceback)")
        return 1
    return int(result) if isinstance(result, int) else 0
