"""How a command's outcome becomes an exit code and at most one stderr line; imports no click.

Exit codes: 0 success, 2 a user mistake (InvalidRequest, a usage error, a missing optional extra), 1 a runtime fault
(the store, the file system, a full stdout). Every error is one line on stderr, ``apportion: error: ...``, never a
traceback; ``--debug`` anywhere on the command line shows the traceback. Whatever is printed about a store URL has
its password masked (``apportion.store.redact``): the words of the command line and the URLs the command was given
(``--store``, from the environment or a config file) are remembered as they are parsed, and every error line and log
record is redacted with them.

:func:`guarded` runs a command with every mapping of a foreign exception but click's (``apportion.cli._app`` adds
those); :func:`finish` ends the process. Click-free so that the one command line read without click
(``apportion assign --input FILE``, see ``apportion.cli._assign_io``) words its errors the same way.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import NoReturn

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


def remember(value: object) -> None:
    """A value that may hold a store URL (a word of the command line, a ``--store``): its password is masked in
    everything printed afterwards."""
    if isinstance(value, str):
        _UNREAD.append(value)


def remember_argv(args: list[str]) -> None:
    """Secrets in the raw arguments too (so even a usage error that echoes one masks it)."""
    for arg in args:
        remember(arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg)


def scrub(text: str) -> str:
    """``text`` with every store password this command has seen masked. The values remembered are searched for
    passwords here, when something is first printed: a command that prints nothing but its output (`apportion
    assign`) does not load the store layer."""
    from apportion.store import redact, url_secrets

    while _UNREAD:
        _SECRETS.extend(s for s in url_secrets(_UNREAD.pop(0)) if s not in _SECRETS)
    return redact(text, _SECRETS)


# what an error line echoes: a longer word (a value the user gave: a group name, a URL) is cut to ECHO_CHARS, the
# whole line to LINE_CHARS (each with the length it had), so that a hostile value of a megabyte prints one short line
ECHO_CHARS = 200
LINE_CHARS = 2000


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}...({len(text):,} characters)"


def error(message: str) -> None:
    """One line on stderr, whatever the message holds (redacted first, then cut: a cut never splits a secret)."""
    line = _cut(" ".join(_cut(word, ECHO_CHARS) for word in scrub(message).split()), LINE_CHARS)
    with contextlib.suppress(OSError, ValueError):
        print(f"apportion: error: {line}", file=sys.stderr, flush=True)


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


# what a command asked to outlive it (:func:`keep_until_exit`)
_KEPT: list[object] = []


def keep_until_exit(*objects: object) -> None:
    """Let ``objects`` (a big request and its plan) outlive the command: when the command is its own process
    (:func:`finish`) they are never freed, the process ends with ``os._exit`` once stdout and stderr are flushed
    (freeing a million tuples one by one is ~8 % of `apportion assign` at 1,000,000 partitions); called in process
    (``apportion.cli.main``) they are freed when it returns."""
    _KEPT.extend(objects)


def release() -> None:
    """Free what the command kept (``main()`` in process returns)."""
    _KEPT.clear()


# click's exceptions -> an exit code (None: not one of them), given the traceback printer of --debug
Handler = Callable[[Exception, Callable[[], None]], "int | None"]


def guarded(invoke: Callable[[], object], debug: bool, more: Handler | None = None) -> int:
    """Run ``invoke`` (the command: it enters :func:`_signals.interruptible` for the command's run) and map what it
    raises to an exit code and one stderr line (``more`` maps the command-line parser's own exceptions, click's,
    before the catch-all), then flush stdout (a failure to write the output is an error too). The result of
    ``invoke``, an int, is the code."""

    def show_traceback() -> None:
        if debug:
            import traceback

            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(scrub(traceback.format_exc()))

    code = _guarded(invoke, show_traceback, more)
    problem = _flush_stdout()
    if problem is not None:
        _KEPT.clear()  # the normal exit: the interpreter's own flush finds stdout pointed at /dev/null
        if code == 0:
            error(problem)
        return code or 1
    return code


def _guarded(invoke: Callable[[], object], show_traceback: Callable[[], None], more: Handler | None) -> int:
    try:
        result = invoke()
    except ApportionError as exc:
        show_traceback()
        error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt as exc:  # SIGINT or SIGTERM (apportion.cli._signals): nothing to add to the ^C
        return _signals.exit_code(exc)
    except SystemExit as exc:  # a command that chose its exit code
        if isinstance(exc.code, str):
            error(exc.code)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except ModuleNotFoundError as exc:
        show_traceback()
        top = (exc.name or "").split(".")[0]
        if top not in EXTRAS:
            error(f"internal error: {exc} (a bug: please report it; --debug shows the traceback)")
            return 1
        extra = EXTRAS[top]
        error(f"this command needs the {extra} extra ({top} is not installed): pip install 'apportion[{extra}]'")
        return 2
    except OSError as exc:  # an environment fault: a disk, a pipe, a file system
        show_traceback()
        where = f": {exc.filename}" if exc.filename else ""
        error(f"{exc.strerror or exc}{where}")
        return 1
    except MemoryError:
        show_traceback()
        error("out of memory")
        return 1
    except Exception as exc:  # never a traceback without --debug; tests assert this line never appears
        code = None if more is None else more(exc, show_traceback)
        if code is not None:
            return code
        show_traceback()
        error(f"internal error: {type(exc).__name__}: {exc} (a bug: please report it; --debug shows the traceback)")
        return 1
    return int(result) if isinstance(result, int) else 0


def finish(code: int) -> NoReturn:
    """End the process that ran one command with ``code``. When the command kept objects for the exit
    (:func:`keep_until_exit`) and stdout was flushed without error, the process ends at once (``os._exit``): nothing
    else is open then (the command read its input whole and closed it, it logs nothing), so only the freeing of those
    objects and the interpreter's teardown are skipped."""
    if _signals.interrupted():
        _signals.end_children()  # what the way out did not stop (see apportion.cli._signals)
    if _KEPT:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
