"""`apportion assign` — the dry run of any strategy: a JSON request in (stdin or --input), the plan out.

The plain command line (JSON out) runs without click: ``apportion.cli._assign_io``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from apportion.assign import gc_paused
from apportion.cli._app import app
from apportion.cli._assign_io import planned, write_json
from apportion.model import Partition, Plan

if TYPE_CHECKING:
    from rich.table import Table


def compact(parts: Sequence[Partition]) -> str:
    """``t1-0..3, t2-5`` for humans: runs of consecutive indices shown as ranges."""
    out: list[str] = []
    run: list[Partition] = []
    for part in (*parts, None):
        if part is not None and run and part.resource == run[-1].resource and part.index == run[-1].index + 1:
            run.append(part)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}..{run[-1].index}")
        run = [part] if part is not None else []
    return ", ".join(out)


def render_table(result: Plan) -> Table:
    from rich.table import Table  # only for --format table: the JSON path does not load rich

    moved_in: dict[str, int] = {}
    moved_out: dict[str, int] = {}
    for mv in result.moves:
        if mv.source is not None:
            moved_in[mv.target] = moved_in.get(mv.target, 0) + 1
            moved_out[mv.source] = moved_out.get(mv.source, 0) + 1
    s = result.stats
    table = Table(
        title=f"{result.strategy}: {s.partitions} partitions, {s.members} members",
        caption=f"load {s.min}..{s.max}, moved {s.moved} (lower bound {s.min_moves})",
    )
    for column in ("member", "load", "in", "out", "partitions"):
        table.add_column(column, justify="right" if column in ("load", "in", "out") else "left")
    for member, parts in sorted(result.assignment.items()):
        table.add_row(
            member, str(len(parts)), str(moved_in.get(member, 0)), str(moved_out.get(member, 0)), compact(parts)
        )
    return table


@app.command()
@click.option("--input", "input_path", type=click.Path(dir_okay=False), help="Request file (default: stdin).")
@click.option("--format", "fmt", type=click.Choice(["json", "table"]), default="json", help="Output format.")
def assign(input_path: str | None, fmt: str) -> None:
    """Plan an assignment from a JSON request (a dry run of any strategy); print the plan."""
    with gc_paused():  # the cyclic GC would rescan the millions of acyclic tuples of a big request again and again
        _assign(input_path, fmt)  # which frees them (by reference counts) before the GC runs again


def _assign(input_path: str | None, fmt: str) -> None:
    result = planned(input_path)
    if fmt == "table":
        from rich.console import Console

        Console().print(render_table(result))
        return
    write_json(result)
