"""Polling a condition until it holds, with a time limit: the one wait of the harnesses, benches and tests.

Real processes (workers, Spark sessions) give nothing to wait on but their state, so their callers poll: ``wait_for``
calls ``condition()`` every ``poll_s`` until it is true and returns the seconds that took, or raises ``TimedOut``
naming ``what`` it waited for. Two options make a long wait both patient and quick to fail:

- ``progress``: a value that changes while work moves on (records committed, event lines written); the limit then
  counts from its last change, so a wait fails only after ``timeout_s`` *without progress*;
- ``alive``: called before each poll, raises when the wait can no longer succeed (``Fleet.check``'s
  ``WorkerExited``: a worker it needs has exited); the error then says what was being waited for.

    took = wait_for("w3 to own every partition", lambda: owners(store, "g").keys() ..., 30)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from apportion.errors import TimedOut, WorkerExited


def wait_for(
    what: str,
    condition: Callable[[], object],
    timeout_s: float,
    *,
    poll_s: float = 0.05,
    progress: Callable[[], object] | None = None,
    alive: Callable[[], None] | None = None,
    context: Callable[[], str] | None = None,
) -> float:
    """Poll ``condition`` until it is true; return the seconds it took.

    Raises ``TimedOut`` after ``timeout_s`` (counted from the last change of ``progress()`` when given), with
    ``context()`` appended on its own lines (a timeline, a log tail); a ``WorkerExited`` raised by ``alive()`` is
    raised again at once, prefixed with what was being waited for."""
    start = since = time.monotonic()
    seen = progress() if progress is not None else None
    while True:
        if alive is not None:
            try:
                alive()
            except WorkerExited as exc:
                raise WorkerExited(f"while waiting for {what}: {exc}") from None
        if condition():
            return time.monotonic() - start
        now = time.monotonic()
        if progress is not None:
            current = progress()
            if current != seen:
                seen, since = current, now
        if now - since > timeout_s:
            quiet = " without progress" if progress is not None else ""
            detail = f"\n{context()}" if context is not None else ""
            raise TimedOut(f"timed out after {now - start:.1f} s ({timeout_s:g} s{quiet}) waiting for {what}{detail}")
        time.sleep(poll_s)


__all__ = ["wait_for"]
