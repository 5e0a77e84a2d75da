"""The previous release, installed from this repository's history into a virtual environment of its own.

``previous_release()`` is the newest release tag (``vMAJOR.MINOR.PATCH``) reachable from HEAD (``git describe``);
``installed(tag)`` is its virtual environment, built once per tag commit and Python version and cached across runs
(under ``$APPORTION_RELEASE_CACHE``, default ``~/.cache/apportion/releases``): the tag's tree from ``git archive``
(read-only on the repository, unlike a worktree), ``python -m venv``, and an install (``installer``: uv's, or pip's
without uv) of that tree with its ``etcd`` and ``spark`` extras, its dependencies from PyPI (the only network it
uses) and its version given as the tag's
(``SETUPTOOLS_SCM_PRETEND_VERSION``: an archive has no git metadata). A file lock lets two test processes (xdist)
share one build; a half-built environment (a crash, a timeout) is never used: ``ready`` is written last.
One environment serves the worker's and the pipeline's upgrade tests: the ``spark`` extra too, pyspark pinned to
this environment's (a thin client speaks its Spark Connect server's version, and the release's own range,
``pyspark>=4.0,<5`` in v0.9.0, would take PyPI's newest: 4.3.0 today, the server 4.2.0).

Without git, or without a tag, a developer's run skips; CI's fails naming what is missing (the Makefile recreates
the tags a clone came without from ``RELEASES``: ``scripts/ensure-release-tags.sh``)."""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import IN_CI
from tests.uv import index_options, uv

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Release:
    tag: str  # v0.9.0
    commit: str
    python: Path  # the release's interpreter, in its own virtual environment

    @property
    def version(self) -> str:
        return self.tag.removeprefix("v")

    def worker(self, store_url: str, group: str, *options: str) -> list[str]:
        """Its `apportion worker` command line (as ``apportion.fleet.worker_args``, without ``--id``)."""
        return [str(self.python), "-m", "apportion.cli", "worker", "--store", store_url, "--group", group, *options]

    def pipeline(
        self, store_url: str, group: str, input_dir: str | Path, output_dir: str | Path, resource: str, *options: str
    ) -> list[str]:
        """Its `apportion pipeline run` command line (as ``apportion.fleet.pipeline_args``, without ``--id``)."""
        return [
            str(self.python), "-m", "apportion.cli", "pipeline", "run", "--store", store_url, "--group", group,
            "--input", str(input_dir), "--output", str(output_dir), "--resource", resource, *options,
        ]  # fmt: skip


def _unavailable(message: str) -> None:
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def previous_release() -> tuple[str, str]:
    """(tag, commit) of the newest release tag reachable from HEAD."""
    try:
        tag = _git("describe", "--tags", "--abbrev=0", "--match", "v[0-9]*.[0-9]*.[0-9]*")
        commit = _git("rev-parse", f"{tag}^{{commit}}")
    except (OSError, subprocess.CalledProcessError) as exc:
        stderr = getattr(exc, "stderr", "") or str(exc)
        _unavailable(
            f"no release tag to upgrade from (git describe: {stderr.strip()}): run scripts/ensure-release-tags.sh"
        )
        raise AssertionError("unreachable") from exc
    return tag, commit


def cache_root() -> Path:
    return Path(os.environ.get("APPORTION_RELEASE_CACHE") or Path.home() / ".cache" / "apportion" / "releases")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(command: list[str], *, env: dict[str, str] | None = None, timeout_s: float = 600) -> None:
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s)
    if done.returncode != 0:
        raise AssertionError(f"{command[:4]} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")


def installer(python: Path) -> list[str]:
    """The install command into ``python``'s environment: uv's when the set-up installed it (tests/uv.py: on a fresh
    machine, pip took minutes to resolve the release's spark extra, uv seconds), pip's otherwise. With the bytecode
    compiled either way: the release's venv is kept, and a developer's shell may set PYTHONDONTWRITEBYTECODE."""
    found = uv()
    if found is not None:
        return [str(found), "pip", "install", "-q", "--compile-bytecode", "--python", str(python), *index_options()]
    return [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]


def installed(tag: str, commit: str) -> Release:
    """The release ``tag`` (at ``commit``) in its own virtual environment (its etcd and spark extras, this
    environment's pyspark), built on the first call."""
    python_tag = f"py{sys.version_info.major}.{sys.version_info.minor}"
    home = cache_root() / f"{tag}-{commit[:12]}-{python_tag}-spark"
    venv, ready = home / "venv", home / "ready"
    with _locked(cache_root() / f"{home.name}.lock"):
        if not ready.exists():
            shutil.rmtree(home, ignore_errors=True)
            source = home / "src"
            source.mkdir(parents=True)
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit], capture_output=True)
            if archive.returncode != 0:
                raise AssertionError(f"git archive {commit} failed: {archive.stderr.decode(errors='replace')}")
            subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
            _run([sys.executable, "-m", "venv", str(venv)])
            env = {**os.environ, "SETUPTOOLS_SCM_PRETEND_VERSION": tag.removeprefix("v")}
            pyspark = f"pyspark=={importlib.metadata.version('pyspark')}"
            _run([*installer(venv / "bin" / "python"), f"{source}[etcd,spark]", pyspark], env=env, timeout_s=1200)
            ready.write_text(f"{tag} {commit}\n")
    release = Release(tag, commit, venv / "bin" / "python")
    shown = subprocess.run(
        [str(release.python), "-m", "apportion.cli", "--version"], capture_output=True, text=True, cwd=home, timeout=60
    )
    assert shown.stdout.strip() == f"apportion, version {release.version}", (shown.stdout, shown.stderr)
    return release
