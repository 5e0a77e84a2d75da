"""Command line: argument parsing and rich output only; every command calls into the library.

Each command lives in its own module (``_assign.py``, ``_worker.py``, ...) that registers itself on ``app``.
"""

from apportion.cli import (
    _assign,  # noqa: F401  (registers `apportion assign`)
    _dashboard,  # noqa: F401  (registers `apportion dashboard`)
    _demo,  # noqa: F401  (registers `apportion demo`, the main job)
    _explain,  # noqa: F401  (registers `apportion explain`)
    _pipeline,  # noqa: F401  (registers `apportion pipeline produce|run|verify`)
    _rebalance,  # noqa: F401  (registers `apportion rebalance`)
    _report,  # noqa: F401  (registers `apportion report`)
    _route,  # noqa: F401  (registers `apportion route`)
    _scale,  # noqa: F401  (registers `apportion scale`)
    _simulate,  # noqa: F401  (registers `apportion simulate`)
    _spark,  # noqa: F401  (registers `apportion spark serve`)
    _status,  # noqa: F401  (registers `apportion status`)
    _strategies_demo,  # noqa: F401  (registers `apportion demo-strategies`)
    _subscribe,  # noqa: F401  (registers `apportion subscribe`)
    _worker,  # noqa: F401  (registers `apportion worker`)
)
from apportion.cli._app import app, main

__all__ = ["app", "main"]
