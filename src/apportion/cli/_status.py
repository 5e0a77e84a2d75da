"""`apportion status` — who owns what: members (alive, partitions) and partitions (owner, epoch, checkpoint), and in
coordinator mode the partition table, the members that failed within the last hour (when, what they owned) and,
while the group waits, why (the title and ``--json``'s ``waiting``: ``waiting for 3 members (have 1)``, or
``settling`` before the first table).

In static mode the title shows the replica count and an unowned partition ``waiting for ordinal N`` (its pod is down
or not started: a StatefulSet keeps an ordinal's partitions for it).

``--watch`` redraws the tables every ``--interval`` seconds (rich Live) until Ctrl-C. A checkpoint that is a JSON
object with an integer ``"offset"`` gets its own column (the store does not know a log's end, so no lag is shown).

A group of more than ``SUMMARY_ABOVE`` partitions is summarised (100,000 partitions listed are 110,000 lines that
rich took a minute to lay out): per-member counts (per resource too in a group over named resources), the
partitions counted by state, and at most ``SUMMARY_ROWS`` of the partitions that are not at rest. ``--all`` lists
every partition as before (above ``SUMMARY_ABOVE`` as plain aligned lines, not a rich table: seconds, not a
minute); ``--json`` always has everything.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from apportion.cli._app import app
from apportion.cli._common import group_option, seconds, store_option
from apportion.cli._store import read_group
from apportion.clock import clock_text
from apportion.errors import InvalidRequest
from apportion.group import GroupStatus, MemberStatus, PartitionStatus, checkpoint_offset, group_status
from apportion.group.internals import FAILED_RETENTION_S, not_at_rest, tags_text
from apportion.model import resource_of

SUMMARY_ABOVE = 200  # partitions: a larger group's table is a summary unless --all
SUMMARY_ROWS = 20  # partitions not at rest that a summary lists


@app.command()
@store_option()
@group_option()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("--watch", is_flag=True, help="Refresh the tables live until Ctrl-C (not with --json).")
@click.option("--interval", "interval_s", type=seconds(0.05), default=1.0, help="--watch refresh (s).")
@click.option(
    "--all", "list_all", is_flag=True,
    help=f"List every partition and each member's partition ids, also in a group of more than {SUMMARY_ABOVE:,} "
    "partitions (which gets a summary otherwise).",
)  # fmt: skip
def status(
    store_url: str,
    group_name: str,
    as_json: bool,
    watch: bool,
    interval_s: float,
    list_all: bool,
) -> None:
    """Print the group's members and partitions.

    A group of more than 200 partitions gets a summary: each member's partition count (and per resource in a group
    over named resources), the partitions counted by state, and at most 20 of the partitions not at rest
    (unowned, lapsing, moving, waiting for an ordinal, warming up learners). It leaves out each member's partition
    ids and the owner, epoch and checkpoint of every other partition: --all lists them, --json always has them."""
    if watch and as_json:
        raise InvalidRequest("watch", "--watch cannot be combined with --json (poll `status --json` instead)")
    if watch:
        _watch(store_url, group_name, interval_s, list_all)
        return
    with read_group(store_url, group_name) as store:
        snapshot = group_status(store, group_name)
    if as_json:
        click.echo(json.dumps(_json(snapshot), sort_keys=True))
        return
    Console().print(render(group_name, snapshot, list_all=list_all), soft_wrap=_listed_plainly(snapshot, list_all))


def _json(snapshot: GroupStatus) -> dict[str, object]:
    """``--json``: members (alive, partitions, and in a group over named resources the subscriptions the table shows;
    absent: every resource of the group), partitions, round, failed members and mode; the replica count in static
    mode, the resources in a group over named resources, ``waiting`` in coordinator mode (null once the table is laid
    out and the minimum is live)."""
    shown = ("alive", "partitions", "subscriptions")  # not a member's capacity or lapsing records
    out: dict[str, object] = {
        "members": {
            mid: {k: v for k, v in info.to_json().items() if k in shown} for mid, info in snapshot.members.items()
        },
        "partitions": {p: info.to_json() for p, info in snapshot.partitions.items()},
        "round": snapshot.round,
        "failed": {mid: info.to_json() for mid, info in snapshot.failed.items()},
    }
    if snapshot.replicas is not None:  # static mode
        out["replicas"] = snapshot.replicas
    if snapshot.resource is not None and snapshot.resource.resources:  # what the table's title shows
        out["resources"] = snapshot.resource.to_json()["resources"]
    out["mode"] = snapshot.mode  # the stored definition's (null: stored before modes were)
    if snapshot.mode == "coordinator":
        out["waiting"] = None if snapshot.waiting is None else snapshot.waiting.to_json()
    return out


def _watch(store_url: str, group_name: str, interval_s: float, list_all: bool) -> None:
    """Redraw the tables every ``interval_s`` until Ctrl-C."""
    with read_group(store_url, group_name) as store, Live(auto_refresh=False) as live:
        try:
            while True:
                snapshot = group_status(store, group_name)
                stamp = clock_text(time.time())
                shown = render(group_name, snapshot, list_all=list_all)
                live.update(Group(shown, f"updated {stamp}, every {interval_s}s"))
                live.refresh()
                time.sleep(interval_s)  # the refresh period itself, not a synchronisation
        except KeyboardInterrupt:
            return


def _when(t: float) -> str:
    """A store-clock time: the local date and time when it is a wall-clock reading, else seconds (a virtual clock)."""
    return clock_text(t, date=True)


def _holders(holders: Mapping[str, int | None]) -> str:
    """``w2 (0) w4 (1,530)``: replica holders with the lag they reported (``?``: not reported yet)."""
    return " ".join(f"{m} ({'?' if lag is None else f'{lag:,}'})" for m, lag in holders.items()) or "-"


def render(group_name: str, snapshot: GroupStatus, *, list_all: bool = False) -> RenderableType:
    """The status tables of a ``group_status`` snapshot: every partition when the group has at most
    ``SUMMARY_ABOVE`` of them or ``list_all``, else the summary (see the module docstring); first, on a line of its
    own, why a coordinator group waits (below its minimum cluster size, or before the first table)."""
    tables = _tables(group_name, snapshot, list_all=list_all)
    if snapshot.waiting is not None:
        return Group(Text(f"group {group_name}: {snapshot.waiting.reason}"), tables)
    return tables


def _tables(group_name: str, snapshot: GroupStatus, *, list_all: bool) -> RenderableType:
    if not (list_all or len(snapshot.partitions) <= SUMMARY_ABOVE):
        return _summary(group_name, snapshot)
    members = Table(title=_title(group_name, snapshot))
    subscribing = any(info.subscriptions is not None for info in snapshot.members.values())
    for column in ("member", "alive", *(["subscriptions"] if subscribing else []), "partitions"):
        members.add_column(column)
    for mid, info in snapshot.members.items():
        subs = [_subscriptions(info)] if subscribing else []
        members.add_row(mid, "yes" if info.alive else "no", *subs, " ".join(info.partitions))
    if _listed_plainly(snapshot, list_all):
        return Group(members, *_failed(snapshot, counts=False), _plain_listing(snapshot))
    parts = Table(title="partitions")
    columns, rows = _partition_rows(snapshot, snapshot.partitions)
    for column in columns:
        parts.add_column(column)
    for row in rows:
        parts.add_row(*row)
    tables: list[RenderableType] = [members, parts, *_failed(snapshot, counts=False)]
    if snapshot.table:
        table = Table(title=f"partition table — coordinator {snapshot.coordinator_id or '-'}")
        for column in ("partition", "owner", "target", "state"):
            table.add_column(column)
        for p, entry in snapshot.table.items():
            table.add_row(p, entry.owner or "-", entry.target or "-", entry.state.value)
        tables.append(table)
    return Group(*tables)


def _subscriptions(info: MemberStatus) -> str:
    return "all" if info.subscriptions is None else ",".join(info.subscriptions)


def _listed_plainly(snapshot: GroupStatus, list_all: bool) -> bool:
    """``--all`` on a group above ``SUMMARY_ABOVE``: the partitions as plain aligned lines (a rich table of 100,000
    rows took a minute to lay out), printed unwrapped (soft wrap) so that each partition stays one line."""
    return list_all and len(snapshot.partitions) > SUMMARY_ABOVE


def _resources(snapshot: GroupStatus) -> list[str]:
    """The names of a group's named resources (empty: a one-resource group, or no definition)."""
    return [] if snapshot.resource is None else [r.name for r in snapshot.resource.resources]


def _title(group_name: str, snapshot: GroupStatus) -> str:
    replicas = snapshot.replicas
    about = f"replicas {replicas}" if replicas else f"round {snapshot.round}"
    if snapshot.resource is not None and snapshot.resource.resources:  # named resources: what each consumes
        about += " — " + ", ".join(f"{r.name} ({r.partitions})" for r in snapshot.resource.resources)
    if snapshot.waiting is not None:  # coordinator mode: below the minimum cluster size, or before the first table
        about += " — " + snapshot.waiting.reason
    return f"group {group_name} — {about}"


def _partition_rows(
    snapshot: GroupStatus, partitions: dict[str, PartitionStatus], *, state: bool = False
) -> tuple[list[str], list[list[str]]]:
    """The columns and rows of a partitions table (the offset and replica columns only when some partition has
    them; ``state``: why each is not at rest)."""
    offsets = {p: checkpoint_offset(info.checkpoint) for p, info in partitions.items()}
    show_offsets = any(o is not None for o in offsets.values())
    show_replicas = any(info.standby or info.learners for info in partitions.values())
    show_tags = any(info.tags for info in partitions.values())  # high_availability: seed 2's task tags
    columns = ["partition", "owner", "epoch", "checkpoint", *(["offset"] if show_offsets else [])]
    columns += ["standby (lag)", "learners (lag)"] if show_replicas else []
    columns += ["tags"] if show_tags else []
    columns += ["not at rest"] if state else []
    rows = []
    table = snapshot.table
    for p, info in partitions.items():
        owner = f"{info.owner} (lapsing)" if info.lapsing else info.owner or "-"
        if info.waiting_for is not None:
            owner = f"waiting for ordinal {info.waiting_for}"
        row = [p, owner, str(info.epoch or "-"), info.checkpoint or "-"]
        if show_offsets:
            offset = offsets[p]
            row.append("-" if offset is None else str(offset))
        if show_replicas:
            row += [_holders(info.standby), _holders(info.learners)]
        if show_tags:
            row.append(tags_text(info.tags) or "-")
        if state:
            row.append(", ".join(not_at_rest(info, table.get(p))))
        rows.append(row)
    return columns, rows


def _plain_listing(snapshot: GroupStatus) -> Text:
    """Every partition, one plain line each with the columns aligned (``--all`` on a large group), with the
    partition table's target and state in coordinator mode."""
    columns, rows = _partition_rows(snapshot, snapshot.partitions)
    table = snapshot.table
    if table:
        columns += ["target", "state"]
        for row in rows:
            entry = table.get(row[0])
            row += ["-", "-"] if entry is None else [entry.target or "-", entry.state.value]
    widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(columns)]
    last = len(columns) - 1
    lines = [
        "  ".join(cell if i == last else cell.ljust(widths[i]) for i, cell in enumerate(row))
        for row in [columns, ["-" * w for w in widths], *rows]
    ]
    return Text("partitions\n" + "\n".join(lines))


def _failed(snapshot: GroupStatus, *, counts: bool) -> list[RenderableType]:
    if not snapshot.failed:
        return []
    failed = Table(title=f"failed members (lease ended without leaving; kept {FAILED_RETENTION_S / 3600:g} h)")
    for column in ("member", "failed at", "owned then", "seen by"):
        failed.add_column(column)
    for mid, info in snapshot.failed.items():
        parts = info.partitions
        owned = f"{len(parts):,} partitions" if counts else " ".join(map(str, parts)) or "-"
        failed.add_row(mid, _when(info.failed_at), owned, str(info.detected_by or "-"))
    return [failed]


def _summary(group_name: str, snapshot: GroupStatus) -> RenderableType:
    """Counts instead of lists (a group above ``SUMMARY_ABOVE`` partitions, without ``--all``)."""
    partitions = snapshot.partitions
    resources = _resources(snapshot)
    table = snapshot.table
    unrest = {p: why for p, info in partitions.items() if (why := not_at_rest(info, table.get(p)))}
    per_member: dict[str, dict[str, int]] = {}  # member -> resource -> count
    if resources:
        for mid, info in snapshot.members.items():
            counted = per_member.setdefault(mid, {})
            for p in info.partitions:
                name = resource_of(p) or p
                counted[name] = counted.get(name, 0) + 1
    members = Table(title=_title(group_name, snapshot))
    subscribing = any(info.subscriptions is not None for info in snapshot.members.values())
    lapsing = any(info.lapsing for info in snapshot.members.values())
    columns = ["member", "alive", *(["subscriptions"] if subscribing else []), "partitions"]
    columns += resources if len(resources) <= 6 else ["by resource"] if resources else []
    columns += ["lapsing"] if lapsing else []
    for column in columns:
        members.add_column(column, justify="right" if column in ("partitions", "lapsing", *resources) else "left")
    for mid, info in snapshot.members.items():
        row = [mid, "yes" if info.alive else "no"]
        row += [_subscriptions(info)] if subscribing else []
        row.append(f"{len(info.partitions):,}")
        counted = per_member.get(mid, {})
        if resources and len(resources) <= 6:
            row += [f"{counted.get(r, 0):,}" for r in resources]
        elif resources:
            row.append(" ".join(f"{r} {n:,}" for r, n in sorted(counted.items())) or "-")
        row += [f"{len(info.lapsing):,}"] if lapsing else []
        members.add_row(*row)
    tables: list[RenderableType] = [members]
    if resources:
        by_resource = Table(title="resources")
        for column in ("resource", "partitions", "owned", "unowned", "not at rest"):
            by_resource.add_column(column, justify="left" if column == "resource" else "right")
        stats = {r: [0, 0, 0, 0] for r in resources}
        for p, part in partitions.items():
            row_stats = stats.setdefault(resource_of(p) or p, [0, 0, 0, 0])
            row_stats[0] += 1
            row_stats[1 if part.owner is not None and not part.lapsing else 2] += 1
            row_stats[3] += p in unrest
        for r, (n, owned, unowned, restless) in stats.items():
            by_resource.add_row(r, f"{n:,}", f"{owned:,}", f"{unowned:,}", f"{restless:,}")
        tables.append(by_resource)
    tables.append(Text(_counts(snapshot, unrest)))
    if unrest:
        shown = dict(list(unrest.items())[:SUMMARY_ROWS])
        parts = Table(title=f"partitions not at rest: the first {len(shown):,} of {len(unrest):,}")
        columns, rows = _partition_rows(snapshot, {p: partitions[p] for p in shown}, state=True)
        for column in columns:
            parts.add_column(column)
        for row in rows:
            parts.add_row(*row)
        tables.append(parts)
        if len(unrest) > len(shown):
            tables.append(
                Text(f"… and {len(unrest) - len(shown):,} more: apportion status --all lists every partition")
            )
    return Group(*tables, *_failed(snapshot, counts=True))


def _counts(snapshot: GroupStatus, unrest: dict[str, list[str]]) -> str:
    """One line: the partitions by state (and the partition table's entries by state, in coordinator mode)."""
    owned = lapsing = waiting = moving = learning = 0
    for info in snapshot.partitions.values():  # one pass: 100,000 of them
        if info.lapsing:
            lapsing += 1
        elif info.owner is not None:
            owned += 1
        waiting += info.waiting_for is not None
        moving += bool(info.moving_to)
        learning += bool(info.learners)
    unowned = len(snapshot.partitions) - owned - lapsing
    parts = [
        f"{owned:,} owned",
        f"{unowned:,} unowned" + (f" ({waiting:,} waiting for their ordinal)" if waiting else ""),
    ]
    parts += [f"{lapsing:,} lapsing", f"{moving:,} moving"] + (
        [f"{learning:,} with learners warming up"] if learning else []
    )
    line = f"partitions: {len(snapshot.partitions):,} — " + ", ".join(parts) + f"; {len(unrest):,} not at rest"
    line += " (a summary: --all lists every partition)"
    if snapshot.table:
        states = Counter(entry.state.value for entry in snapshot.table.values())
        line += f"\npartition table (coordinator {snapshot.coordinator_id or '-'}): " + ", ".join(
            f"{n:,} {state}" for state, n in sorted(states.items())
        )
    return line
