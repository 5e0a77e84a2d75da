"""Live scale (issue 27): real `apportion worker` processes started together with identical arguments, as the pods of
one Deployment, must converge — every partition owned, each owner within floor/ceil(P/N) and having *applied* its
partitions (its event lines say so: a claimed partition whose on_assigned has not run is not owned) — and fail over a
kill -9 within ttl + RST + 2 s with no survivor losing a partition.

The verdict and its timing are ``bench/scale_probe.py``'s, shared with ``bench/scale_bench.py`` (which measures the
same phases and more); ``tests/scale/test_probe.py`` tests the verdict itself. ``make test`` runs 16 x 4,096 on a
1-node etcd (and 4 x 256, a size today's protocol handles, so a failure of the large one is the protocol's, not the
checker's); ``make soak`` runs 32 x 16,384 on SQLite and on etcd.

16 x 4,096 fails on the protocol of 341785e, as issue 27 reports (not marked xfail: it is the fix's acceptance test):
"converge: never (60 s) ... 16 members own 0..798 (quota 256..256), 3 none, 8 outside quota; 3318 claimed not
applied" — members that claimed hundreds of partitions and had called on_assigned for none of them.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from bench.scale_probe import Phase, Probe, start_staggered

from apportion.fleet import Fleet, worker_args
from apportion.store import connect

pytestmark = pytest.mark.slow

TTL_S, SETTLE_S = 5.0, 0.5  # passed explicitly (etcd's defaults): the failover bound is derived from them
FAILOVER_GOAL_S = TTL_S + SETTLE_S + 2.0
COMMIT_EVERY_S = 5.0
STAGGER_S = 0.1
REPORT_PAST_S = 10.0  # a failover past its goal is waited for this much longer, so the failure says how late it was


def _failure(phase: Phase, fleet: Fleet, bound: str) -> str:
    """What was expected, the last look, and the logs of the members most behind (else the first ones)."""
    shown = (phase.verdict.laggards if phase.verdict is not None else [])[:3] or sorted(fleet.workers)[:3]
    tails = "\n".join(f"--- {wid}:\n{fleet[wid].tail(5)}" for wid in shown)
    return (
        f"{phase.what}: {phase.text()}, expected within {bound}; the last look: {phase.summary()}; the logs of "
        f"{', '.join(shown)} end with:\n{tails}"
    )


def converge_then_fail_over(url: str, logs: Path, workers: int, partitions: int, converge_within_s: float) -> None:
    """Start ``workers`` 0.1 s apart; assert converged within ``converge_within_s`` of the last start, then after a
    kill -9 of one, converged on the others within ttl + RST + 2 s, and no ``lost`` event from a survivor at any time
    of the run (a member whose lease lapses under load loses partitions as surely as one hit by the kill)."""
    options = ["--partitions", str(partitions), "--commit-every", f"{COMMIT_EVERY_S:g}", "--ttl", f"{TTL_S:g}",
               "--settle", f"{SETTLE_S:g}"]  # fmt: skip
    ids = [f"w{i:02d}" for i in range(workers)]
    with Fleet(logs, worker_args(url, "scale", *options), count_only=("commit",)) as fleet, connect(url) as store:
        probe = Probe(store, "scale", fleet, range(partitions))
        last = start_staggered(fleet, ids, STAGGER_S)
        converge = probe.until_converged("converge", ids, converge_within_s, since=last)
        assert converge.seconds is not None, _failure(converge, fleet, f"{converge_within_s:g} s of the last start")

        victim, survivors = ids[0], ids[1:]
        fleet[victim].signal(signal.SIGKILL)
        killed = time.monotonic()
        failover = probe.until_converged("kill -9 failover", survivors, FAILOVER_GOAL_S + REPORT_PAST_S, since=killed)
        # the verdict is seen at the end of a look (a store range and the event lines): one look is its resolution
        within = FAILOVER_GOAL_S + failover.look_s
        bound = f"ttl + RST + 2 s = {FAILOVER_GOAL_S:g} s of the kill (+ one look, {failover.look_s:.2f} s)"
        assert failover.seconds is not None and failover.seconds <= within, _failure(failover, fleet, bound)
        lost = {wid: fleet[wid].log.lost() for wid in survivors if fleet[wid].log.lost()}
        assert not lost, f"survivors reported lost partitions (their on_lost, oldest first): {lost}"


@pytest.mark.etcd
@pytest.mark.parametrize(("workers", "partitions"), [(4, 256), (16, 4096)], ids=["4x256", "16x4096"])
def test_a_fleet_started_at_once_converges_within_60_s_and_fails_over_a_kill_within_ttl_rst_2_s(
    etcd_url: str, tmp_path: Path, workers: int, partitions: int
) -> None:
    converge_then_fail_over(etcd_url, tmp_path / "logs", workers, partitions, converge_within_s=60.0)


@pytest.mark.soak
@pytest.mark.parametrize("kind", ["sqlite", "etcd"])
def test_32_workers_converge_on_16384_partitions_and_fail_over_a_kill(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("etcd_url") if kind == "etcd" else f"sqlite:///{tmp_path / 'scale.db'}"
    converge_then_fail_over(url, tmp_path / "logs", 32, 16384, converge_within_s=120.0)
