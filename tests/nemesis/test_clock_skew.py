"""A worker with a skewed and drifting clock (its wall clock, the one its lease deadlines use, faked by
tests/nemesis/skewed_clock: Debian's libfaketime breaks Python's sleeps), isolated from etcd for two ttl's
while it keeps running (once in make test, three times in make soak).

README, "Guarantees and their limits": at most one member believes it owns a partition as long as clocks drift by less
than 20 % of the lease ttl over one ttl; commits are fenced at the store regardless of clocks. Inside the bound (10 %
slow, 20 s behind) the checker finds nothing at all; outside it (50 % slow, 20 s ahead) the skewed worker's belief
outlives its lease and overlaps the new owner's — and that is all: no commit breaks the fence, the order or
durability, and the skewed worker's stale commits are fenced at the store.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.nemesis.checker import check_directory
from tests.nemesis.cluster import PARTITIONS, Deployment
from tests.nemesis.nemesis import wait_recovered

SOAK = os.environ.get("APPORTION_SOAK") == "1"
pytestmark = [pytest.mark.etcd, pytest.mark.slow, pytest.mark.xdist_group("netns-nemesis")]
pytestmark.append(pytest.mark.usefixtures("netns_ok"))


@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    ("clock", "inside"),
    [
        pytest.param("-20 x0.9", True, id="inside", marks=pytest.mark.soak),
        pytest.param("+20 x0.5", False, id="outside"),
    ],
)  # make test keeps "outside" (the fence under a skewed clock); "inside" (the belief's bound too) in make soak
def test_a_worker_with_a_skewed_drifting_clock_keeps_the_fence_and_inside_the_bound_the_belief(
    tmp_path: Path, etcd_bin: str, clock: str, inside: bool
) -> None:
    directory = tmp_path / "run"
    ttl_s = 5.0
    with Deployment.create(etcd_bin, directory, ["w0", "w1", "w2"], clocks={"w0": clock}, ttl_s=ttl_s) as dep:
        for _ in range(3 if SOAK else 1):
            wait_recovered(dep, 60, "the start or the last heal", require="w0")
            dep.journal("fault", kind=f"isolate-skewed-worker ({clock})", target="w0")
            dep.network.isolate("w0")
            dep.sleep(2 * ttl_s)  # the fault's length: the others take w0's partitions meanwhile
            dep.network.heal("w0")
            dep.journal("heal", target="w0")
        wait_recovered(dep, 60, "the last heal", require="w0")
        dep.journal("end")
        for name in dep.workers:
            dep.stop_worker(name)
        dep.dump_store_history()
    report = check_directory(directory / "history", PARTITIONS)
    print(f"\nclock {clock}:\n{report.table()}\n" + "\n".join((report.violations + report.tolerated_overlaps)[:10]))
    if inside:
        assert report.violations == [], "\n".join(report.violations)
        return
    assert report.violations, "a clock 50 % slow should make w0's belief outlive its lease (the bound is 20 %)"
    assert {line.split(":")[0] for line in report.violations} == {"belief"}, "\n".join(report.violations)
    assert all("w0" in line for line in report.violations), "\n".join(report.violations)
    exempt = check_directory(directory / "history", PARTITIONS, skewed=["w0"])
    assert exempt.violations == [], "\n".join(exempt.violations)
