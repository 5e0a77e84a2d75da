"""The pipeline's files as a user meets them (issue 28): `pipeline produce` and `pipeline verify` over a real log
whose manifest was lost, a checkpoint that names paths outside the output, and corrupt files (a truncated output
Parquet file, a truncated or empty ``_manifest.json`` or ``_resource.json``, a changelog manifest). Each is one
``apportion: error:`` line naming the file or directory and what to do, exit 2, and nothing is changed on disk."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from apportion.group.internals import Keys, encode
from apportion.log import PartitionedLog
from apportion.spark.state import Aggregate, append_changelog
from apportion.store import connect
from tests.cli.run import Result, cli

GROUP = "orders"  # the group and its resource


def produce(log: Path, records: int) -> Result:
    return cli("pipeline", "produce", "--input", str(log), "--resource", GROUP, "--partitions", "2",
               "--records", str(records), "--batch-records", "100")  # fmt: skip


def verify(tmp_path: Path) -> Result:
    return cli("pipeline", "verify", "--store", f"sqlite:///{tmp_path / 'store.db'}", "--group", GROUP,
               "--input", str(tmp_path / "log"), "--output", str(tmp_path / "out"))  # fmt: skip


def files(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` and its bytes, symlinks as their targets."""
    return {
        str(f.relative_to(directory)): os.readlink(f).encode() if f.is_symlink() else f.read_bytes()
        for f in sorted(directory.rglob("*"))
        if f.is_file() or f.is_symlink()
    }


def commit(tmp_path: Path, checkpoints: dict[int, dict[str, object]]) -> None:
    """Store ``checkpoints`` (partition -> checkpoint JSON) as the group's commit records, as a worker would."""
    with connect(f"sqlite:///{tmp_path / 'store.db'}") as store:
        for p, checkpoint in checkpoints.items():
            record = {"checkpoint": json.dumps(checkpoint), "epoch": 1, "member": "w1"}
            store.put(Keys(GROUP).commit(p), encode(record))


def output_rows(log: PartitionedLog, p: int) -> pa.Table:
    """What the default transform writes for every record of partition ``p`` (the columns verify compares)."""
    table = log.read(GROUP, p)
    return pa.table(
        {
            "partition": pa.array([p] * table.num_rows, pa.int32()),
            "offset": table.column("offset"),
            "key": table.column("key"),
            "value": table.column("value"),
        }
    )


def batch_rel(p: int, end: int) -> str:
    return f"{GROUP}/p={p}/batch={0:020d}-{end:020d}-e{1:010d}"


def the_error(result: Result, path: Path | str, reason: str) -> None:
    """Exit 2 and one line: the error about ``path`` (a file or directory), then ``reason`` (a regex)."""
    assert result.code == 2, result.stderr
    assert re.match(f"apportion: error: {re.escape(str(path))}: {reason}", result.one_error_line()), result.stderr


# -- data loss: a lost manifest ----------------------------------------------------------------------------------


def test_produce_refuses_a_partition_whose_manifest_is_lost_and_deletes_nothing(tmp_path: Path) -> None:
    """Issue 28: `produce` took the segments of a partition without a manifest for torn appends, deleted every one
    and restarted its offsets at 0 (exit 0). Now: exit 2 naming the directory, every file as it was; `verify` too.
    Through the installed entry point, as a user runs it."""
    log = tmp_path / "log"

    def apportion(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "apportion.cli", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)

    produced = apportion("pipeline", "produce", "--input", str(log), "--resource", GROUP, "--partitions", "2",
                         "--records", "1000", "--batch-records", "100")  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    lost = log / GROUP / "0"
    segments = sorted(f.name for f in lost.glob("*.parquet"))
    assert len(segments) > 1
    (lost / "_manifest.json").unlink()
    before = files(tmp_path / "log")

    again = apportion("pipeline", "produce", "--input", str(log), "--resource", GROUP, "--partitions", "2",
                      "--records", "10")  # fmt: skip
    assert again.returncode == 2, again.stderr
    assert again.stderr.splitlines() == [
        f"apportion: error: {lost}: {len(segments)} segment file(s) ({segments[0]}, ...) but no _manifest.json "
        "(deleted, or lost in a copy?); restore _manifest.json from a backup, or move the segment files out of the "
        "directory to start the partition empty; nothing was changed (apportion deletes no segment it cannot prove "
        "uncommitted)"
    ]
    assert files(tmp_path / "log") == before
    the_error(verify(tmp_path), lost, r"\d+ segment file\(s\) .* but no _manifest.json")
    assert files(tmp_path / "log") == before


def test_produce_refuses_segments_an_older_manifest_does_not_list_and_deletes_nothing(tmp_path: Path) -> None:
    """A manifest restored from an older backup: the newer segments are committed data, not torn appends."""
    log = tmp_path / "log"
    assert produce(log, 400).code == 0
    manifest = log / GROUP / "1" / "_manifest.json"
    older = manifest.read_bytes()
    assert produce(log, 400).code == 0
    manifest.write_bytes(older)
    before = files(tmp_path / "log")
    the_error(produce(log, 10), log / GROUP / "1", r"segment file\(s\) .* are not listed in _manifest.json")
    assert files(tmp_path / "log") == before


# -- a checkpoint that names paths outside the output -----------------------------------------------------------


@pytest.mark.parametrize("escape", ["relative", "absolute", "symlink"])
def test_verify_never_reads_outside_the_output_a_checkpoint_names(tmp_path: Path, escape: str) -> None:
    """The files outside hold exactly the right records, so a verify that read them would pass (it did)."""
    assert produce(tmp_path / "log", 300).code == 0
    log = PartitionedLog(tmp_path / "log")
    outside, out = tmp_path / "outside", tmp_path / "out"
    checkpoints: dict[int, dict[str, object]] = {}
    for p in range(2):
        rows = output_rows(log, p)
        (outside / str(p)).mkdir(parents=True)
        pq.write_table(rows, outside / str(p) / "part-00000.parquet")
        rel = {"relative": f"../outside/{p}", "absolute": str(outside / str(p)), "symlink": batch_rel(p, rows.num_rows)}
        if escape == "symlink":
            (out / rel[escape]).parent.mkdir(parents=True)
            (out / rel[escape]).symlink_to(outside / str(p), target_is_directory=True)
        checkpoints[p] = {"offset": rows.num_rows, "outputs": [rel[escape]]}
    out.mkdir(exist_ok=True)
    commit(tmp_path, checkpoints)
    result = verify(tmp_path)
    assert result.code == 2, result.stderr
    assert re.match(
        "apportion: error: a store record is corrupt: the committed checkpoint of partition 0 lists the output .*, "
        "which (is not a relative path inside|leads out of) the output directory",
        result.one_error_line(),
    ), result.stderr


# -- corrupt files ------------------------------------------------------------------------------------------------


def test_verify_names_a_truncated_output_file_and_what_to_do(tmp_path: Path) -> None:
    assert produce(tmp_path / "log", 300).code == 0
    log = PartitionedLog(tmp_path / "log")
    checkpoints: dict[int, dict[str, object]] = {}
    for p in range(2):
        rows = output_rows(log, p)
        (tmp_path / "out" / batch_rel(p, rows.num_rows)).mkdir(parents=True)
        pq.write_table(rows, tmp_path / "out" / batch_rel(p, rows.num_rows) / "part-00000.parquet")
        checkpoints[p] = {"offset": rows.num_rows, "outputs": [batch_rel(p, rows.num_rows)]}
    commit(tmp_path, checkpoints)
    assert verify(tmp_path).code == 0
    part = tmp_path / "out" / batch_rel(1, checkpoints[1]["offset"]) / "part-00000.parquet"  # type: ignore[arg-type]
    part.write_bytes(part.read_bytes()[:-100])
    the_error(verify(tmp_path), part, r"not a whole Parquet file .*; restore it from a backup, or rebuild the output")


@pytest.mark.parametrize("content", [b"", b'{"version": 1, "end_offset": 1'], ids=["empty", "truncated"])
@pytest.mark.parametrize("name", ["_manifest.json", "_resource.json"])
def test_produce_and_verify_name_a_truncated_or_empty_log_file(tmp_path: Path, name: str, content: bytes) -> None:
    assert produce(tmp_path / "log", 300).code == 0
    path = tmp_path / "log" / GROUP / ("0" if name == "_manifest.json" else "") / name
    path.write_bytes(content)
    before = files(tmp_path / "log")
    reason = ("empty" if not content else "not JSON") + r" \(truncated\?\); restore it from a backup"
    the_error(produce(tmp_path / "log", 10), path, reason)
    the_error(verify(tmp_path), path, reason)
    assert files(tmp_path / "log") == before


def test_verify_names_a_truncated_changelog_manifest(tmp_path: Path) -> None:
    """A stateful group's changelog is a resource of the log: verify rebuilds the state from it."""
    assert produce(tmp_path / "log", 100).code == 0
    log = PartitionedLog(tmp_path / "log")
    first, end = append_changelog(log, GROUP, 0, {"key-1": Aggregate(1, 3)})
    commit(tmp_path, {0: {"offset": 0, "outputs": [], "changelog": [[first, end]]}})
    manifest = tmp_path / "log" / f"{GROUP}.changelog" / "0" / "_manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:20])
    the_error(verify(tmp_path), manifest, r"not JSON \(truncated\?\); restore it from a backup")
