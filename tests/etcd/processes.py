"""``apportion worker`` as a real process for the etcd tests: its JSON events (stdout), its log (stderr) in a file."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from apportion import events


class WorkerProcess:
    """``apportion worker`` in its own process: JSON events from stdout, the log (stderr) in a file."""

    def __init__(self, url: str, log: Path, *args: str) -> None:
        self.log = log
        self.events: list[dict[str, Any]] = []
        self.started = time.monotonic()
        with log.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "apportion.cli", "worker", "--store", url, "--group", "g", "--id", "w1",
                 "--partitions", "4", *args],
                stdout=subprocess.PIPE, stderr=err, text=True,
            )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = events.parse(line)
            if event is not None:
                self.events.append(event)

    def text(self) -> str:
        return self.log.read_text()

    def owns_everything(self) -> bool:
        owned: set[int] = set()
        for event in list(self.events):
            if event["event"] == "assigned":
                owned |= set(event["partitions"])
            elif event["event"] in ("revoked", "lost"):
                owned -= set(event["partitions"])
        return owned == {0, 1, 2, 3}

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)
