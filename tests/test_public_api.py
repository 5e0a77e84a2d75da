"""The top-level API is exactly what the README documents."""

import re
from pathlib import Path

import apportion

README = Path(__file__).resolve().parents[1] / "README.md"


def test_top_level_all_is_exactly_the_documented_api() -> None:
    block = README.read_text().split("<!-- api -->")[1].split("<!-- /api -->")[0]
    documented = set(re.findall(r"`(\w+)`", block))
    assert set(apportion.__all__) == documented
    assert len(apportion.__all__) == len(set(apportion.__all__))


def test_every_exported_name_exists() -> None:
    for name in apportion.__all__:
        assert hasattr(apportion, name), name


def test_the_lazy_spark_face_names_each_export_once_for_runtime_and_type_checkers() -> None:
    """``apportion.spark`` loads its names lazily (``_LAZY``) and declares them again under ``TYPE_CHECKING`` for
    mypy: the two lists and ``__all__`` must agree, and every name must load."""
    import ast
    import importlib

    import apportion.spark as spark

    source = Path(spark.__file__).read_text()
    declared = {
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for stmt in node.body
        if isinstance(stmt, ast.ImportFrom)
        for alias in stmt.names
    }
    lazy = set(spark._LAZY)
    assert declared == lazy == set(spark.__all__)
    for name, module in spark._LAZY.items():
        assert hasattr(importlib.import_module(module), name), f"{module} has no {name}"
