"""How many records per partition the next micro-batch takes: fixed, or chosen by records and time.

A batch has a fixed cost whatever its size (planning, a Spark job's scheduling, one directory per partition, one
commit transaction: 0.5-1.5 s on one core) and a cost per record. Small batches pay the fixed cost again and again
(10,000 records per partition: ~25 % of a run on one core, `bench/README.md`); large ones hold their partitions'
locks longer, and a revocation waits for the batch in flight (``on_revoked``), so a handoff waits longer. The size
therefore follows a time target::

    next = clamp(used x min(GROWTH, target / seconds))   after a batch that was full (some partition took ``size``)
    next = clamp(used x target / seconds)                after one over the target, full or not
    next = size                                          after one under the target that the log's end cut short

``used``: the most records one partition took in that batch; ``seconds``: the batch from its plan to its commit;
``clamp`` to ``[MIN_RECORDS, most]`` (``MAX_RECORDS``; ``STATEFUL_MAX_RECORDS`` for a stateful pipeline).
Growth is bounded (x4 per batch) because the cost per record is not constant: the first large batch may spill, or
meet a cold code path. With no target the size stays as given.

Pure: the pipeline feeds it each batch's measure (``Pipeline._process``) and reads ``records``.
"""

from __future__ import annotations

import math

from apportion.errors import InvalidRequest

DEFAULT_RECORDS = 10_000
"""Records per partition of the first batch, when none is given."""

DEFAULT_SECONDS = 5.0
"""The target of one batch when the size is not fixed: well inside ``--revoke-timeout``'s 30 s (a revocation
waits for the batch in flight), long enough that the fixed cost is under a quarter of the batch."""

MIN_RECORDS = 100
MAX_RECORDS = 1_000_000  # per partition: a batch is bounded by the cluster, but a plan this large is a typo
STATEFUL_MAX_RECORDS = 100_000
"""The most records per partition of a stateful pipeline's batch, fixed or adaptive: the worker folds each
partition's rows of the batch and holds the batch's keys and new values (``StatefulPartitions.stage_output``), so
the batch is bounded by the worker's memory, not only by the cluster's."""
GROWTH = 4.0


class BatchSize:
    """The next batch's records per partition (``records``); ``target_s`` None: fixed at ``records``."""

    __slots__ = ("most", "records", "target_s")

    def __init__(self, records: int | None = None, target_s: float | None = None, *, most: int | None = None) -> None:
        """``records`` None: :data:`DEFAULT_RECORDS`, adapting to ``target_s`` (default :data:`DEFAULT_SECONDS`);
        given: fixed, unless ``target_s`` is given too (then it is the first batch's size). ``most`` (a stateful
        pipeline's :data:`STATEFUL_MAX_RECORDS`): the largest size, given (a larger ``records`` is refused) or
        adapted (default: :data:`MAX_RECORDS`, adapted only)."""
        if records is not None and (isinstance(records, bool) or not isinstance(records, int) or records < 1):
            raise InvalidRequest("batch_records", f"must be an int >= 1, got {records!r}")
        if most is not None and records is not None and records > most:
            raise InvalidRequest("batch_records", f"must be at most {most:,} per partition here, got {records:,}")
        if target_s is not None and (
            isinstance(target_s, bool)
            or not isinstance(target_s, int | float)
            or not math.isfinite(target_s)
            or target_s <= 0
        ):
            raise InvalidRequest("batch_seconds", f"must be a number of seconds > 0, got {target_s!r}")
        self.most = MAX_RECORDS if most is None else max(MIN_RECORDS, most)
        self.records = min(DEFAULT_RECORDS, self.most) if records is None else records
        self.target_s = DEFAULT_SECONDS if records is None and target_s is None else target_s

    @property
    def adaptive(self) -> bool:
        return self.target_s is not None

    def measured(self, used: int, seconds: float) -> int:
        """A batch took ``seconds``, its largest partition ``used`` records: the size of the next one."""
        target = self.target_s
        if target is None or used < 1:
            return self.records
        full = used >= self.records
        if seconds <= target and not full:
            return self.records  # the log's end cut it short: nothing says a larger batch would fit
        factor = GROWTH if seconds <= 0 else min(GROWTH, target / seconds)
        self.records = max(MIN_RECORDS, min(self.most, int(used * factor)))
        return self.records


__all__ = [
    "DEFAULT_RECORDS",
    "DEFAULT_SECONDS",
    "GROWTH",
    "MAX_RECORDS",
    "MIN_RECORDS",
    "STATEFUL_MAX_RECORDS",
    "BatchSize",
]
