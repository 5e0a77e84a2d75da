"""Analytics of a group's protocol history (``apportion.group.history``) on Spark: pure DataFrame functions.

Input: ``events_frame(spark, events)`` — one row per event and partition (``EVENTS_SCHEMA``). Order is the store
revision (then member, seq): the store's total order, immune to the skew of the members' clocks. Times are the
members' clocks (seconds) and are used for durations only; a duration between two members' events (a handoff) is
never negative: when their clocks disagree with the store order it is 0 (``handoff_latency``).

Ownership interval = one claim, i.e. one ``(partition, epoch)`` (the claim txn makes every epoch unique). It ends:

- at the owner's own ``release``/``lost``/``fenced`` of that epoch when it comes before the next claim of the partition
  (a ``lost`` carries no epoch: it ends the owner's latest claim of that partition);
- at its last proof of ownership (``release``/``commit``, recorded only by txns that checked the owner record) when that
  proof comes AFTER the next claim: the two owners overlapped in the store (``end_type`` = that proof);
- otherwise, when someone else claimed it first (the lease expired: crash, freeze, ...), ``end_type = "expired"``; the
  end time is the owner's last sign of life before that claim (its latest event of any type: claim, commit, round
  joined, ...). The lease expiry itself is not an event, so gaps after a crash are measured from the last sign of life:
  an upper bound, too long by at most the time between the owner's events;
- still open: ``end_type = "open"``, closed at the report time (default: the last event's time).

``overlaps(intervals)`` — two intervals of different members on one partition intersecting in store order — must be
empty. Everything is window functions and joins: no Python UDFs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from apportion.errors import InvalidRequest
from apportion.group import HistoryType
from apportion.group.internals import pid_order

EVENTS_SCHEMA = (
    "revision LONG, seq LONG, time DOUBLE, type STRING, member STRING, partition INT, epoch LONG, "
    "round LONG, moves INT, kept BOOLEAN, participants INT"
)
# the history's types as Spark literals (plain ``str``: ``HistoryType``'s values)
_CLAIM, _LOST, _ROUND_CLOSED = HistoryType.CLAIM.value, HistoryType.LOST.value, HistoryType.ROUND_CLOSED.value
_END_TYPES = (HistoryType.RELEASE.value, _LOST, HistoryType.FENCED.value)
_PROOF_TYPES = (_CLAIM, HistoryType.COMMIT.value, HistoryType.RELEASE.value)


def partition_numbers(events: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """A group over several resources names its partitions ``<resource>-<index>``: the analytics number them in
    (resource, index) order, 0..K-1, so that every per-partition computation keys on an int and the timeline's rows
    come grouped by resource (a one-resource group's int partitions need no numbering: empty)."""
    names = {str(e["partition"]) for e in events if isinstance(e.get("partition"), str)}
    ordered = sorted(names, key=pid_order)
    return {name: k for k, name in enumerate(ordered)}


def _row(event: Mapping[str, Any], numbers: Mapping[str, int] | None = None) -> tuple[Any, ...]:
    for name in ("revision", "time", "type", "member"):
        if name not in event:
            raise InvalidRequest("events", f"an event lacks {name!r}: {dict(event)!r}")
    participants = event.get("participants")

    def opt_int(name: str) -> int | None:
        value = event.get(name)
        if isinstance(value, str) and numbers is not None and value in numbers:
            return numbers[value]
        return None if value is None else int(value)

    return (
        int(event["revision"]),
        int(event.get("seq", 0)),
        float(event["time"]),
        str(event["type"]),
        str(event["member"]),
        opt_int("partition"),
        opt_int("epoch"),
        opt_int("round"),
        opt_int("moves"),
        None if event.get("kept") is None else bool(event["kept"]),
        len(participants) if isinstance(participants, list) else None,
    )


def events_frame(spark: Any, events: Iterable[Mapping[str, Any]]) -> Any:
    """The events (dicts as ``apportion.group.history`` returns them) as a DataFrame of ``EVENTS_SCHEMA``; the
    partitions of a group over several resources numbered by :func:`partition_numbers`."""
    rows = list(events)
    numbers = partition_numbers(rows)
    return spark.createDataFrame([_row(e, numbers) for e in rows], EVENTS_SCHEMA)


def report_time(events: Any) -> float:
    """The default report time: the last event's time (0.0 without events)."""
    from pyspark.sql import functions as F

    value = events.agg(F.max("time")).first()[0]
    return 0.0 if value is None else float(value)


def ownership_intervals(events: Any, end_time: float | None = None) -> Any:
    """One row per claim: partition, epoch, member, start/end revision and time, end_type, duration_s (module doc)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    at = report_time(events) if end_time is None else float(end_time)
    own = events.where(F.col("partition").isNotNull() & F.col("type").isin(*_PROOF_TYPES, *_END_TYPES))
    by_owner = (
        Window.partitionBy("partition", "member").orderBy("revision", "seq").rowsBetween(Window.unboundedPreceding, 0)
    )
    claimed = F.last(F.when(F.col("type") == _CLAIM, F.col("epoch")), ignorenulls=True).over(by_owner)
    own = own.withColumn("epoch", F.when(F.col("type") == _LOST, claimed).otherwise(F.col("epoch")))
    own = own.where(F.col("epoch").isNotNull())
    point = F.struct(F.col("revision").alias("rev"), F.col("time").alias("t"), F.col("type").alias("kind"))
    per_claim = own.groupBy("partition", "epoch").agg(
        F.min(F.when(F.col("type") == _CLAIM, point)).alias("start"),
        F.min(F.when(F.col("type").isin(*_END_TYPES), point)).alias("explicit"),
        F.max(F.when(F.col("type").isin(*_PROOF_TYPES), point)).alias("proof"),
        F.first(F.when(F.col("type") == _CLAIM, F.col("member")), ignorenulls=True).alias("member"),
    )
    per_claim = per_claim.where(F.col("start").isNotNull())
    by_partition = Window.partitionBy("partition").orderBy(F.col("start.rev"))
    nxt = per_claim.withColumn("next", F.lead("start").over(by_partition))
    seen = events.select(F.col("member").alias("seen_member"), point.alias("seen"))
    last_seen = (
        nxt.where(F.col("next").isNotNull())
        .join(
            seen,
            (F.col("member") == F.col("seen_member"))
            & (F.col("seen.rev") >= F.col("start.rev"))
            & (F.col("seen.rev") < F.col("next.rev")),
        )
        .groupBy("partition", "epoch")
        .agg(F.max("seen").alias("seen"))
    )
    nxt = nxt.join(last_seen, ["partition", "epoch"], "left")
    explicit_first = F.col("explicit").isNotNull() & (
        F.col("next").isNull() | (F.col("explicit.rev") < F.col("next.rev"))
    )
    proof_after_next = F.col("next").isNotNull() & (F.col("proof.rev") > F.col("next.rev"))
    expired = F.col("next").isNotNull()
    end_rev = (
        F.when(explicit_first, F.col("explicit.rev"))
        .when(proof_after_next, F.col("proof.rev"))
        .when(expired, F.col("next.rev"))
    )
    end_t = (
        F.when(explicit_first, F.col("explicit.t"))
        .when(proof_after_next, F.col("proof.t"))
        .when(expired, F.greatest(F.col("proof.t"), F.col("seen.t")))
        .otherwise(F.lit(at))
    )
    end_type = (
        F.when(explicit_first, F.col("explicit.kind"))
        .when(proof_after_next, F.col("proof.kind"))
        .when(expired, F.lit("expired"))
        .otherwise(F.lit("open"))
    )
    out = nxt.select(
        "partition",
        "epoch",
        "member",
        F.col("start.rev").alias("start_revision"),
        F.col("start.t").alias("start_time"),
        end_rev.alias("end_revision"),
        F.greatest(end_t, F.col("start.t")).alias("end_time"),
        end_type.alias("end_type"),
    )
    return out.withColumn("duration_s", F.col("end_time") - F.col("start_time")).orderBy("partition", "start_revision")


def overlaps(intervals: Any) -> Any:
    """Pairs of intervals of different members on one partition that intersect in store order (must be empty)."""
    from pyspark.sql import functions as F

    a = intervals.alias("a")
    b = intervals.alias("b")
    cond = (
        (F.col("a.partition") == F.col("b.partition"))
        & (F.col("a.member") != F.col("b.member"))
        & (F.col("a.start_revision") < F.col("b.start_revision"))
        & (F.col("a.end_revision").isNull() | (F.col("b.start_revision") < F.col("a.end_revision")))
    )
    return (
        a.join(b, cond)
        .select(
            F.col("a.partition").alias("partition"),
            F.col("a.member").alias("first_member"),
            F.col("a.epoch").alias("first_epoch"),
            F.col("b.member").alias("second_member"),
            F.col("b.epoch").alias("second_epoch"),
            F.col("b.start_time").alias("overlap_start_time"),
            F.least(F.col("a.end_time"), F.col("b.end_time")).alias("overlap_end_time"),
        )
        .withColumn("overlap_s", F.greatest(F.col("overlap_end_time") - F.col("overlap_start_time"), F.lit(0.0)))
        .orderBy("partition", "overlap_start_time")
    )


def unowned_gaps(intervals: Any, end_time: float | None = None) -> Any:
    """Per partition, from its first claim on, the spans owned by nobody: gap_start, gap_end, gap_s, from/to member.
    A partition whose last interval ended (not open) is unowned until ``end_time`` (default: the last interval end)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_partition = Window.partitionBy("partition").orderBy("start_revision")
    before = by_partition.rowsBetween(Window.unboundedPreceding, -1)
    w = (
        intervals.withColumn("covered_to", F.max("end_time").over(before))
        .withColumn("prev_member", F.lag("member").over(by_partition))
        .withColumn("is_last", F.lead("start_revision").over(by_partition).isNull())
    )
    inner = w.where(F.col("covered_to").isNotNull() & (F.col("start_time") > F.col("covered_to"))).select(
        "partition",
        F.col("covered_to").alias("gap_start"),
        F.col("start_time").alias("gap_end"),
        F.col("prev_member").alias("from_member"),
        F.col("member").alias("to_member"),
    )
    at = F.lit(float(end_time)) if end_time is not None else F.max("end_time").over(Window.partitionBy(F.lit(1)))
    tail = (
        w.withColumn("at", at)
        .where(F.col("is_last") & (F.col("end_type") != "open"))
        .withColumn("covered", F.greatest(F.col("end_time"), F.coalesce(F.col("covered_to"), F.col("end_time"))))
        .where(F.col("at") > F.col("covered"))
        .select(
            "partition",
            F.col("covered").alias("gap_start"),
            F.col("at").alias("gap_end"),
            F.col("member").alias("from_member"),
            F.lit(None).cast("string").alias("to_member"),
        )
    )
    gaps = inner.unionByName(tail)
    return gaps.withColumn("gap_s", F.col("gap_end") - F.col("gap_start")).orderBy("partition", "gap_start")


def handoff_latency(intervals: Any) -> Any:
    """Per partition, each change of owner: the old owner's end (release, lost, fenced, expired) → the new owner's
    claim. ``latency_s`` = claim time - end time, at least 0; ``cause`` = the old end_type."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_partition = Window.partitionBy("partition").orderBy("start_revision")
    w = (
        intervals.withColumn("from_member", F.lag("member").over(by_partition))
        .withColumn("ended_at", F.lag("end_time").over(by_partition))
        .withColumn("cause", F.lag("end_type").over(by_partition))
    )
    return (
        w.where(F.col("from_member").isNotNull() & (F.col("from_member") != F.col("member")))
        .select(
            "partition",
            "from_member",
            F.col("member").alias("to_member"),
            "cause",
            "ended_at",
            F.col("start_time").alias("claimed_at"),
            # The end and the claim are stamped by two processes' clocks. The store orders them (the claim's
            # revision follows the end's unless the owners overlapped, which ``overlaps`` reports), so a claim time
            # before the end time is clock skew, not a negative wait: the handoff took no measurable time, 0.
            F.greatest(F.col("start_time") - F.col("ended_at"), F.lit(0.0)).alias("latency_s"),
        )
        .orderBy("claimed_at", "partition")
    )


def latency_stats(handoffs: Any) -> Any:
    """Per cause, and over all (``cause = "all"``): count, p50_s, p99_s, max_s (``percentile_approx``)."""
    from pyspark.sql import functions as F

    def aggs() -> list[Any]:
        return [
            F.count("*").alias("count"),
            F.percentile_approx("latency_s", 0.5, 100000).alias("p50_s"),
            F.percentile_approx("latency_s", 0.99, 100000).alias("p99_s"),
            F.max("latency_s").alias("max_s"),
        ]

    per_cause = handoffs.groupBy("cause").agg(*aggs())
    overall = handoffs.agg(*aggs()).select(F.lit("all").alias("cause"), "count", "p50_s", "p99_s", "max_s")
    return per_cause.unionByName(overall).where(F.col("count") > 0).orderBy("cause")


def moves_per_round(events: Any, intervals: Any) -> Any:
    """One row per closed round: round, closed_at, closer, participants, kept, planned_moves (the plan's own count:
    partitions taken from a participant; those of departed members are not counted),
    and what followed until the next close: claims, moved (claims taking a partition from another member) and
    initial (first claims of a partition)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    closed = events.where(F.col("type") == _ROUND_CLOSED).select(
        "round",
        F.col("revision").alias("close_revision"),
        F.col("time").alias("closed_at"),
        F.col("member").alias("closer"),
        "participants",
        "kept",
        F.col("moves").alias("planned_moves"),
    )
    by_partition = Window.partitionBy("partition").orderBy("start_revision")
    claims = intervals.withColumn("prev", F.lag("member").over(by_partition)).select(
        F.col("start_revision").alias("revision"),
        F.lit(None).cast("long").alias("round"),
        (F.col("prev").isNotNull() & (F.col("prev") != F.col("member"))).cast("int").alias("moved"),
        F.col("prev").isNull().cast("int").alias("initial"),
    )
    marks = closed.select(
        F.col("close_revision").alias("revision"),
        "round",
        F.lit(None).cast("int").alias("moved"),
        F.lit(None).cast("int").alias("initial"),
    )
    timeline = Window.orderBy("revision", F.col("round").isNull()).rowsBetween(Window.unboundedPreceding, 0)
    attributed = (
        marks.unionByName(claims)
        .withColumn("in_round", F.last("round", ignorenulls=True).over(timeline))
        .where(F.col("round").isNull() & F.col("in_round").isNotNull())
        .groupBy(F.col("in_round").alias("round"))
        .agg(F.count("*").alias("claims"), F.sum("moved").alias("moved"), F.sum("initial").alias("initial"))
    )
    return (
        closed.join(attributed, "round", "left")
        .fillna(0, subset=["claims", "moved", "initial"])
        .orderBy("close_revision")
    )


def balance_over_time(intervals: Any) -> tuple[Any, Any]:
    """(per member: member, time, owned — a step function), (per change time: members owning at least one partition,
    owned_total, max_owned, min_owned, spread = max - min among them)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    starts = intervals.select("member", F.col("start_time").alias("time"), F.lit(1).alias("delta"))
    ends = intervals.where(F.col("end_type") != "open").select(
        "member", F.col("end_time").alias("time"), F.lit(-1).alias("delta")
    )
    deltas = starts.unionByName(ends).groupBy("member", "time").agg(F.sum("delta").alias("delta"))
    running = Window.partitionBy("member").orderBy("time").rowsBetween(Window.unboundedPreceding, 0)
    per_member = deltas.withColumn("owned", F.sum("delta").over(running)).select("member", "time", "owned")
    times = per_member.select("time").distinct()
    members = per_member.select("member").distinct()
    filled = (
        members.crossJoin(times)
        .join(per_member, ["member", "time"], "left")
        .withColumn("owned", F.last("owned", ignorenulls=True).over(running))
    )
    owning = filled.where(F.col("owned") > 0)
    spread = (
        owning.groupBy("time")
        .agg(
            F.count("*").alias("members"),
            F.sum("owned").alias("owned_total"),
            F.max("owned").alias("max_owned"),
            F.min("owned").alias("min_owned"),
        )
        .withColumn("spread", F.col("max_owned") - F.col("min_owned"))
        .orderBy("time")
    )
    return per_member.orderBy("member", "time"), spread


__all__ = [
    "EVENTS_SCHEMA",
    "balance_over_time",
    "events_frame",
    "partition_numbers",
    "handoff_latency",
    "latency_stats",
    "moves_per_round",
    "overlaps",
    "ownership_intervals",
    "report_time",
    "unowned_gaps",
]
