"""`apportion assign`'s request in and plan out, and its one command line read without click.

``apportion assign``, ``apportion assign --input FILE`` and ``apportion assign --input=FILE`` (FILE not a
directory, not starting with ``-``) are run by :func:`run_plain` before click is imported (click's import is ~5 % of
the command at a million partitions): the same steps as the click command (``apportion.cli._assign``), errors worded
and exit codes chosen by the same ``apportion.cli._outcome``. Every other command line (``--format table``,
``--debug``, ``--help``, a usage error) goes to click. This path installs no log-record redaction (what
``apportion.cli._app`` does for every command): the parse, the planner and the output log nothing.
"""

from __future__ import annotations

import os
import sys
from typing import Literal

from apportion.assign import dumps_plan, gc_paused, loads_request, plan
from apportion.cli import _signals
from apportion.cli._outcome import finish, guarded, keep_until_exit, remember_argv
from apportion.errors import InvalidRequest
from apportion.model import Plan


def read_request(input_path: str | None) -> str | bytes:
    """The request: the bytes of ``--input`` or stdin when they are ASCII (``loads_request`` reads them without a
    decode), else their UTF-8 text; anything else (binary, UTF-16, no stdin) is InvalidRequest."""
    where = "stdin" if input_path is None else input_path
    try:
        if input_path is not None:
            with open(input_path, "rb") as file:  # not pathlib: its import is ~3 % of the command at a million
                data = file.read()
        elif sys.stdin is None:
            raise InvalidRequest("input", "stdin is closed: pipe the request in or give --input FILE")
        elif hasattr(sys.stdin, "buffer"):
            data = sys.stdin.buffer.read()
        else:
            return sys.stdin.read()
        return data if data.isascii() else data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest("input", f"{where} is not UTF-8 text (byte {exc.start}): a JSON request is") from exc
    except OSError as exc:
        raise InvalidRequest("input", f"cannot read {where}: {exc.strerror or exc}") from exc


def planned(input_path: str | None) -> Plan:
    """The plan of the request read from ``input_path`` (stdin: None); the request and the plan are kept until the
    process ends (``keep_until_exit``: not freed one by one when this is the whole process). Options the strategy
    cannot apply to this request (``high_availability``'s replica options with no stateful resource) are one
    ``apportion: warning:`` line each on stderr; the plan is printed as ever, exit 0."""
    request = loads_request(read_request(input_path))
    result = plan(request)
    if request.strategy == "high_availability":  # an option that cannot change the plan is said (issue 45.7)
        from apportion.assign import ignored_options

        for note in ignored_options(request):
            sys.stderr.write(f"apportion: warning: {note}\n")
    keep_until_exit(request, result)
    return result


def write_json(result: Plan) -> None:
    """The plan as compact JSON on stdout, one line."""
    out = dumps_plan(result)
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is not None:
        buffer.write(out)
        buffer.write(b"\n")  # apart: adding it to `out` would copy the whole plan (11 MB at a million)
    else:  # a text-only stdout (tests capture it so)
        sys.stdout.write(out.decode() + "\n")


def plain_input(args: list[str]) -> str | Literal[False] | None:
    """The input of a plain `apportion assign` command line (None: stdin), or False for any other."""
    if args[:1] != ["assign"]:
        return False
    if len(args) == 1:
        return None
    if len(args) == 3 and args[1] == "--input":
        path = args[2]
    elif len(args) == 2 and args[1].startswith("--input="):
        path = args[1].removeprefix("--input=")
    else:
        return False
    return path if path and not path.startswith("-") and not os.path.isdir(path) else False  # click words these


def run_plain(args: list[str]) -> None:
    """Run a plain `apportion assign` command line (:func:`plain_input`) and end the process; return at once for any
    other command line."""
    input_path = plain_input(args)
    if input_path is False:
        return
    remember_argv(args)

    def assign() -> None:
        with _signals.interruptible(), gc_paused():  # see apportion.cli._assign
            write_json(planned(input_path))

    finish(guarded(assign, debug=False))
