"""Time sources: the real clock and a virtual clock for deterministic simulation.

Code that needs time takes a :class:`Clock`; tests and the simulator pass a :class:`VirtualClock` and advance it,
so nothing waits on ``time.sleep`` to synchronise. A reading is shown to people by :func:`clock_text` only: a
wall-clock one as local time, a virtual clock's as seconds (the two are told apart by :data:`WALL_CLOCK`).
"""

from __future__ import annotations

import datetime
import threading
import time
from typing import Protocol


class Clock(Protocol):
    """A source of seconds. ``now`` is comparable across all users of the same clock."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Wall-clock seconds since the epoch (shared by all processes of a machine)."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class VirtualClock:
    """A clock that moves only when told to; ``sleep`` advances it (single-threaded simulation)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go backwards by advance(); use set() to model a jump")
        with self._lock:
            self._now += seconds

    def set(self, value: float) -> None:
        """Jump to ``value`` (models a clock jump, forwards or backwards)."""
        with self._lock:
            self._now = value

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)


SYSTEM_CLOCK = SystemClock()

WALL_CLOCK = 1e9
"""A reading at or above this is a Unix time (2001 on); below, a virtual clock's seconds."""


def clock_text(t: float, *, date: bool = False, ms: bool = False, virtual: str = "") -> str:
    """A clock reading for people: a wall-clock one as local time, ``16:30:02`` (``date``: ``2026-11-25 16:30:02``;
    ``ms``: ``16:30:02.125``), a virtual clock's as seconds, ``12.500`` behind ``virtual`` (``t = ``)."""
    if t < WALL_CLOCK:
        return f"{virtual}{t:.3f}"
    stamp = datetime.datetime.fromtimestamp(t)
    text = stamp.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")
    return f"{text}.{stamp.microsecond // 1000:03d}" if ms else text


__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "VirtualClock"]
