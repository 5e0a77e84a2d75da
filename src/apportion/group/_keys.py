"""The key space of a group under ``/apportion/<group>/`` and the JSON encoding of its values.

::

    resource            definition: partitions, strategy, options, settle_s, min_interval_s, heartbeat_s, ttl_s
    members/<id>        registration (lease-bound): capacity, rack, pid, host
    current             the open round: {opened_at, opener, prev}; the round id is this key's mod_revision
    latest              {round}: the last round that has a plan
    round/<R>/<id>      participation (lease-bound): owned partitions, the round they were owned in, capacity, rack
    round/<R>/joined    touched by every participation write: the closer compares its mod_revision (the cut)
    round/<R>/plan      the cut and the plan: participants, assignment, strategy, closer
    owner/<p>           {epoch, member} (lease-bound to the owner's lease)
    epoch/<p>           last epoch handed out for p (not lease-bound: epochs only grow)
    commit/<p>          {checkpoint, epoch, member}
    history             {expired_before}: history events older than this may have expired (see ``_history``)
    replicas            static mode: {replicas} — the replica count the ordinals are spread over
    coordinator         coordinator mode (lease-bound to the coordinator's member lease): {member, settings}
    table/<p>           coordinator mode: {owner, target, state (ASSIGNED|MIGRATING|ONLINE)} — the partition table
    migrations/<p>      coordinator mode: the move in flight for p: {from, to, state}
    rebalance           coordinator mode, manual policy: an operator's request to rebalance

The history's events live outside the watched prefix, under ``/apportion/.history/<group>/`` (see ``_history``):
inside ``/apportion/``, so an etcd role limited to that prefix suffices, and in no group's prefix (group names start
with a letter or digit). Everything apportion stores is under ``/apportion/``.

Group names and member ids: 1-128 characters ``[A-Za-z0-9._-]`` starting with a letter or digit; member ids
``plan`` and ``joined`` are reserved (they name keys of a round).
"""

from __future__ import annotations

import json
import re
from typing import Any

from apportion.errors import InvalidRequest

ROOT = "/apportion/"
HISTORY_ROOT = ROOT + ".history/"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RESERVED_IDS = ("joined", "plan")


def validate_group(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidRequest("group", f"{name!r} must be 1-128 characters [A-Za-z0-9._-] starting with a letter/digit")
    return name


def validate_member_id(member_id: str) -> str:
    if not isinstance(member_id, str) or not _NAME.match(member_id):
        raise InvalidRequest(
            "worker_id", f"{member_id!r} must be 1-128 characters [A-Za-z0-9._-] starting with a letter/digit"
        )
    if member_id in RESERVED_IDS:
        raise InvalidRequest("worker_id", f"{member_id!r} is reserved")
    return member_id


class Keys:
    """Key names of one group."""

    __slots__ = ("current", "events", "history", "latest", "members", "prefix", "resource", "rounds")

    def __init__(self, group: str) -> None:
        validate_group(group)
        self.prefix = f"{ROOT}{group}/"
        self.resource = self.prefix + "resource"
        self.current = self.prefix + "current"
        self.latest = self.prefix + "latest"
        self.members = self.prefix + "members/"
        self.rounds = self.prefix + "round/"
        self.history = self.prefix + "history"
        self.events = f"{HISTORY_ROOT}{group}/"

    def member(self, member_id: str) -> str:
        return self.members + member_id

    def round(self, round_id: int) -> str:
        return f"{self.rounds}{round_id}/"

    def participation(self, round_id: int, member_id: str) -> str:
        return f"{self.rounds}{round_id}/{member_id}"

    def joined(self, round_id: int) -> str:
        return f"{self.rounds}{round_id}/joined"

    def plan(self, round_id: int) -> str:
        return f"{self.rounds}{round_id}/plan"

    def owner(self, partition: int) -> str:
        return f"{self.prefix}owner/{partition}"

    def epoch(self, partition: int) -> str:
        return f"{self.prefix}epoch/{partition}"

    def commit(self, partition: int) -> str:
        return f"{self.prefix}commit/{partition}"

    @property
    def replicas(self) -> str:
        return self.prefix + "replicas"

    @property
    def coordinator(self) -> str:
        return self.prefix + "coordinator"

    @property
    def tables(self) -> str:
        return self.prefix + "table/"

    def table(self, partition: int) -> str:
        return f"{self.prefix}table/{partition}"

    @property
    def migrations(self) -> str:
        return self.prefix + "migrations/"

    def migration(self, partition: int) -> str:
        return f"{self.prefix}migrations/{partition}"

    @property
    def rebalance(self) -> str:
        return self.prefix + "rebalance"


def encode(value: dict[str, Any]) -> bytes:
    """Canonical JSON (sorted keys, no spaces): equal values give equal bytes, so value compares work."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def decode(raw: bytes) -> dict[str, Any]:
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value


def owner_value(member_id: str, epoch: int) -> bytes:
    return encode({"epoch": epoch, "member": member_id})


__all__ = ["Keys", "decode", "encode", "owner_value", "validate_group", "validate_member_id"]
