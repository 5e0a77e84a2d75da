"""How `make test`'s xdist workers spent a run: each worker's work units (an xdist group, or a test module's run of
ungrouped tests) in order, with their start and length, and when each worker finished (the idle tail).

usage: APPORTION_TEST_TIMELINE=/tmp/tl make test   (or the pytest line of the Makefile), then
       python scripts/test-timeline.py /tmp/tl [--costs tests/unit-costs.json]

--costs writes each unit's seconds in that run (its tests' setup, call and teardown, summed) to the file that
tests/conftest.py orders the units by, longest first: refresh it after a run on a quiet machine when units change.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path


def unit_of(nodeid: str) -> str:
    if "@" in nodeid and nodeid.rfind("@") > nodeid.rfind("]"):
        return "@" + nodeid.rsplit("@", 1)[1]
    return nodeid.split("::", 1)[0]


@dataclass
class Unit:
    name: str
    start: float
    end: float
    tests: int = 0


def units_of(lines: list[list[str]], t0: float) -> list[Unit]:
    units: list[Unit] = []
    for stamp, what, nodeid in lines:
        name, t = unit_of(nodeid.strip()), float(stamp) - t0
        if what == "start":
            if not units or units[-1].name != name:
                units.append(Unit(name, t, t))
            units[-1].tests += 1
        elif units:
            units[-1].end = t
    return units


def unit_costs(rows: dict[str, list[list[str]]]) -> dict[str, float]:
    """Each unit's seconds: its tests' start-to-end times summed, over the xdist workers' files."""
    costs: dict[str, float] = {}
    for worker, lines in rows.items():
        if not worker.startswith("gw"):  # the controller's file repeats the workers' tests
            continue
        started: dict[str, float] = {}
        for stamp, what, nodeid in lines:
            nodeid = nodeid.strip()
            if what == "start":
                started[nodeid] = float(stamp)
            elif nodeid in started:
                unit = unit_of(nodeid)
                costs[unit] = costs.get(unit, 0.0) + float(stamp) - started.pop(nodeid)
    return {unit: round(seconds, 1) for unit, seconds in sorted(costs.items())}


def main(directory: Path, costs_file: Path | None = None) -> None:
    files = sorted(directory.glob("*.tsv"))
    if not files:
        raise SystemExit(f"no timeline in {directory} (run the tests with APPORTION_TEST_TIMELINE={directory})")
    rows = {f.stem: [line.split("\t") for line in f.read_text().splitlines() if line.count("\t") == 2] for f in files}
    t0 = min(float(r[0]) for lines in rows.values() for r in lines)
    for worker, lines in rows.items():
        units = units_of(lines, t0)
        print(f"{worker}: finished at {max(u.end for u in units):.0f} s; units of 10 s or more:")
        for u in units:
            if u.end - u.start >= 10:
                print(f"  {u.start:7.0f} s  {u.end - u.start:6.0f} s  {u.tests:4} tests  {u.name}")
    if costs_file is not None:
        costs = unit_costs(rows)
        costs_file.write_text(json.dumps(costs, indent=1) + "\n")
        print(f"wrote {len(costs)} units' seconds ({sum(costs.values()):.0f} s in all) to {costs_file}")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    costs_at = arguments.index("--costs") if "--costs" in arguments else None
    costs_path = None if costs_at is None else Path(arguments.pop(costs_at + 1))
    if costs_at is not None:
        arguments.pop(costs_at)
    main(Path(arguments[0] if arguments else "."), costs_path)
