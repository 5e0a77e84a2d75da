"""`apportion demo-strategies`: the strategies alone (no store): scripted churn, sticky and weighted, a table a step."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from apportion.assign import check_or_raise, plan
from apportion.cli._app import app
from apportion.model import AssignRequest, Member, Plan, Resource

PARTITIONS = 3000
# (step, member -> capacity) — members join, leave and change capacity
SCRIPT: list[tuple[str, dict[str, float]]] = [
    ("start: 3 workers", {"w1": 1, "w2": 1, "w3": 1}),
    ("w4 joins", {"w1": 1, "w2": 1, "w3": 1, "w4": 1}),
    ("w5 joins with capacity 2", {"w1": 1, "w2": 1, "w3": 1, "w4": 1, "w5": 2}),
    ("w2 leaves", {"w1": 1, "w3": 1, "w4": 1, "w5": 2}),
    ("w1 doubles its capacity", {"w1": 2, "w3": 1, "w4": 1, "w5": 2}),
    ("w6, w7 join; w3 leaves", {"w1": 2, "w4": 1, "w5": 2, "w6": 1, "w7": 1}),
]


def _step(strategy: str, members: dict[str, float], previous: Plan | None, round_no: int) -> tuple[Plan, Table]:
    owned = previous.assignment if previous is not None else {}
    request = AssignRequest(
        strategy,
        (Resource("orders", PARTITIONS),),
        tuple(Member(m, owned=owned.get(m, ()), generation=round_no, capacity=c) for m, c in members.items()),
        {"tolerance": 0.05} if strategy == "weighted" else {},
    )
    result = plan(request)
    check_or_raise(request, result)
    return result, _table(result, members)


def _table(result: Plan, members: dict[str, float]) -> Table:
    gained: dict[str, int] = {}
    for mv in result.moves:
        if mv.source is not None:
            gained[mv.target] = gained.get(mv.target, 0) + 1
    table = Table(caption=f"moved {result.stats.moved} (lower bound {result.stats.min_moves})")
    for column in ("member", "capacity", "load", "moved in"):
        table.add_column(column, justify="left" if column == "member" else "right")
    for member, parts in sorted(result.assignment.items()):
        table.add_row(member, f"{members[member]:g}", str(len(parts)), str(gained.get(member, 0)))
    return table


@app.command("demo-strategies")
def demo_strategies() -> None:
    """The strategies alone: scripted churn on 3000 partitions with sticky and weighted (no store, no processes)."""
    console = Console()
    for strategy in ("sticky", "weighted"):
        previous: Plan | None = None
        for round_no, (title, members) in enumerate(SCRIPT, start=1):
            previous, table = _step(strategy, members, previous, round_no)
            table.title = f"{strategy} — round {round_no}: {title}"
            console.print(table)
    click.echo("every plan passed apportion.assign.check")
