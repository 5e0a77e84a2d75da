"""What a test sees of the processes it starts, from /proc: a process's descendants, whether a pid still runs, and
the end of a server's log."""

from __future__ import annotations

from pathlib import Path


def descendants(pid: int) -> list[tuple[int, str]]:
    """``(pid, command name)`` of every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
            children.setdefault(int(rest[1]), []).append(int(entry.name))
            names[int(entry.name)] = name
    found, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        found.append((p, names.get(p, "?")))
        todo.extend(children.get(p, []))
    return found


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (exited, waiting for its parent to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def file_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a server's log file, or ``(no log)``."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
