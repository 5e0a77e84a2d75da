"""``write_report``: the group's history → Spark analytics → Parquet + CSV tables, PNG plots and one index.html.

Layout of ``out_dir``: ``<table>.parquet`` and ``<table>.csv`` (one file, header row) for each of
``intervals, gaps, overlaps, moves_per_round, balance, balance_per_member, handoffs, handoff_stats``; ``timeline.png``,
``moves.png``, ``balance.png``, ``handoff.png``; ``index.html`` embeds the plots and the first rows of each table.
Tables are computed by Spark (``_analytics``); only their (small) results come to the driver (one Arrow batch each),
which writes the Parquet and CSV files, the plots and the HTML.

A report covers only the history it was given: ``ReportSummary`` states its span (first to last event), whether
older events may have expired (the history's retention, ``expired_before``) and which members' histories are
incomplete (their first event in the span is not their registration: what they did before is not seen), and its
``coverage`` line says "overlaps: N in <span>" with those limits — never a bare "0 overlaps".

The page reads as a report: a headline verdict (overlaps 0 ✓, and the caller's own checks such as exactly-once when
it knows them: ``verdicts``), a summary table with units (ms, s) and wall-clock times in the local time zone (times
below 1e9 are a virtual clock's and shown as ``t = …``), each chart with one sentence on how to read it, then the
tables (the first rows; relative links to the full CSV and Parquet files). No file-system path appears on the page.
"""

from __future__ import annotations

import csv
import html
import math
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apportion.clock import WALL_CLOCK, clock_text
from apportion.errors import InvalidRequest
from apportion.group import HistoryType
from apportion.spark.analytics import _analytics as A

HTML_ROWS = 40  # rows of each table shown in index.html (the CSV has them all)


@dataclass(frozen=True, slots=True)
class Table:
    """One written table: its name, rows, and where it is."""

    name: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    parquet: str
    csv: str


@dataclass(frozen=True, slots=True)
class ReportSummary:
    """What ``write_report`` found and wrote. Times in seconds of the members' clocks; ``*_p50_s``/``*_p99_s`` are
    None when there was no such handoff. ``handoff_*`` are planned handoffs (release → claim); ``failover_*`` are
    handoffs after a lost or expired lease. ``span_start``/``span_end``: the first and last event analysed;
    ``expired_before``: events before it may have been deleted by retention (None: none were);
    ``incomplete_members``: members whose history in the span does not start with their registration;
    ``coverage``: one line saying what the overlap count covers."""

    out_dir: str
    index_html: str
    tables: tuple[str, ...]
    plots: tuple[str, ...]
    events: int
    partitions: int
    members: int
    rounds: int
    intervals: int
    overlaps: int
    gaps: int
    unowned_s: float
    max_gap_s: float
    planned_moves: int
    moved: int
    handoffs: int
    handoff_p50_s: float | None
    handoff_p99_s: float | None
    failover_p50_s: float | None
    failover_p99_s: float | None
    final_spread: int | None
    span_start: float
    span_end: float
    span_s: float
    expired_before: float | None
    incomplete_members: tuple[str, ...]
    coverage: str

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    return value


def write_table(df: Any, out_dir: Path, name: str) -> Table:
    """``df`` → ``<name>.parquet`` and ``<name>.csv`` (one file each). One Spark job (``toArrow``): result tables
    are small, so the driver writes both files with pyarrow; returns the rows for plots and HTML."""
    import pyarrow.parquet as pq

    arrow = df.toArrow()
    parquet_path = out_dir / f"{name}.parquet"
    if parquet_path.is_dir():  # left by an earlier writer that used Spark's directory layout
        shutil.rmtree(parquet_path)
    pq.write_table(arrow, parquet_path)
    columns = tuple(arrow.column_names)
    rows = tuple(tuple(_cell(v) for v in row.values()) for row in arrow.to_pylist())
    csv_path = out_dir / f"{name}.csv"
    with csv_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows(rows)
    return Table(name, columns, rows, str(parquet_path), str(csv_path))


TIME_COLUMNS = ("time", "start_time", "end_time", "gap_start", "gap_end", "overlap_start_time", "overlap_end_time")


def when(t: float | None, *, date: bool = True) -> str:
    """A member-clock time for people: the local date and time (to the second) of a wall-clock reading,
    ``t = 12.500`` of a virtual clock, ``-`` for None."""
    return "-" if t is None else clock_text(t, date=date, virtual="t = ")


def span(start: float, end: float) -> str:
    """``2026-11-25 16:30:02 to 16:32:15`` (wall clock) or ``t = 200.000 to 230.500`` (a virtual clock)."""
    if start < WALL_CLOCK:
        return f"t = {start:.3f} to {end:.3f}"
    return f"{when(start)} to {when(end, date=False)}"


def duration(seconds: float | None) -> str:
    """``4.1 ms``, ``2.35 s``, ``3 min 20 s``, ``1 h 5 min``; ``-`` for None."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms" if seconds > 0 else "0 s"
    if seconds < 60:
        return f"{seconds:.3g} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def _show(column: str, value: Any) -> str:
    """A table cell for the page: times as clock times, ``*_s`` durations with their unit, numbers grouped."""
    if value is None:
        return ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if column in TIME_COLUMNS and value >= WALL_CLOCK:
            return clock_text(float(value), ms=True)
        if column.endswith("_s"):
            return duration(float(value))
        if isinstance(value, int):
            return f"{value:,}"
        return f"{value:.6g}"
    return str(value)


def html_table(table: Table, limit: int = HTML_ROWS) -> str:
    """A small HTML table of the first ``limit`` rows (cells formatted for people), linking the full CSV and
    Parquet files by name (relative to the page)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(_show(c, v))}</td>" for c, v in zip(table.columns, row, strict=True))
        + "</tr>"
        for row in table.rows[:limit]
    )
    shown = f"first {limit} of {len(table.rows):,} rows" if len(table.rows) > limit else f"{len(table.rows):,} rows"
    csv_name = html.escape(Path(table.csv).name)
    pq_name = html.escape(Path(table.parquet).name)
    about = TABLE_NOTES.get(table.name, "")
    return (
        f'<h3 id="{html.escape(table.name)}">{html.escape(table.name)}</h3>'
        f'<p class="note">{html.escape(about)} {shown}: <a href="{csv_name}">{csv_name}</a>, '
        f'<a href="{pq_name}">{pq_name}</a>.</p>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


TABLE_NOTES = {
    "intervals": "Each stretch of time one member owned one partition.",
    "gaps": "Each stretch of time a partition had no owner.",
    "overlaps": "Two members owning one partition at once (must be empty).",
    "moves_per_round": "Per round: the moves its plan counted and the partitions observed changing owner after it.",
    "balance": "After each change: the most and fewest partitions a member owned.",
    "balance_per_member": "After each change: what each member owned.",
    "handoffs": "Each change of owner: who handed over to whom, why the old ownership ended, and how long it took.",
    "handoff_stats": "Handoff latency percentiles by how the old ownership ended.",
}

CHART_NOTES = {
    "timeline.png": "One row per partition, one colour per member, time running left to right: a grey sliver is a "
    "moment nobody owned the partition, and any red would be two owners at once.",
    "moves.png": "For each round, the partitions its plan moved (left bar) next to the partitions seen changing owner "
    "after it (right bar); the right bar is taller when a departed member's partitions were taken over.",
    "balance.png": "Top: how many partitions each member owned over time; bottom: the largest and smallest count "
    "and their difference, which a balanced group keeps at 0 or 1.",
    "handoff.png": "How long partitions waited between one owner's end and the next owner's claim: planned handoffs "
    "take milliseconds, failovers (lost or expired leases) wait for the lease to run out.",
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """One line of the report's headline: a check and whether it passed (``detail``: what was measured)."""

    name: str
    ok: bool
    detail: str = ""


def _headline(verdicts: Sequence[Verdict]) -> str:
    items = "".join(
        f'<li class="{"ok" if v.ok else "bad"}"><span class="mark">{"✓" if v.ok else "✗"}</span> '
        f"<b>{html.escape(v.name)}</b>{' — ' + html.escape(v.detail) if v.detail else ''}</li>"
        for v in verdicts
    )
    ok = all(v.ok for v in verdicts)
    word = "Every check passed" if ok else "A check failed"
    return f'<div class="verdict {"ok" if ok else "bad"}"><h2>{word}</h2><ul>{items}</ul></div>'


def summary_rows(summary: ReportSummary) -> list[tuple[str, str]]:
    """The report's summary as (what, value with its unit) rows for people."""
    s = summary
    clock = ", virtual clock" if s.span_start < WALL_CLOCK else ""
    rows = [
        ("History analysed", f"{span(s.span_start, s.span_end)} ({duration(s.span_s)}{clock}), {s.events:,} events"),
        ("Partitions and members", f"{s.partitions:,} partitions, {s.members:,} members seen"),
        ("Rounds", f"{s.rounds:,}"),
        ("Ownership intervals", f"{s.intervals:,}"),
        ("Overlaps (two owners at once)", f"{s.overlaps:,}"),
        ("Unowned gaps", f"{s.gaps:,}, {duration(s.unowned_s)} in all, the longest {duration(s.max_gap_s)}"),
        ("Partitions moved", f"{s.planned_moves:,} planned by the rounds, {s.moved:,} observed changing owner"),
        (
            "Planned handoff (release → claim)",
            f"p50 {duration(s.handoff_p50_s)}, p99 {duration(s.handoff_p99_s)} over {s.handoffs:,} handoffs",
        ),
        (
            "Failover (lost or expired lease → claim)",
            f"p50 {duration(s.failover_p50_s)}, p99 {duration(s.failover_p99_s)}",
        ),
        ("Balance at the end", "-" if s.final_spread is None else f"max - min = {s.final_spread} partition(s)"),
    ]
    limits = []
    if s.expired_before is not None:
        limits.append(f"events before {when(s.expired_before)} expired (history retention)")
    if s.incomplete_members:
        limits.append(f"members seen only in part: {', '.join(s.incomplete_members)}")
    rows.append(("What the history may miss", "; ".join(limits) or "nothing: every member's history is complete"))
    return rows


def report_page(
    title: str,
    summary: ReportSummary,
    plots: Sequence[str],
    tables: Iterable[Table],
    verdicts: Sequence[Verdict] = (),
) -> str:
    """The whole page: the headline verdict, the summary table, the charts with how to read each, the tables."""
    overlap = Verdict(
        "no overlapping ownership",
        summary.overlaps == 0,
        f"{summary.overlaps:,} overlaps in {duration(summary.span_s)} of history",
    )
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in summary_rows(summary))
    charts = "".join(
        f'<figure><img src="{html.escape(p)}" alt="{html.escape(p)}">'
        f"<figcaption>{html.escape(CHART_NOTES.get(p, ''))}</figcaption></figure>"
        for p in plots
    )
    style = (
        "body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#1d2330}"
        "h1{margin-bottom:0}.sub{color:#6b7385;margin-top:4px}"
        ".verdict{border-radius:8px;padding:10px 16px;margin:16px 0}.verdict h2{margin:4px 0;font-size:20px}"
        ".verdict.ok{background:#e6f4ea}.verdict.bad{background:#fdecea}.verdict ul{margin:4px 0;padding-left:0}"
        ".verdict li{list-style:none;margin:2px 0}.verdict .mark{font-weight:700}"
        "li.ok .mark{color:#1a7f37}li.bad .mark{color:#c62828}"
        "table{border-collapse:collapse;font-size:13px;margin-bottom:1em;font-variant-numeric:tabular-nums}"
        "td,th{border-bottom:1px solid #e2e5ec;padding:3px 10px;text-align:right}"
        "table.summary th{text-align:left;font-weight:600;color:#3a4152}table.summary td{text-align:left}"
        "thead th{background:#f3f4f7}figure{margin:1.5em 0}figure img{max-width:100%}"
        "figcaption{color:#3a4152;font-size:14px;max-width:900px}.note{color:#6b7385;font-size:13px}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
        f'<p class="sub">{html.escape(summary.coverage, quote=False)}</p>'
        + _headline([overlap, *verdicts])
        + f'<h2>Summary</h2><table class="summary"><tbody>{rows}</tbody></table>'
        + f"<h2>Charts</h2>{charts}<h2>Tables</h2>"
        + "".join(html_table(t) for t in tables)
        + "</body></html>\n"
    )


def html_page(title: str, summary: Mapping[str, Any], plots: Sequence[str], tables: Iterable[Table]) -> str:
    """A plain page (``simulate --grid``): a summary list, the plots (relative links) and the tables."""
    items = "".join(
        f"<li><b>{html.escape(k)}</b>: {html.escape(str(_cell(v)))}</li>"
        for k, v in summary.items()
        if k not in ("tables", "plots")
    )
    images = "".join(
        f'<p><img src="{html.escape(p)}" alt="{html.escape(p)}" style="max-width:100%"></p>' for p in plots
    )
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px;margin-bottom:1em}"
        "td,th{border:1px solid #bbb;padding:2px 6px;text-align:right}th{background:#eee}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1><ul>{items}</ul>{images}"
        + "".join(html_table(t) for t in tables)
        + "</body></html>\n"
    )


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _column(table: Table, name: str) -> list[Any]:
    i = table.columns.index(name)
    return [row[i] for row in table.rows]


def _records(table: Table) -> list[dict[str, Any]]:
    return [dict(zip(table.columns, row, strict=True)) for row in table.rows]


def _since(t0: float) -> str:
    """The time axis' label: seconds since the first event, named by its wall-clock time."""
    if t0 < WALL_CLOCK:
        return f"seconds since the first event ({when(t0)}, virtual clock)"
    return f"seconds since the first event ({when(t0)}, local time)"


MEMBER_PALETTE = (
    "#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#bcbd22", "#ff7f0e", "#e377c2",
    "#aec7e8", "#98df8a", "#b39ddb", "#9edae5", "#dbdb8d", "#ffbb78", "#f7b6d2",
)  # fmt: skip
"""The members' colours on the ownership timeline: matplotlib's tab20 without its reds, browns and greys (its pale
lavender a shade deeper), because on that chart red means an overlap (two owners) and grey an unowned gap: one
colour, one meaning."""
OVERLAP_COLOUR = "red"
GAP_COLOUR = "0.6"


def member_colours(members: Sequence[str]) -> dict[str, str]:
    """Each member's colour (cycling through :data:`MEMBER_PALETTE` past 14 members)."""
    return {m: MEMBER_PALETTE[i % len(MEMBER_PALETTE)] for i, m in enumerate(members)}


def _plot_timeline(
    path: Path,
    intervals: Table,
    gaps: Table,
    found: Table,
    t0: float,
    partitions: Sequence[int],
    names: Mapping[int, str] | None = None,
) -> None:
    """One row per partition, in (resource, index) order; labelled ``orders-3`` in a group over several
    resources (``names``: the analytics' partition numbers), else by number."""
    plt = pyplot()
    members = sorted({r["member"] for r in _records(intervals)})
    colour = member_colours(members)
    row_of = {p: i for i, p in enumerate(partitions)}
    height = min(40.0, max(3.0, 0.28 * len(partitions) + 1.5))
    fig, ax = plt.subplots(figsize=(12, height))
    for r in _records(intervals):
        y = row_of[r["partition"]]
        ax.broken_barh([(r["start_time"] - t0, r["duration_s"])], (y - 0.4, 0.8), facecolors=colour[r["member"]])
    for r in _records(gaps):
        ax.broken_barh([(r["gap_start"] - t0, r["gap_s"])], (row_of[r["partition"]] - 0.1, 0.2), facecolors=GAP_COLOUR)
    for r in _records(found):
        y = row_of[r["partition"]]
        ax.broken_barh(
            [(r["overlap_start_time"] - t0, max(r["overlap_s"], 1e-3))],
            (y - 0.45, 0.9),
            facecolors=OVERLAP_COLOUR,
            alpha=0.7,
        )
    ax.set_yticks(range(len(partitions)))
    labels = [(names or {}).get(p, str(p)) for p in partitions]
    ax.set_yticklabels(labels, fontsize=7 if len(partitions) > 30 else 9)
    ax.set_ylim(-0.7, len(partitions) - 0.3)
    ax.invert_yaxis()
    ax.set_xlabel(_since(t0))
    ax.set_ylabel("partition")
    ax.set_title("Ownership per partition (colour = member; grey = unowned gap; red = overlap)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[m]) for m in members[:20]]
    ax.legend(handles, members[:20], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="member")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_moves(path: Path, moves: Table) -> None:
    plt = pyplot()
    rounds = [str(r) for r in _column(moves, "round")]
    x = list(range(len(rounds)))
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.bar(
        [i - 0.2 for i in x],
        _column(moves, "planned_moves"),
        width=0.4,
        label="planned: taken from a participant (plan stats)",
    )
    ax.bar(
        [i + 0.2 for i in x],
        _column(moves, "moved"),
        width=0.4,
        label="observed: claimed from another member (incl. departed)",
    )
    ax.set_xticks(x)
    ax.set_xticklabels(rounds, rotation=45, ha="right", fontsize=8)
    ax.set_xlabel("round (store revision)")
    ax.set_ylabel("partitions moved")
    ax.yaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set_title("Moves per round")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_balance(path: Path, balance: Table, per_member: Table, t0: float) -> None:
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    by_member: dict[str, list[tuple[float, int]]] = {}
    for r in _records(per_member):
        by_member.setdefault(r["member"], []).append((r["time"] - t0, r["owned"]))
    for i, (member, points) in enumerate(sorted(by_member.items())):
        lift = 0.06 * (i - (len(by_member) - 1) / 2)  # equal counts stay distinguishable
        ys = [p[1] + lift for p in points]
        top.step([p[0] for p in points], ys, where="post", label=member, linewidth=2, alpha=0.85)
    top.set_ylabel("owned partitions")
    top.set_title("Balance over time")
    if len(by_member) <= 20:
        top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="member")
    times = [t - t0 for t in _column(balance, "time")]
    bottom.step(times, _column(balance, "max_owned"), where="post", label="max", linewidth=3, alpha=0.6)
    bottom.step(times, _column(balance, "min_owned"), where="post", label="min", linestyle="--")
    bottom.step(times, _column(balance, "spread"), where="post", label="max - min", color="black")
    bottom.set_ylabel("among owning members")
    bottom.set_xlabel(_since(t0))
    bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_handoffs(path: Path, handoffs: Table) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    by_cause: dict[str, list[float]] = {}
    for r in _records(handoffs):
        by_cause.setdefault(r["cause"], []).append(r["latency_s"])
    if by_cause:
        causes = sorted(by_cause)
        ax.hist([by_cause[c] for c in causes], bins=30, stacked=True, label=causes)
        ax.legend(title="old owner's end")
    else:
        ax.text(0.5, 0.5, "no handoffs", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("handoff latency: old owner's end → new owner's claim (s)")
    ax.set_ylabel("handoffs")
    ax.yaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set_title("Handoff latency")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def incomplete_members(events: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """Members whose first event (store order) is not ``registered``: their earlier events expired (or were never
    recorded), so claims they made before it are not seen and ownership they held then is not checked."""
    first: dict[str, tuple[int, int, str]] = {}
    for e in events:
        member, point = str(e["member"]), (int(e["revision"]), int(e.get("seq", 0)), str(e["type"]))
        if member not in first or point < first[member]:
            first[member] = point
    return tuple(sorted(m for m, (_, _, kind) in first.items() if kind != HistoryType.REGISTERED))


def coverage_line(
    overlap_count: int, start: float, end: float, expired_before: float | None, incomplete: Sequence[str]
) -> str:
    """ "overlaps: N in <span>" plus what the span may miss (expired events, members seen only in part)."""
    line = f"overlaps: {overlap_count} in {end - start:.3f} s of history ({span(start, end)})"
    limits = []
    if expired_before is not None:
        limits.append(f"events before {when(expired_before)} expired (history retention)")
    if incomplete:
        limits.append(f"incomplete history (not seen before their first event): {', '.join(incomplete)}")
    return line + ("; " + "; ".join(limits) if limits else "; every member's history complete in this span")


def _stat(stats: Table, causes: Sequence[str], column: str) -> float | None:
    """The statistic of the causes (exactly one row each expected; several causes: the worst)."""
    values = [r[column] for r in _records(stats) if r["cause"] in causes and r[column] is not None]
    return max(values) if values else None


def write_report(
    spark: Any,
    events: Sequence[Mapping[str, Any]],
    out_dir: str | Path,
    *,
    end_time: float | None = None,
    expired_before: float | None = None,
    title: str = "apportion report",
    verdicts: Sequence[Verdict] = (),
) -> ReportSummary:
    """Analyse ``events`` (``apportion.group.history``) and write tables, plots and ``index.html`` into ``out_dir``.
    Open ownership is closed at ``end_time`` (default: the last event's time). ``expired_before``
    (``apportion.group.history_expired_before``): events before it may have been deleted by the history's retention;
    the summary says so. ``title`` heads the page; ``verdicts`` join the headline after the overlap check (the
    caller's own checks: exactly-once, when it knows)."""
    if not events:
        raise InvalidRequest("events", "the group has no recorded history (wrong group, or history_retention_s=0)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df = A.events_frame(spark, events).cache()
    t0 = float(min(float(e["time"]) for e in events))
    t1 = float(max(float(e["time"]) for e in events))
    at = t1 if end_time is None else float(end_time)  # A.report_time(df) without a Spark job: the events are here
    incomplete = incomplete_members(events)
    intervals_df = A.ownership_intervals(df, at).cache()
    handoffs_df = A.handoff_latency(intervals_df).cache()
    per_member_df, balance_df = A.balance_over_time(intervals_df)

    intervals = write_table(intervals_df, out, "intervals")
    gaps = write_table(A.unowned_gaps(intervals_df, at), out, "gaps")
    found = write_table(A.overlaps(intervals_df), out, "overlaps")
    moves = write_table(A.moves_per_round(df, intervals_df), out, "moves_per_round")
    balance = write_table(balance_df, out, "balance")
    per_member = write_table(per_member_df, out, "balance_per_member")
    handoffs = write_table(handoffs_df, out, "handoffs")
    stats = write_table(A.latency_stats(handoffs_df), out, "handoff_stats")
    tables = (intervals, gaps, found, moves, balance, per_member, handoffs, stats)
    for frame in (handoffs_df, intervals_df, df):
        frame.unpersist()

    partitions = sorted({int(p) for p in _column(intervals, "partition")})
    plots = ("timeline.png", "moves.png", "balance.png", "handoff.png")
    names = {k: name for name, k in A.partition_numbers(events).items()}  # several resources: rows by resource
    _plot_timeline(out / plots[0], intervals, gaps, found, t0, partitions, names)
    _plot_moves(out / plots[1], moves)
    _plot_balance(out / plots[2], balance, per_member, t0)
    _plot_handoffs(out / plots[3], handoffs)

    gap_s = [float(v) for v in _column(gaps, "gap_s")]
    spreads = _column(balance, "spread")
    summary = ReportSummary(
        out_dir=str(out),
        index_html=str(out / "index.html"),
        tables=tuple(t.name for t in tables),
        plots=plots,
        events=len(events),
        partitions=len(partitions),
        members=len({str(e["member"]) for e in events}),
        rounds=len(moves.rows),
        intervals=len(intervals.rows),
        overlaps=len(found.rows),
        gaps=len(gap_s),
        unowned_s=round(math.fsum(gap_s), 6),
        max_gap_s=max(gap_s, default=0.0),
        planned_moves=sum(int(v or 0) for v in _column(moves, "planned_moves")),
        moved=sum(int(v or 0) for v in _column(moves, "moved")),
        handoffs=len(handoffs.rows),
        handoff_p50_s=_stat(stats, (HistoryType.RELEASE,), "p50_s"),
        handoff_p99_s=_stat(stats, (HistoryType.RELEASE,), "p99_s"),
        failover_p50_s=_stat(stats, (HistoryType.LOST, "expired", HistoryType.FENCED), "p50_s"),
        failover_p99_s=_stat(stats, (HistoryType.LOST, "expired", HistoryType.FENCED), "p99_s"),
        final_spread=int(spreads[-1]) if spreads else None,
        span_start=t0,
        span_end=t1,
        span_s=round(t1 - t0, 6),
        expired_before=expired_before,
        incomplete_members=incomplete,
        coverage=coverage_line(len(found.rows), t0, t1, expired_before, incomplete),
    )
    page = report_page(title, summary, plots, tables, verdicts)
    Path(summary.index_html).write_text(page)
    return summary


__all__ = [
    "ReportSummary",
    "Table",
    "Verdict",
    "coverage_line",
    "duration",
    "html_page",
    "incomplete_members",
    "html_table",
    "pyplot",
    "report_page",
    "write_report",
    "summary_rows",
    "when",
    "write_table",
]
