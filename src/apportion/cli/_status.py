"""`apportion status` — who owns what: members (alive, partitions) and partitions (owner, epoch, checkpoint), and in
coordinator mode the partition table and the members that failed within the last hour (when, what they owned).

In static mode the title shows the replica count and an unowned partition ``waiting for ordinal N`` (its pod is down
or not started: a StatefulSet keeps an ordinal's partitions for it).

``--watch`` redraws the tables every ``--interval`` seconds (rich Live) until Ctrl-C. A checkpoint that is a JSON
object with an integer ``"offset"`` gets its own column (the store does not know a log's end, so no lag is shown).
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table

from apportion.cli._app import app
from apportion.cli._common import group_option, store_option
from apportion.cli._store import read_group
from apportion.errors import InvalidRequest
from apportion.group import FAILED_RETENTION_S, checkpoint_offset, group_status


@app.command()
@store_option()
@group_option()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("--watch", is_flag=True, help="Refresh the tables live until Ctrl-C (not with --json).")
@click.option("--interval", "interval_s", type=click.FloatRange(min=0.05), default=1.0, help="--watch refresh (s).")
@click.option("--max-refreshes", type=int, default=None, hidden=True, help="--watch: stop after N refreshes (tests).")
def status(
    store_url: str, group_name: str, as_json: bool, watch: bool, interval_s: float, max_refreshes: int | None
) -> None:
    """Print the group's members and partitions."""
    if watch and as_json:
        raise InvalidRequest("watch", "--watch cannot be combined with --json (poll `status --json` instead)")
    if watch:
        _watch(store_url, group_name, interval_s, max_refreshes)
        return
    with read_group(store_url, group_name) as store:
        snapshot = group_status(store, group_name)
    if as_json:
        out = {
            "members": {
                m: {"alive": v["alive"], "partitions": v["partitions"]} for m, v in snapshot["members"].items()
            },
            "partitions": snapshot["partitions"],
            "round": snapshot["round"],
            "failed": snapshot["failed"],
        }
        if "replicas" in snapshot:  # static mode
            out["replicas"] = snapshot["replicas"]["replicas"]
        click.echo(json.dumps(out, sort_keys=True))
        return
    Console().print(render(group_name, snapshot))


def _watch(store_url: str, group_name: str, interval_s: float, max_refreshes: int | None) -> None:
    with read_group(store_url, group_name) as store, Live(auto_refresh=False) as live:
        n = 0
        try:
            while max_refreshes is None or n < max_refreshes:
                snapshot = group_status(store, group_name)
                stamp = time.strftime("%H:%M:%S")
                live.update(Group(render(group_name, snapshot), f"updated {stamp}, every {interval_s}s"))
                live.refresh()
                n += 1
                if max_refreshes is None or n < max_refreshes:
                    time.sleep(interval_s)  # the refresh period itself, not a synchronisation
        except KeyboardInterrupt:
            return


def _when(t: float) -> str:
    """A store-clock time: the local date and time when it is a wall-clock reading, else seconds (a virtual clock)."""
    if t > 1e9:
        return datetime.datetime.fromtimestamp(t).isoformat(sep=" ", timespec="seconds")
    return f"{t:.3f}"


def _holders(holders: dict[str, int | None]) -> str:
    """``w2 (0) w4 (1,530)``: replica holders with the lag they reported (``?``: not reported yet)."""
    return " ".join(f"{m} ({'?' if lag is None else f'{lag:,}'})" for m, lag in holders.items()) or "-"


def render(group_name: str, snapshot: dict[str, Any]) -> RenderableType:
    """The status tables of a ``group_status`` snapshot."""
    replicas = snapshot.get("replicas")
    about = f"replicas {replicas['replicas']}" if replicas else f"round {snapshot['round']}"
    resource = snapshot.get("resource") or {}
    if resource.get("resources"):  # a group over named resources: what each consumes
        about += " — " + ", ".join(f"{r['name']} ({r['partitions']})" for r in resource["resources"])
    members = Table(title=f"group {group_name} — {about}")
    subscribing = any("subscriptions" in info for info in snapshot["members"].values())
    for column in ("member", "alive", *(["subscriptions"] if subscribing else []), "partitions"):
        members.add_column(column)
    for mid, info in snapshot["members"].items():
        subs = [",".join(info.get("subscriptions", ["all"]))] if subscribing else []
        members.add_row(mid, "yes" if info["alive"] else "no", *subs, " ".join(info["partitions"]))
    offsets = {p: checkpoint_offset(info["checkpoint"]) for p, info in snapshot["partitions"].items()}
    show_offsets = any(o is not None for o in offsets.values())
    show_replicas = any("standby" in info or "learners" in info for info in snapshot["partitions"].values())
    parts = Table(title="partitions")
    columns = ["partition", "owner", "epoch", "checkpoint", *(["offset"] if show_offsets else [])]
    for column in columns + (["standby (lag)", "learners (lag)"] if show_replicas else []):
        parts.add_column(column)
    for p, info in snapshot["partitions"].items():
        owner = f"{info['owner']} (lapsing)" if info.get("lapsing") else info["owner"] or "-"
        if info.get("waiting_for") is not None:
            owner = f"waiting for ordinal {info['waiting_for']}"
        row = [p, owner, str(info["epoch"] or "-"), info["checkpoint"] or "-"]
        if show_offsets:
            offset = offsets[p]
            row.append("-" if offset is None else str(offset))
        if show_replicas:
            row += [_holders(info.get("standby", {})), _holders(info.get("learners", {}))]
        parts.add_row(*row)
    tables: list[RenderableType] = [members, parts]
    if snapshot["failed"]:
        failed = Table(title=f"failed members (lease ended without leaving; kept {FAILED_RETENTION_S / 3600:g} h)")
        for column in ("member", "failed at", "owned then", "seen by"):
            failed.add_column(column)
        for mid, info in snapshot["failed"].items():
            owned = " ".join(map(str, info["partitions"])) or "-"
            failed.add_row(mid, _when(info["failed_at"]), owned, str(info["detected_by"] or "-"))
        tables.append(failed)
    if snapshot["table"]:
        coordinator = snapshot.get("coordinator", {}).get("member", "-")
        table = Table(title=f"partition table — coordinator {coordinator}")
        for column in ("partition", "owner", "target", "state"):
            table.add_column(column)
        for p, entry in snapshot["table"].items():
            table.add_row(p, entry["owner"] or "-", entry["target"] or "-", entry["state"])
        tables.append(table)
    return Group(*tables)
