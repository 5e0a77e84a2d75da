"""The store's own account of a group for ``tests/nemesis/checker.py``: every change under the group's prefix, to its
ownership records and to its commit records since revision 1, as ``store.jsonl`` lines (revision, put/delete, key,
value, lease). Keys are relative to the group's prefix (``owner/3``; a layout-2 group's owner and epoch records,
which live beside it under ``.own/<group>/``, named the same way), commit records relative to ``/apportion/``
(``.commit/<group>/3``); the history's events are left out. Any store whose watch replays from revision 1 (etcd
before a compaction, SQLite within its ``history``): the multi-host nemesis and the rolling-upgrade tests."""

from __future__ import annotations

import json
import time
from pathlib import Path

from apportion.store import connect


def dump_store_history(store_url: str, group: str, path: Path, *, idle_s: float = 5.0) -> Path:
    """Write the history to ``path`` (one watch of ``/apportion/``: one stream in revision order) and return it."""
    root, prefix = "/apportion/", f"/apportion/{group}/"
    commits, own = f"{root}.commit/{group}/", f"{root}.own/{group}/"
    with connect(store_url) as store, store.watch(root, start_revision=1) as watch, path.open("w") as out:
        last = store.revision()  # the watch may end below it: the last writes may lie outside the prefix
        seen, idle_since = 0, time.monotonic()
        while seen < last and time.monotonic() - idle_since < idle_s:
            events = watch.wait(1.0)
            if events:
                idle_since = time.monotonic()
            for event in events:
                seen = max(seen, event.revision)
                key = event.kv.key
                if key.startswith(prefix):
                    key = key[len(prefix) :]
                elif key.startswith(own):
                    key = key[len(own) :]
                elif key.startswith(commits):
                    key = key[len(root) :]
                else:
                    continue
                record = {
                    "revision": event.revision, "type": event.type.value, "key": key,
                    "value": event.kv.value.decode(errors="replace"), "lease": event.kv.lease,
                }  # fmt: skip
                out.write(json.dumps(record) + "\n")
    return path
