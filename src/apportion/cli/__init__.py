"""Command line: argument parsing and rich output only; every command calls into the library.

Each command lives in its own module (``_assign.py``, ``_worker.py``, ...) that registers itself on ``app``; the
group imports it only when that command runs or ``--help`` lists it (``_app.COMMANDS``: one line per command).

This face imports nothing heavy (``app`` and ``main`` load on first use, PEP 562): :func:`run`, the console entry
point, installs the signal handling (``apportion.cli._signals``) before the command line's imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from apportion._lazy import lazy_names

if TYPE_CHECKING:  # the same names, eagerly, for type checkers
    from apportion.cli._app import app, main

__getattr__ = lazy_names(__name__, {"app": "apportion.cli._app", "main": "apportion.cli._app"})


def run() -> NoReturn:
    """Console entry point (``apportion``, ``python -m apportion.cli``): a SIGINT or SIGTERM from here on ends the
    process quietly (see ``apportion.cli._signals``), even during the imports that follow; then the command
    (``apportion.cli._app.run``)."""
    import sys

    from apportion.cli._signals import install

    install()
    from apportion.cli._assign_io import run_plain

    run_plain(sys.argv[1:])  # `apportion assign [--input FILE]`: run and ended here, before click is imported
    from apportion.cli._app import run as run_command

    run_command()


__all__ = ["app", "main", "run"]
