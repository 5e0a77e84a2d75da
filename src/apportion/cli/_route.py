"""`apportion route` — a client's lookup (seed 1): which partition a key belongs to and who owns it now."""

from __future__ import annotations

import json

import click

from apportion.cli._app import app
from apportion.cli._common import group_option, store_option
from apportion.cli._store import read_group
from apportion.group import GroupConfig, owner_of, table_entry_of
from apportion.routing import partition_for


@app.command()
@store_option()
@group_option()
@click.argument("key")
def route(store_url: str, group_name: str, key: str) -> None:
    """Print {"key", "partition", "owner", "epoch", "state"} for KEY (routing: ``partition_for``). ``owner`` is the
    live owner record (null while the partition moves); ``state`` the partition table's (coordinator mode)."""
    with read_group(store_url, group_name) as store:
        # deleted since read_group looked: InvalidRequest; a corrupt record: CorruptRecord naming its key (exit 2)
        config = GroupConfig.load(store, group_name)
        p = partition_for(key, config.partitions)
        owner = owner_of(store, group_name, p)
        entry = table_entry_of(store, group_name, p)
    out = {
        "key": key,
        "partition": p,
        "owner": None if owner is None else owner[0],
        "epoch": None if owner is None else owner[1],
        "state": None if entry is None else entry["state"],
        "table_owner": None if entry is None else entry.get("target") or entry.get("owner"),
    }
    click.echo(json.dumps(out, sort_keys=True))
