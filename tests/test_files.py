"""Files read back as input (``apportion._files``): a path from a record stays under its root, and a corrupt file
(exit 2, named, with what to do) is told from a disk that fails (exit 1)."""

from __future__ import annotations

import errno
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from apportion._files import inside, plain_relpath, read_json, read_parquet
from apportion.errors import ApportionError, CorruptFile


@pytest.mark.parametrize(
    ("rel", "plain"),
    [("a", True), ("r/p=0/batch=1", True), ("a..b/c", True), ("", False), ("/etc", False), ("../x", False),
     ("a/../b", False), ("a//b", False), ("a/", False), ("./a", False), ("a\0b", False), (7, False)],
)  # fmt: skip
def test_a_plain_relpath_is_relative_normalised_and_never_climbs(rel: object, plain: bool) -> None:
    assert plain_relpath(rel) is plain


def test_inside_resolves_symlinks_and_refuses_whatever_leaves_the_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    (root / "out").symlink_to(outside, target_is_directory=True)
    (root / "in").symlink_to(root / "d", target_is_directory=True)
    assert inside(root, "d/file") == (root / "d" / "file").resolve()
    assert inside(root, "in/file") == (root / "d" / "file").resolve()
    assert inside(root, "not/yet/written") is not None
    for escape in ("../outside", str(outside), "out", "out/file", "d/../../outside", ".", "", "a\0b"):
        assert inside(root, escape) is None, escape
    linked = tmp_path / "linked-root"
    linked.symlink_to(root, target_is_directory=True)
    assert inside(linked, "d") == (root / "d").resolve()  # the root itself may be a symlink


def test_read_json_tells_a_missing_file_from_an_empty_or_truncated_one(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    assert read_json(path, "do X") is None
    path.write_bytes(b'{"a": [1, 2')
    with pytest.raises(CorruptFile, match=r"f.json: not JSON \(truncated\?\); do X$"):
        read_json(path, "do X")
    path.write_bytes(b" \n")
    with pytest.raises(CorruptFile, match=r"f.json: empty \(truncated\?\); do X$") as caught:
        read_json(path, "do X")
    assert caught.value.exit_code == 2 and caught.value.path == str(path)


def test_read_parquet_names_the_bad_file_of_a_directory(tmp_path: Path) -> None:
    batch = tmp_path / "batch"
    batch.mkdir()
    pq.write_table(pa.table({"a": [1, 2]}), batch / "part-0.parquet")
    pq.write_table(pa.table({"a": [3]}), batch / "part-1.parquet")
    (batch / ".part-1.parquet.crc").write_bytes(b"crc")
    assert read_parquet(batch, "do X").column("a").to_pylist() == [1, 2, 3]
    bad = batch / "part-1.parquet"
    bad.write_bytes(bad.read_bytes()[:-10])
    with pytest.raises(CorruptFile, match=f"^{re.escape(str(bad))}: not a whole Parquet file .*; do X$"):
        read_parquet(batch, "do X")
    with pytest.raises(CorruptFile, match=f"^{re.escape(str(tmp_path / 'gone.parquet'))}: missing; do X$"):
        read_parquet(tmp_path / "gone.parquet", "do X")


def test_read_parquet_reports_a_failing_disk_as_a_runtime_fault(tmp_path: Path, monkeypatch: Any) -> None:
    def eio(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(pq, "read_table", eio)
    with pytest.raises(ApportionError, match=r"cannot read .*x\.parquet: .*Input/output error.*disk fault") as caught:
        read_parquet(tmp_path / "x.parquet", "do X")
    assert caught.value.exit_code == 1 and not isinstance(caught.value, CorruptFile)
