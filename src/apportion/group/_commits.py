"""Commit records: their value, and reading checkpoints back from either key layout (``_keys``).

A checkpoint may be in the current record (``/apportion/.commit/<group>/<p>``) or, written by an earlier version, in
the legacy one (``/apportion/<group>/commit/<p>``); of the two, the one written last (greater mod_revision) is the
partition's checkpoint (``latest_commits``). Both are read in one transaction of two Gets.
"""

from __future__ import annotations

from collections.abc import Iterable

from apportion.group._keys import Keys, PartitionId, decode, encode, pid_of_key
from apportion.group._keys import field as record_field
from apportion.store import Get, KeyValue, Store


def commit_record(checkpoint: str, epoch: int, member_id: str) -> bytes:
    """The value of a commit record."""
    return encode({"checkpoint": checkpoint, "epoch": epoch, "member": member_id})


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


__all__ = ["checkpoint_of", "commit_record", "latest_commits", "read_checkpoint", "read_commits"]
