"""The uv of this environment, for the tests that make throw-away environments (the wheel's build, a previous
release's venv): ``scripts/install-venv.sh`` installs it beside the environment's Python when pip can fetch it; pip
serves where it did not. uv reads its own settings, so pip's find-links and index settings are passed on as options,
as install-venv.sh does, and so is the set-up's cache of pyspark's wheel."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def uv() -> Path | None:
    """The uv executable beside this environment's Python, None when the set-up did not install it."""
    found = Path(sys.executable).parent / "uv"
    return found if found.exists() else None


def index_options() -> list[str]:
    """uv's options for pip's ``PIP_FIND_LINKS``, ``PIP_INDEX_URL`` and ``PIP_EXTRA_INDEX_URL``, and the wheel cache."""
    options = [f"--find-links={link}" for link in os.environ.get("PIP_FIND_LINKS", "").split()]
    options += [f"--index-url={url}" for url in os.environ.get("PIP_INDEX_URL", "").split()]
    options += [f"--extra-index-url={url}" for url in os.environ.get("PIP_EXTRA_INDEX_URL", "").split()]
    wheels = Path(os.environ.get("APPORTION_WHEEL_CACHE") or Path.home() / ".cache" / "apportion" / "wheels")
    return options + ([f"--find-links={wheels}"] if wheels.is_dir() else [])
