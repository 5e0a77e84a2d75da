"""The test consumers' handler (``--handler tests.rabbitmq.handler:record``): one ``processed`` event line per
message, with its key and sequence number and the system-wide monotonic clock (``mono``, in ns: comparable across
the processes of one machine), after ``APPORTION_TEST_HANDLE_S`` seconds of "work"."""

from __future__ import annotations

import json
import os
import time

from apportion import events

_WORK_S = float(os.environ.get("APPORTION_TEST_HANDLE_S", "0"))


def record(partition: int | str, body: bytes) -> None:
    message = json.loads(body)
    if _WORK_S:
        time.sleep(_WORK_S)
    events.emit("processed", partition=partition, key=message["key"], seq=message["seq"], mono=time.monotonic_ns())
