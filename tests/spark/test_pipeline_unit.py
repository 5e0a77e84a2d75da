"""The pipeline's commit/discard logic on the memory store (virtual clock, no Spark): fencing, clean-up, reading
only committed output, and the verifier's detection of every kind of wrong output. Outputs are written here as
Spark's executors lay them out (``write_output``: a batch directory with one part file)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from apportion.errors import CorruptRecord, Fenced
from apportion.group import CommitResult, PartitionId, RoundsMember
from apportion.log import PartitionedLog
from apportion.spark.pipeline._output import (
    Checkpoint,
    committed_checkpoints,
    output_relpath,
    read_committed_arrow,
    verify,
)
from apportion.spark.pipeline._pipeline import Task, clean_partition, commit_task, commit_tasks, output_rows
from tests.group.harness import FAST, Harness


def write_output(out: Path, resource: str, task: Task, rows: pa.Table) -> str:
    """What ``write_batch``'s Spark job leaves for ``task``: its batch directory with a part file (and a .crc)."""
    rel = output_relpath(resource, task.partition, task.start, task.end, task.epoch)
    (out / rel).mkdir(parents=True)
    pq.write_table(rows, out / rel / "part-00000-x.c000.snappy.parquet")
    (out / rel / ".part-00000-x.c000.snappy.parquet.crc").write_bytes(b"crc")
    return rel


def _rows(partition: int, start: int, end: int) -> pa.Table:
    return pa.table(
        {
            "partition": pa.array([partition] * (end - start), pa.int32()),
            "offset": pa.array(range(start, end), pa.int64()),
            "key": [f"k{o % 3}" for o in range(start, end)],
            "value": [f"v{o}" for o in range(start, end)],
        }
    )


def _task(member: RoundsMember, p: int, start: int, end: int) -> Task:
    checkpoint = Checkpoint.parse(member.checkpoint(p), p)
    return Task(p, member.lease(p).epoch, start, end, checkpoint)


def _settled_pair() -> tuple[Harness, RoundsMember, RoundsMember]:
    h = Harness()
    a, b = h.add("a"), h.add("b")
    h.run(2.0)
    assert a.owned() and b.owned()
    return h, a, b


def test_commit_of_the_owner_makes_its_file_part_of_the_checkpoint(tmp_path: Path) -> None:
    _, a, _ = _settled_pair()
    p = a.owned()[0]
    task = _task(a, p, 0, 5)
    rel = write_output(tmp_path, "r", task, _rows(p, 0, 5))
    checkpoint = commit_task(a, task, rel, tmp_path)
    assert Checkpoint.parse(a.checkpoint(p), p) == checkpoint == Checkpoint(5, (rel,))
    assert (tmp_path / rel).is_dir() and output_rows(tmp_path / rel) == 5


def test_zombie_commit_with_a_stale_epoch_is_fenced_and_its_output_file_deleted(tmp_path: Path) -> None:
    h, a, b = _settled_pair()
    p = a.owned()[0]
    done = commit_task(a, _task(a, p, 0, 5), write_output(tmp_path, "r", _task(a, p, 0, 5), _rows(p, 0, 5)), tmp_path)
    stale = _task(a, p, 5, 9)
    rel = write_output(tmp_path, "r", stale, _rows(p, 5, 9))  # written, then the writer freezes before committing
    h.frozen.add("a")
    h.run(FAST.ttl_s + 3.0)
    assert p in b.owned() and b.lease(p).epoch > stale.epoch
    with pytest.raises(Fenced):
        commit_task(a, stale, rel, tmp_path)
    assert not (tmp_path / rel).exists()
    assert Checkpoint.parse(b.checkpoint(p), p) == done  # the zombie changed nothing


def test_fenced_commit_keeps_a_file_that_the_committed_checkpoint_lists(tmp_path: Path) -> None:
    """An ambiguous commit (applied, but reported as fenced) must not delete committed output."""
    _, a, _ = _settled_pair()
    p = a.owned()[0]

    class AppliedThenFenced:
        def __init__(self, member: RoundsMember) -> None:
            self.member = member

        def commit_many(
            self, checkpoints: Mapping[PartitionId, str], *, epochs: Mapping[PartitionId, int] | None = None
        ) -> CommitResult:
            assert self.member.commit_many(checkpoints, epochs=epochs).ok
            return CommitResult(fenced=dict(epochs or {}), member="a")  # lost right after the commit applied

        def checkpoint(self, partition: int) -> str | None:
            return self.member.checkpoint(partition)

        def owned(self) -> list[int]:
            return self.member.owned()

        def lease(self, partition: int) -> object:
            return self.member.lease(partition)

    task = _task(a, p, 0, 5)
    rel = write_output(tmp_path, "r", task, _rows(p, 0, 5))
    with pytest.raises(Fenced):
        commit_task(AppliedThenFenced(a), task, rel, tmp_path)  # type: ignore[arg-type]
    assert (tmp_path / rel).is_dir()
    assert Checkpoint.parse(a.checkpoint(p), p).outputs == (rel,)


def test_a_batch_commits_its_tasks_in_one_transaction_and_discards_only_the_fenced_ones_output(
    tmp_path: Path,
) -> None:
    h, a, _ = _settled_pair()
    p1, p2, p3 = a.owned()[:3]
    fresh = [_task(a, p, 0, 4) for p in (p1, p2, p3)]
    tasks = [fresh[0], dataclasses.replace(fresh[1], epoch=fresh[1].epoch - 1), fresh[2]]  # p2's epoch is stale
    written = [(t, write_output(tmp_path, "r", t, _rows(t.partition, 0, 4)), None) for t in tasks]
    before = h.store.revision()
    outcome = commit_tasks(a, written, tmp_path)
    assert set(outcome.committed) == {p1, p3} and set(outcome.fenced) == {p2} and not outcome.unknown
    assert h.store.revision() == before + 1  # p1 and p3 in one transaction; p2 refused without a store call
    assert not (tmp_path / str(written[1][1])).exists()  # the fenced task's output is gone, the others' listed
    for p, (_, rel, _) in ((p1, written[0]), (p3, written[2])):
        assert (tmp_path / str(rel)).is_dir() and Checkpoint.parse(a.checkpoint(p), p) == outcome.committed[p]
    assert a.checkpoint(p2) is None


def test_new_owner_cleans_only_unlisted_outputs_of_older_epochs(tmp_path: Path) -> None:
    listed = Task(0, 1, 0, 5, Checkpoint())
    orphan = Task(0, 2, 5, 9, Checkpoint())
    mine = Task(0, 3, 5, 9, Checkpoint())
    rel_listed = write_output(tmp_path, "r", listed, _rows(0, 0, 5))
    rel_orphan = write_output(tmp_path, "r", orphan, _rows(0, 5, 9))
    rel_mine = write_output(tmp_path, "r", mine, _rows(0, 5, 9))
    (tmp_path / "r" / "p=0" / "not-a-batch").mkdir()  # not ours to judge: left alone
    deleted = clean_partition(tmp_path, "r", 0, Checkpoint(5, (rel_listed,)), epoch=3)
    assert deleted == [rel_orphan]
    assert not (tmp_path / rel_orphan).exists()
    assert (tmp_path / rel_listed).is_dir() and (tmp_path / rel_mine).is_dir()
    assert (tmp_path / "r" / "p=0" / "not-a-batch").is_dir()


def test_a_batch_with_no_rows_commits_its_offsets_without_an_output(tmp_path: Path) -> None:
    _, a, _ = _settled_pair()
    p = a.owned()[0]
    task = _task(a, p, 0, 5)
    assert output_rows(tmp_path / output_relpath("r", p, 0, 5, task.epoch)) == 0  # Spark wrote nothing for it
    assert commit_task(a, task, None, tmp_path) == Checkpoint(5, ())
    assert read_committed_arrow(a.store, "g", tmp_path).num_rows == 0


def test_outputs_of_the_layout_before_batch_directories_are_still_read(tmp_path: Path) -> None:
    """A checkpoint committed by an older apportion lists single files ``<resource>/<p>/<range>.parquet``."""
    _, a, _ = _settled_pair()
    p = a.owned()[0]
    old = f"r/{p}/{0:020d}-{3:020d}-e{1:010d}.parquet"
    (tmp_path / old).parent.mkdir(parents=True)
    pq.write_table(_rows(p, 0, 3), tmp_path / old)
    a.commit(p, Checkpoint(3, (old,)).to_json(), epoch=a.lease(p).epoch)
    task = _task(a, p, 3, 6)
    commit_task(a, task, write_output(tmp_path, "r", task, _rows(p, 3, 6)), tmp_path)
    assert read_committed_arrow(a.store, "g", tmp_path).column("offset").to_pylist() == [0, 1, 2, 3, 4, 5]


def test_read_committed_reads_only_files_listed_by_checkpoints(tmp_path: Path) -> None:
    _, a, _ = _settled_pair()
    p = a.owned()[0]
    task = _task(a, p, 0, 4)
    commit_task(a, task, write_output(tmp_path, "r", task, _rows(p, 0, 4)), tmp_path)
    write_output(tmp_path, "r", _task(a, p, 4, 8), _rows(p, 4, 8))  # written, never committed
    table = read_committed_arrow(a.store, "g", tmp_path)
    assert table.column("offset").to_pylist() == [0, 1, 2, 3]
    assert committed_checkpoints(a.store, "g") == {p: Checkpoint(4, (task_rel(task),))}


def task_rel(task: Task) -> str:
    return f"r/p={task.partition}/batch={task.start:020d}-{task.end:020d}-e{task.epoch:010d}"


def test_a_foreign_checkpoint_is_reported_not_misread() -> None:
    assert Checkpoint.parse(None, 3) == Checkpoint()
    assert Checkpoint.parse(Checkpoint(7, ("x",)).to_json(), 3) == Checkpoint(7, ("x",))
    for foreign in ("w1:17", '{"offset": 1, "outputs": "r/p=3/x"}', "[1]", '{"offset": 1}'):
        with pytest.raises(CorruptRecord, match=r"checkpoint of partition 3, .* is not a pipeline checkpoint"):
            Checkpoint.parse(foreign, 3)


@pytest.mark.parametrize("output", ["../../etc", "/etc/passwd", "r/../../x", "r/p=3/../../..", "", "r//x", "./r", 5])
def test_a_checkpoint_whose_output_is_no_plain_relative_path_is_a_corrupt_record(output: object) -> None:
    """Issue 28: ``../../etc`` in a checkpoint made verify read outside the output directory."""
    text = json.dumps({"offset": 3, "outputs": [task_rel(Task(3, 1, 0, 3, Checkpoint())), output]})
    with pytest.raises(CorruptRecord, match=r"checkpoint of partition 3 lists the output .*, which is not a relative"):
        Checkpoint.parse(text, 3)


def test_reading_the_committed_output_refuses_an_output_that_a_symlink_leads_out_of_the_directory(
    tmp_path: Path,
) -> None:
    _, a, _ = _settled_pair()
    p = a.owned()[0]
    task = _task(a, p, 0, 4)
    rel = write_output(tmp_path / "outside", "r", task, _rows(p, 0, 4))
    (tmp_path / "out" / rel).parent.mkdir(parents=True)
    (tmp_path / "out" / rel).symlink_to(tmp_path / "outside" / rel, target_is_directory=True)
    commit_task(a, task, rel, tmp_path / "out")
    with pytest.raises(CorruptRecord, match=f"partition {p} lists the output .*, which leads out of the output"):
        read_committed_arrow(a.store, "g", tmp_path / "out")


def _committed_group(tmp_path: Path, tables: dict[int, list[pa.Table]]) -> tuple[Harness, PartitionedLog]:
    """A log of 2 partitions x 6 records and a group whose checkpoints list ``tables`` as output files."""
    log = PartitionedLog(tmp_path / "log")
    log.create("r", 2)
    for p in range(2):
        log.append("r", p, pa.table({"key": [f"k{o % 3}" for o in range(6)], "value": [f"v{o}" for o in range(6)]}))
    h = Harness(config=dataclasses.replace(FAST, partitions=2))
    a = h.add("a")
    h.run(2.0)
    for p, parts in tables.items():
        rels = []
        for i, table in enumerate(parts):
            rel = f"r/{p}/{i:020d}-{i:020d}-e0000000001.parquet"
            (tmp_path / "out" / rel).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, tmp_path / "out" / rel)
            rels.append(rel)
        a.commit(p, Checkpoint(6, tuple(rels)).to_json())
    return h, log


def test_verify_accepts_exactly_once_output(tmp_path: Path) -> None:
    h, log = _committed_group(tmp_path, {0: [_rows(0, 0, 3), _rows(0, 3, 6)], 1: [_rows(1, 0, 6)]})
    report = verify(h.store, "g", log, "r", tmp_path / "out")
    assert report.ok, report
    assert report.input_records == report.output_records == 12


def test_verify_detects_duplicates_missing_reordering_and_changed_values(tmp_path: Path) -> None:
    changed = _rows(1, 0, 6).set_column(3, "value", pa.array(["v0", "v1", "X", "v3", "v4", "v5"]))
    reordered = _rows(0, 3, 6).take([2, 1, 0])
    h, log = _committed_group(tmp_path, {0: [_rows(0, 0, 4), reordered, _rows(0, 5, 6)], 1: [changed]})
    report = verify(h.store, "g", log, "r", tmp_path / "out")
    assert not report.ok
    assert report.duplicates == 2  # offsets 3 and 5 twice
    assert report.mismatched == 1
    assert report.order_violations >= 1
    assert report.input_checksum != report.output_checksum


def test_verify_counts_records_not_yet_committed_as_missing(tmp_path: Path) -> None:
    h, log = _committed_group(tmp_path, {0: [_rows(0, 0, 6)]})
    report = verify(h.store, "g", log, "r", tmp_path / "out")
    assert report.missing == 6 and report.uncommitted_lag == 6 and not report.ok
