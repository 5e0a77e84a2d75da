"""Worker event lines: the one JSON-line format of `apportion worker` and `apportion pipeline run`, written and read.

One event per line, one JSON object whose first key is its kind and whose second is its wall-clock time (Unix
seconds, to the millisecond), then the event's own fields::

    {"event": "assigned", "time": 1718000000.123, "partitions": [0, 3]}

``line`` formats one (what `apportion pipeline run` logs on stderr); ``emit`` writes one whole line to stdout (what
`apportion worker` prints); ``parse`` reads one back, None for any other line of a log (Spark's, a traceback);
``head`` is how every line of one kind begins (a reader that only counts a kind need not parse its lines).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

_LOCK = threading.Lock()


def line(event: str, **fields: Any) -> str:
    """One event as its JSON line, without the newline (fields JSON cannot encode are written as ``str``)."""
    return json.dumps({"event": event, "time": round(time.time(), 3), **fields}, default=str)


def emit(event: str, **fields: Any) -> None:
    """Write one whole event line to stdout and flush: callbacks and committers emit from different threads, and
    ``print`` writes the text and its newline apart, so unguarded lines could interleave and be lost to a reader."""
    text = line(event, **fields) + "\n"
    with _LOCK:
        sys.stdout.write(text)
        sys.stdout.flush()


def head(event: str) -> bytes:
    """The bytes every line of an ``event`` begins with (its kind is the first key), up to and including the comma."""
    return json.dumps({"event": event})[:-1].encode() + b","


def parse(text: str | bytes) -> dict[str, Any] | None:
    """The event on ``text`` (one line), or None when it is not an event line."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get("event"), str):
        return value
    return None


__all__ = ["emit", "head", "line", "parse"]
