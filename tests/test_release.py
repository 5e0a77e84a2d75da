"""Releases: one source of truth for the version (the git tag, through the installed package's metadata), a changelog
entry for every tag, and the release tags the rolling-upgrade tests start from (README, "Releases and upgrades").

A test that needs the tags finds them with ``git tag``; where the checkout has no git metadata it is skipped, except
in CI, where a missing tag fails naming what to do. A clone made without tags (CI's is) gets them back from
``RELEASES`` (``scripts/ensure-release-tags.sh``, which the Makefile runs before installing the package)."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

import apportion
from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[1]
TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")


def release_tags() -> list[str]:
    """The release tags (``vMAJOR.MINOR.PATCH``) of this checkout, oldest first; skip (fail in CI) without any."""
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "tag", "--list", "v*"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        if IN_CI:
            pytest.fail(f"cannot list the release tags with git ({exc}): CI must run in a git clone of the repository")
        pytest.skip(f"not a git checkout ({exc})")
    tags = sorted((t for t in out.split() if TAG.match(t)), key=lambda t: tuple(map(int, TAG.findall(t)[0])))
    if not tags:
        message = "no release tag (vMAJOR.MINOR.PATCH) in this clone: run scripts/ensure-release-tags.sh"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return tags


def test_the_version_is_the_installed_metadata_for_the_cli_and_the_package() -> None:
    installed = version("apportion")
    assert apportion.__version__ == installed
    shown = subprocess.run(
        [sys.executable, "-m", "apportion.cli", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert shown.strip() == f"apportion, version {installed}"


def test_no_version_literal_is_written_in_the_source() -> None:
    """The tag is the one source of truth: pyproject's version is dynamic and no module spells one out."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert not re.search(r'(?m)^version\s*=\s*"', pyproject)
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "src").rglob("*.py")
        if re.search(r'(?m)^__version__\s*=\s*["\']', path.read_text())
    ]
    assert offenders == []


def test_every_release_tag_has_a_changelog_entry_and_is_annotated() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    headings = set(re.findall(r"(?m)^## (\d+\.\d+\.\d+)\b", changelog))
    for tag in release_tags():
        assert tag[1:] in headings, f"CHANGELOG.md has no '## {tag[1:]}' entry for the tag {tag}"
        kind = subprocess.run(
            ["git", "-C", str(ROOT), "cat-file", "-t", tag], capture_output=True, text=True, check=True
        ).stdout.strip()
        assert kind == "tag", f"{tag} is a lightweight tag; a release is an annotated one (git tag -a)"


def test_every_release_tag_is_in_releases_naming_the_same_commit_and_every_line_is_tagged() -> None:
    """RELEASES recreates the tags in a clone without them: it and the tags cannot disagree."""
    listed = {
        tag: commit
        for tag, commit, _when in (
            line.split() for line in (ROOT / "RELEASES").read_text().splitlines() if line and not line.startswith("#")
        )
    }
    tagged = {
        tag: subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", f"{tag}^{{commit}}"], capture_output=True, text=True, check=True
        ).stdout.strip()
        for tag in release_tags()
    }
    assert tagged == listed


def test_an_installed_version_is_the_last_tags_or_a_dev_version_of_the_next_patch() -> None:
    """Installed from the tag itself, the version is the tag's; from a commit after it (or a changed tree), the next
    patch's ``.devN`` (hatch-vcs), never an unrelated literal."""
    major, minor, patch = (int(n) for n in TAG.findall(release_tags()[-1])[0])
    installed = version("apportion").split("+")[0]
    tagged, dev = f"{major}.{minor}.{patch}", f"{major}.{minor}.{patch + 1}.dev"
    assert installed == tagged or installed.startswith(dev), installed
