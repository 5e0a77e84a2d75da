"""Local partition state: fold/merge, committed ranges, changelog append and restore of committed ranges only."""

from __future__ import annotations

import itertools
import logging
import re
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.clock import VirtualClock
from apportion.errors import ApportionError, CorruptFile, InvalidRequest
from apportion.log import PartitionedLog
from apportion.log._log import records_table
from apportion.spark.state import (
    Aggregate,
    PartitionState,
    Ranges,
    add_range,
    append_changelog,
    changelog_resource,
    fold,
    lag,
    merge,
    restore,
)

Batch = list[tuple[str, str | None]]

keys_st = st.text(max_size=4)  # unicode, including the empty key
values_st = st.none() | st.text(max_size=6)
batch_st = st.lists(st.tuples(keys_st, values_st), max_size=12)


def reference_fold(records: Sequence[tuple[str, str | None]]) -> dict[str, Aggregate]:
    counts: dict[str, list[int]] = {}
    for key, value in records:
        entry = counts.setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += 0 if value is None else len(value)
    return {k: Aggregate(c, t) for k, (c, t) in sorted(counts.items())}


@pytest.fixture
def log(tmp_path: Path) -> PartitionedLog:
    log = PartitionedLog(tmp_path / "log")
    log.create("counts", 3)
    return log


@pytest.fixture
def store(tmp_path: Path) -> Iterator[PartitionState]:
    with PartitionState.open(tmp_path / "state", 1) as state:
        yield state


# -- fold / merge --------------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(batch_st)
def test_fold_counts_records_and_utf8_characters_per_key_like_the_reference(batch: Batch) -> None:
    delta = fold(records_table(batch))
    assert delta == reference_fold(batch)
    assert list(delta) == sorted(delta)


def test_fold_ignores_other_columns_and_counts_a_null_value_as_zero() -> None:
    table = pa.table({"key": ["é", "é", "a"], "value": ["日本", None, ""], "offset": [0, 1, 2], "x": [1.0, 2.0, 3.0]})
    assert fold(table) == {"a": Aggregate(1, 0), "é": Aggregate(2, 2)}


def test_fold_rejects_a_null_key_and_missing_columns() -> None:
    with pytest.raises(InvalidRequest, match="null key"):
        fold(pa.table({"key": ["a", None], "value": ["x", "y"]}))
    with pytest.raises(InvalidRequest, match="key and value"):
        fold(pa.table({"key": ["a"]}))


@settings(max_examples=60, deadline=None)
@given(batch_st, batch_st)
def test_merging_two_folds_equals_the_fold_of_both_batches(first: Batch, second: Batch) -> None:
    state = reference_fold(first)
    merged = merge(state, fold(records_table(second)))
    assert set(merged) == {k for k, _ in second}
    assert {**state, **merged} == reference_fold(first + second)
    assert list(merged) == sorted(merged)


def test_aggregate_rejects_negative_or_non_int_fields() -> None:
    with pytest.raises(InvalidRequest, match="count"):
        Aggregate(-1, 0)
    with pytest.raises(InvalidRequest, match="total"):
        Aggregate(1, True)


# -- committed ranges ----------------------------------------------------------------------------------------------
def test_add_range_merges_contiguous_batches_into_one_range_and_keeps_gaps() -> None:
    ranges: Ranges = ()
    ranges = add_range(ranges, 0, 3)
    ranges = add_range(ranges, 3, 5)
    assert ranges == ((0, 5),)
    ranges = add_range(ranges, 7, 9)  # offsets 5 and 6: a zombie's uncommitted append
    assert ranges == ((0, 5), (7, 9))
    assert add_range(ranges, 9, 9) == ranges  # an empty batch adds nothing
    assert add_range(ranges, 12, 12) == ranges
    assert add_range([[0, 5]], 5, 6) == ((0, 6),)  # type: ignore[arg-type]  # lists from a JSON checkpoint


def test_add_range_rejects_reversed_or_overlapping_ranges() -> None:
    with pytest.raises(InvalidRequest, match="end"):
        add_range((), 5, 4)
    with pytest.raises(InvalidRequest, match="overlaps"):
        add_range(((0, 5),), 4, 8)
    with pytest.raises(InvalidRequest, match="first"):
        add_range((), -1, 2)
    with pytest.raises(InvalidRequest, match="ranges"):
        add_range(((3, 5), (0, 2)), 6, 7)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 5)), max_size=8), st.integers(0, 40))
def test_lag_counts_the_committed_offsets_at_or_beyond_the_position(steps: list[tuple[int, int]], pos: int) -> None:
    ranges: Ranges = ()
    end = 0
    offsets: list[int] = []
    for gap, size in steps:
        ranges = add_range(ranges, end + gap, end + gap + size)
        offsets += range(end + gap, end + gap + size)
        end += gap + size
    assert [o for first, last in ranges for o in range(first, last)] == offsets
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))  # merged when contiguous
    assert lag(ranges, pos) == sum(1 for o in offsets if o >= pos)


# -- changelog and restore -----------------------------------------------------------------------------------------
class Active:
    """The active of one partition: appends new absolute values, then commits the range, then writes its cache."""

    def __init__(self, log: PartitionedLog, partition: int) -> None:
        self.log = log
        self.partition = partition
        self.state: dict[str, Aggregate] = {}
        self.ranges: Ranges = ()
        self.committed: Batch = []

    def process(self, batch: Batch) -> None:
        updates = merge(self.state, fold(records_table(batch)))
        first, end = append_changelog(self.log, "counts", self.partition, updates)
        self.ranges = add_range(self.ranges, first, end)  # the fenced commit
        self.state.update(updates)
        self.committed += batch

    def zombie(self, batch: Batch) -> None:
        """A fenced former owner appends values computed from its stale state; its commit fails."""
        append_changelog(self.log, "counts", self.partition, merge({}, fold(records_table(batch))))


def test_a_zombies_uncommitted_append_between_two_commits_is_never_restored(
    log: PartitionedLog, store: PartitionState
) -> None:
    active = Active(log, 1)
    active.process([("a", "xx"), ("b", "y")])
    active.zombie([("a", "zombie!"), ("c", "never")])
    active.process([("a", "é"), ("d", None)])
    assert active.ranges == ((0, 2), (4, 6))
    assert log.end_offset(changelog_resource("counts"), 1) == 6

    assert lag(active.ranges, store.position) == 4
    assert restore(log, "counts", 1, store, active.ranges) == 4
    assert store.snapshot() == {"a": Aggregate(2, 3), "b": Aggregate(1, 1), "d": Aggregate(1, 0)}
    assert store.snapshot() == reference_fold(active.committed)
    assert store.position == 6
    assert lag(active.ranges, store.position) == 0
    assert restore(log, "counts", 1, store, active.ranges) == 0


def test_append_changelog_writes_compact_json_in_key_order_stamped_by_the_clock(log: PartitionedLog) -> None:
    clock = VirtualClock(1_700_000_000.25)
    updates = {"b": Aggregate(2, 7), "a": Aggregate(1, 0)}
    assert append_changelog(log, "counts", 2, updates, clock=clock) == (0, 2)
    table = log.read("counts.changelog", 2)
    assert table.column("key").to_pylist() == ["a", "b"]
    assert table.column("value").to_pylist() == ['{"count":1,"total":0}', '{"count":2,"total":7}']
    assert table.column("ts_ms").to_pylist() == [1_700_000_000_250] * 2
    assert log.partitions("counts.changelog") == 3
    assert append_changelog(log, "counts", 2, {}) == (2, 2)
    assert log.end_offset("counts.changelog", 2) == 2


def test_concurrent_first_appends_create_the_changelog_once(log: PartitionedLog) -> None:
    errors: list[BaseException] = []

    def append(partition: int) -> None:
        try:
            append_changelog(log, "counts", partition, {f"k{partition}": Aggregate(1, 1)})
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(p % 3,)) for p in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert log.partitions("counts.changelog") == 3
    assert [log.end_offset("counts.changelog", p) for p in range(3)] == [2, 2, 2]


def test_append_changelog_rejects_a_changelog_with_another_partition_count_and_bad_updates(
    log: PartitionedLog,
) -> None:
    log.create("counts.changelog", 2)
    with pytest.raises(InvalidRequest, match="partitions"):
        append_changelog(log, "counts", 0, {"a": Aggregate(1, 1)})
    with pytest.raises(InvalidRequest, match="Aggregate"):
        append_changelog(log, "counts", 0, {"a": (1, 1)})  # type: ignore[dict-item]


def test_restore_fails_loudly_when_a_committed_range_is_missing_or_corrupt(
    log: PartitionedLog, store: PartitionState
) -> None:
    first, end = append_changelog(log, "counts", 1, {"a": Aggregate(1, 1)})
    with pytest.raises(ApportionError, match="committed range"):
        restore(log, "counts", 1, store, ((first, end + 1),))
    log.append("counts.changelog", 1, records_table([("b", "not json")]))
    with pytest.raises(ApportionError, match="not"):
        restore(log, "counts", 1, store, ((0, 2),))
    assert store.position == 0 and len(store) == 0  # nothing half-applied
    with pytest.raises(InvalidRequest, match="max_records"):
        restore(log, "counts", 1, store, ((0, 1),), max_records=-1)


@pytest.mark.parametrize("name", ["_manifest.json", "_resource.json"])
def test_a_truncated_changelog_file_is_a_corrupt_file_naming_it_for_restore_and_append(
    log: PartitionedLog, store: PartitionState, name: str
) -> None:
    """Issue 28: a truncated changelog manifest was an internal error (JSONDecodeError) in a stateful worker."""
    active = Active(log, 1)
    active.process([("a", "1"), ("b", "22")])
    path = log.root / changelog_resource("counts") / ("1" if name == "_manifest.json" else "") / name
    path.write_bytes(path.read_bytes()[:15])
    for attempt in (
        lambda: restore(log, "counts", 1, store, active.ranges),
        lambda: append_changelog(log, "counts", 1, {"c": Aggregate(1, 1)}),
    ):
        with pytest.raises(CorruptFile, match=f"^{re.escape(str(path))}: not JSON .*; restore it from a backup"):
            attempt()
    assert store.position == 0


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(batch_st, st.booleans()), min_size=1, max_size=6),
    st.integers(1, 8),
)
def test_restore_in_chunks_equals_restore_all_equals_the_fold_of_committed_input(
    steps: list[tuple[Batch, bool]], chunk: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = PartitionedLog(Path(tmp) / "log")
        log.create("counts", 1)
        active = Active(log, 0)
        for batch, committed in steps:
            if committed:
                active.process(batch)
            else:
                active.zombie(batch)
        expected = reference_fold(active.committed)
        total = lag(active.ranges, 0)

        with PartitionState.open(Path(tmp) / "all", 0) as whole:
            assert restore(log, "counts", 0, whole, active.ranges) == total
            assert whole.snapshot() == expected
            assert whole.position == (active.ranges[-1][1] if active.ranges else 0)
            assert restore(log, "counts", 0, whole, active.ranges) == 0

        with PartitionState.open(Path(tmp) / "chunks", 0) as chunked:
            replayed = 0
            while True:
                before = lag(active.ranges, chunked.position)
                n = restore(log, "counts", 0, chunked, active.ranges, max_records=chunk)
                assert n == min(chunk, before)
                assert lag(active.ranges, chunked.position) == before - n
                replayed += n
                if n == 0:
                    break
            assert replayed == total
            assert chunked.snapshot() == expected
            assert chunked.position == (active.ranges[-1][1] if active.ranges else 0)


def test_a_cache_behind_the_commit_is_repaired_by_replaying_from_its_position(
    log: PartitionedLog, store: PartitionState
) -> None:
    active = Active(log, 1)
    active.process([("a", "1"), ("b", "22")])
    restore(log, "counts", 1, store, active.ranges)
    active.process([("a", "333")])  # committed, but the crash hit before the local write
    assert store.snapshot() == {"a": Aggregate(1, 1), "b": Aggregate(1, 2)}
    assert restore(log, "counts", 1, store, active.ranges) == 1
    assert store.snapshot() == reference_fold(active.committed)


# -- the local store -----------------------------------------------------------------------------------------------
def test_state_and_position_persist_across_reopen(tmp_path: Path) -> None:
    with PartitionState.open(tmp_path / "deep" / "dir", 4) as state:
        assert state.position == 0 and len(state) == 0
        state.apply({"x": Aggregate(1, 2), "ü": Aggregate(3, 4)}, 10)
    assert (tmp_path / "deep" / "dir" / "4.sqlite").is_file()
    with PartitionState.open(tmp_path / "deep" / "dir", 4) as state:
        assert state.position == 10
        assert state.snapshot() == {"x": Aggregate(1, 2), "ü": Aggregate(3, 4)}
        assert len(state) == 2


def test_position_never_goes_backwards_and_a_rejected_apply_changes_nothing(store: PartitionState) -> None:
    store.apply({"a": Aggregate(1, 1)}, 5)
    store.apply({}, 5)
    with pytest.raises(InvalidRequest, match="position"):
        store.apply({"a": Aggregate(9, 9), "b": Aggregate(1, 1)}, 4)
    assert store.position == 5
    assert store.snapshot() == {"a": Aggregate(1, 1)}
    store.apply({"a": Aggregate(2, 3)}, 8)  # values are absolute: an upsert replaces
    assert store.snapshot() == {"a": Aggregate(2, 3)}


def test_get_many_keys_returns_only_the_present_ones_in_key_order(store: PartitionState) -> None:
    present = {f"k{i:05d}": Aggregate(i, 2 * i) for i in range(0, 12_000, 2)}
    store.apply(present, 1)
    wanted = [f"k{i:05d}" for i in range(11_999, -1, -1)] + ["missing", "k00000"]
    found = store.get(wanted)
    assert found == dict(sorted(present.items()))
    assert list(found) == sorted(found)
    assert store.get([]) == {}
    with pytest.raises(InvalidRequest, match="keys"):
        store.get("k00000")


def test_reset_deletes_every_key_and_the_position(store: PartitionState) -> None:
    store.apply({"a": Aggregate(1, 1), "b": Aggregate(2, 2)}, 7)
    store.reset()
    assert store.position == 0 and len(store) == 0 and store.snapshot() == {}
    store.apply({"c": Aggregate(1, 0)}, 1)
    assert store.snapshot() == {"c": Aggregate(1, 0)}


@given(st.dictionaries(keys_st, st.builds(Aggregate, st.integers(0, 2**40), st.integers(0, 2**40)), max_size=20))
@settings(max_examples=30, deadline=None)
def test_snapshot_round_trips_unicode_keys_in_python_sort_order(updates: dict[str, Aggregate]) -> None:
    with tempfile.TemporaryDirectory() as tmp, PartitionState.open(tmp, 0) as state:
        state.apply(updates, 0)
        assert state.snapshot() == dict(sorted(updates.items()))
        assert list(state.snapshot()) == sorted(updates)
        assert state.get(updates) == dict(sorted(updates.items()))


def test_threads_sharing_one_store_apply_without_losing_updates(store: PartitionState) -> None:
    def work(t: int) -> None:
        for i in range(50):
            store.apply({f"t{t}-{i}": Aggregate(1, i)}, 0)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(store) == 200


CORRUPTIONS = {
    "not a database": lambda data: b"this is not a database, just enough bytes to look like a header" * 4,
    "truncated": lambda data: data[: len(data) // 2],
    "pages zeroed": lambda data: data[:4096] + bytes(len(data) - 4096),
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_a_corrupt_state_file_is_rebuilt_from_the_changelog_with_a_warning(
    corrupt: Callable[[bytes], bytes], log: PartitionedLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The local file is a cache of the committed changelog: a corrupt one is started again and replayed whole."""
    active = Active(log, 1)
    for batch in range(3):
        active.process([(f"key-{i}", "v" * (i % 7 + batch)) for i in range(700)])
    with PartitionState.open(tmp_path / "state", 1) as state:
        restore(log, "counts", 1, state, active.ranges)
        state._connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the file, as after a clean stop
    path = tmp_path / "state" / "1.sqlite"
    path.write_bytes(corrupt(path.read_bytes()))
    with caplog.at_level(logging.WARNING, "apportion.state"), PartitionState.open(tmp_path / "state", 1) as state:
        assert state.position == 0 and len(state) == 0
        assert restore(log, "counts", 1, state, active.ranges) == 3 * 700
        assert state.snapshot() == reference_fold(active.committed)
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"local state {path} is corrupt (")
    assert warning.endswith("rebuilding it from the changelog (it is a cache)")


def test_sqlite_failures_surface_as_apportion_errors(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ApportionError, match="directory"):
        PartitionState.open(tmp_path / "file", 0)
    state = PartitionState.open(tmp_path / "ok", 0)
    state.close()
    state.close()  # idempotent
    with pytest.raises(ApportionError, match="local state"):
        _ = state.position
    with pytest.raises(InvalidRequest, match="partition"):
        PartitionState.open(tmp_path, -1)
