"""`apportion assign` — the dry run of any strategy: a JSON request in (stdin or --input), the plan out."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from apportion.assign import dumps_plan, gc_paused, loads_request, plan
from apportion.cli._app import app, keep_until_exit
from apportion.errors import InvalidRequest
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


def _read_request(input_path: str | None) -> str | bytes:
    """The request: the bytes of ``--input`` or stdin when they are ASCII (``loads_request`` reads them without a
    decode), else their UTF-8 text; anything else (binary, UTF-16, no stdin) is InvalidRequest."""
    where = "stdin" if input_path is None else input_path
    try:
        if input_path is not None:
            with open(input_path, "rb") as file:  # not pathlib: its import is ~3 % of the command at a million
                data = file.read()
        elif sys.stdin is None:
            raise InvalidRequest("input", "stdin is closed: pipe the request in or give --input FILE")
        elif hasattr(sys.stdin, "buffer"):
            data = sys.stdin.buffer.read()
        else:
            return sys.stdin.read()
        return data if data.isascii() else data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest("input", f"{where} is not UTF-8 text (byte {exc.start}): a JSON request is") from exc
    except OSError as exc:
        raise InvalidRequest("input", f"cannot read {where}: {exc.strerror or exc}") from exc


@app.command()
@click.option("--input", "input_path", type=click.Path(dir_okay=False), help="Request file (default: stdin).")
@click.option("--format", "fmt", type=click.Choice(["json", "table"]), default="json", help="Output format.")
def assign(input_path: str | None, fmt: str) -> None:
    """Plan an assignment from a JSON request (a dry run of any strategy); print the plan."""
    with gc_paused():  # the cyclic GC would rescan the millions of acyclic tuples of a big request again and again
        _assign(input_path, fmt)  # which frees them (by reference counts) before the GC runs again


def _assign(input_path: str | None, fmt: str) -> None:
    request = loads_request(_read_request(input_path))
    result = plan(request)
    keep_until_exit(request, result)  # not freed one by one when this is the whole process
    if fmt == "table":
        from rich.console import Console

        Console().print(render_table(result))
        return
    out = dumps_plan(result)
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is not None:
        buffer.write(out)
        buffer.write(b"\n")  # apart: adding it to `out` would copy the whole plan (11 MB at a million)
    else:  # a text-only stdout (tests capture it so)
        sys.stdout.write(out.decode() + "\n")
