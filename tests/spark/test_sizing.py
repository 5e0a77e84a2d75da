"""The micro-batch size chosen by records and time (``apportion.spark.pipeline._sizing``): pure, no Spark."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.errors import InvalidRequest
from apportion.spark.pipeline._sizing import (
    DEFAULT_RECORDS,
    DEFAULT_SECONDS,
    FIRST_BATCH,
    GROWTH,
    LIMIT,
    MAX_RECORDS,
    MIN_RECORDS,
    STATEFUL_MAX_RECORDS,
    TAIL,
    BatchSize,
)

sizes = st.integers(1, MAX_RECORDS)
seconds = st.floats(0.0, 600.0, allow_nan=False)
targets = st.floats(0.01, 60.0, allow_nan=False)


def test_without_a_size_it_starts_at_the_default_and_adapts_to_the_default_target() -> None:
    size = BatchSize()
    assert (size.records, size.target_s, size.adaptive) == (DEFAULT_RECORDS, DEFAULT_SECONDS, True)


@given(
    st.integers(1, 1_000),
    st.sampled_from([None, STATEFUL_MAX_RECORDS]),
    st.lists(st.tuples(st.integers(1, MAX_RECORDS), seconds), max_size=3),
)
def test_without_a_size_the_first_batch_spreads_its_records_over_its_partitions_and_no_later_one(
    partitions: int, most: int | None, batches: list[tuple[int, float]]
) -> None:
    size = BatchSize(most=most)
    size.spread(partitions)
    cap = STATEFUL_MAX_RECORDS if most is not None else MAX_RECORDS
    assert size.records == min(cap, max(DEFAULT_RECORDS, FIRST_BATCH // partitions))
    assert size.records * partitions <= max(FIRST_BATCH, DEFAULT_RECORDS * partitions)  # budget, or default each
    assert size.records >= min(cap, DEFAULT_RECORDS)  # never below the default per partition
    for used, took in batches:  # once a batch is measured, the size is the model's alone
        chosen = size.measured(used, took)
        size.spread(partitions)
        assert size.records == chosen


@given(st.integers(1, 1_000), st.sampled_from([(5_000, None), (None, 3.0), (5_000, 3.0)]))
def test_a_given_size_or_target_is_not_spread(partitions: int, given_: tuple[int | None, float | None]) -> None:
    records, target = given_
    size = BatchSize(records, target)
    before = size.records
    size.spread(partitions)
    assert size.records == before


@given(sizes, st.integers(1, MAX_RECORDS), seconds)
def test_a_given_size_is_fixed(records: int, used: int, took: float) -> None:
    size = BatchSize(records)
    assert not size.adaptive
    assert size.measured(min(used, records), took) == records


@given(sizes, targets, st.integers(1, MAX_RECORDS), seconds, st.sampled_from([None, STATEFUL_MAX_RECORDS]))
def test_the_next_size_stays_within_its_bounds_and_grows_at_most_fourfold(
    records: int, target: float, used: int, took: float, most: int | None
) -> None:
    records = records if most is None else min(records, most)
    size = BatchSize(records, target, most=most)
    used = min(used, records)
    after = size.measured(used, took)
    assert MIN_RECORDS <= after <= (most or MAX_RECORDS) or after == records
    assert after <= max(records, used * GROWTH, MIN_RECORDS)
    if took > target:  # over the target: never larger than what it used
        assert after <= max(used, MIN_RECORDS)


@given(sizes, st.booleans(), st.integers(0, 10**9), st.integers(0, 3 * MAX_RECORDS), st.booleans())
def test_a_task_takes_the_size_or_a_small_remainder_whole_never_past_the_end_or_the_cap(
    records: int, adaptive: bool, start: int, backlog: int, stateful: bool
) -> None:
    most = STATEFUL_MAX_RECORDS if stateful else None
    records = min(records, most) if most is not None else records
    size = BatchSize(records, 10.0 if adaptive else None, most=most)
    end = size.end(start, start + backlog)
    assert start <= end <= start + backlog  # never past what the source has
    if not adaptive or backlog <= records:  # a fixed size is the user's; within the size, the backlog is all of it
        assert end == min(start + backlog, start + records)
        return
    cap = min(size.most, int(records * (1 + TAIL)))
    # adaptive: the whole backlog when what would remain is at most TAIL of the size (and within the cap); else the size
    assert end == (start + backlog if backlog <= cap else start + records)


def test_the_last_few_records_of_a_partition_ride_with_the_batch_before() -> None:
    size = BatchSize(None, 10.0)
    size.records = 100_000
    assert size.end(0, 124_000) == 124_000  # 24,000 left would have been a batch of its own
    assert size.end(0, 126_000) == 100_000  # 26,000 is a batch worth its fixed cost
    assert BatchSize(100_000).end(0, 101_000) == 100_000  # a given size is kept exactly


def run_batches(size: BatchSize, fixed_s: float, per_used_s: float, batches: int) -> list[float]:
    """The times of ``batches`` full batches that cost ``fixed_s`` plus ``per_used_s`` per record of ``used``."""
    times = []
    for _ in range(batches):
        used = size.records
        times.append(fixed_s + used * per_used_s)
        size.measured(used, times[-1])
    return times


@given(st.integers(MIN_RECORDS * 2, MAX_RECORDS // 8), targets)
def test_a_batch_that_the_log_end_cut_short_under_the_target_keeps_the_size(records: int, target: float) -> None:
    size = BatchSize(records, target)
    assert size.measured(records // 2, target / 2) == records


@given(
    fixed_s=st.floats(0.05, 2.0),
    per_record_us=st.floats(0.5, 200.0),
    partitions=st.integers(1, 64),
    target=st.floats(3.0, 20.0),
)
def test_on_a_fixed_plus_per_record_cost_the_batches_settle_near_the_target(
    fixed_s: float, per_record_us: float, partitions: int, target: float
) -> None:
    # a batch costs a fixed part (plan, job scheduling, commit) plus a part per record: the size must settle where a
    # batch takes about the target (or at the largest size, when even that is quicker)
    took = run_batches(BatchSize(1_000, target), fixed_s, partitions * per_record_us / 1e6, 40)[-1]
    at_most = fixed_s + MAX_RECORDS * partitions * per_record_us / 1e6
    assert took <= target * 1.05 + fixed_s or math.isclose(took, at_most)
    assert took >= min(target, at_most) / GROWTH


@given(st.floats(0.5, 0.9), st.integers(2_000, 12_000), st.floats(3.0, 20.0))
def test_when_the_fixed_cost_is_most_of_a_batch_the_size_reaches_the_target_within_five_batches(
    fixed_share: float, ideal: int, target: float
) -> None:
    # measured on one own core: batches of 80,000 to 527,000 records all took 3.2-4.0 s. A size that assumes time
    # proportional to records grows by target / seconds (x1.1-x2 here) and needs many batches to get there
    fixed_s = fixed_share * target
    per_used_s = (target - fixed_s) / ideal  # `ideal` records per partition take the target
    times = run_batches(BatchSize(1_000, target), fixed_s, per_used_s, 5)
    assert times[-1] >= 0.9 * target
    assert max(times) <= LIMIT * target


@given(st.floats(0.5, 9.0), st.floats(1.0, 9.9), st.integers(MIN_RECORDS, DEFAULT_RECORDS - 1))
def test_a_cold_first_batch_is_not_fitted_so_the_second_grows_the_size_by_the_bounds(
    first_s: float, second_s: float, first_used: int
) -> None:
    # a steady 20,000 records/s into Kafka (local[1]): the first batch (a few records, cut short by the end) took
    # 5.6 s, the second (full) 9.3 s, both cold; a line through them called 5.4 s of it fixed and grew the size only
    # x1.15 while the backlog grew. Under the target, the second batch's size grows by the bounds alone
    size = BatchSize(None, 10.0)
    assert size.measured(first_used, first_s) == DEFAULT_RECORDS  # cut short under the target: kept
    grown = size.measured(DEFAULT_RECORDS, second_s)
    assert grown == min(MAX_RECORDS, int(DEFAULT_RECORDS * min(GROWTH, LIMIT * 10.0 / second_s)))


@given(
    st.sampled_from([None, 1_000, 10_000]),
    targets,
    st.lists(st.tuples(st.floats(0.01, 1.0), st.floats(0.001, 600.0)), min_size=1, max_size=20),
)
def test_were_its_cost_all_per_record_no_batch_would_take_more_than_limit_times_the_target(
    records: int | None, target: float, batches: list[tuple[float, float]]
) -> None:
    # whatever the cost model fitted from earlier batches (noise, a cold start), the next size is at most what a
    # cost proportional to records would finish in LIMIT x the target: a revocation waits for that batch
    size = BatchSize(records, target)
    for share, took in batches:
        before = size.records
        used = max(1, int(before * share))
        after = size.measured(used, took)
        if used < before and took <= target:
            assert after == before  # the log's end cut it short: the size stays
        else:
            assert after <= max(MIN_RECORDS, used * LIMIT * target / took * (1 + 1e-9))


def test_a_larger_batch_that_was_not_slower_grows_the_size_by_the_bounds() -> None:
    size = BatchSize(10_000, 5.0)
    size.measured(10_000, 2.0)  # the first batch: taken as all fixed cost, x min(4, 2 x 5 / 2)
    assert size.records == 40_000
    size.measured(40_000, 1.9)  # four times the records, no slower: all fixed, x4
    assert size.records == 160_000
    size.measured(160_000, 3.9)  # now the line through (40,000, 1.9) and (160,000, 3.9): 1.23 s fixed
    assert size.records == pytest.approx(160_000 * (5.0 - 1.2333) / (3.9 - 1.2333), rel=1e-3)


@given(st.lists(st.tuples(st.integers(1, MAX_RECORDS), seconds), min_size=1, max_size=30))
def test_a_stateful_size_never_grows_past_its_cap(batches: list[tuple[int, float]]) -> None:
    # the worker folds a stateful batch's rows: however quick the batches, the size stays at most the cap
    size = BatchSize(most=STATEFUL_MAX_RECORDS)
    assert size.records <= STATEFUL_MAX_RECORDS
    for used, took in batches:
        assert size.measured(min(used, size.records), took) <= STATEFUL_MAX_RECORDS


def test_a_stateful_pipeline_caps_its_adaptive_size_and_refuses_a_larger_fixed_one(tmp_path: Path) -> None:
    from apportion.log import PartitionedLog
    from apportion.spark.pipeline._pipeline import Pipeline
    from apportion.spark.pipeline._stateful import StatefulPartitions

    log = PartitionedLog(tmp_path / "log")
    log.create("r", 2)
    state = StatefulPartitions(log, "r", tmp_path / "state", emit=lambda *a, **k: None)
    pipeline = Pipeline(None, log, tmp_path / "out", "r", state=state)  # type: ignore[arg-type]  # no batch runs
    for _ in range(20):  # batches far under the target: the size grows x4 each time, up to the cap
        pipeline.sizing.measured(pipeline.sizing.records, 0.01)
    assert pipeline.sizing.records == STATEFUL_MAX_RECORDS
    stateless = Pipeline(None, log, tmp_path / "out", "r")  # type: ignore[arg-type]
    for _ in range(20):
        stateless.sizing.measured(stateless.sizing.records, 0.01)
    assert stateless.sizing.records == MAX_RECORDS
    with pytest.raises(InvalidRequest, match="batch_records"):
        Pipeline(None, log, tmp_path / "out", "r", batch_records=STATEFUL_MAX_RECORDS + 1, state=state)  # type: ignore[arg-type]
    state.close()


@pytest.mark.parametrize(
    ("records", "target", "field"),
    [(0, None, "batch_records"), (True, None, "batch_records"), (1.5, None, "batch_records"),
     (None, 0.0, "batch_seconds"), (None, -1.0, "batch_seconds"), (None, math.inf, "batch_seconds"),
     (None, math.nan, "batch_seconds"), (10, "5", "batch_seconds")],
)  # fmt: skip
def test_a_bad_size_or_target_is_refused_naming_it(records: object, target: object, field: str) -> None:
    with pytest.raises(InvalidRequest, match=field):
        BatchSize(records, target)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("records", "target", "revoke_timeout", "expected"),
    [(None, None, 30.0, DEFAULT_SECONDS), (None, None, 6.0, 2.0), (None, None, 10.0, 10.0 / 3),
     (None, 7.5, 30.0, 7.5), (None, 20.0, 6.0, 20.0), (500, None, 30.0, None), (500, 4.0, 30.0, 4.0),
     (None, None, 0.0, DEFAULT_SECONDS), (None, None, math.nan, DEFAULT_SECONDS)],
)  # fmt: skip
def test_a_default_target_is_at_most_a_third_of_the_revoke_timeout_a_given_one_stays(
    records: int | None, target: float | None, revoke_timeout: float, expected: float | None
) -> None:
    # a revocation waits for the batch in flight: the default target leaves room for LIMIT x itself; a given
    # target is the user's (checked against the revoke timeout by the worker), a fixed size has none
    size = BatchSize(records, target)
    size.within(revoke_timeout)
    assert size.target_s == (pytest.approx(expected) if expected is not None else None)
    assert DEFAULT_SECONDS * LIMIT < 30.0  # the default --revoke-timeout


@pytest.mark.parametrize(("options", "expected"), [({}, 10.0 / 3), ({"revoke_timeout_s": 30.0}, DEFAULT_SECONDS)])
def test_a_pipeline_joined_aims_its_default_batches_at_a_third_of_the_revoke_timeout_it_joins_with(
    options: dict[str, float], expected: float, tmp_path: Path
) -> None:
    # the library's Group.join waits DEFAULT_REVOKE_TIMEOUT_S (10 s) for a revocation unless told: a pipeline made
    # without a target must not plan 10 s batches into it
    from apportion.log import PartitionedLog
    from apportion.spark.pipeline._pipeline import Pipeline, joined
    from apportion.store import connect
    from apportion.worker import DEFAULT_REVOKE_TIMEOUT_S, Group

    assert DEFAULT_REVOKE_TIMEOUT_S == 10.0
    log = PartitionedLog(tmp_path / "log")
    log.create("r", 2)
    pipeline = Pipeline(None, log, tmp_path / "out", "r")  # type: ignore[arg-type]  # joins, runs no batch
    assert pipeline.sizing.target_s == DEFAULT_SECONDS
    with connect("memory://") as store, joined(Group(store, "g", partitions=2), "w", pipeline, **options):  # type: ignore[arg-type]
        assert pipeline.sizing.target_s == pytest.approx(expected)


@pytest.mark.parametrize("revoke_timeout", [0.0, -1.0, math.nan, True])
def test_a_worker_refuses_a_revoke_timeout_that_is_not_a_positive_number_naming_it(
    revoke_timeout: float, tmp_path: Path
) -> None:
    # before Spark starts, and not blamed on the batch target the user never gave
    from apportion.spark import PipelineRequest, PipelineSettings, run_pipeline_worker

    settings = PipelineSettings(tmp_path, tmp_path / "out", revoke_timeout_s=revoke_timeout)
    with pytest.raises(InvalidRequest, match="revoke_timeout"):
        run_pipeline_worker(PipelineRequest("memory://", "g", "w", settings))
