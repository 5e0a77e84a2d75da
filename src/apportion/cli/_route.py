"""`apportion route` — a client's lookup (seed 1): which partition a key belongs to and who serves it now."""

from __future__ import annotations

import json

import click

from apportion.cli._app import app
from apportion.cli._common import group_option, store_option
from apportion.cli._store import read_group
from apportion.group import Router


@app.command()
@store_option()
@group_option()
@click.option("--resource", default=None, help="The resource KEY belongs to (a group over several resources).")
@click.argument("key")
def route(store_url: str, group_name: str, resource: str | None, key: str) -> None:
    """Print {"key", "partition", "owner", "epoch", "state"} for KEY, as ``apportion.Router`` routes it (routing:
    ``partition_for``): ``owner`` is the member serving the partition (the partition table's in coordinator mode,
    else the owner record's; null: nobody yet), ``state`` the table's (coordinator mode, else null). Exit 1
    ``NotEnoughMembers`` while a coordinator-mode group is below its minimum cluster size."""
    with read_group(store_url, group_name) as store, Router(store, group_name, follow=False) as router:
        # deleted since read_group looked: InvalidRequest; a corrupt record: CorruptRecord naming its key (exit 2)
        found = router.route(key, resource)
    out = {
        "key": key,
        "partition": found.partition,
        "owner": found.owner,
        "epoch": found.epoch,
        "state": None if found.state is None else found.state.value,
    }
    click.echo(json.dumps(out, sort_keys=True))
