"""Analytics of the protocol history on Spark: hand-built histories with known answers, a report of a real run
(RoundsMember on the memory store in virtual time), and the simulator grid as Spark tasks."""

from __future__ import annotations

import datetime
import html.parser
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from apportion.cli import main
from apportion.errors import InvalidRequest
from apportion.group import history
from apportion.spark.analytics._analytics import (
    balance_over_time,
    events_frame,
    handoff_latency,
    latency_stats,
    moves_per_round,
    overlaps,
    ownership_intervals,
    unowned_gaps,
)
from apportion.spark.analytics._grid import load_grid, run_grid
from apportion.spark.analytics._report import (
    Verdict,
    coverage_line,
    duration,
    incomplete_members,
    report_page,
    write_report,
)
from apportion.store import connect
from tests.group.harness import Harness

pytestmark = pytest.mark.spark


def ev(rev: int, t: float, kind: str, member: str, **fields: Any) -> dict[str, Any]:
    return {"revision": rev, "time": t, "type": kind, "member": member, "seq": 0, **fields}


# Partition 0: planned handoff a -> b (release 105.0, claim 105.5). Partition 1: c's lease lapses (lost at 110, no
# epoch in the event), b claims at 113. Partition 2: a crashes (last sign of life: a commit at 108), b claims at 115.
# Partition 3: a keeps it (open at the report time 115). Round 18 planned 3 moves and 3 followed.
HISTORY = [
    ev(5, 99.9, "round_closed", "a", round=4, moves=0, participants=["a"], kept=False),
    ev(10, 100.0, "claim", "a", partition=0, epoch=1),
    ev(11, 100.0, "claim", "c", partition=1, epoch=1),
    ev(12, 100.0, "claim", "a", partition=2, epoch=1),
    ev(13, 100.0, "claim", "a", partition=3, epoch=1),
    ev(19, 104.9, "round_closed", "b", round=18, moves=3, participants=["a", "b"], kept=False),
    ev(20, 105.0, "release", "a", partition=0, epoch=1),
    ev(22, 105.5, "claim", "b", partition=0, epoch=2),
    ev(25, 108.0, "commit", "a", partition=2, epoch=1, checkpoint="x"),
    ev(30, 110.0, "lost", "c", partition=1, reason="lease deadline passed"),
    ev(35, 113.0, "claim", "b", partition=1, epoch=2),
    ev(40, 115.0, "claim", "b", partition=2, epoch=2),
]


@pytest.fixture(scope="module")
def known(spark: Any) -> dict[str, Any]:
    df = events_frame(spark, HISTORY)
    intervals = ownership_intervals(df).cache()
    return {"events": df, "intervals": intervals}


def test_intervals_end_by_release_lost_expiry_or_stay_open(known: dict[str, Any]) -> None:
    rows = [
        (r.partition, r.epoch, r.member, r.start_time, r.end_time, r.end_type)
        for r in known["intervals"].orderBy("partition", "epoch").collect()
    ]
    assert rows == [
        (0, 1, "a", 100.0, 105.0, "release"),
        (0, 2, "b", 105.5, 115.0, "open"),
        (1, 1, "c", 100.0, 110.0, "lost"),
        (1, 2, "b", 113.0, 115.0, "open"),
        (2, 1, "a", 100.0, 108.0, "expired"),
        (2, 2, "b", 115.0, 115.0, "open"),
        (3, 1, "a", 100.0, 115.0, "open"),
    ]


def test_gap_is_measured_from_the_old_owners_end_to_the_new_claim(known: dict[str, Any]) -> None:
    gaps = [(r.partition, r.gap_start, r.gap_end, r.gap_s) for r in unowned_gaps(known["intervals"]).collect()]
    assert gaps == [(0, 105.0, 105.5, 0.5), (1, 110.0, 113.0, 3.0), (2, 108.0, 115.0, 7.0)]


def test_no_overlap_in_a_fenced_history(known: dict[str, Any]) -> None:
    assert overlaps(known["intervals"]).count() == 0


def test_an_injected_overlap_is_detected(spark: Any) -> None:
    # b claims partition 5 while a still holds it: a's release succeeds AFTER b's claim (store order).
    injected = [
        *HISTORY,
        ev(50, 120.0, "claim", "a", partition=5, epoch=1),
        ev(52, 121.0, "claim", "b", partition=5, epoch=2),
        ev(54, 123.0, "release", "a", partition=5, epoch=1),
    ]
    found = overlaps(ownership_intervals(events_frame(spark, injected))).collect()
    assert [(r.partition, r.first_member, r.second_member, r.overlap_s) for r in found] == [(5, "a", "b", 2.0)]


def test_handoff_latency_per_cause_and_p50(known: dict[str, Any]) -> None:
    handoffs = handoff_latency(known["intervals"])
    assert sorted((r.partition, r.cause, r.latency_s) for r in handoffs.collect()) == [
        (0, "release", 0.5),
        (1, "lost", 3.0),
        (2, "expired", 7.0),
    ]
    stats = {r.cause: (r["count"], r.p50_s, r.p99_s) for r in latency_stats(handoffs).collect()}
    assert stats["release"] == (1, 0.5, 0.5)
    assert stats["all"] == (3, 3.0, 7.0)


def test_handoff_latency_is_never_negative_when_the_two_writers_clocks_disagree(spark: Any) -> None:
    # b's clock is 0.1 s behind a's: its claim (after a's release in store order) is stamped before the release.
    skewed = [
        ev(10, 100.0, "claim", "a", partition=0, epoch=1),
        ev(20, 105.0, "release", "a", partition=0, epoch=1),
        ev(22, 104.9, "claim", "b", partition=0, epoch=2),
        ev(30, 106.0, "release", "b", partition=0, epoch=2),
        ev(32, 106.25, "claim", "a", partition=0, epoch=3),
    ]
    handoffs = handoff_latency(ownership_intervals(events_frame(spark, skewed)))
    assert sorted((r.from_member, r.to_member, r.latency_s) for r in handoffs.collect()) == [
        ("a", "b", 0.0),
        ("b", "a", 0.25),
    ]


def test_the_report_states_its_span_and_the_members_it_saw_only_in_part(spark: Any, tmp_path: Path) -> None:
    # a registered inside the span; b's earlier events expired: its history starts with a commit.
    events = [
        ev(3, 200.0, "registered", "a"),
        ev(4, 201.0, "commit", "b", partition=1, epoch=1, checkpoint="x"),
        ev(5, 202.0, "claim", "a", partition=0, epoch=1),
        ev(6, 230.5, "commit", "a", partition=0, epoch=1, checkpoint="y"),
    ]
    summary = write_report(spark, events, tmp_path / "part", expired_before=180.0)
    assert (summary.span_start, summary.span_end, summary.span_s) == (200.0, 230.5, 30.5)
    assert summary.expired_before == 180.0
    assert summary.incomplete_members == ("b",)
    assert summary.coverage.startswith("overlaps: 0 in 30.500 s of history (t = 200.000 to 230.500)")
    assert "expired" in summary.coverage and "incomplete history" in summary.coverage and "b" in summary.coverage
    assert summary.coverage in (tmp_path / "part" / "index.html").read_text()
    whole = events[:1] + events[2:]  # the rest of the page's span line is pure: no second Spark report needed
    assert incomplete_members(whole) == ()
    assert coverage_line(0, 200.0, 230.5, None, ()).endswith("every member's history complete in this span")


def test_the_report_reads_like_a_report_verdict_units_clock_times_captions_and_no_paths(
    spark: Any, tmp_path: Path
) -> None:
    wall = 1_795_453_045.0  # HISTORY moved to a wall clock: 2026-11-24, the first event at t0 = wall + 99.9
    events = [{**e, "time": e["time"] + wall} for e in HISTORY]
    out = tmp_path / "report-dir-name"
    verdict = Verdict("exactly once (count, checksum, order)", True, "12,000 records")
    summary = write_report(spark, events, out, title="apportion report — group g", verdicts=[verdict])
    page = (out / "index.html").read_text()
    body = page.split("<body>", 1)[1]
    headline = body.split('<div class="verdict ok">', 1)[1].split("</div>", 1)[0]
    assert "Every check passed" in headline
    assert "✓</span> <b>no overlapping ownership</b>" in headline
    assert "✓</span> <b>exactly once (count, checksum, order)</b> — 12,000 records" in headline
    assert str(tmp_path) not in body and "report-dir-name" not in body  # no file-system path on the page
    assert "1795453" not in body  # no raw Unix time anywhere
    local = datetime.datetime.fromtimestamp(wall + 99.9).strftime("%Y-%m-%d %H:%M:%S")
    assert f"<td>{local} to " in body  # the summary's span in local wall-clock time
    assert "<th>Planned handoff (release → claim)</th><td>p50 500 ms, p99 500 ms over" in body
    assert "<th>Unowned gaps</th><td>3, 10.5 s in all, the longest 7 s</td>" in body
    assert body.count("<figcaption>") == 4 and "<figcaption></figcaption>" not in body
    assert summary.coverage.startswith(f"overlaps: 0 in 15.100 s of history ({local} to ")
    failed_page = report_page("r", summary, (), (), [Verdict("exactly once", False, "3 missing")])  # pure
    assert '<div class="verdict bad"><h2>A check failed</h2>' in failed_page
    assert "✗</span> <b>exactly once</b> — 3 missing" in failed_page


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "-"), (0.0, "0 s"), (0.004101, "4.1 ms"), (0.5, "500 ms"), (2.345, "2.35 s"), (113.590467, "1 min 54 s"),
     (3600.0, "1 h"), (3960.0, "1 h 6 min")],
)  # fmt: skip
def test_durations_are_shown_with_their_unit(seconds: float | None, shown: str) -> None:
    assert duration(seconds) == shown


def test_moves_are_attributed_to_the_round_closed_before_them(known: dict[str, Any]) -> None:
    rows = [
        (r["round"], r.planned_moves, r.claims, r.moved, r.initial)
        for r in moves_per_round(known["events"], known["intervals"]).collect()
    ]
    assert rows == [(4, 0, 4, 0, 4), (18, 3, 3, 3, 0)]


def test_balance_spread_follows_the_owned_counts(known: dict[str, Any]) -> None:
    per_member, spread = balance_over_time(known["intervals"])
    last = {r.member: r.owned for r in per_member.where("time = 115.0").collect()}
    assert last == {"b": 3}  # a's crash ended partition 2 at 108; b claimed it at 115
    series = [(r.time, r.members, r.max_owned, r.min_owned, r.spread) for r in spread.collect()]
    assert series[0] == (100.0, 2, 3, 1, 2)  # a owns 0, 2, 3 and c owns 1
    assert (105.5, 3, 2, 1, 1) in series  # b took partition 0 from a
    assert (110.0, 2, 1, 1, 0) in series  # c lost its partition: members owning nothing do not count
    assert series[-1] == (115.0, 2, 3, 1, 2)


def _short_run() -> Harness:
    """Three members settle, a fourth joins, one leaves gracefully, one crashes (its lease expires). The store is
    a named memory store, so ``apportion report --store memory://<name>`` in this process reads it."""
    h = Harness()
    h.store = connect(f"memory://report-{uuid.uuid4().hex}", clock=h.clock)  # type: ignore[assignment]
    for mid in ("a", "b", "c"):
        h.add(mid)
    h.run(2.0)
    h.add("d")
    h.run(3.0)
    h.members["b"].leave()
    del h.members["b"]
    h.run(3.0)
    h.frozen.add("c")  # stops stepping and renewing: a crash
    h.run(8.0)
    return h


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images += [v for k, v in attrs if k == "src" and v]


@pytest.mark.soak  # make test keeps the report of a real run: test_demo's small demo writes and checks it
def test_report_command_on_a_real_run_finds_no_overlap_and_writes_an_html_page_with_its_plots(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    h = _short_run()
    events = history(h.store, h.group)
    assert {"claim", "release", "round_closed", "commit"} - {e["type"] for e in events} == {"commit"}
    shuffle = spark.conf.get("spark.sql.shuffle.partitions")
    try:  # the command's getOrCreate returns this session (and sets its own shuffle width)
        code = main(["report", "--store", h.store.url, "--group", h.group, "--out", str(tmp_path / "report")])
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", shuffle)
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0, out
    summary = json.loads("\n".join(out[:-1]))
    assert summary["overlaps"] == 0
    assert summary["partitions"] == 12
    assert summary["rounds"] >= 3
    assert summary["handoff_p50_s"] is not None and summary["handoff_p50_s"] >= 0.0
    assert summary["failover_p50_s"] > 0.0  # c's crash: its partitions waited for its lease to expire
    index = Path(out[-1])
    assert index == Path(summary["index_html"])
    parser = _Links()
    parser.feed(index.read_text())
    assert len(parser.images) == 4
    for src in parser.images:
        png = index.parent / src
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", src
    for table in summary["tables"]:
        assert (index.parent / f"{table}.csv").is_file()
        assert (index.parent / f"{table}.parquet").is_file()
    reread = spark.read.parquet(str(index.parent / "intervals.parquet"))
    assert reread.count() == summary["intervals"]


def test_write_report_refuses_an_empty_history(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="no recorded history"):
        write_report(spark, [], tmp_path)


def test_simulate_grid_without_out_is_a_user_mistake(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid_file = tmp_path / "grid.json"
    grid_file.write_text("{}")
    assert main(["simulate", "--grid", str(grid_file)]) == 2
    assert "--out" in capsys.readouterr().err


def test_grid_runs_every_scenario_as_a_spark_task_and_writes_table_and_chart(spark: Any, tmp_path: Path) -> None:
    grid_file = tmp_path / "grid.json"
    axes = {"strategies": ["sticky", "round_robin"], "members": [3], "partitions": [6], "churn": [2], "seeds": [1]}
    grid_file.write_text(json.dumps({**axes, "modes": ["rounds", "coordinator"]}))  # a grid picks the modes too
    result = run_grid(spark, load_grid(grid_file), tmp_path / "grid")
    rows = spark.read.parquet(result.table_parquet).orderBy("mode", "strategy").collect()
    assert [(r.mode, r.strategy, r.members, r.partitions, r.churn) for r in rows] == [
        ("coordinator", "round_robin", 3, 6, 2),
        ("coordinator", "sticky", 3, 6, 2),
        ("rounds", "round_robin", 3, 6, 2),
        ("rounds", "sticky", 3, 6, 2),
    ]
    assert all(r.ok and r.moves >= r.moves_lower_bound and r.plans >= 1 for r in rows)
    assert Path(result.chart_png).read_bytes()[:4] == b"\x89PNG"
    assert "sticky" in Path(result.index_html).read_text()


def test_grid_file_with_an_unknown_key_is_rejected(tmp_path: Path) -> None:
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text('strategies = ["sticky"]\nmembers = [3]\nwobble = [1]\n')
    with pytest.raises(InvalidRequest, match="wobble"):
        load_grid(grid_file)
