"""`apportion rebalance` — coordinator mode, manual policy: show the planned moves, then ask the coordinator."""

from __future__ import annotations

import json
import time

import click
from rich.console import Console
from rich.table import Table

from apportion.cli._app import app
from apportion.cli._common import group_option, store_option
from apportion.group import GroupConfig, PartitionId, request_rebalance
from apportion.group.internals import in_flight, planned_moves, read_table
from apportion.store import Store, connect


def _moving(store: Store, group: str) -> list[PartitionId]:
    """The partitions still moving (``in_flight``), after checking the definition and the partition table a re-plan
    reads: CorruptRecord naming a corrupt key (exit 2) before anything is planned or requested."""
    GroupConfig.find(store, group)  # none: planned_moves says the group is unknown
    return in_flight({p: e for p, (e, _) in read_table(store, group).items()})


@app.command()
@store_option()
@group_option()
@click.option("--dry-run", is_flag=True, help="Only show the planned moves.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def rebalance(store_url: str, group_name: str, dry_run: bool, as_json: bool) -> None:
    """Plan a full re-assignment over the live members, print the moves, and (unless --dry-run) request it: the
    coordinator applies it as throttled migrations (ASSIGNED -> MIGRATING -> ONLINE). Refused (exit 2) while the
    moves of a previous plan are in flight; a dry run then says so."""
    with connect(store_url) as store:
        moving = _moving(store, group_name)
        moves = planned_moves(store, group_name)
        if not dry_run and (moves or moving):
            request_rebalance(store, group_name, time.time())  # refused (exit 2) while partitions are moving
    if as_json:
        rows = [{"partition": m.partition, "from": m.source, "to": m.target} for m in moves]
        out = {"moves": rows, "requested": bool(moves) and not dry_run, "in_flight": moving}
        click.echo(json.dumps(out, sort_keys=True))
        return
    table = Table(title=f"group {group_name} — {len(moves)} planned moves" + (" (dry run)" if dry_run else ""))
    for column in ("partition", "from", "to"):
        table.add_column(column)
    for m in moves:
        table.add_row(str(m.partition), m.source or "-", m.target)
    Console().print(table)
    if moving:
        click.echo(f"{len(moving)} partition(s) still moving: a rebalance is refused until every one is ONLINE")
    if not dry_run and moves:
        click.echo("rebalance requested: the coordinator applies it")
