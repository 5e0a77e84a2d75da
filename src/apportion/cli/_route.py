"""`apportion route` — a client's lookup (seed 1): which partition a key belongs to and who owns it now."""

from __future__ import annotations

import json

import click

from apportion.cli._app import app
from apportion.cli._store import read_group, store_option
from apportion.errors import InvalidRequest
from apportion.group import GroupConfig, Keys, decode
from apportion.group._coordinator import read_table
from apportion.routing import partition_for


@app.command()
@store_option()
@click.option("--group", "group_name", required=True, help="Group name.")
@click.argument("key")
def route(store_url: str, group_name: str, key: str) -> None:
    """Print {"key", "partition", "owner", "epoch", "state"} for KEY (routing: ``partition_for``). ``owner`` is the
    live owner record (null while the partition moves); ``state`` the partition table's (coordinator mode)."""
    keys = Keys(group_name)
    with read_group(store_url, group_name) as store:
        kv = store.get(keys.resource)
        if kv is None:  # deleted since read_group looked
            raise InvalidRequest("group", f"group {group_name!r} has no resource definition")
        config = GroupConfig.from_json(decode(kv.value))
        p = partition_for(key, config.partitions)
        owner_kv = store.get(keys.owner(p))
        entry = read_table(store, group_name).get(p)
    owner = None if owner_kv is None else decode(owner_kv.value)
    out = {
        "key": key,
        "partition": p,
        "owner": None if owner is None else owner["member"],
        "epoch": None if owner is None else owner["epoch"],
        "state": None if entry is None else entry[0].state.value,
        "table_owner": None if entry is None else entry[0].holder,
    }
    click.echo(json.dumps(out, sort_keys=True))
