"""Command line: argument parsing and rich output only; every command calls into the library.

Each command lives in its own module (``_assign.py``, ``_worker.py``, ...) that registers itself on ``app``.
"""

from apportion.cli import _assign  # noqa: F401  (registers `apportion assign`)
from apportion.cli._app import app, main

__all__ = ["app", "main"]
