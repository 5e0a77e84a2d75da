"""A group of many members and partitions written straight into a store, as the protocol leaves it at rest, without
running a member per id: what ``status`` and the dashboard read at 100,000 partitions (issue 27) in seconds.

``build_group`` writes, with the protocol's own encoders and key names:

- ``resource`` (the definition) and, per member, a lease and ``members/<id>`` bound to it (the registration
  ``RoundsMember`` writes: capacity, rack, pid, host, revoking);
- one round: ``current``, ``round/<R>/<id>`` (participation, lease-bound), ``round/<R>/joined``, ``round/<R>/plan``
  (participants and the assignment: member ``i`` gets partitions ``i, i + N, i + 2N, ...``) and ``latest``;
- per partition its claim: ``owner/<p>`` ``{epoch, member}`` bound to the owner's lease and ``epoch/<p>``, in claim
  transactions of ``CHUNK`` partitions that also append the ``claim`` history event (as ``_claim_chunk`` does), and
  with ``commits`` a ``commit/<p>`` whose checkpoint is the pipeline's ``{"offset": N}``;
- ``unowned`` partitions (the last ones of the plan) get no owner record: a handoff in flight (their epoch/commit
  stay, from an earlier owner).

Leases are granted for ``lease_ttl_s`` (default an hour) so that nothing expires while a bench or a test reads the
group; nothing keeps them alive. At most ``CHUNK * 3 + 1`` ops per transaction (etcd allows 128).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass

from apportion.group import GroupConfig, PartitionId
from apportion.group._history import Recorder
from apportion.group._keys import owner_value
from apportion.group._ownership import CHUNK
from apportion.group.internals import Keys, encode
from apportion.model import index_of
from apportion.store import Op, Put, Store


@dataclass(frozen=True, slots=True)
class LargeGroup:
    group: str
    config: GroupConfig
    members: tuple[str, ...]
    assignment: dict[str, list[PartitionId]]  # what the plan gives each member
    unowned: tuple[PartitionId, ...]  # planned, but no owner record


def member_ids(count: int) -> tuple[str, ...]:
    width = len(str(count - 1))
    return tuple(f"w{i:0{width}d}" for i in range(count))


def build_group(
    store: Store,
    group: str = "big",
    *,
    members: int = 64,
    partitions: int = 100_000,
    config: GroupConfig | None = None,
    commits: bool = True,
    unowned: int = 0,
    lease_ttl_s: float = 3600.0,
    now: float | None = None,
) -> LargeGroup:
    """Write the group (see the module docstring); ``config`` overrides ``partitions`` (e.g. named resources);
    ``now``: the time of the round and the claims (their history events), default the store clock's now."""
    keys = Keys(group)
    now = store.clock.now() if now is None else now
    config = config or GroupConfig(partitions=partitions)
    ids = config.partition_ids()
    mids = member_ids(members)
    store.put(keys.resource, encode(config.to_json()))
    leases = {}
    for mid in mids:
        lease = store.grant(lease_ttl_s)
        leases[mid] = lease.id
        info = {"capacity": 1.0, "rack": None, "pid": os.getpid(), "host": socket.gethostname(), "revoking": False}
        store.put(keys.member(mid), encode(info), lease.id)
    assignment: dict[str, list[PartitionId]] = {mid: list(ids[i :: len(mids)]) for i, mid in enumerate(mids)}
    gap = set(ids[len(ids) - unowned :]) if unowned else set()
    rnd = store.put(keys.current, encode({"opened_at": now, "opener": mids[0], "prev": 0}))
    for mid in mids:
        owned = [p for p in assignment[mid] if p not in gap]
        record = {"owned": owned, "generation": rnd, "capacity": 1.0, "rack": None}
        store.txn([], [Put(keys.participation(rnd, mid), encode(record), leases[mid]), Put(keys.joined(rnd), b"1")])
    plan = {
        "round": rnd,
        "participants": list(mids),
        "assignment": assignment,
        "strategy": config.strategy,
        "kept": False,
        "moves": 0,
        "min_moves": 0,
        "deferred": 0,
        "closer": mids[0],
        "closed_at": now,
        "resource_revision": 1,
        "partitions": config.partitions,
    }
    store.txn([], [Put(keys.plan(rnd), encode(plan)), Put(keys.latest, encode({"round": rnd}))])
    for mid in mids:
        recorder = Recorder(keys, mid, 3600.0)
        parts = assignment[mid]
        for start in range(0, len(parts), CHUNK):
            chunk = parts[start : start + CHUNK]
            ops: list[Op] = []
            claimed = []
            for p in chunk:
                if p not in gap:
                    ops.append(Put(keys.owner(p), owner_value(mid, 1), leases[mid]))
                    claimed.append(p)
                ops.append(Put(keys.epoch(p), b"1"))
                if commits:
                    checkpoint = json.dumps({"offset": 1_000 + index_of(p)})
                    ops.append(Put(keys.commit(p), encode({"checkpoint": checkpoint, "epoch": 1, "member": mid})))
            if claimed:
                ops += recorder.put("claim", now, partitions=claimed, epochs=[1] * len(claimed))
            store.txn([], ops)
    return LargeGroup(group, config, mids, assignment, tuple(p for p in ids if p in gap))
