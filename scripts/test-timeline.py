"""How `make test`'s xdist workers spent a run: each worker's work units (an xdist group, or a test module's run of
ungrouped tests) in order, with their start, length and the CPU seconds the worker's process and the children it
reaped used meanwhile (not the JVMs and servers of session fixtures), and when each worker finished (the idle tail).

usage: APPORTION_TEST_TIMELINE=/tmp/tl make test   (or the pytest line of the Makefile), then
       python scripts/test-timeline.py /tmp/tl
"""

from __future__ import annotations

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
    cpu_start: float = 0.0
    cpu_end: float = 0.0


def units_of(lines: list[list[str]], t0: float) -> list[Unit]:
    units: list[Unit] = []
    for stamp, what, nodeid, *rest in lines:
        name, t = unit_of(nodeid.strip()), float(stamp) - t0
        cpu = float(rest[0]) if rest else 0.0
        if what == "start":
            if not units or units[-1].name != name:
                units.append(Unit(name, t, t, cpu_start=cpu, cpu_end=cpu))
            units[-1].tests += 1
        elif units:
            units[-1].end, units[-1].cpu_end = t, cpu
    return units


def main(directory: Path) -> None:
    files = sorted(directory.glob("*.tsv"))
    if not files:
        raise SystemExit(f"no timeline in {directory} (run the tests with APPORTION_TEST_TIMELINE={directory})")
    rows = {
        f.stem: [line.split("\t") for line in f.read_text().splitlines() if line.count("\t") in (2, 3)] for f in files
    }
    t0 = min(float(r[0]) for lines in rows.values() for r in lines)
    for worker, lines in rows.items():
        units = units_of(lines, t0)
        print(f"{worker}: finished at {max(u.end for u in units):.0f} s; units of 10 s or more:")
        for u in units:
            if u.end - u.start >= 10:
                cpu = u.cpu_end - u.cpu_start
                print(f"  {u.start:7.0f} s  {u.end - u.start:6.0f} s  {cpu:6.0f} CPU-s  {u.tests:4} tests  {u.name}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
