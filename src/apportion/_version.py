"""This apportion's version: the installed distribution's (its metadata, written from the git tag at install by
hatch-vcs: pyproject's ``[tool.hatch.version]``), read on first use and kept. ``importlib.metadata`` costs ~0.1 s,
which ``import apportion`` and `apportion assign` do not pay: ``apportion.__version__`` and the lines that name the
version (``NewerFormat``) call :func:`version` only when they need it."""

from __future__ import annotations

import functools

UNKNOWN = "0.0.0+unknown"  # a source tree on sys.path that was never installed


@functools.cache
def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("apportion")
    except PackageNotFoundError:
        return UNKNOWN
