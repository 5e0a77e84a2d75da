"""An SQLite store on a full disk (issue 42): a running worker loses its partitions (a lease renewal is a write), says
once that the store is out of space, waits, and takes its share back when space is freed; a worker that starts on a
full disk says it in one line and exits 1. A real file system that fills up: a 3 MB tmpfs mounted for the test
(root only; CI runs as root), filled by a file written until ENOSPC."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.fleet import Fleet, worker_args
from apportion.waiting import wait_for
from tests.conftest import IN_CI

pytestmark = pytest.mark.slow

FULL = "is out of space: writes are refused until space is freed on its file system"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs at ``tmp_path/disk``, unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        why = f"cannot mount a tmpfs (root only): {mounted.stderr.decode(errors='replace').strip()}"
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Write ``disk/filler`` until the file system has no space left."""
    filler = disk / "filler"
    with filler.open("wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 65536)
            out.flush()
            os.fsync(out.fileno())
    assert os.statvfs(disk).f_bavail == 0
    return filler


def test_a_running_worker_on_a_full_disk_loses_its_partitions_says_so_once_waits_and_takes_them_back(
    small_disk: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{small_disk / 'store.db'}"
    with Fleet(tmp_path / "logs", worker_args(url, "g", "--partitions", "4", "--commit-every", "0.2")) as fleet:
        w = fleet.start("w1")
        alive = lambda: fleet.check(["w1"])  # noqa: E731
        wait_for("w1 to own the 4 partitions", lambda: len(w.applied()) == 4, 30, alive=alive, context=w.tail)
        filler = fill(small_disk)
        wait_for("w1 to lose its partitions", lambda: w.applied() == set(), 15, alive=alive, context=w.tail)
        wait_for("w1 to say the store is out of space", lambda: "worker w1: SQLite store" in w.log.text(), 5,
                 alive=alive, context=w.tail)  # fmt: skip
        lost = w.of("lost")[-1]
        assert sorted(lost["partitions"]) == [0, 1, 2, 3]
        assert w.alive(), "it waits for space"

        filler.unlink()
        wait_for("w1 to own its partitions again", lambda: len(w.applied()) == 4, 30, alive=alive, context=w.tail)
        committed = lambda: any(e["time"] > lost["time"] for e in w.of("commit"))  # noqa: E731
        wait_for("w1 to commit again", committed, 10, context=w.tail)
        assert fleet.stop_all(20) == {"w1": 0}

    lines = w.log.text().splitlines()
    said = [line for line in lines if line.endswith(f"worker w1: SQLite store {small_disk / 'store.db'} {FULL}")]
    assert len(said) == 1, "\n".join(lines[-30:])  # one line for the outage (repeated only after a minute)
    assert sum("the store takes writes again" in line for line in lines) == 1
    assert not [line for line in lines if "Traceback" in line or "apportion: error" in line]


def test_a_worker_that_starts_on_a_full_disk_says_so_in_one_line_and_exits_1(small_disk: Path) -> None:
    url = f"sqlite:///{small_disk / 'store.db'}"
    with Fleet(small_disk.parent / "logs", worker_args(url, "g", "--partitions", "4")) as fleet:
        w = fleet.start("w0")  # creates the store and the group, then leaves
        wait_for("w0 to own the partitions", lambda: len(w.applied()) == 4, 30, context=w.tail)
        assert fleet.stop_all(20) == {"w0": 0}
    fill(small_disk)
    done = subprocess.run([*worker_args(url, "g"), "--id", "w1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("apportion: error:")]
    assert errors == [f"apportion: error: SQLite store {small_disk / 'store.db'} {FULL}"], done.stderr
    assert "waiting for store" not in done.stderr
