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

from apportion.errors import InvalidRequest
from apportion.spark import _analytics as A

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


def html_table(table: Table, limit: int = HTML_ROWS) -> str:
    """A small HTML table of the first ``limit`` rows, linking the full CSV."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape('' if v is None else str(v))}</td>" for v in row) + "</tr>"
        for row in table.rows[:limit]
    )
    shown = f"first {limit} of {len(table.rows)} rows" if len(table.rows) > limit else f"{len(table.rows)} rows"
    csv_name = html.escape(Path(table.csv).name)
    pq_name = html.escape(Path(table.parquet).name)
    return (
        f'<h3 id="{html.escape(table.name)}">{html.escape(table.name)}</h3>'
        f'<p>{shown} — <a href="{csv_name}">{csv_name}</a>, <a href="{pq_name}">{pq_name}</a></p>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def html_page(title: str, summary: Mapping[str, Any], plots: Sequence[str], tables: Iterable[Table]) -> str:
    """The whole page: a summary list, the plots (relative links) and the tables."""
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
    cmap = plt.get_cmap("tab20" if len(members) > 10 else "tab10")
    colour = {m: cmap(i % cmap.N) for i, m in enumerate(members)}
    row_of = {p: i for i, p in enumerate(partitions)}
    height = min(40.0, max(3.0, 0.28 * len(partitions) + 1.5))
    fig, ax = plt.subplots(figsize=(12, height))
    for r in _records(intervals):
        y = row_of[r["partition"]]
        ax.broken_barh([(r["start_time"] - t0, r["duration_s"])], (y - 0.4, 0.8), facecolors=colour[r["member"]])
    for r in _records(gaps):
        ax.broken_barh([(r["gap_start"] - t0, r["gap_s"])], (row_of[r["partition"]] - 0.1, 0.2), facecolors="0.6")
    for r in _records(found):
        y = row_of[r["partition"]]
        ax.broken_barh(
            [(r["overlap_start_time"] - t0, max(r["overlap_s"], 1e-3))], (y - 0.45, 0.9), facecolors="red", alpha=0.7
        )
    ax.set_yticks(range(len(partitions)))
    labels = [(names or {}).get(p, str(p)) for p in partitions]
    ax.set_yticklabels(labels, fontsize=7 if len(partitions) > 30 else 9)
    ax.set_ylim(-0.7, len(partitions) - 0.3)
    ax.invert_yaxis()
    ax.set_xlabel(f"seconds since the first event (t0 = {t0:.3f})")
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
    bottom.set_xlabel(f"seconds since the first event (t0 = {t0:.3f})")
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
    return tuple(sorted(m for m, (_, _, kind) in first.items() if kind != "registered"))


def coverage_line(
    overlap_count: int, start: float, end: float, expired_before: float | None, incomplete: Sequence[str]
) -> str:
    """ "overlaps: N in <span>" plus what the span may miss (expired events, members seen only in part)."""
    line = f"overlaps: {overlap_count} in {end - start:.3f} s of history (t = {start:.3f} to {end:.3f})"
    limits = []
    if expired_before is not None:
        limits.append(f"events before t = {expired_before:.3f} expired (history retention)")
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
) -> ReportSummary:
    """Analyse ``events`` (``apportion.group.history``) and write tables, plots and ``index.html`` into ``out_dir``.
    Open ownership is closed at ``end_time`` (default: the last event's time). ``expired_before``
    (``apportion.group.history_expired_before``): events before it may have been deleted by the history's retention;
    the summary says so."""
    if not events:
        raise InvalidRequest("events", "the group has no recorded history (wrong group, or history_retention_s=0)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df = A.events_frame(spark, events).cache()
    at = A.report_time(df) if end_time is None else float(end_time)
    t0 = float(min(float(e["time"]) for e in events))
    t1 = float(max(float(e["time"]) for e in events))
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
        handoff_p50_s=_stat(stats, ("release",), "p50_s"),
        handoff_p99_s=_stat(stats, ("release",), "p99_s"),
        failover_p50_s=_stat(stats, ("lost", "expired", "fenced"), "p50_s"),
        failover_p99_s=_stat(stats, ("lost", "expired", "fenced"), "p99_s"),
        final_spread=int(spreads[-1]) if spreads else None,
        span_start=t0,
        span_end=t1,
        span_s=round(t1 - t0, 6),
        expired_before=expired_before,
        incomplete_members=incomplete,
        coverage=coverage_line(len(found.rows), t0, t1, expired_before, incomplete),
    )
    page = html_page("apportion report", summary.as_dict(), plots, tables)
    Path(summary.index_html).write_text(page)
    return summary


__all__ = [
    "ReportSummary",
    "Table",
    "coverage_line",
    "html_page",
    "incomplete_members",
    "html_table",
    "pyplot",
    "write_report",
    "write_table",
]
