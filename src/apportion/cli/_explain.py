"""`apportion explain` — why a partition is owned by its member: the round, the strategy's decision, its epochs."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from apportion.cli._app import app
from apportion.cli._common import group_option, store_option
from apportion.cli._store import read_group
from apportion.group import explain as explain_partition
from apportion.group.internals import tags_text


@app.command()
@store_option()
@group_option()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.argument("partition")
def explain(store_url: str, group_name: str, as_json: bool, partition: str) -> None:
    """Explain why PARTITION (a number; <resource>-<index> in a group over several resources) is owned by its
    member (from the group's history)."""
    with read_group(store_url, group_name) as store:
        out = explain_partition(store, group_name, partition)
    if as_json:
        click.echo(json.dumps(out.to_json(), sort_keys=True))
        return
    console = Console()
    owner = out.owner or "nobody"
    console.print(f"[bold]partition {partition}[/bold] of {group_name}: owner [bold]{owner}[/bold], epoch {out.epoch}")
    if out.round is not None:
        console.print(f"given in round {out.round}")
    console.print(f"decision: {out.decision.text}")
    if out.tags is not None:  # high_availability (seed 2): each holder's role and the task tags that hold
        console.print(f"tags: {tags_text(out.tags) or 'no holder in the latest plan'}", highlight=False)
    table = Table(title="epoch history")
    for column in ("revision", "time", "event", "member", "epoch", "detail"):
        table.add_column(column)
    for e in out.epochs:
        detail = e.reason or (f"from {e.source}" if e.source else "")
        time = "-" if e.time is None else f"{e.time:.3f}"
        epoch = "-" if e.epoch is None else str(e.epoch)
        table.add_row(str(e.revision), time, e.type, e.member, epoch, detail)
    console.print(table)
