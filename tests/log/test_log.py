"""The partitioned log: contiguous offsets, atomic appends, torn segments ignored, concurrent producers exact."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.errors import CorruptFile, InvalidRequest
from apportion.log import PartitionedLog, Producer, segment_name
from apportion.log import _log as log_module
from apportion.log._log import records_table
from apportion.routing import partition_for


def _log(tmp_path: Path, partitions: int = 4) -> PartitionedLog:
    log = PartitionedLog(tmp_path / "log")
    log.create("orders", partitions)
    return log


def _offsets(log: PartitionedLog, partition: int, start: int = 0) -> list[int]:
    return list(log.read("orders", partition, start).column("offset").to_pylist())


def test_offsets_are_contiguous_from_zero_across_appends(tmp_path: Path) -> None:
    log = _log(tmp_path, 1)
    for size in (3, 1, 5):
        log.append("orders", 0, records_table([(f"k{i}", f"v{i}") for i in range(size)]))
    assert _offsets(log, 0) == list(range(9))
    assert log.end_offset("orders", 0) == 9
    assert [(s.first_offset, s.last_offset) for s in log.segments("orders", 0)] == [(0, 2), (3, 3), (4, 8)]
    assert [Path(s.path).name for s in log.segments("orders", 0, 4)] == [segment_name(4, 8)]


def test_producer_routes_every_record_by_partition_for_and_keeps_its_order(tmp_path: Path) -> None:
    log = _log(tmp_path, 4)
    with Producer(log, "orders", batch_records=7) as producer:
        for i in range(100):
            producer.send(f"key-{i % 13}", f"value-{i}", ts_ms=i)
        producer.send_many([(f"key-{i % 13}", f"value-{i}") for i in range(100, 200)])
    total = 0
    for p in range(4):
        table = log.read("orders", p)
        total += table.num_rows
        assert all(partition_for(k, 4) == p for k in table.column("key").to_pylist())
        seq = [int(v.split("-")[1]) for v in table.column("value").to_pylist()]
        assert seq == sorted(seq)
    assert total == 200


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=8), st.data())
def test_reads_from_any_offset_range_return_exactly_those_offsets_in_order(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], data: st.DataObject
) -> None:
    log = PartitionedLog(tmp_path_factory.mktemp("log"))
    log.create("orders", 1)
    for size in sizes:
        log.append("orders", 0, records_table([("k", str(i)) for i in range(size)]))
    end = sum(sizes)
    start = data.draw(st.integers(min_value=0, max_value=end + 2))
    stop = data.draw(st.none() | st.integers(min_value=start, max_value=end + 2))
    got = log.read("orders", 0, start, stop).column("offset").to_pylist()
    assert got == list(range(start, min(end, end if stop is None else stop)))


def test_a_segment_file_without_a_manifest_entry_is_ignored_and_replaced(tmp_path: Path) -> None:
    log = _log(tmp_path, 1)
    log.append("orders", 0, records_table([("a", "1"), ("b", "2")]))
    directory = tmp_path / "log" / "orders" / "0"
    # a crashed appender: whole segment renamed but manifest not updated, and a torn (truncated) longer one
    whole = pa.table({"offset": pa.array([2, 3], pa.int64()), "key": ["x", "y"], "value": ["lost", "lost"]})
    pq.write_table(whole, directory / segment_name(2, 3))
    pq.write_table(whole, directory / segment_name(2, 9))
    torn = directory / segment_name(2, 9)
    torn.write_bytes(torn.read_bytes()[:40])
    (directory / ".tmp-123-x.parquet").write_bytes(b"PAR1 half")
    assert _offsets(log, 0) == [0, 1]
    assert log.end_offset("orders", 0) == 2
    log.append("orders", 0, records_table([("c", "3")]))
    table = log.read("orders", 0)
    assert table.column("offset").to_pylist() == [0, 1, 2]
    assert table.column("value").to_pylist() == ["1", "2", "3"]
    assert sorted(p.name for p in directory.iterdir() if not p.name.startswith("_") and p.name != ".lock") == [
        segment_name(0, 1),
        segment_name(2, 2),
    ]


def test_a_crash_before_the_manifest_rename_commits_nothing(tmp_path: Path) -> None:
    log = _log(tmp_path, 1)
    log.append("orders", 0, records_table([("a", "1")]))
    directory = tmp_path / "log" / "orders" / "0"
    manifest = (directory / "_manifest.json").read_bytes()
    (directory / f".tmp-1-{'_manifest.json'}").write_bytes(manifest[: len(manifest) // 2])  # torn manifest temp
    assert log.end_offset("orders", 0) == 1
    log.append("orders", 0, records_table([("b", "2")]))
    assert _offsets(log, 0) == [0, 1]


def test_an_appender_between_its_temp_write_and_rename_holds_the_lock_so_no_clean_up_removes_its_file(
    tmp_path: Path,
) -> None:
    """The pipeline's zombie race, in the log: another appender's leftover clean-up deletes temp files, but only
    under the partition's lock, which the appender paused before its rename still holds."""
    _log(tmp_path, 1).append("orders", 0, records_table([("a", "0")]))
    other = PartitionedLog(tmp_path / "log")
    seen: list[str] = []

    def another_appender_tries_now(tmp: Path) -> None:
        assert tmp.is_file()
        fd = os.open(tmp.parent / ".lock", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):  # any other appender (thread or process) waits here
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        seen.append(tmp.name)

    paused = PartitionedLog(tmp_path / "log", fault=another_appender_tries_now)
    appended = paused.append("orders", 0, records_table([("b", "1"), ("c", "2")]))
    assert appended is not None and (appended.first_offset, appended.last_offset) == (1, 2)
    assert len(seen) == 2  # the segment's temp file, then the manifest's
    other.append("orders", 0, records_table([("d", "3")]))
    assert _offsets(log=other, partition=0) == [0, 1, 2, 3]
    assert not [n for n in os.listdir(tmp_path / "log" / "orders" / "0") if n.startswith(".tmp-")]


def test_a_failed_append_between_temp_write_and_rename_commits_nothing_and_is_cleaned_up(tmp_path: Path) -> None:
    def crash(tmp: Path) -> None:
        raise OSError(5, "I/O error")

    _log(tmp_path, 1).append("orders", 0, records_table([("a", "0")]))
    with pytest.raises(OSError, match="I/O error"):
        PartitionedLog(tmp_path / "log", fault=crash).append("orders", 0, records_table([("b", "1")]))
    log = PartitionedLog(tmp_path / "log")
    assert log.end_offset("orders", 0) == 1
    log.append("orders", 0, records_table([("c", "2")]))
    assert log.read("orders", 0).column("value").to_pylist() == ["0", "2"]
    assert not [n for n in os.listdir(tmp_path / "log" / "orders" / "0") if n.startswith(".tmp-")]


def at(path: Path, reason: str) -> str:
    """The regex of a ``CorruptFile`` message about ``path``: the path, then ``reason`` (a regex)."""
    return f"^{re.escape(str(path))}: {reason}"


def _files(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` with its bytes."""
    return {str(f.relative_to(directory)): f.read_bytes() for f in sorted(directory.rglob("*")) if f.is_file()}


def _three_appends(tmp_path: Path) -> tuple[PartitionedLog, Path]:
    log = _log(tmp_path, 1)
    for size in (3, 2, 4):
        log.append("orders", 0, records_table([(f"k{i}", f"v{i}") for i in range(size)]))
    return log, tmp_path / "log" / "orders" / "0"


@pytest.mark.parametrize("segments", [1, 3])
def test_a_partition_whose_manifest_is_lost_is_refused_and_nothing_is_deleted(tmp_path: Path, segments: int) -> None:
    """Issue 28: segments without a manifest were taken for torn appends, deleted, and the offsets restarted at 0.
    With one segment too: a first append's segment is never without a manifest (it is written first)."""
    log = _log(tmp_path, 1)
    for size in (3, 2, 4)[:segments]:
        log.append("orders", 0, records_table([(f"k{i}", f"v{i}") for i in range(size)]))
    directory = tmp_path / "log" / "orders" / "0"
    (directory / "_manifest.json").unlink()
    before = _files(tmp_path)
    for attempt in (
        lambda: log.append("orders", 0, records_table([("new", "record")])),
        lambda: log.end_offset("orders", 0),
        lambda: log.read("orders", 0),
        lambda: log.segments("orders", 0),
        lambda: log.check("orders"),
    ):
        with pytest.raises(CorruptFile, match=at(directory, rf"{segments} segment file\(s\) .* but no _manifest.json")):
            attempt()
    assert _files(tmp_path) == before


def test_an_unlisted_segment_that_is_no_torn_append_is_refused_and_nothing_is_deleted(tmp_path: Path) -> None:
    """An older manifest restored over newer segments: only an unlisted segment starting at the manifest's end can be
    a torn append; the others are committed data the manifest lost track of."""
    log, directory = _three_appends(tmp_path)
    older = (directory / "_manifest.json").read_bytes()
    log.append("orders", 0, records_table([("a", "9"), ("b", "10")]))
    log.append("orders", 0, records_table([("c", "11")]))
    (directory / "_manifest.json").write_bytes(older)  # ends at 9: 9-10 could be torn, 11-11 cannot
    (directory / ".tmp-77-x.parquet").write_bytes(b"half")
    before = _files(tmp_path)
    for attempt in (lambda: log.append("orders", 0, records_table([("d", "12")])), lambda: log.check("orders")):
        with pytest.raises(
            CorruptFile, match=at(directory, rf"segment file\(s\) {segment_name(11, 11)} are not listed")
        ):
            attempt()
    assert _files(tmp_path) == before
    assert log.end_offset("orders", 0) == 9  # readers read what the manifest lists


def test_a_first_append_writes_the_manifest_before_its_segment_so_its_crash_leaves_a_torn_append(
    tmp_path: Path,
) -> None:
    def crash_at_the_segment(tmp: Path) -> None:
        if tmp.name.endswith(".parquet"):
            assert (tmp.parent / "_manifest.json").read_text() == '{"version": 1, "end_offset": 0, "segments": []}'
            os.replace(tmp, tmp.parent / segment_name(0, 1))  # the rename happened, the manifest update did not
            raise OSError(5, "I/O error")

    log = _log(tmp_path, 1)
    with pytest.raises(OSError, match="I/O error"):
        PartitionedLog(log.root, fault=crash_at_the_segment).append(
            "orders", 0, records_table([("a", "0"), ("b", "1")])
        )
    assert log.end_offset("orders", 0) == 0
    log.append("orders", 0, records_table([("c", "2")]))  # the torn segment 0-1 is cleaned up, not refused
    assert log.read("orders", 0).column("value").to_pylist() == ["2"]
    assert sorted(n for n in os.listdir(tmp_path / "log" / "orders" / "0") if n.endswith(".parquet")) == [
        segment_name(0, 0)
    ]


def test_a_reader_that_finds_no_manifest_and_then_the_first_segment_reads_the_manifest_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race of a reader (no lock) with a first append: the reader finds no manifest, the append writes the
    manifest then its segment, the reader lists the segment. It is no lost manifest: the second look finds it."""
    log = _log(tmp_path, 1)
    listing = log_module._segments_on_disk

    def the_first_append_lands_now(directory: Path) -> list[str]:
        monkeypatch.setattr(log_module, "_segments_on_disk", listing)
        PartitionedLog(log.root).append("orders", 0, records_table([("a", "0")]))
        return listing(directory)

    monkeypatch.setattr(log_module, "_segments_on_disk", the_first_append_lands_now)
    assert log.end_offset("orders", 0) == 1


MANIFESTS = {
    "empty": b"",
    "truncated": b'{"version": 1, "end_offset": 9, "segm',
    "not a manifest": b"[1, 2]",
    "end beyond its segments": b'{"version": 1, "end_offset": 99, "segments": []}',
    "a path for a segment": b'{"end_offset": 1, "segments": [{"file": "../../x.parquet", "first": 0, "last": 0}]}',
    "offsets not its name's": (
        b'{"end_offset": 5, "segments": [{"file": "00000000000000000000-00000000000000000002.parquet", '
        b'"first": 0, "last": 4}]}'
    ),
}


@pytest.mark.parametrize("content", MANIFESTS.values(), ids=MANIFESTS.keys())
def test_a_corrupt_manifest_is_refused_naming_it_and_nothing_is_deleted(tmp_path: Path, content: bytes) -> None:
    log, directory = _three_appends(tmp_path)
    (directory / "_manifest.json").write_bytes(content)
    before = _files(tmp_path)
    for attempt in (
        lambda: log.append("orders", 0, records_table([("new", "record")])),
        lambda: log.end_offset("orders", 0),
        lambda: log.read("orders", 0),
    ):
        with pytest.raises(CorruptFile, match=at(directory / "_manifest.json", ".*; restore it from a backup")):
            attempt()
    assert _files(tmp_path) == before


RESOURCES = {"empty": b"", "truncated": b'{"version": 1, "parti', "no count": b"{}", "zero": b'{"partitions": 0}'}


@pytest.mark.parametrize("content", RESOURCES.values(), ids=RESOURCES.keys())
def test_a_corrupt_resource_file_is_refused_naming_it_and_what_to_write(tmp_path: Path, content: bytes) -> None:
    log, _ = _three_appends(tmp_path)
    path = tmp_path / "log" / "orders" / "_resource.json"
    path.write_bytes(content)
    before = _files(tmp_path)
    for attempt in (lambda: log.create("orders", 1), lambda: log.partitions("orders"), lambda: log.read("orders", 0)):
        with pytest.raises(CorruptFile, match=at(path, '.*"partitions": N} to it .*; 1 partition directories here')):
            attempt()
    assert _files(tmp_path) == before


def test_a_lost_resource_file_is_refused_when_its_partitions_hold_data(tmp_path: Path) -> None:
    """Re-created with another partition count, every key would route elsewhere: refuse instead."""
    log, _ = _three_appends(tmp_path)
    path = tmp_path / "log" / "orders" / "_resource.json"
    path.unlink()
    before = _files(tmp_path)
    with pytest.raises(CorruptFile, match=at(path, "missing, but partitions 0 hold data")):
        log.create("orders", 4)
    assert _files(tmp_path) == before
    PartitionedLog(tmp_path / "log").create("fresh", 2)  # a new resource, or one whose creation crashed: fine


def test_listed_segments_that_are_truncated_missing_or_lead_out_are_corrupt_files(tmp_path: Path) -> None:
    log, directory = _three_appends(tmp_path)
    first, second, third = (directory / segment_name(a, b) for a, b in ((0, 2), (3, 4), (5, 8)))
    first.write_bytes(first.read_bytes()[:-30])
    with pytest.raises(CorruptFile, match=at(first, "not a whole Parquet file .*; restore it from a backup")):
        log.read("orders", 0)
    second.unlink()
    with pytest.raises(CorruptFile, match=at(second, "missing; restore it from a backup")):
        log.read("orders", 0, 3)
    outside = tmp_path / "elsewhere.parquet"
    third.rename(outside)
    third.symlink_to(outside)
    with pytest.raises(CorruptFile, match=at(third, "leads out of its partition directory")):
        log.segments("orders", 0, 5)


def test_invalid_names_partitions_and_offsets_are_rejected(tmp_path: Path) -> None:
    log = _log(tmp_path, 2)
    with pytest.raises(InvalidRequest, match="resource"):
        log.create("../escape", 2)
    with pytest.raises(InvalidRequest, match="partitions"):
        log.create("orders", 3)
    log.create("orders", 2)  # same count: a no-op
    with pytest.raises(InvalidRequest, match="partition"):
        log.end_offset("orders", 2)
    with pytest.raises(InvalidRequest, match="resource"):
        log.partitions("missing")
    with pytest.raises(InvalidRequest, match="start_offset"):
        log.read("orders", 0, -1)
    with pytest.raises(InvalidRequest, match="key"):
        Producer(log, "orders").send(5, "v")  # type: ignore[arg-type]
    assert log.resources() == ["orders"]


def _produce(root: str, producer_id: int, records: int, batch: int) -> None:
    log = PartitionedLog(root)
    producer = Producer(log, "orders", batch_records=batch)
    for i in range(records):
        producer.send(f"k{(producer_id * 7 + i) % 17}", f"{producer_id}:{i}")
        if i % 50 == 49:
            producer.flush()
    producer.flush()


@pytest.mark.slow
def test_concurrent_producers_in_separate_processes_never_lose_or_duplicate(tmp_path: Path) -> None:
    log = _log(tmp_path, 3)
    ctx = multiprocessing.get_context("spawn")
    producers, per_producer = 4, 600
    procs = [ctx.Process(target=_produce, args=(str(log.root), i, per_producer, 13)) for i in range(producers)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0, f"producer process exited with {proc.exitcode} (expected 0 within 120 s)"
    seen: list[str] = []
    for p in range(3):
        table = log.read("orders", p)
        assert table.column("offset").to_pylist() == list(range(table.num_rows))
        values = table.column("value").to_pylist()
        for producer_id in range(producers):  # each producer's records keep their order within a partition
            mine = [int(v.split(":")[1]) for v in values if v.startswith(f"{producer_id}:")]
            assert mine == sorted(mine)
        seen += values
    assert sorted(seen) == sorted(f"{i}:{n}" for i in range(producers) for n in range(per_producer))
    assert len(os.listdir(tmp_path / "log" / "orders" / "0")) > 10  # many interleaved segments were appended
