"""`status`, `explain`, `route` and `report` only look (issue 14, item 6): the store is opened read-only, nothing is
created or written, an unknown store file or group is exit 2 ``no such group 'g' in <url>``, and a store file the
user can only read works."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from apportion.clock import VirtualClock
from apportion.group import GroupConfig
from apportion.group.internals import Keys, encode
from apportion.store import connect
from tests.cli.run import cli

LOOKING = [
    ["status"],
    ["status", "--json"],
    ["explain", "3"],
    ["route", "key-1"],
    ["report", "--out", "OUT"],
]


def make_store(path: Path, group: str = "orders", *, expired_member: bool = False) -> str:
    """A store holding ``group`` (4 partitions); with a member whose lease expired long ago (virtual clock)."""
    url = f"sqlite:///{path}"
    with connect(url, clock=VirtualClock(1_000.0)) as store:
        keys = Keys(group)
        store.put(keys.resource, encode(GroupConfig(partitions=4).to_json()))
        if expired_member:
            lease = store.grant(1.0)  # expires at virtual 1001 s, i.e. long ago on the wall clock
            store.put(keys.member("w1"), encode({"capacity": 1.0}), lease=lease)
    return url


def files(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()}


@pytest.mark.parametrize("args", LOOKING, ids=lambda a: "-".join(a))
def test_a_missing_store_file_is_exit_2_and_is_not_created(args: list[str], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/mistyped.db"
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in args]
    result = cli(argv[0], "--store", url, "--group", "orders", *argv[1:])
    assert result.code == 2
    line = result.one_error_line()
    assert line.startswith(f"apportion: error: no such group 'orders' in {url} (no store file ")
    assert list(tmp_path.iterdir()) == []  # no database, no -wal, no -shm, no report


@pytest.mark.parametrize("args", LOOKING, ids=lambda a: "-".join(a))
def test_an_unknown_group_is_exit_2(args: list[str], tmp_path: Path) -> None:
    url = make_store(tmp_path / "s.db")
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in args]
    result = cli(argv[0], "--store", url, "--group", "ordres", *argv[1:])
    assert result.code == 2
    assert result.one_error_line() == f"apportion: error: no such group 'ordres' in {url}"
    assert not (tmp_path / "out").exists()


def test_status_writes_nothing_and_hides_an_expired_member(tmp_path: Path) -> None:
    url = make_store(tmp_path / "s.db", expired_member=True)
    before = files(tmp_path)
    result = cli("status", "--store", url, "--group", "orders", "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["members"] == {}  # its lease lapsed: not shown as a member
    with sqlite3.connect(tmp_path / "s.db") as db:  # ...but not removed from the file: status wrote nothing
        assert db.execute("SELECT count(*) FROM leases").fetchone() == (1,)
        assert db.execute("SELECT count(*) FROM kv WHERE key LIKE '%members/w1'").fetchone() == (1,)
    assert {k: v for k, v in files(tmp_path).items() if not k.endswith(("-wal", "-shm"))} == before


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory under /tmp that an unprivileged user can traverse (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="apportion-ro-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        path.chmod(0o755)
        for child in path.iterdir():
            child.unlink()
        path.rmdir()


def status_as_nobody(url: str) -> tuple[int, str, str]:
    """``apportion status --json`` in a forked child that dropped root for uid/gid 65534 (nobody): everything it
    needs is imported already (nobody cannot read this interpreter's library directory)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            result = cli("status", "--store", url, "--group", "orders", "--json")
            payload = json.dumps([result.code, result.stdout, result.stderr]).encode()
        except BaseException as exc:
            payload = json.dumps([99, "", repr(exc)]).encode()
        os.write(write_end, payload)
        os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    code, out, err = json.loads(b"".join(chunks))
    return int(code), str(out), str(err)


@pytest.mark.skipif(os.geteuid() != 0, reason="drops privileges to 'nobody' with os.setuid (needs root)")
def test_status_works_for_a_user_who_can_only_read_the_file_and_not_write_its_directory(shared_dir: Path) -> None:
    url = make_store(shared_dir / "s.db", expired_member=True)
    cli("status", "--store", "memory://warm-up", "--group", "orders")  # import everything before dropping root
    (shared_dir / "s.db").chmod(0o444)
    shared_dir.chmod(0o555)
    assert not (shared_dir / "s.db-wal").exists()  # no live writer: -wal/-shm cannot be created by nobody

    code, out, err = status_as_nobody(url)
    assert code == 0, err
    assert set(json.loads(out)["partitions"]) == {"0", "1", "2", "3"} and json.loads(out)["members"] == {}

    # a live writer (root) holds the WAL open: nobody reads through it, and sees its newest commit
    shared_dir.chmod(0o755)
    with connect(url) as writer:
        writer.put(Keys("orders").member("w2"), encode({"capacity": 1.0}))
        shared_dir.chmod(0o555)
        for name in ("s.db-wal", "s.db-shm"):
            (shared_dir / name).chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        code, out, err = status_as_nobody(url)
        assert code == 0, err
        assert list(json.loads(out)["members"]) == ["w2"]
        shared_dir.chmod(0o755)
