"""A skewed, drifting wall clock for one `apportion worker` process of the nemesis (put this directory on its
PYTHONPATH and set APPORTION_TEST_CLOCK="<offset s> x<rate>", e.g. "-20 x0.9": 20 s behind, running 10 % slow).

``time.time`` — the clock apportion's ``SystemClock`` and its lease deadlines use, and the clock of its event stamps
— becomes ``start + offset + rate * (real - start)``; the monotonic clock and sleeps stay real. Debian's libfaketime
does the same to the whole process but breaks Python there: with a rate, ``time.sleep`` fails with EINVAL (CPython
3.11 sleeps with an absolute clock_nanosleep) and, with the monotonic clock faked too, ``threading.Event.wait`` hangs.
"""

from __future__ import annotations

import os
import time

_spec = os.environ.get("APPORTION_TEST_CLOCK")
if _spec:
    _offset_text, _rate_text = _spec.split()
    _offset, _rate = float(_offset_text), float(_rate_text.lstrip("x"))
    _real = time.time
    _start = _real()

    def _skewed() -> float:
        return _start + _offset + _rate * (_real() - _start)

    time.time = _skewed
