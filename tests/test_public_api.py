"""The top-level API is exactly what the documentation lists (docs/guides/library.md, "What the package exports")."""

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import apportion

LIBRARY = Path(__file__).resolve().parents[1] / "docs" / "guides" / "library.md"
ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"


def test_top_level_all_is_exactly_the_documented_api() -> None:
    block = LIBRARY.read_text().split("<!-- api -->")[1].split("<!-- /api -->")[0]
    documented = set(re.findall(r"`(\w+)`", block))
    assert set(apportion.__all__) == documented
    assert len(apportion.__all__) == len(set(apportion.__all__))


def test_the_group_face_is_exactly_the_documented_list() -> None:
    """``apportion.group.__all__`` is the list of docs/ARCHITECTURE.md ("The faces"), each name once and loadable;
    what apportion's other packages need beyond it is in ``apportion.group.internals``, disjoint from the face."""
    import apportion.group
    import apportion.group.internals

    block = ARCHITECTURE.read_text().split("<!-- group-api -->")[1].split("<!-- /group-api -->")[0]
    documented = re.findall(r"`(\w+)`", block)
    assert sorted(apportion.group.__all__) == sorted(documented)
    assert len(apportion.group.__all__) == len(set(apportion.group.__all__))
    for name in apportion.group.__all__:
        assert hasattr(apportion.group, name), name
    for name in apportion.group.internals.__all__:
        assert hasattr(apportion.group.internals, name), name
    assert set(apportion.group.__all__).isdisjoint(apportion.group.internals.__all__)


def test_every_exported_name_exists() -> None:
    for name in apportion.__all__:
        assert hasattr(apportion, name), name


@pytest.mark.parametrize("module_name", ["apportion", "apportion.spark"])
def test_a_lazy_face_names_each_export_once_for_runtime_and_type_checkers(module_name: str) -> None:
    """``apportion`` and ``apportion.spark`` load their names lazily (``_LAZY``) and declare them again under
    ``TYPE_CHECKING`` for mypy: the two lists and ``__all__`` must agree, and every name must load."""
    face = importlib.import_module(module_name)
    source = Path(face.__file__ or "").read_text()
    declared = {
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for stmt in node.body
        if isinstance(stmt, ast.ImportFrom)
        for alias in stmt.names
    }
    lazy = set(face._LAZY)
    assert declared == lazy == set(face.__all__)
    for name, module in face._LAZY.items():
        assert hasattr(importlib.import_module(module), name), f"{module} has no {name}"


def test_importing_apportion_loads_no_layer_until_a_name_is_used() -> None:
    """``import apportion`` (and so `apportion assign`) does not load the group, store and worker layers; ``from
    apportion import Group`` does, and gives the worker layer's class."""
    code = (
        "import sys, apportion\n"
        "before = sorted(m for m in ('apportion.group', 'apportion.store', 'apportion.worker') if m in sys.modules)\n"
        "from apportion import Group\n"
        "import apportion.worker\n"
        "print(before, Group is apportion.worker.Group, 'Group' in dir(apportion))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "True", "True"]
