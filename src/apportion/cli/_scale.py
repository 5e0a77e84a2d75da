"""`apportion scale` — set a static-mode group's replica count, as `kubectl scale` sets a StatefulSet's (seed 3)."""

from __future__ import annotations

import json

import click

from apportion.cli._app import app
from apportion.cli._common import group_option, store_option
from apportion.cli._store import read_group
from apportion.group import set_replicas, stored_replicas
from apportion.group.internals import validate_replicas
from apportion.store import connect


@app.command()
@store_option()
@group_option()
@click.option("--replicas", type=int, required=True, help="The new replica count (>= 1).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a line.")
def scale(store_url: str, group_name: str, replicas: int, as_json: bool) -> None:
    """Set the group's replica count: every static member follows it. Scaling down, the ordinals at or above it
    give their partitions up (on_revoked, then release) and the remaining ordinals claim them; scaling up, the new
    ordinals' partitions wait for their pods. Run it with (before) `kubectl scale`; a new pod whose ordinal is at or
    above the count raises it on its own."""
    validate_replicas(replicas)
    with read_group(store_url, group_name) as store:  # an unknown group: exit 2, nothing created
        previous = stored_replicas(store, group_name)
    with connect(store_url) as store:
        set_replicas(store, group_name, replicas)  # a group of another mode: exit 2, nothing written
    if as_json:
        click.echo(json.dumps({"group": group_name, "previous": previous, "replicas": replicas}, sort_keys=True))
    else:
        click.echo(f"group {group_name}: replica count {'-' if previous is None else previous} -> {replicas}")
