"""The nemesis: a seeded random schedule of network and process faults against a Deployment, bounded in count and
time, each fault undone before the next; then the checker's verdict on the whole history.

Fault kinds (the journal's ``fault`` events carry them; ``heal`` ends each):

- ``isolate-worker``: a worker's host cut off from every etcd node while the worker keeps running (longer than the
  ttl, so its belief must end and the others take over).
- ``worker-sees-one-etcd``: a worker's host cut from two of the three etcd nodes (iptables): it must fail over to
  the one it still reaches.
- ``isolate-leader`` / ``isolate-follower``: the etcd leader's host, or a follower's (a minority), cut off.
- ``stop-leader``: SIGSTOP of the etcd leader (a hung host), SIGCONT after the hold.
- ``kill-etcd``: kill -9 of a random etcd node, restarted on its data dir after the hold.
- ``kill-worker``: kill -9 of a worker, restarted (same id) after the hold.
- ``leave-join``: a worker leaves gracefully (SIGTERM) and another joins (a spare host, or the same one back).

After each fault the nemesis waits (deadline ``recover_s``) until every partition has an owner record of a running
worker; a run that does not recover, or whose worker exits by itself, fails naming the fault.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from apportion.errors import ApportionError
from apportion.waiting import wait_for
from tests.nemesis.checker import Report, check_directory
from tests.nemesis.cluster import PARTITIONS, Deployment

KINDS = (
    "isolate-worker",
    "worker-sees-one-etcd",
    "isolate-leader",
    "isolate-follower",
    "stop-leader",
    "kill-etcd",
    "kill-worker",
    "leave-join",
)


@dataclass(frozen=True, slots=True)
class Planned:
    kind: str
    hold_s: float
    pause_s: float
    pick: int  # chooses the victim among the candidates at the time (index modulo their count)


@dataclass(frozen=True, slots=True)
class NemesisConfig:
    directory: Path
    seed: int
    faults: int
    budget_s: float  # no new fault after this much time of the fault phase
    workers: tuple[str, ...] = ("w0", "w1", "w2")
    ttl_s: float = 5.0
    recover_s: float = 60.0
    kinds: tuple[str, ...] = KINDS


def schedule(config: NemesisConfig) -> list[Planned]:
    """The faults of a run, from its seed alone: every kind before any repeats (shuffled rounds), then holds
    (longer than the ttl for a worker's isolation) and pauses."""
    rng = random.Random(config.seed)
    kinds: list[str] = []
    while len(kinds) < config.faults:
        round_ = list(config.kinds)
        rng.shuffle(round_)
        kinds += round_
    plan = []
    for kind in kinds[: config.faults]:
        hold = config.ttl_s * rng.uniform(1.2, 1.8) if kind == "isolate-worker" else rng.uniform(1.0, 4.0)
        plan.append(Planned(kind, round(hold, 2), round(rng.uniform(0.5, 2.0), 2), rng.randrange(1 << 16)))
    return plan


@dataclass
class Outcome:
    injected: list[tuple[str, str]] = field(default_factory=list)  # (kind, target)
    recovery_s: list[float] = field(default_factory=list)
    report: Report | None = None


def run(config: NemesisConfig, etcd_binary: str, say: Callable[[str], None] = print) -> Outcome:
    outcome = Outcome()
    plan = schedule(config)
    with Deployment.create(etcd_binary, config.directory, list(config.workers), ttl_s=config.ttl_s) as dep:
        wait_recovered(dep, config.recover_s, "the start")
        started = time.monotonic()
        for planned in plan:
            if time.monotonic() - started > config.budget_s:
                say(f"time budget {config.budget_s:g} s spent after {len(outcome.injected)} faults")
                break
            target = _inject(dep, planned)
            outcome.injected.append((planned.kind, target))
            t0 = time.monotonic()
            wait_recovered(dep, config.recover_s, f"{planned.kind} of {target}")
            outcome.recovery_s.append(time.monotonic() - t0)
            took = outcome.recovery_s[-1]
            say(f"  {planned.kind:<22} {target:<4} held {planned.hold_s:.1f} s, recovered in {took:.1f} s")
            time.sleep(planned.pause_s)  # the group works undisturbed for a while: commits go on
        dep.journal("end")
        for name in dep.workers:
            dep.stop_worker(name)
        dep.dump_store_history()
    outcome.report = check_directory(config.directory / "history", PARTITIONS)
    return outcome


def _running_workers(dep: Deployment) -> list[str]:
    return sorted(name for name, w in dep.workers.items() if w.running)


def _inject(dep: Deployment, planned: Planned) -> str:
    """Apply one fault, hold it, undo it; returns its target."""
    kind, net = planned.kind, dep.network
    workers = _running_workers(dep)
    if kind in ("isolate-worker", "worker-sees-one-etcd", "kill-worker", "leave-join"):
        target = workers[planned.pick % len(workers)]
    elif kind in ("isolate-leader", "stop-leader"):
        target = dep.leader()
    elif kind == "isolate-follower":
        leader = dep.leader()
        followers = sorted(n for n in dep.etcd if n != leader)
        target = followers[planned.pick % len(followers)]
    else:  # kill-etcd
        target = sorted(dep.etcd)[planned.pick % len(dep.etcd)]
    dep.journal("fault", kind=kind, target=target)
    if kind in ("isolate-worker", "isolate-leader", "isolate-follower"):
        net.isolate(target)
        time.sleep(planned.hold_s)
        net.heal(target)
    elif kind == "worker-sees-one-etcd":
        reached = sorted(dep.etcd)[planned.pick % len(dep.etcd)]
        cut = [n for n in sorted(dep.etcd) if n != reached]
        for node in cut:
            net.cut(target, node)
        time.sleep(planned.hold_s)
        for node in cut:
            net.mend(target, node)
    elif kind == "stop-leader":
        dep.etcd[target].freeze()
        time.sleep(planned.hold_s)
        dep.etcd[target].thaw()
    elif kind == "kill-etcd":
        dep.etcd[target].kill()
        time.sleep(planned.hold_s)
        dep.etcd[target].start()
        dep.etcd[target].wait_ready(60)
    elif kind == "kill-worker":
        dep.kill_worker(target)
        time.sleep(planned.hold_s)
        dep.start_worker(target, replace=True)  # as a supervisor restarts it: its old lease may not have expired
    elif kind == "leave-join":
        dep.stop_worker(target)
        idle = sorted(n for n in dep.workers if not dep.workers[n].running and n != target)
        time.sleep(planned.hold_s)
        dep.start_worker(idle[0] if idle else target)
    dep.journal("heal", kind=kind, target=target)
    return target


def wait_recovered(
    dep: Deployment, deadline_s: float, after: str, *, require: str | None = None, partitions: int = PARTITIONS
) -> None:
    """Every one of ``partitions`` has an owner record of a running worker (read from the store by the control
    host), and ``require``, if given, owns one of them."""
    last: dict[int, str] = {}

    def recovered() -> bool:
        nonlocal last
        dep.check_workers()
        try:
            last = dep.owners()
        except ApportionError:
            return False
        running = {name for name, w in dep.workers.items() if w.running}
        owners = set(last.values())
        return sorted(last) == list(range(partitions)) and owners <= running and (require is None or require in owners)

    wait_for(f"every partition owned by a running worker after {after}", recovered, deadline_s, poll_s=0.2,
             context=lambda: f"owners: {last}")  # fmt: skip
