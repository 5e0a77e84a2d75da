"""`apportion demo --clean` deletes a demo's own directory and nothing else (found by the fuzz pass over every
option, which gave it ``--dir ../../../../etc --clean`` as root: the directory was deleted)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli.run import cli


@pytest.fixture(autouse=True)
def demo_does_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import apportion.cli._demo as demo

    def accepted(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit(0)

    monkeypatch.setattr(demo, "run_demo", accepted)


def test_clean_refuses_a_directory_the_demo_did_not_write_and_leaves_it_whole(tmp_path: Path) -> None:
    precious = tmp_path / "home"
    (precious / "sub").mkdir(parents=True)
    (precious / "notes.txt").write_text("keep me")
    result = cli("demo", "--dir", str(precious), "--clean")
    assert result.code == 2
    assert "was not written by apportion demo" in result.one_error_line()
    assert (precious / "notes.txt").read_text() == "keep me" and (precious / "sub").is_dir()


def test_clean_deletes_a_directory_an_earlier_demo_wrote(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert cli("demo", "--dir", str(run)).code == 0  # the demo marks the directory it writes
    (run / "leftover.parquet").write_text("an earlier run's output")
    assert cli("demo", "--dir", str(run)).code == 2  # not empty, no --clean
    assert cli("demo", "--dir", str(run), "--clean").code == 0
    assert not (run / "leftover.parquet").exists() and (run / ".apportion-demo").is_file()
