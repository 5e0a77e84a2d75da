"""high_availability before/after issue 18's stale-claim rule, on one request: 20,000 stateful partitions over 190
owners (every 7th a generation behind: it missed a plan) and 10 new members, 50 standbys per owner with random lags.

Usage: ``git show <base>:src/apportion/assign/_high_availability.py > /tmp/ha_base.py`` then
``.venv/bin/python bench/ha_stale_claims_bench.py /tmp/ha_base.py``: 5 alternating runs of each, medians and ratio.
The work differs by design: the baseline ignores the stale owners' claims and places their partitions as orphans.
"""

from __future__ import annotations

import importlib.util
import random
import statistics
import sys
import time
from collections.abc import Callable
from types import ModuleType

from apportion.model import AssignRequest, Member, Partition, Plan, Resource


def load(path: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def request(n: int = 20_000, m: int = 200) -> AssignRequest:
    rnd = random.Random(1)
    owned: dict[str, list[Partition]] = {f"m{i:03d}": [] for i in range(m - 10)}
    for p in range(n):
        owned[f"m{rnd.randrange(m - 10):03d}"].append(Partition("s", p))
    members = []
    for i, (mid, ps) in enumerate(owned.items()):
        mine = set(ps)
        standby = tuple(dict.fromkeys(x for x in (Partition("s", (q.index + 1) % n) for q in ps[:50]) if x not in mine))
        lag = {x: rnd.randrange(20_000) for x in standby}
        members.append(Member(mid, owned=tuple(ps), generation=5 if i % 7 else 4, standby=standby, lag=lag))
    members += [Member(f"n{i}") for i in range(10)]
    options = {"num_standby_replicas": 1, "max_warmup_replicas": 2}
    return AssignRequest("high_availability", (Resource("s", n, stateful=True),), tuple(members), options)


def main() -> None:
    base = load(sys.argv[1], "ha_base").high_availability
    new = load("src/apportion/assign/_high_availability.py", "ha_new").high_availability
    req = request()
    runs: dict[str, list[float]] = {"base": [], "new": []}
    plans: list[tuple[str, Callable[[AssignRequest], Plan]]] = [("base", base), ("new", new)]
    for _ in range(5):
        for name, plan in plans:
            t = time.perf_counter()
            plan(req)
            runs[name].append(time.perf_counter() - t)
    b, n = statistics.median(runs["base"]), statistics.median(runs["new"])
    print(f"median base {b:.3f}s new {n:.3f}s ratio new/base {n / b:.2f}")


if __name__ == "__main__":
    main()
