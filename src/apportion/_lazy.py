"""PEP 562 lazy package faces: a package's public names load from their modules on first use (``apportion``,
``apportion.spark``), so importing the package costs only its ``__init__``."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(face: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of package ``face``: ``names`` maps each public name to the module it is in; a name
    is imported on first use and then kept on the package (later lookups do not come here)."""

    def load(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {face!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[face], name, value)
        return value

    return load


def lazy_dir(face: str, names: Mapping[str, str]) -> Callable[[], list[str]]:
    """The module ``__dir__`` of package ``face``: its loaded attributes and the lazy ``names`` not loaded yet."""

    def listing() -> list[str]:
        return sorted({*vars(sys.modules[face]), *names})

    return listing


def by_module(modules: Mapping[str, str]) -> dict[str, str]:
    """``{module: "name name ..."}`` (a face's table, module by module) as ``{name: module}`` for :func:`lazy_names`."""
    return {name: module for module, names in modules.items() for name in names.split()}
