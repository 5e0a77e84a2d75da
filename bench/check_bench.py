"""What ``assign.check`` costs beside the plan it checks: a rounds closer runs both on every plan it writes.

Sticky, one join after a balanced plan, equal subscriptions (one resource) and mixed ones (three resources, every
third member subscribed to one of them only); plan and check alternate, medians of ``--runs``.

    .venv/bin/python bench/check_bench.py [--partitions 100000] [--members 1000] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from apportion.assign import check, plan
from apportion.model import AssignRequest, Member, Resource


def request(partitions: int, members: int, mixed: bool) -> AssignRequest:
    if mixed:
        third = partitions // 3
        resources = (Resource("a", third), Resource("b", third), Resource("c", partitions - 2 * third))
    else:
        resources = (Resource("a", partitions),)
    names = [r.name for r in resources]

    def subs(i: int) -> frozenset[str] | None:
        return frozenset({names[i % 3]}) if mixed and i % 3 == 0 else None

    base = tuple(Member(f"m{i:05d}", subscriptions=subs(i)) for i in range(members))
    first = plan(AssignRequest("sticky", resources, base))
    joined = tuple(
        Member(m.id, subscriptions=m.subscriptions, owned=first.assignment[m.id], generation=1) for m in base
    )
    return AssignRequest("sticky", resources, (*joined, Member("new")))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--members", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"command: .venv/bin/python bench/check_bench.py; load {os.getloadavg()[0]:.1f}")
    print("| subscriptions | size (P x N) | plan | check | check / plan |")
    print("|---|---|---:|---:|---:|")
    for mixed in (False, True):
        req = request(args.partitions, args.members, mixed)
        plans, checks = [], []
        for _ in range(args.runs):
            t = time.perf_counter()
            p = plan(req)
            plans.append(time.perf_counter() - t)
            t = time.perf_counter()
            violations = check(req, p)
            checks.append(time.perf_counter() - t)
            assert not violations, violations[:3]
        tp, tc = statistics.median(plans), statistics.median(checks)
        size = f"{args.partitions:,} x {args.members:,}"
        kind = "mixed (3 resources)" if mixed else "equal (1 resource)"
        print(f"| {kind} | {size} | {tp * 1000:.0f} ms | {tc * 1000:.0f} ms | {tc / tp:.2f}x |")


if __name__ == "__main__":
    main()
