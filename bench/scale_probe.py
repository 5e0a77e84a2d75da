"""Is a live fleet converged, and how long until it is (issue 27): shared by ``bench/scale_bench.py`` and
``tests/scale/``.

A fleet of `apportion worker` processes is **converged** on a set of live members when every partition has an owner
record in the store, each naming one of them; each member's count is within floor/ceil of its capacity's share of
the partitions; and each member has *applied* exactly what the store says it owns (its event lines: assigned, less
revoked and lost, ``WorkerProcess.applied``). A claimed partition whose ``on_assigned`` has not run is not owned:
nobody processes it yet.

- ``judge`` is the pure part: a ``Verdict`` from the owner map, the capacities and the applied sets;
- ``read_owners`` reads the owner records and the registrations in one transaction (two prefix ranges, not
  ``group_status``: at 100,000 partitions that reads and decodes every record of the group on every poll); a record
  bound to another lease than its owner's registration is *lapsing* (its owner registered again, or is gone: the
  record waits for its old lease to end; nobody processes that partition), as ``apportion status`` says;
- ``Probe.until_converged`` polls both until converged or a deadline counted from a given instant (the last start,
  the kill) and returns a ``Phase``: its time, or "never (N s)" with the last verdict;
- ``start_staggered`` starts workers as a Deployment's pods start: the same command line, a fixed gap apart;
- ``cpu_s``: a process's utime + stime from /proc;
- ``failover_timeline``: from the group's history, when the first round after a kill opened and closed and the
  survivors' first and last claims came (seconds after the kill): where a failover's seconds go;
- ``last_apply_s``: when the last member applied a change (its ``assigned``/``revoked``/``lost`` line) after an
  instant: the moment a converged fleet became so, without the probe's own look (~0.4 s to read 16,384 owner records
  at load) and poll interval, which ``Phase.seconds`` includes.

Why here and not in ``src/apportion``: the verdict and its timing exist to measure and to test the protocol; a user
asks the store whether a group is at rest (``apportion.group.settled``, ``apportion status``). What a worker's event
lines say it applied is read where every event line is read, ``apportion.fleet`` (``WorkerProcess.applied``).
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from apportion.errors import StoreUnavailable, TimedOut
from apportion.fleet import Fleet
from apportion.group import PartitionId, history
from apportion.group.internals import LEGACY_LAYOUT, Keys, decode_owner, pid_of_text
from apportion.store import Get, Store
from apportion.waiting import wait_for

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one look at the store and the event lines found (``ok``: converged)."""

    partitions: int
    unowned: int  # no owner record
    foreign: int  # an owner record naming a member not in the live set (a dead one, or a stranger)
    lapsing: int = 0  # an owner record that outlives its live owner's registration (its owner gave it up)
    counts: Mapping[str, int] = field(default_factory=dict)  # owner records per live member
    quota: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # floor/ceil of each live member's share
    unapplied: int = 0  # owned by a live member in the store, not in its applied set
    stray: int = 0  # in a live member's applied set, the store names another owner or none
    unapplied_by: Mapping[str, int] = field(default_factory=dict)  # members with unapplied partitions: how many

    @property
    def outside_quota(self) -> list[str]:
        return sorted(m for m, n in self.counts.items() if not self.quota[m][0] <= n <= self.quota[m][1])

    @property
    def laggards(self) -> list[str]:
        """Members with claimed partitions they have not applied, most first."""
        return sorted(self.unapplied_by, key=lambda m: (-self.unapplied_by[m], m))

    @property
    def all_owned(self) -> bool:
        """Every partition owned by a live member (balance and application aside)."""
        return self.unowned == 0 and self.foreign == 0 and self.lapsing == 0

    @property
    def ok(self) -> bool:
        return self.all_owned and not self.outside_quota and self.unapplied == 0 and self.stray == 0

    def summary(self) -> str:
        counts = sorted(self.counts.values())
        lows = sorted({q[0] for q in self.quota.values()})
        highs = sorted({q[1] for q in self.quota.values()})
        quota = f"{lows[0]}..{highs[-1]}" if lows else "-"
        empty = sum(1 for n in counts if n == 0)
        worst = ", ".join(f"{m} {self.unapplied_by[m]}" for m in self.laggards[:3])
        owned = self.partitions - self.unowned - self.foreign - self.lapsing
        lapsing = f", {self.lapsing} lapsing" if self.lapsing else ""
        return (
            f"{owned}/{self.partitions} owned by live members ({self.unowned} unowned, {self.foreign} by others"
            f"{lapsing}); {len(counts)} members own "
            f"{counts[0] if counts else 0}..{counts[-1] if counts else 0} (quota {quota}), {empty} none, "
            f"{len(self.outside_quota)} outside quota; {self.unapplied} claimed not applied"
            f"{f' ({worst})' if worst else ''}, {self.stray} applied not owned"
        )

    def to_json(self) -> dict[str, Any]:
        counts = sorted(self.counts.values())
        return {
            "ok": self.ok,
            "partitions": self.partitions,
            "unowned": self.unowned,
            "foreign": self.foreign,
            "lapsing": self.lapsing,
            "min_count": counts[0] if counts else 0,
            "max_count": counts[-1] if counts else 0,
            "members_owning_none": sum(1 for n in counts if n == 0),
            "members_outside_quota": len(self.outside_quota),
            "unapplied": self.unapplied,
            "stray": self.stray,
        }


def quotas(partitions: int, capacities: Mapping[str, float]) -> dict[str, tuple[int, int]]:
    """Each member's floor and ceil of ``partitions`` x its share of the total capacity."""
    total = sum(capacities.values())
    out: dict[str, tuple[int, int]] = {}
    for member, capacity in capacities.items():
        share = partitions * capacity / total
        out[member] = (math.floor(share + 1e-9), math.ceil(share - 1e-9))
    return out


def judge(
    owners: Mapping[PartitionId, str],
    partitions: Collection[PartitionId],
    capacities: Mapping[str, float],
    applied: Mapping[str, Collection[PartitionId]],
    lapsing: Collection[PartitionId] = (),
) -> Verdict:
    """The verdict on ``owners`` (partition -> the member its owner record names; ``lapsing``: partitions whose
    record outlives its owner's registration, not in ``owners``) for the live members of ``capacities``, each of
    which has applied ``applied[member]``. Records of partitions outside ``partitions`` are ignored."""
    counts = dict.fromkeys(capacities, 0)
    unowned = foreign = unapplied = lapsed = 0
    gone = set(lapsing)
    for p in partitions:
        owner = owners.get(p)
        if p in gone:
            lapsed += 1
        elif owner is None:
            unowned += 1
        elif owner not in counts:
            foreign += 1
        else:
            counts[owner] += 1
    stray = 0
    unapplied_by: dict[str, int] = {}
    for member in capacities:
        held = set(applied.get(member, ()))
        stray += sum(1 for p in held if owners.get(p) != member)
        missing = counts[member] - sum(1 for p in held if owners.get(p) == member)
        if missing:
            unapplied_by[member] = missing
            unapplied += missing
    return Verdict(
        partitions=len(partitions),
        unowned=unowned,
        foreign=foreign,
        lapsing=lapsed,
        counts=counts,
        quota=quotas(len(partitions), capacities) if capacities else {},
        unapplied=unapplied,
        stray=stray,
        unapplied_by=unapplied_by,
    )


@dataclass(frozen=True, slots=True)
class Records:
    """The owner records of a group at one revision: ``owners`` (partition -> member) bound to their owner's
    registration's lease, and the ``lapsing`` ones (partition -> member) bound to another (or whose owner has no
    registration)."""

    owners: dict[PartitionId, str]
    lapsing: dict[PartitionId, str]


def read_owners(store: Store, group: str) -> Records:
    """The owner records and the registrations, in one transaction (one revision)."""
    keys = Keys(group)
    roots = (keys.owners, Keys(group, LEGACY_LAYOUT).owners)  # either layout's owner records (``group._keys``)
    found = store.txn([], [*(Get(root, prefix=True) for root in roots), Get(keys.members, prefix=True)]).responses
    member_kvs = found[-1]
    assert isinstance(member_kvs, list)
    registered = {kv.key[len(keys.members) :]: kv.lease for kv in member_kvs}
    owners: dict[PartitionId, str] = {}
    lapsing: dict[PartitionId, str] = {}
    for root, owner_kvs in zip(roots, found, strict=False):
        assert isinstance(owner_kvs, list)
        for kv in owner_kvs:
            member = decode_owner(kv)[0]
            current = registered.get(member) == kv.lease
            (owners if current else lapsing)[pid_of_text(kv.key[len(root) :])] = member
    return Records(owners, lapsing)


@dataclass(frozen=True, slots=True)
class Phase:
    """How long a fleet took to converge, from ``since`` (the last start, a kill, a join)."""

    what: str
    seconds: float | None  # None: not converged within timeout_s
    timeout_s: float
    owned_s: float | None  # the first look at which every partition was owned by a live member
    verdict: Verdict | None  # the last answered look's (None: the store answered none)
    looks: int
    look_s: float  # the median time one look took (store range + event lines): the resolution of ``seconds``
    unanswered: int = 0  # looks the store did not answer (StoreUnavailable: a loaded machine), retried

    def text(self) -> str:
        return f"{self.seconds:.1f} s" if self.seconds is not None else f"never ({self.timeout_s:g} s)"

    def summary(self) -> str:
        """The last look's verdict and how the looks went."""
        last = "the store answered no look" if self.verdict is None else self.verdict.summary()
        unanswered = f", {self.unanswered} unanswered" if self.unanswered else ""
        return f"{last} ({self.looks} looks of {self.look_s:.2f} s{unanswered})"

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds": None if self.seconds is None else round(self.seconds, 2),
            "text": self.text(),
            "timeout_s": self.timeout_s,
            "owned_s": None if self.owned_s is None else round(self.owned_s, 2),
            "looks": self.looks,
            "look_s": round(self.look_s, 3),
            "unanswered": self.unanswered,
            "last": None if self.verdict is None else self.verdict.to_json(),
            "last_summary": self.summary(),
        }


class Probe:
    """Looks at one group of a fleet: the store's owner records and the live members' event lines."""

    def __init__(self, store: Store, group: str, fleet: Fleet, partitions: Collection[PartitionId]) -> None:
        self.store = store
        self.group = group
        self.fleet = fleet
        self.partitions = list(partitions)

    def verdict(self, members: Collection[str], capacities: Mapping[str, float] | None = None) -> Verdict:
        records = read_owners(self.store, self.group)  # first: a worker applies after its claim is in the store
        applied = {m: self.fleet[m].applied() for m in members}
        capacities = capacities or dict.fromkeys(members, 1.0)
        return judge(records.owners, self.partitions, capacities, applied, records.lapsing)

    def until_converged(
        self,
        what: str,
        members: Collection[str],
        timeout_s: float,
        *,
        since: float,
        poll_s: float = 0.25,
        progress: Callable[[str], None] | None = None,
        progress_every_s: float = 5.0,
    ) -> Phase:
        """Look every ``poll_s`` until the fleet is converged on ``members`` or ``timeout_s`` after ``since`` (a
        ``time.monotonic()`` instant); raises ``WorkerExited`` if one of ``members`` exits. A look the store does not
        answer in time (``StoreUnavailable``) is counted and the next one tried."""
        live = sorted(members)
        costs: list[float] = []
        state: dict[str, Any] = {"owned": None, "seconds": None, "verdict": None, "said": time.monotonic()}
        unanswered = 0

        def look() -> bool:
            nonlocal unanswered
            began = time.monotonic()
            try:
                verdict = self.verdict(live)
            except StoreUnavailable as exc:
                unanswered += 1
                if progress is not None:
                    progress(f"{what}: {began - since:.0f} s: the store did not answer a look: {exc}")
                return False
            now = time.monotonic()
            costs.append(now - began)
            state["verdict"] = verdict
            if verdict.all_owned and state["owned"] is None:
                state["owned"] = now - since
            if verdict.ok:
                state["seconds"] = now - since
                return True
            if progress is not None and now - state["said"] >= progress_every_s:
                state["said"] = now
                progress(f"{what}: {now - since:.0f} s: {verdict.summary()}")
            return False

        left = max(0.0, timeout_s - (time.monotonic() - since))
        with contextlib.suppress(TimedOut):
            wait_for(what, look, left, poll_s=poll_s, alive=lambda: self.fleet.check(live))
        return Phase(
            what=what,
            seconds=state["seconds"],
            timeout_s=timeout_s,
            owned_s=state["owned"],
            verdict=state["verdict"],
            looks=len(costs),
            look_s=statistics.median(costs) if costs else 0.0,
            unanswered=unanswered,
        )


def start_staggered(fleet: Fleet, worker_ids: Sequence[str], gap_s: float) -> float:
    """Start ``worker_ids`` with the fleet's one command line, ``gap_s`` apart (a Deployment's pods); returns the
    ``time.monotonic()`` of the last start."""
    first = time.monotonic()
    for i, wid in enumerate(worker_ids):
        time.sleep(max(0.0, first + i * gap_s - time.monotonic()))
        fleet.start(wid)
    return time.monotonic()


def cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system, every thread) the process has used; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15 of stat(5)


def say(line: str) -> None:
    """A progress line on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


__all__ = ["Phase", "Probe", "Records", "Verdict", "cpu_s", "judge", "quotas", "read_owners", "say", "start_staggered"]


def failover_timeline(store: Store, group: str, killed_at: float) -> dict[str, float | int | None]:
    """Seconds after ``killed_at`` (wall clock, as the members record event times) of the first ``round_opened`` and
    ``round_closed`` that follow, and of the first and last ``claim`` (``claims``: how many), from the history."""
    after = [e for e in history(store, group) if float(e.get("time", 0.0)) >= killed_at and e["type"] != "commit"]

    def first(kind: str) -> float | None:
        times = [float(e["time"]) - killed_at for e in after if e["type"] == kind]
        return round(min(times), 2) if times else None

    claims = sorted(float(e["time"]) - killed_at for e in after if e["type"] == "claim")
    return {
        "round_opened_s": first("round_opened"),
        "round_closed_s": first("round_closed"),
        "first_claim_s": round(claims[0], 2) if claims else None,
        "last_claim_s": round(claims[-1], 2) if claims else None,
        "claims": len(claims),
    }


def last_apply_s(fleet: Fleet, members: Collection[str], since_wall: float) -> float | None:
    """Seconds from ``since_wall`` (wall clock, as event lines carry) to the last ``assigned``, ``revoked`` or
    ``lost`` line of ``members`` after it; None when none came."""
    times = [
        float(e["time"])
        for m in members
        for e in fleet[m].events
        if e.get("event") in ("assigned", "revoked", "lost") and float(e["time"]) >= since_wall
    ]
    return round(max(times) - since_wall, 2) if times else None
