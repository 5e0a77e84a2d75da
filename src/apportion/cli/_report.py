"""`apportion report` — the group's protocol history → Spark analytics → tables, plots and one index.html."""

from __future__ import annotations

import json

import click

from apportion.cli._app import app
from apportion.cli._common import group_option, spark_master, spark_options, store_option
from apportion.cli._store import read_group
from apportion.errors import InvalidRequest, OverlapFound
from apportion.group import history, history_expired_before
from apportion.store import redact_url


@app.command()
@store_option()
@group_option()
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory for the report.")
@spark_options("local[1]")
def report(store_url: str, group_name: str, out_dir: str, master: str | None, spark_url: str | None) -> None:
    """Ownership timelines, unowned gaps, overlaps (must be none), moves per round, balance, handoff latency.
    The summary states the span of history analysed and what it may miss (expired events, members seen in part)."""
    from apportion.spark import spark_session, write_report

    engine = spark_master(master, spark_url, "local[1]")
    with read_group(store_url, group_name) as store:
        events = history(store, group_name)
        expired_before = history_expired_before(store, group_name)
    if not events:  # before paying for a Spark start
        raise InvalidRequest("--group", f"{group_name!r} has no recorded history in {redact_url(store_url)}")
    spark = spark_session(engine, app_name="apportion-report")
    title = f"apportion report — group {group_name}"
    summary = write_report(spark, events, out_dir, expired_before=expired_before, title=title)
    out = summary.as_dict()
    click.echo(json.dumps(out, indent=2))
    click.echo(summary.index_html)
    click.echo(summary.coverage, err=True)
    if summary.overlaps:
        raise OverlapFound(f"{summary.overlaps} overlapping ownership interval(s): see {out_dir}/overlaps.csv")
