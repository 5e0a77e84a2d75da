"""How many records per partition the next micro-batch takes: fixed, or chosen by records and time.

A batch has a fixed cost whatever its size (planning, a Spark job's scheduling, one directory per partition, one
commit transaction: 1-3 s on one own core, `bench/README.md`) and a cost per record. Small batches pay the fixed cost
again and again; large ones hold their partitions' locks longer, and a revocation waits for the batch in flight
(``on_revoked``), so a handoff waits longer. The size therefore follows a time target, on a cost model
``seconds = fixed + per_record x used`` fitted to the last two batches::

    next = clamp(min(ideal, used x GROWTH, used x LIMIT x target / seconds))   after a full batch (some partition
                                                                                took ``size``) or one over the target
    next = size                                         after one under the target that the log's end cut short
    ideal = used x (target - fixed) / (seconds - fixed)  (the size whose modelled time is the target)

``used``: the most records one partition took in that batch; ``seconds``: the batch from its plan to its commit;
``clamp`` to ``[MIN_RECORDS, most]`` (``MAX_RECORDS``; ``STATEFUL_MAX_RECORDS`` for a stateful pipeline), and never
above ``used`` after a batch over the target. ``fixed`` is the intercept of the line through this batch and the one
before when their sizes differ by a fifth or more; the last such estimate otherwise; before any, the whole of a first
batch under the target (mostly fixed cost and a cold start) and none of one over it. A larger batch that was not
slower says the cost is all fixed: the size then grows by the bounds. Over the target with nothing fitted, or with a
fixed cost above the target, the size shrinks as if the cost were all per record.

Why a model with a fixed part: measured on one own core, batches of 80,000 to 527,000 records all took 3.2-4.0 s;
a rule that assumes time proportional to records grows such a size by only target / seconds (x1.3 per batch here),
so a 2,000,000-record backlog took 8 batches where 4 do. The bounds keep the model's errors cheap: growth is at most
x4 per batch (the cost per record is not constant: the first large batch may spill, or meet a cold code path), and
at most ``LIMIT x target / seconds``, so that even if the cost were all per record a batch would take at most
``LIMIT`` x the target (20 s at the default 10 s, inside ``--revoke-timeout``'s 30 s; a given ``--batch-seconds``
above half the revoke timeout gives up that margin, and a revocation that outlasts the timeout lets the lease lapse:
a liveness cost, never a safety one). With no target the size stays as given. With neither a size nor a target
given, the first batch takes ``FIRST_BATCH`` records in all, spread over the partitions it reads.

Pure: the pipeline feeds it each batch's measure (``Pipeline._process``) and reads ``records``.
"""

from __future__ import annotations

import math

from apportion.errors import InvalidRequest

DEFAULT_RECORDS = 10_000
"""Records per partition of the first batch, when none is given."""

FIRST_BATCH = 400_000
"""Records in all of a process's first batch, when no size is given: spread over the partitions it reads
(``BatchSize.spread``), never below :data:`DEFAULT_RECORDS` per partition. The first batch knows nothing of the rate;
per partition alone, a worker of 8 partitions started at 80,000 records and needed three batches for a backlog of
1,000,000 (10,000, 40,000 and the rest per partition), each paying a batch's fixed cost (1.3-2 s through a Spark
Connect server). A warm ``local[2]`` job reads, hashes and writes 1,000,000 Kafka records in ~7 s, so 400,000 take
~3 s warm and about the 10 s target on a worker's own cold ``local[1]`` JVM after its warm-up."""

DEFAULT_SECONDS = 10.0
"""The target of one batch when the size is not fixed: a third of ``--revoke-timeout``'s default 30 s (a revocation
waits for the batch in flight; joined with a shorter one, a pipeline aims at a third of it: ``within``), long enough
that the fixed cost is a small share of the batch (1-3 s on one own core). 5 s before: 2,000,000 records took 5-9
batches."""
REVOKE_SHARE = 3.0
"""Without ``--batch-seconds`` the target is at most ``revoke timeout / REVOKE_SHARE``: with ``LIMIT`` a batch takes
at most two thirds of the revoke timeout even if its cost were all per record."""

MIN_RECORDS = 100
MAX_RECORDS = 1_000_000  # per partition: a batch is bounded by the cluster, but a plan this large is a typo
STATEFUL_MAX_RECORDS = 100_000
"""The most records per partition of a stateful pipeline's batch, fixed or adaptive: the worker folds each
partition's rows of the batch and holds the batch's keys and new values (``StatefulPartitions.stage_output``), so
the batch is bounded by the worker's memory, not only by the cluster's."""
GROWTH = 4.0
LIMIT = 2.0
"""A batch sized for the target takes at most ``LIMIT`` x the target were its cost all per record (module doc)."""
TAIL = 0.25
"""An adaptive batch takes a partition's whole backlog when what it would leave is at most ``TAIL`` x the size
(``BatchSize.end``): a remainder that small would cost a batch's whole fixed cost on its own (measured: the last
7,750 records of one partition of a Kafka topic took a batch of 1.1 s after a batch of 700,650 records took 11.3 s,
local[1]). The batch is then at most ``1 + TAIL`` x the size: with ``LIMIT`` at most 2.5 x its target even if its cost
were all per record (25 s at the default 10 s, inside ``--revoke-timeout``'s 30 s)."""
SPREAD = 1.2
"""Two batches fit the cost line only when the larger is at least ``SPREAD`` x the smaller (else noise decides)."""


def positive_seconds(name: str, value: object) -> float:
    """``value`` if it is a finite number of seconds > 0 (not a bool); ``InvalidRequest`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise InvalidRequest(name, f"must be a number of seconds > 0, got {value!r}")
    return float(value)


class BatchSize:
    """The next batch's records per partition (``records``); ``target_s`` None: fixed at ``records``."""

    __slots__ = ("_default", "_fixed_s", "_given_target", "_measured", "_previous", "most", "records", "target_s")

    def __init__(self, records: int | None = None, target_s: float | None = None, *, most: int | None = None) -> None:
        """``records`` None: :data:`DEFAULT_RECORDS`, adapting to ``target_s`` (default :data:`DEFAULT_SECONDS`);
        given: fixed, unless ``target_s`` is given too (then it is the first batch's size). ``most`` (a stateful
        pipeline's :data:`STATEFUL_MAX_RECORDS`): the largest size, given (a larger ``records`` is refused) or
        adapted (default: :data:`MAX_RECORDS`, adapted only)."""
        if records is not None and (isinstance(records, bool) or not isinstance(records, int) or records < 1):
            raise InvalidRequest("batch_records", f"must be an int >= 1, got {records!r}")
        if most is not None and records is not None and records > most:
            raise InvalidRequest("batch_records", f"must be at most {most:,} per partition here, got {records:,}")
        if target_s is not None:
            positive_seconds("batch_seconds", target_s)
        self.most = MAX_RECORDS if most is None else max(MIN_RECORDS, most)
        self.records = min(DEFAULT_RECORDS, self.most) if records is None else records
        self.target_s = DEFAULT_SECONDS if records is None and target_s is None else target_s
        self._given_target = target_s is not None
        self._default = records is None and target_s is None  # neither given: the first batch is spread (``spread``)
        self._fixed_s: float | None = None  # the fixed cost of a batch, as last fitted
        self._previous: tuple[int, float] | None = None  # (used, seconds) of the batch before
        self._measured = 0  # batches measured so far

    def within(self, revoke_timeout_s: float) -> None:
        """A revocation will wait up to ``revoke_timeout_s`` for the batch in flight (the pipeline joins its group so):
        a default target becomes :data:`DEFAULT_SECONDS`, at most a :data:`REVOKE_SHARE` of it. A given target is the
        user's (``run_pipeline_worker`` refuses one not below the timeout); a fixed size has none."""
        if self.target_s is not None and not self._given_target and revoke_timeout_s > 0:
            self.target_s = min(DEFAULT_SECONDS, revoke_timeout_s / REVOKE_SHARE)

    def spread(self, partitions: int) -> None:
        """Before a batch over ``partitions`` partitions that have records: if no batch was measured yet and no size
        or target was given, the size becomes :data:`FIRST_BATCH` records in all over them (at least the default per
        partition, at most the largest size)."""
        if self._default and self._measured == 0 and partitions > 0:
            self.records = min(self.most, max(DEFAULT_RECORDS, FIRST_BATCH // partitions))

    def end(self, start: int, available: int) -> int:
        """The end of a partition's next task from ``start`` when the source has records up to ``available``: ``start``
        + the size, or ``available`` when that leaves at most :data:`TAIL` x the size (adaptive only, and never above
        the largest size)."""
        end = min(available, start + self.records)
        if self.adaptive and available - start <= min(self.most, int(self.records * (1 + TAIL))):
            return available
        return end

    @property
    def adaptive(self) -> bool:
        return self.target_s is not None

    def measured(self, used: int, seconds: float) -> int:
        """A batch took ``seconds``, its largest partition ``used`` records: the size of the next one."""
        target = self.target_s
        if target is None or used < 1:
            return self.records
        fixed = self._fit(used, seconds)
        full = used >= self.records
        if seconds <= target and not full:
            return self.records  # the log's end cut it short: nothing says a larger batch would fit
        if seconds <= 0:
            ideal = used * GROWTH
        elif seconds > target and (fixed is None or fixed >= target):
            ideal = used * target / seconds  # nothing fitted yet, or no size meets the target: as if proportional
        else:
            fixed = seconds if fixed is None else min(fixed, seconds)  # the first batch: taken as all fixed cost
            per_record = (seconds - fixed) / used
            ideal = used * GROWTH if per_record <= 0 else (target - fixed) / per_record
            ideal = min(ideal, used * LIMIT * target / seconds)
        ideal = min(ideal, used * GROWTH)
        if seconds > target:
            ideal = min(ideal, used)  # over the target: never larger than what it used
        self.records = max(MIN_RECORDS, min(self.most, int(ideal)))
        return self.records

    def _fit(self, used: int, seconds: float) -> float | None:
        """The fixed cost of a batch (None until fitted), refitted on this batch and the one before when their sizes
        are apart enough (:data:`SPREAD`): the intercept of the line through them, within ``[0, seconds]``. The
        first batch is never a point of the line: it is cold (class loading, the JIT compiling the read and write
        paths as it goes), and a line through it and the second batch puts that cold cost into the fixed part. On a
        steady 20,000 records/s into a Kafka topic (local[1]) the first two batches took 5.6 s and 9.3 s; fitted on
        them, the fixed cost was 5.4 s and the next size only 1.15 x, so the backlog of those seconds took 20 s more
        to drain (batches of 2-3 s once warm)."""
        self._measured += 1
        if self._measured == 1:
            return self._fixed_s
        previous, self._previous = self._previous, (used, seconds)
        if previous is not None:
            used_before, seconds_before = previous
            if max(used, used_before) >= SPREAD * min(used, used_before):
                slope = (seconds - seconds_before) / (used - used_before)
                self._fixed_s = seconds if slope <= 0 else min(seconds, max(0.0, seconds - slope * used))
        return self._fixed_s


__all__ = [
    "DEFAULT_RECORDS",
    "DEFAULT_SECONDS",
    "FIRST_BATCH",
    "GROWTH",
    "LIMIT",
    "MAX_RECORDS",
    "MIN_RECORDS",
    "REVOKE_SHARE",
    "SPREAD",
    "TAIL",
    "STATEFUL_MAX_RECORDS",
    "BatchSize",
    "positive_seconds",
]
