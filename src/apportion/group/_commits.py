"""Fenced commits of many partitions at once: the record, the transactions, and reading checkpoints back.

``FencedMember.commit_many`` commits a batch; ``commit`` is the batch of one (same code). The batch is cut into
chunks (``chunked``) that each fit one store transaction: at most ``CHUNK_PARTITIONS`` partitions and
``CHUNK_BYTES`` of keys and values (``commit_size``). These are etcd's default limits, the strictest backend's,
applied on every backend so that all behave alike: ``--max-txn-ops`` 128 (compares, success ops and failure ops are
each limited; a chunk of n has n compares, n + 1 puts and n gets) and ``--max-request-bytes`` 1.5 MiB (a third
kept as margin for the request's framing). One chunk is one transaction (``fence``)::

    txn(compares = [owner/p == (me, epoch_p)                                   for p in chunk],
        success  = [put .commit/<group>/p = {checkpoint, epoch, member}         for p in chunk]
                   + [one history event "commit" {partitions, epochs}],
        failure  = [get owner/p                                                 for p in chunk])

Each partition is fenced by its own compare, exactly as a commit of one is. When the txn fails, its failure branch
has read every owner record at the revision the compares were evaluated at: the partitions whose record is not
(me, epoch) are fenced — for good, since an epoch is never handed out twice, so that record never comes back — and
the others are sent again in a new txn. Each failed txn fences at least one partition, so a chunk of n partitions
takes at most n txns. (A store that refuses the compares while every read matches is not consistent:
``StoreUnavailable``.)

What a commit costs the store: n partitions committed together are ceil(n / chunk) txns writing n records plus one
history event per txn — before this layout, n txns writing n records and n events, each record under the group's
prefix, waking every member. The records now live outside it (``_keys``: a commit wakes no member). The history
event no longer carries the checkpoints: the record keeps the last one, and the history's readers (``report``,
``explain``, the dashboard, the analytics) only ask who committed which (partition, epoch) when.

Reading: a checkpoint may be in the current record or, written by an earlier version, in the legacy one
(``_keys``); of the two, the one written last (greater mod_revision) is the partition's checkpoint
(``latest_commits``). Both are read in one transaction of two Gets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from apportion.errors import ApportionError, Fenced, StoreUnavailable
from apportion.group._history import HistoryType, Recorder
from apportion.group._keys import Keys, PartitionId, decode, encode, pid_of_key
from apportion.group._keys import field as record_field
from apportion.store import Get, KeyValue, Op, Put, Store, value_is

T = TypeVar("T")

CHUNK_PARTITIONS = 120  # etcd's --max-txn-ops default is 128: n puts + the history event, n compares, n gets
CHUNK_BYTES = 1 << 20  # etcd's --max-request-bytes default is 1.5 MiB: a third of it kept as margin
_OP_OVERHEAD = 16  # bytes a compare, put or get adds to a request beyond its key and value (protobuf framing)


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What ``commit_many`` did; every partition given is in exactly one of the three.

    ``committed``: partition -> the store revision of the transaction that committed it. ``fenced``: partition ->
    the epoch whose commit was refused (the store's owner record is not this member's with that epoch any more, or
    this member's belief in it had ended; it is reported through ``on_lost``), None when no epoch was given and the
    member does not own the partition. ``failed``: partition -> why the store did not answer (``StoreUnavailable``):
    its outcome is unknown (the transaction may have been applied); re-read the checkpoint or commit again.
    ``member``: who committed."""

    committed: Mapping[PartitionId, int] = field(default_factory=dict)
    fenced: Mapping[PartitionId, int | None] = field(default_factory=dict)
    failed: Mapping[PartitionId, str] = field(default_factory=dict)
    member: str = ""

    @property
    def ok(self) -> bool:
        """True when every partition was committed."""
        return not self.fenced and not self.failed

    def error(self, partition: PartitionId) -> ApportionError | None:
        """What a commit of ``partition`` alone would have raised: None (committed, or not in this result),
        ``Fenced`` or ``StoreUnavailable``."""
        if partition in self.fenced:
            epoch = self.fenced[partition]
            if epoch is None:
                return Fenced(f"partition {partition} is not owned by {self.member}")
            return Fenced(f"partition {partition}: epoch {epoch} of {self.member} is no longer the owner's")
        if partition in self.failed:
            return StoreUnavailable(self.failed[partition])
        return None


def commit_record(checkpoint: str, epoch: int, member_id: str) -> bytes:
    """The value of a commit record."""
    return encode({"checkpoint": checkpoint, "epoch": epoch, "member": member_id})


def commit_size(keys: Keys, partition: PartitionId, record: bytes, owner_value: bytes) -> int:
    """The bytes ``partition`` adds to a commit transaction: its compare (owner key and value), its put (the
    record), its failure get (owner key) and its entries in the history event."""
    owner_key = len(keys.owner(partition))
    return 2 * owner_key + len(owner_value) + len(keys.commit(partition)) + len(record) + 32 + 3 * _OP_OVERHEAD


def chunked(
    parts: Sequence[T], sizes: Sequence[int], *, count: int = CHUNK_PARTITIONS, budget: int = CHUNK_BYTES
) -> list[list[T]]:
    """``parts`` in order, cut into runs of at most ``count`` whose ``sizes`` add up to at most ``budget`` (a part
    larger than the budget goes alone: the store says whether it fits)."""
    out: list[list[T]] = []
    current: list[T] = []
    used = 0
    for part, size in zip(parts, sizes, strict=True):
        if current and (len(current) >= count or used + size > budget):
            out.append(current)
            current, used = [], 0
        current.append(part)
        used += size
    if current:
        out.append(current)
    return out


def fence(
    store: Store,
    keys: Keys,
    recorder: Recorder,
    records: Mapping[PartitionId, bytes],
    epochs: Mapping[PartitionId, int],
    owner_value: Callable[[int], bytes],
    now: float,
) -> tuple[dict[PartitionId, int], dict[PartitionId, int]]:
    """Commit one chunk: ``records`` (partition -> commit record) under ``epochs``, each fenced by its own compare
    of ``owner/<p>`` with ``owner_value(epoch)``. Returns (committed: partition -> revision, fenced: partition ->
    epoch). No local check of the belief: the caller's (``FencedMember``)."""
    pending = list(records)
    committed: dict[PartitionId, int] = {}
    fenced: dict[PartitionId, int] = {}
    while pending:
        expected = {p: owner_value(epochs[p]) for p in pending}
        ops: list[Op] = [Put(keys.commit(p), records[p]) for p in pending]
        ops += recorder.put(HistoryType.COMMIT, now, partitions=list(pending), epochs=[epochs[p] for p in pending])
        result = store.txn(
            [value_is(keys.owner(p), expected[p]) for p in pending], ops, [Get(keys.owner(p)) for p in pending]
        )
        if result.succeeded:
            committed.update(dict.fromkeys(pending, result.revision))
            break
        ours = [
            p
            for p, found in zip(pending, result.responses, strict=True)
            if isinstance(found, list) and found and found[0].value == expected[p]
        ]
        if len(ours) == len(pending):
            raise StoreUnavailable("the store refused a commit whose owner records all matched (not consistent?)")
        still = frozenset(ours)
        fenced.update({p: epochs[p] for p in pending if p not in still})
        pending = ours
    return committed, fenced


# -- reading checkpoints back -------------------------------------------------------------------------------------


def checkpoint_of(kv: KeyValue) -> str:
    """The checkpoint of a commit record; CorruptRecord naming its key when it is not one."""
    return str(record_field(decode(kv.value, kv.key), kv.key, "checkpoint", str))


def latest_commits(keys: Keys, kvs: Iterable[KeyValue]) -> dict[PartitionId, KeyValue]:
    """Of the commit records among ``kvs`` (either layout; other keys are ignored), each partition's written last."""
    out: dict[PartitionId, KeyValue] = {}
    for kv in kvs:
        if kv.key.startswith(keys.commits):
            name = kv.key[len(keys.commits) :]
        elif kv.key.startswith(keys.legacy_commits):
            name = kv.key[len(keys.legacy_commits) :]
        else:
            continue
        p = pid_of_key(name)
        if p is not None and (p not in out or kv.mod_revision > out[p].mod_revision):
            out[p] = kv
    return out


def read_checkpoint(store: Store, keys: Keys, partition: PartitionId) -> str | None:
    """``partition``'s last committed checkpoint, whoever wrote it, in either layout (one read)."""
    result = store.txn([], [Get(keys.commit(partition)), Get(keys.legacy_commit(partition))])
    kvs = [found[0] for found in result.responses if isinstance(found, list) and found]
    return checkpoint_of(max(kvs, key=lambda kv: kv.mod_revision)) if kvs else None


def read_commits(store: Store, keys: Keys) -> dict[PartitionId, KeyValue]:
    """Every partition's last commit record, in either layout (one read)."""
    result = store.txn([], [Get(keys.commits, prefix=True), Get(keys.legacy_commits, prefix=True)])
    return latest_commits(keys, (kv for found in result.responses if isinstance(found, list) for kv in found))


__all__ = [
    "CHUNK_BYTES",
    "CHUNK_PARTITIONS",
    "CommitResult",
    "checkpoint_of",
    "chunked",
    "commit_record",
    "commit_size",
    "fence",
    "latest_commits",
    "read_checkpoint",
    "read_commits",
]
