"""`apportion subscribe` — set the resources a member of a group over named resources consumes, while it runs."""

from __future__ import annotations

import json

import click

from apportion.cli._app import app
from apportion.cli._common import group_option, store_option
from apportion.cli._options import resource_names
from apportion.cli._store import read_group
from apportion.errors import InvalidRequest
from apportion.group import set_subscriptions
from apportion.store import connect


@app.command()
@store_option()
@group_option()
@click.option("--id", "member_id", required=True, help="The member whose subscriptions change.")
@click.option("--clear", is_flag=True, help="Delete the operator's subscriptions: the member goes back to its own.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a line.")
@click.argument("resources", required=False)
def subscribe(
    store_url: str, group_name: str, member_id: str, clear: bool, as_json: bool, resources: str | None
) -> None:
    """Make member --id consume RESOURCES (NAME,...; or --clear): it revokes at once what it holds of the others,
    and a new round plans the change with as few moves as it can. The setting replaces the member's own
    (--subscribe) while it exists, also across restarts."""
    if clear == (resources is not None):
        raise InvalidRequest("resources", "give RESOURCES (NAME,...) or --clear")
    with read_group(store_url, group_name):  # an unknown group: exit 2, nothing created
        pass
    wanted = None if resources is None else resource_names(resources, "resources")
    with connect(store_url) as store:
        set_subscriptions(store, group_name, member_id, wanted)
    if as_json:
        click.echo(json.dumps({"group": group_name, "member": member_id, "subscriptions": wanted}, sort_keys=True))
    else:
        click.echo(f"group {group_name}: {member_id} subscribes to {'its own' if wanted is None else ','.join(wanted)}")
