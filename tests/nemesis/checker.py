"""An independent checker of a nemesis run, written against the README's "Guarantees and their limits" and the store
layout the README documents (``owner/<p>`` holds the owner and its epoch, bound to its lease; ``epoch/<p>`` is the
per-partition counter, bumped by every claim; ``/apportion/.commit/<group>/<p>`` the last checkpoint with its epoch,
``commit/<p>`` under the group's prefix in the layout before) — not against the implementation: it imports nothing of
apportion. Keys in ``store.jsonl`` are relative to the group's prefix, commit records of the current layout relative
to ``/apportion/`` (``.commit/<group>/<p>``).

Inputs (JSON lines, see tests/nemesis/cluster.py): the store's own MVCC history of the group (every put and delete,
by revision), each worker's event lines (its own ``time`` stamps; beliefs are ordered by ``seen``, the harness's
real clock as each line arrived, when present: a worker's own clock may be skewed) and the harness's journal
(``fault`` with its ``kind``, ``kill``/``stop`` of a worker, ``end`` when it stopped observing, before shutting the
workers down).

Safety (each breach is one line in ``Report.violations``):

- **fence**: every commit the store accepted carried the then-current epoch: at its revision ``owner/<p>`` held that
  epoch (the commit's own member) and ``epoch/<p>`` had not moved past it.
- **order**: commits for one partition from different epochs never interleave at the store: in revision order the
  epochs of its commit records (either layout) never go down.
- **epochs**: ``epoch/<p>`` only goes up, by one per claim, and each owner record names the counter's value.
- **durability**: every commit a worker was told succeeded (its ``commit`` event: epoch, revision, checkpoint) is in
  the store's history at that revision with that epoch and checkpoint.
- **belief**: at most one member believes it owns a partition at any instant (a belief runs from ``assigned`` to
  ``revoked``/``lost``/``stopped`` or the process's kill in the journal). The README promises this while clocks
  drift by less than 20 % of the ttl; events are stamped after the callback, so overlaps up to ``slack_s`` (the
  stamping delay a busy machine adds) are tolerated and reported, not counted. ``skewed`` members (a faked clock
  outside the bound) are exempt: for them only the store's fence is promised.

Availability (reported, not judged): per partition the fraction of the run during which some member believed it
owned it, and per fault kind the faults injected, the longest unowned gap that began during a fault's window (from
its start to the next fault's), commits fenced and beliefs lost in those windows.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Interval = tuple[float, float]


@dataclass(frozen=True, slots=True)
class FaultStats:
    kind: str
    injected: int = 0
    longest_gap_s: float = 0.0
    fenced: int = 0
    lost: int = 0


@dataclass
class Report:
    violations: list[str] = field(default_factory=list)
    tolerated_overlaps: list[str] = field(default_factory=list)
    availability: dict[int, float] = field(default_factory=dict)
    faults: dict[str, FaultStats] = field(default_factory=dict)
    store_commits: int = 0
    worker_commits: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    def table(self) -> str:
        """bench/README.md's rows: fault kind | injected | longest unowned gap | commits fenced | violations."""
        rows = ["| fault | injected | longest unowned gap | commits fenced | beliefs lost |", "|---|---|---|---|---|"]
        for stats in sorted(self.faults.values(), key=lambda s: s.kind):
            rows.append(
                f"| {stats.kind} | {stats.injected} | {stats.longest_gap_s:.2f} s | {stats.fenced} | {stats.lost} |"
            )
        low = min(self.availability.values(), default=1.0)
        rows.append(
            f"\nviolations {len(self.violations)}; store commits {self.store_commits}, acknowledged "
            f"{self.worker_commits}; availability (lowest partition) {low:.1%}"
        )
        return "\n".join(rows)


# -- inputs --------------------------------------------------------------------------------------------------


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue  # a line cut by kill -9
            if isinstance(value, dict):
                out.append(value)
    return out


def check_directory(history: Path, partitions: int, *, slack_s: float = 0.1, skewed: Iterable[str] = ()) -> Report:
    """:func:`check` on a run's ``history`` directory (``store.jsonl``, ``nemesis.jsonl``, ``<worker>.jsonl``)."""
    workers = {
        path.stem: read_jsonl(path) for path in sorted(history.glob("*.jsonl")) if path.stem not in ("store", "nemesis")
    }
    return check(
        read_jsonl(history / "store.jsonl"), workers, read_jsonl(history / "nemesis.jsonl"), partitions,
        slack_s=slack_s, skewed=skewed,
    )  # fmt: skip


# -- the checks ----------------------------------------------------------------------------------------------


def check(
    store: Sequence[Mapping[str, Any]],
    workers: Mapping[str, Sequence[Mapping[str, Any]]],
    journal: Sequence[Mapping[str, Any]],
    partitions: int,
    *,
    slack_s: float = 0.1,
    skewed: Iterable[str] = (),
) -> Report:
    report = Report()
    committed = _check_store(store, report)
    _check_durability(workers, committed, report)
    beliefs = _beliefs(workers, journal)
    _check_beliefs(beliefs, report, slack_s, set(skewed))
    times = [_t(e) for events in workers.values() for e in events if "time" in e]
    times += [float(e["time"]) for e in journal]
    ends = [float(e["time"]) for e in journal if e.get("event") == "end"]  # the harness stopped observing
    if times:
        _availability(beliefs, workers, journal, partitions, min(times), min(ends or [max(times)]), report)
    return report


def _t(event: Mapping[str, Any]) -> float:
    """When a worker's event happened: ``seen`` (the harness's real clock as the line arrived) when the harness
    stamped it, else the worker's own ``time``."""
    return float(event.get("seen", event.get("time", 0.0)))


def _partition(key: str, kind: str) -> int | None:
    head, _, tail = key.partition("/")
    if kind == "commit" and head == ".commit":  # .commit/<group>/<p>
        tail = tail.partition("/")[2]
        head = kind
    return int(tail) if head == kind and tail.isdigit() else None


def _check_store(store: Sequence[Mapping[str, Any]], report: Report) -> dict[tuple[int, int], tuple[int, str]]:
    """Replay the store's history in revision order; returns (partition, revision) -> (epoch, checkpoint)."""
    events = sorted(store, key=lambda e: int(e["revision"]))
    bumps: dict[tuple[int, int], int] = {}  # (partition, revision) -> the counter's new value
    for event in events:
        if (p := _partition(str(event["key"]), "epoch")) is not None and event["type"] == "put":
            bumps[(p, int(event["revision"]))] = int(event["value"])
    owner: dict[int, tuple[str, int]] = {}  # partition -> (member, epoch) of the live owner record
    counter: dict[int, int] = {}
    last_commit: dict[int, tuple[int, int]] = {}  # partition -> (epoch, revision) of its latest commit
    committed: dict[tuple[int, int], tuple[int, str]] = {}
    for event in events:
        revision, key, kind = int(event["revision"]), str(event["key"]), event["type"]
        if (p := _partition(key, "epoch")) is not None and kind == "put":
            epoch = bumps[(p, revision)]
            if epoch != counter.get(p, 0) + 1:
                report.violations.append(f"epochs: epoch/{p} went {counter.get(p, 0)} -> {epoch} at rev {revision}")
            counter[p] = epoch
        elif (p := _partition(key, "owner")) is not None:
            if kind == "delete":
                owner.pop(p, None)
                continue
            record = json.loads(event["value"])
            owner[p] = (str(record["member"]), int(record["epoch"]))
            if bumps.get((p, revision)) != owner[p][1]:
                report.violations.append(
                    f"epochs: owner/{p} at rev {revision} names epoch {owner[p][1]} without the counter's bump to it"
                )
        elif (p := _partition(key, "commit")) is not None and kind == "put":
            record = json.loads(event["value"])
            member, epoch, checkpoint = str(record["member"]), int(record["epoch"]), str(record["checkpoint"])
            report.store_commits += 1
            committed[(p, revision)] = (epoch, checkpoint)
            held = owner.get(p)
            if held != (member, epoch):
                report.violations.append(
                    f"fence: commit/{p} at rev {revision} by {member} with epoch {epoch}, but owner/{p} was {held}"
                )
            elif epoch != counter.get(p, 0):
                report.violations.append(
                    f"fence: commit/{p} at rev {revision} carried epoch {epoch}, the counter was {counter.get(p, 0)}"
                )
            previous = last_commit.get(p)
            if previous is not None and epoch < previous[0]:
                report.violations.append(
                    f"order: commit/{p} at rev {revision} with epoch {epoch} after epoch {previous[0]}'s commit at "
                    f"rev {previous[1]}"
                )
            last_commit[p] = (epoch, revision)
    return committed


def _check_durability(
    workers: Mapping[str, Sequence[Mapping[str, Any]]],
    committed: Mapping[tuple[int, int], tuple[int, str]],
    report: Report,
) -> None:
    for member, events in sorted(workers.items()):
        for event in events:
            if event.get("event") != "commit":
                continue
            report.worker_commits += 1
            p, revision = int(event["partitions"][0]), int(event["revision"])
            stored = committed.get((p, revision))
            if stored != (int(event["epoch"]), str(event["checkpoint"])):
                report.violations.append(
                    f"durability: {member}'s commit of partition {p} (epoch {event['epoch']}, rev {revision}) "
                    f"is not in the store's history (there: {stored})"
                )


def _beliefs(
    workers: Mapping[str, Sequence[Mapping[str, Any]]], journal: Sequence[Mapping[str, Any]]
) -> dict[int, list[tuple[float, float, str]]]:
    """Per partition, every member's belief intervals (start, end, member)."""
    deaths: dict[str, list[float]] = defaultdict(list)
    for entry in journal:
        if entry.get("event") in ("kill", "stop"):
            deaths[str(entry["target"])].append(float(entry["time"]))
    out: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    for member, events in workers.items():
        held: dict[int, float] = {}
        kills = sorted(deaths.get(member, []))

        def close(parts: Iterable[int], at: float, member: str = member, held: dict[int, float] = held) -> None:
            for p in parts:
                start = held.pop(p, None)
                if start is not None:
                    out[p].append((start, at, member))

        for event in sorted(events, key=lambda e: _t(e)):
            t, kind = _t(event), event.get("event")
            while kills and kills[0] < t:  # the process died before this event: beliefs ended then
                close(list(held), kills.pop(0))
            if kind == "assigned":
                for p in event["partitions"]:
                    held.setdefault(int(p), t)
            elif kind in ("revoked", "lost"):
                close([int(p) for p in event["partitions"]], t)
            elif kind == "stopped":
                close(list(held), t)
        close(list(held), kills[0] if kills else float("inf"))  # still believed when the run ended
    return out


def _check_beliefs(
    beliefs: Mapping[int, Sequence[tuple[float, float, str]]], report: Report, slack_s: float, skewed: set[str]
) -> None:
    for p, spans in sorted(beliefs.items()):
        ordered = sorted(spans)
        for i, (_, end, member) in enumerate(ordered):
            for other_start, other_end, other in ordered[i + 1 :]:
                if other_start >= end:
                    break
                if other == member:
                    continue
                overlap = min(end, other_end) - other_start
                line = f"belief: {member} and {other} both owned partition {p} for {overlap:.3f} s at {other_start:.3f}"
                if member in skewed or other in skewed:
                    report.tolerated_overlaps.append(line + " (a skewed clock: only the fence is promised)")
                elif overlap <= slack_s:
                    report.tolerated_overlaps.append(line + f" (within the {slack_s} s stamping slack)")
                else:
                    report.violations.append(line)


def _availability(
    beliefs: Mapping[int, Sequence[tuple[float, float, str]]],
    workers: Mapping[str, Sequence[Mapping[str, Any]]],
    journal: Sequence[Mapping[str, Any]],
    partitions: int,
    start: float,
    end: float,
    report: Report,
) -> None:
    faults = sorted((float(e["time"]), str(e["kind"])) for e in journal if e.get("event") == "fault")
    first_owned = min((s for spans in beliefs.values() for s, _, _ in spans), default=start)
    window = max(end - first_owned, 1e-9)
    stats: dict[str, dict[str, Any]] = {}
    for _, kind in faults:
        entry = stats.setdefault(kind, {"injected": 0, "gap": 0.0, "fenced": 0, "lost": 0})
        entry["injected"] += 1

    def fault_at(t: float) -> str | None:
        """The kind of the latest fault started at or before ``t``."""
        current = None
        for at, kind in faults:
            if at > t:
                break
            current = kind
        return current

    for p in range(partitions):
        covered = _union([(s, min(e, end)) for s, e, _ in beliefs.get(p, []) if s < end])
        owned = sum(e - s for s, e in covered)
        report.availability[p] = min(1.0, owned / window)
        cursor = first_owned
        for s, e in [*covered, (end, end)]:
            if s > cursor and (kind := fault_at(cursor)) is not None:
                stats[kind]["gap"] = max(stats[kind]["gap"], s - cursor)
            cursor = max(cursor, e)
    for events in workers.values():
        for event in events:
            kind = fault_at(_t(event))
            if kind is None or _t(event) > end:
                continue
            if event.get("event") == "fenced":
                stats[kind]["fenced"] += 1
            elif event.get("event") == "lost":
                stats[kind]["lost"] += len(event.get("partitions", []))
    report.faults = {
        kind: FaultStats(kind, s["injected"], round(s["gap"], 3), s["fenced"], s["lost"]) for kind, s in stats.items()
    }


def _union(spans: Sequence[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out
