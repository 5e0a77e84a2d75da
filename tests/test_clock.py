"""Clock readings for people: one formatter (``clock_text``) for the worker's log lines, ``status`` and the report."""

from __future__ import annotations

import datetime

from apportion.clock import clock_text


def test_a_wall_clock_reading_is_local_time_with_the_date_or_milliseconds_asked_for() -> None:
    t = 1_764_084_602.125  # 2025-11-25, wherever the test runs
    local = datetime.datetime.fromtimestamp(t)
    assert clock_text(t) == local.strftime("%H:%M:%S")
    assert clock_text(t, date=True) == local.isoformat(sep=" ", timespec="seconds")
    assert clock_text(t, ms=True) == local.strftime("%H:%M:%S.%f")[:-3]
    assert clock_text(t, virtual="t = ") == local.strftime("%H:%M:%S")


def test_a_virtual_clock_reading_is_seconds_behind_its_prefix() -> None:
    assert clock_text(12.5) == "12.500" and clock_text(12.5, date=True, ms=True) == "12.500"
    assert clock_text(200.0, virtual="t = ") == "t = 200.000"
