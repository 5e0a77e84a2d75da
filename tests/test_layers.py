"""The house's map is true: the layer table (docs/ARCHITECTURE.md, "The map") is what the imports
draw, and no package is entered through
another package's private module (``apportion.<package>._<module>``; a package's face may open its own rooms').

Read from the source with ``ast``; ruff's banned-api rule (pyproject.toml) catches the same reach-ins as they are
typed, this test also where ruff's per-package exemptions cannot see (a package reaching into a sibling).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> list[tuple[str, str]]:
    """(importing module, imported module) for every ``apportion`` import in src/, type-only ones included."""
    edges = []
    for path in sorted((SRC / "apportion").rglob("*.py")):
        here = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "apportion" and node.level == 0:
                names = [f"apportion.{alias.name}" for alias in node.names]  # a module or a name of the top face
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            edges += [(here, name) for name in names if name == "apportion" or name.startswith("apportion.")]
    return edges


def _owner_of_private(module: str) -> str | None:
    """The package whose private module ``module`` is (``apportion.store`` for ``apportion.store._connect``)."""
    parts = module.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if part.startswith("_"):
            return ".".join(parts[:i])
    return None


def test_no_module_reaches_into_another_packages_private_module() -> None:
    reach_ins = []
    for here, imported in _imports():
        owner = _owner_of_private(imported)
        # a package's face may open the private modules of its own rooms (apportion.spark of spark/pipeline/...)
        if owner is not None and here != owner and not here.startswith(owner + ".") and owner.rsplit(".", 1)[0] != here:
            reach_ins.append(f"{here} imports {imported}")
    assert reach_ins == [], "\n".join(reach_ins)


def _layers() -> list[tuple[str, list[str]]]:
    """The layer table of docs/ARCHITECTURE.md, top first: (layer name, the source paths its folder column names)."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    table = text.split("| layer | folder | job |", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        paths = re.findall(r"`([^`]+)`", cells[1])
        rows.append((cells[0], [p.removeprefix("src/") for p in paths]))
    return rows


def _layer_of(module: str, layers: list[tuple[str, list[str]]]) -> int:
    path = module.replace(".", "/")
    best, best_len = -1, -1
    for index, (_, paths) in enumerate(layers):
        for p in paths:
            stem = p.removesuffix("/").removesuffix(".py")
            if "/" not in stem:  # shared files are named without their folder: model.py, errors.py
                stem = "apportion/" + stem
            if (path == stem or path.startswith(stem + "/")) and len(stem) > best_len:
                best, best_len = index, len(stem)
    return best


def test_every_module_is_on_the_map() -> None:
    layers = _layers()
    modules = {_module_name(p) for p in (SRC / "apportion").rglob("*.py")} - {"apportion"}
    unmapped = sorted(m for m in modules if _layer_of(m, layers) < 0)
    assert unmapped == [], f"modules the layer table (docs/ARCHITECTURE.md) does not place: {unmapped}"


def test_imports_point_down_the_layer_table() -> None:
    layers = _layers()
    upward = []
    for here, imported in _imports():
        if imported == "apportion":
            continue
        source, target = _layer_of(here, layers), _layer_of(imported, layers)
        if here != "apportion" and target >= 0 and source >= 0 and target < source:
            upward.append(f"{here} ({layers[source][0]}) imports {imported} ({layers[target][0]})")
    assert upward == [], "imports that point up the layer table:\n" + "\n".join(sorted(set(upward)))


def test_ruff_bans_every_packages_private_modules_outside_the_package() -> None:
    """pyproject's banned-api table names each ``apportion.<package>._<module>``, so ruff flags a reach-in as it is
    typed (a module added without its line was missed before: ``group._mode``, ``group._members``, ...)."""
    banned = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]["flake8-tidy-imports"]
    modules = {_module_name(p) for p in (SRC / "apportion").rglob("_*.py") if p.name != "__init__.py"}
    private = {m for m in modules if m.count(".") >= 2}  # apportion._lazy, apportion._files: the top face's own
    missing = sorted(private - set(banned["banned-api"]))
    assert missing == [], f"add these to [tool.ruff.lint.flake8-tidy-imports.banned-api] in pyproject.toml: {missing}"


def test_the_architecture_walk_names_only_files_that_exist() -> None:
    """docs/ARCHITECTURE.md follows moves too: every ``.py`` it names is a file of src/apportion (a bare name, one of
    the room its paragraph names) or of the repository (``tests/...``)."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    files = {p.relative_to(SRC / "apportion").as_posix() for p in (SRC / "apportion").rglob("*.py")}
    names = {f.rsplit("/", 1)[-1] for f in files}
    named = set(re.findall(r"`([\w/]+\.py)", text))
    gone = sorted(n for n in named if n not in files and n not in names and not (ROOT / n).is_file())
    assert gone == [], f"docs/ARCHITECTURE.md names files that do not exist: {gone}"
