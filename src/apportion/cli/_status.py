"""`apportion status` — who owns what: members (alive, partitions) and partitions (owner, epoch, checkpoint)."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from apportion.cli._app import app
from apportion.group import group_status
from apportion.store import connect


@app.command()
@click.option("--store", "store_url", required=True, help="Store URL: memory://, sqlite:///path, etcd://host:port")
@click.option("--group", "group_name", required=True, help="Group name.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def status(store_url: str, group_name: str, as_json: bool) -> None:
    """Print the group's members and partitions."""
    with connect(store_url) as store:
        snapshot = group_status(store, group_name)
    if as_json:
        out = {
            "members": {
                m: {"alive": v["alive"], "partitions": v["partitions"]} for m, v in snapshot["members"].items()
            },
            "partitions": snapshot["partitions"],
            "round": snapshot["round"],
        }
        click.echo(json.dumps(out, sort_keys=True))
        return
    console = Console()
    members = Table(title=f"group {group_name} — round {snapshot['round']}")
    for column in ("member", "alive", "partitions"):
        members.add_column(column)
    for mid, info in snapshot["members"].items():
        members.add_row(mid, "yes" if info["alive"] else "no", " ".join(info["partitions"]))
    console.print(members)
    parts = Table(title="partitions")
    for column in ("partition", "owner", "epoch", "checkpoint"):
        parts.add_column(column)
    for p, info in snapshot["partitions"].items():
        parts.add_row(p, info["owner"] or "-", str(info["epoch"] or "-"), info["checkpoint"] or "-")
    console.print(parts)
    if snapshot["table"]:
        coordinator = snapshot.get("coordinator", {}).get("member", "-")
        table = Table(title=f"partition table — coordinator {coordinator}")
        for column in ("partition", "owner", "target", "state"):
            table.add_column(column)
        for p, entry in snapshot["table"].items():
            table.add_row(p, entry["owner"] or "-", entry["target"] or "-", entry["state"])
        console.print(table)
