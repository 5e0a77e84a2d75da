"""The test consumers' handlers (``--handler tests.kafka.handler:record``): one ``processed`` event line per record,
with its key and sequence number, when its handling began (``start``, wall clock) and the system-wide monotonic
clock when it ended (``mono``, in ns: comparable across the processes of one machine), after
``APPORTION_TEST_HANDLE_S`` seconds of "work". ``fail`` raises on a record whose JSON has ``"fail": true``."""

from __future__ import annotations

import json
import os
import time

from apportion import events

_WORK_S = float(os.environ.get("APPORTION_TEST_HANDLE_S", "0"))


def record(partition: str, key: bytes | None, value: bytes | None) -> None:
    start = time.time()
    message = json.loads(value or b"{}")
    if _WORK_S:
        time.sleep(_WORK_S)
    events.emit(
        "processed", partition=partition, key=message["key"], seq=message["seq"], start=start, mono=time.monotonic_ns()
    )


def fail(partition: str, key: bytes | None, value: bytes | None) -> None:
    message = json.loads(value or b"{}")
    if message.get("fail"):
        raise ValueError(f"cannot handle {message['key']}/{message['seq']}\nsecond line of the reason")
    record(partition, key, value)
