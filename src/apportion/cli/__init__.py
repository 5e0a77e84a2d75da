"""Command line: argument parsing and rich output only; every command calls into the library.

Each command lives in its own module (``_assign.py``, ``_worker.py``, ...) that registers itself on ``app``; the
group imports it only when that command runs or ``--help`` lists it (``_app.COMMANDS``: one line per command).
"""

from apportion.cli._app import app, main, run

__all__ = ["app", "main", "run"]
