"""The package as a user gets it: built into an sdist and a wheel (``python -m build``), the wheel installed into a
fresh virtual environment with no source tree beside it, and used from there.

The wheel must carry what is not Python (the dashboard's ``page.html``, ``py.typed``) and the console script; the
installed ``apportion`` answers ``--version``, plans an assignment, shows ``dashboard --help``, and every public
package face imports. The extras installed are those whose wheels are small (etcd, metrics, dashboard, rabbitmq,
kafka; the kubernetes client's tree of 20 packages is left out: ``apportion.kube`` imports it on first use), and
Spark's 450 MB is left out, so ``apportion.spark`` is imported as its lazy face only (it names
pyspark's absence on first use, ``tests/spark`` covers the rest) and ``apportion.log`` (the Parquet log: pyarrow and
numpy, the spark extra's) not at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.uv import uv

ROOT = Path(__file__).resolve().parent.parent
PUBLIC_MODULES = [
    "apportion", "apportion.assign", "apportion.store", "apportion.group", "apportion.routing", "apportion.worker",
    "apportion.runner", "apportion.aio", "apportion.sim", "apportion.metrics", "apportion.web",
    "apportion.rabbitmq", "apportion.kafka", "apportion.kube", "apportion.errors", "apportion.events",
    "apportion.cli", "apportion.spark",
]  # fmt: skip

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]


def run(*command: str | Path, cwd: Path, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"{command} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def build_installer() -> str:
    """uv for the build's isolated environments when the set-up installed it (tests/uv.py), pip otherwise. The backend
    and the wheel are the same; only the time to make the two throw-away environments differs: 30 s with pip, a few
    with uv, of make test's 15 minutes. The install below stays pip's: that is what users run."""
    return "uv" if uv() is not None else "pip"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel) built from this checkout into a temp dir."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--sdist", "--wheel", "--installer", build_installer(), "--outdir", out, ROOT,
        cwd=out)  # fmt: skip
    sdists, wheels = sorted(out.glob("apportion-*.tar.gz")), sorted(out.glob("apportion-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return sdists[0], wheels[0]


def test_the_wheel_holds_the_page_the_type_marker_and_the_console_script(built: tuple[Path, Path]) -> None:
    names = set(zipfile.ZipFile(built[1]).namelist())
    assert "apportion/web/page.html" in names
    assert "apportion/py.typed" in names
    assert "apportion/kafka/_consumer.py" in names or "apportion/kafka/__init__.py" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "apportion = apportion.cli:run" in zipfile.ZipFile(built[1]).read(entry_points).decode()


def test_the_wheel_installs_and_runs_with_no_source_tree_beside_it(built: tuple[Path, Path], tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python, apportion = venv / "bin" / "python", venv / "bin" / "apportion"
    extras = "etcd,metrics,dashboard,rabbitmq,kafka"
    run(python, "-m", "pip", "install", "-q", f"{built[1]}[{extras}]", cwd=tmp_path)
    where = run(python, "-c", "import apportion; print(apportion.__file__)", cwd=tmp_path).stdout.strip()
    assert where.startswith(str(venv)), where  # the installed copy, not this checkout

    version = run(apportion, "--version", cwd=tmp_path).stdout
    assert version.strip(), "apportion --version printed nothing"
    request = {"strategy": "sticky", "resources": {"orders": 6}, "members": {"a": {}, "b": {}}}
    (tmp_path / "request.json").write_text(json.dumps(request))
    plan = json.loads(run(apportion, "assign", "--input", "request.json", cwd=tmp_path).stdout)
    owned = sorted(p for parts in plan["assignment"].values() for p in parts)
    assert owned == [f"orders-{i}" for i in range(6)], plan
    assert "--store" in run(apportion, "dashboard", "--help", cwd=tmp_path).stdout
    run(python, "-c", "; ".join(f"import {m}" for m in PUBLIC_MODULES), cwd=tmp_path)
    page = run(python, "-c", "import importlib.resources as r; print(r.files('apportion.web').joinpath('page.html')"
               ".read_text()[:200])", cwd=tmp_path).stdout  # fmt: skip
    assert "<html" in page.lower() or "<!doctype" in page.lower(), page
