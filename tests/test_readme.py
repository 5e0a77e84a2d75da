"""Every command the README shows in its `console` blocks runs and succeeds (a newcomer can follow it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```console\n(.*?)```", text, flags=re.S)
    return [line[2:] for block in blocks for line in block.splitlines() if line.startswith("$ ")]


def test_the_readme_shows_commands() -> None:
    assert len(readme_commands()) >= 3


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_runs(command: str, tmp_path: Path) -> None:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{command!r} failed ({proc.returncode}): {proc.stderr[-2000:]}"
    assert proc.stdout.strip(), f"{command!r} printed nothing"
