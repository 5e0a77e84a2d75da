"""Seed 3's static ordinal mode: a StatefulSet ordinal and a replica count decide the partitions, no coordination.

A member knows its ordinal ``o`` (``--ordinal``, a host name ``name-<o>``: the StatefulSet convention, see
``ordinal_from_hostname``; ``--ordinal-from-hostname`` reads the machine's). Its partitions are
``range_block(o, R, partitions)`` (the balanced range formula: sizes differ by at most one; seed 3 gives the
remainder to the last ordinal instead); an ordinal >= R owns nothing. In a group over named resources the formula
holds per resource (``static_block``): ordinal ``o`` owns ``range_block(o, R, n_r)`` of every resource ``r``, each
pod consumes every resource (subscriptions need the rounds mode: the formula has no room for them). Ordinals are
below and counts at most ``MAX_REPLICAS`` (``_mode``): a mistyped ordinal would otherwise raise the count for good.

The replica count ``R`` is one live value of the group, the ``replicas`` key, and every member follows it (watch):

- ``set_replicas`` (``Group.scale``, ``apportion scale``) is the analogue of ``kubectl scale``: the operator's word
  (refused for a group of another mode);
- a member's ``replicas`` (``--replicas``) is only the count a group *starts* with, written when it has none yet
  (a pod template's value does not change on scale, so it cannot be the truth afterwards);
- a process whose ordinal is >= the stored count when it first registers is the evidence of a scale-up (a
  StatefulSet only creates ordinals below its replica count): it raises the count to ordinal + 1 (compare-and-set:
  only ever up, never past a higher one), instead of refusing to start. Only at its first registration: a running
  member that sees the count drop below its ordinal is leaving (scale-down), and so is one that registers again
  after a lapse.

Nothing else changes the count: a pod that stops (SIGTERM, crash) is a restart for a StatefulSet, so its ordinal's
partitions stay unowned, ``group_status`` says ``waiting_for`` that ordinal, until it returns or the count changes.

Single active consumer: each partition is still claimed through the lease-bound ``owner/<p>`` record with a new
epoch (``FencedMember``), so two members with the same ordinal (a rolling update, a split brain) never both hold
it: the second one waits and claims when the first releases or its lease expires. After a scale, a member first
releases what the new formula took away (on_revoked, then the fenced release); others claim it only once the
record is free (compare-absent): revoke before assign.

Member phases (``StaticPhase``)::

    STARTING --lease granted, members/<id> put (ordinal); first registration only: the count written if absent,
               raised to ordinal + 1 if below it; the stored count read--> RUNNING
    RUNNING  --each step: revoke owned - target (on_revoked, release); claim target - owned (when free)--> RUNNING
    RUNNING  --replicas or resource changed (watch; read again when the watch lost events)--> RUNNING with the
             new target
    any      --local lease deadline passed, or lease gone--> on_lost(all), lease revoked --> STARTING
    any      --leave()--> on_revoked(all), release, lease revoked --> STOPPED
"""

from __future__ import annotations

import enum
import re
from typing import Any, Unpack

from apportion.assign import range_block
from apportion.errors import InvalidRequest
from apportion.group._config import GroupConfig
from apportion.group._keys import Keys, PartitionId, decode, encode, field, sorted_pids
from apportion.group._mode import MAX_REPLICAS, Static, validate_ordinal, validate_replicas
from apportion.group._ownership import FencedMember, MemberOptions
from apportion.group._trace import TraceKind
from apportion.model import partition_name
from apportion.store import Event, EventType, KeyValue, Put, Store, absent, mod_revision_is

_HOSTNAME = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9.-]*)-(?P<ordinal>[0-9]+)$")


class StaticPhase(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPED = "stopped"


def ordinal_from_hostname(hostname: str) -> int:
    """The ordinal of a StatefulSet pod from its host name ``<statefulset>-<ordinal>``; InvalidRequest otherwise."""
    match = _HOSTNAME.match(hostname) if isinstance(hostname, str) else None
    if match is None:
        raise InvalidRequest("hostname", f"{hostname!r} does not look like a StatefulSet pod name <name>-<ordinal>")
    digits = match.group("ordinal")
    return validate_ordinal(int(digits) if len(digits) <= 12 else MAX_REPLICAS)  # beyond: refused, not converted


def set_replicas(store: Store, group: str, replicas: int) -> None:
    """Publish a new replica count (``kubectl scale``'s analogue): every static member of ``group`` follows it.
    InvalidRequest for a count outside 1..``MAX_REPLICAS``, a group with no definition, and a group whose stored
    mode is not static (a rounds or coordinator group has no replica count; one whose definition records no mode
    yet, written by an older version, is scaled as before). The count is written only if the definition is
    unchanged meanwhile."""
    validate_replicas(replicas)
    keys = Keys(group)
    while True:
        kv = store.get(keys.resource)
        if kv is None:
            raise InvalidRequest("group", f"group {group!r} has no resource definition yet: nothing to scale")
        GroupConfig.from_record(kv).require_mode(group, "static", "replicas", "only a static group has a replica count")
        put = Put(keys.replicas, encode({"replicas": replicas}))
        if store.txn([mod_revision_is(keys.resource, kv.mod_revision)], [put]).succeeded:
            return


def stored_replicas(store: Store, group: str) -> int | None:
    kv = store.get(Keys(group).replicas)
    return None if kv is None else replicas_of(kv)


def replicas_of(kv: KeyValue) -> int:
    """The stored replica count (``{"replicas": n}``, n >= 1); CorruptRecord naming the key otherwise."""
    return int(field(decode(kv.value, kv.key), kv.key, "replicas", int, minimum=1))


def static_block(config: GroupConfig, ordinal: int, replicas: int) -> list[PartitionId]:
    """The partitions of ``ordinal`` under ``replicas``: the range formula over the group's partitions, or over each
    of its named resources (``<resource>-<index>`` ids); none for an ordinal at or above the count."""
    if not 0 <= ordinal < replicas:
        return []
    if not config.named:
        return list(range_block(ordinal, replicas, config.partitions))
    return [partition_name(r.name, i) for r in config.resources for i in range_block(ordinal, replicas, r.partitions)]


class StaticMember(FencedMember):
    """One member of a static-ordinal group: owns ``range_block(ordinal, replicas, partitions)``, claimed fenced.
    The definition's ``Static(replicas)`` is the count the group starts with when it has none yet (default
    ordinal + 1); an ordinal is at most ``MAX_REPLICAS - 1``."""

    def __init__(
        self,
        store: Store,
        group: str,
        member_id: str,
        config: GroupConfig,
        *,
        ordinal: int,
        **options: Unpack[MemberOptions],
    ) -> None:
        if not isinstance(config.mode, Static):
            raise InvalidRequest("mode", f"a static member needs Static(...), got {config.mode!r}")
        self.ordinal = validate_ordinal(ordinal)
        super().__init__(store, group, member_id, config, **options)
        self.phase = StaticPhase.STARTING
        self._published = False
        self._replicas = self.replicas  # the stored (effective) replica count
        self._replicas_revision = 0

    @property
    def replicas(self) -> int:
        """The count this member starts a group with: the definition's ``Static(replicas)`` (the stored one once
        read), at least ordinal + 1."""
        mode = self.config.mode
        initial = mode.replicas if isinstance(mode, Static) and mode.replicas is not None else 0
        return max(initial, self.ordinal + 1)

    @property
    def effective_replicas(self) -> int:
        return self._replicas

    def target(self) -> list[PartitionId]:
        """The partitions the range formula gives this ordinal under the stored replica count."""
        return static_block(self.config, self.ordinal, self._replicas)

    def stable(self) -> bool:
        with self._belief.lock:
            return (
                self.phase is StaticPhase.RUNNING
                and not self._claims.wanted
                and set(self._belief.owned) == set(self.target())
                and self._clock.now() < self._belief.deadline
            )

    def _registration(self) -> dict[str, Any]:
        return {"ordinal": self.ordinal}

    def _started(self, now: float, revision: int) -> None:
        kv = self.store.get(self.keys.replicas)
        if not self._published:  # once per process: a member that registers again after a lapse raises nothing
            kv = self._publish(kv)
            self._published = True
        if kv is not None:
            self._replicas, self._replicas_revision = replicas_of(kv), kv.mod_revision
        self.phase = StaticPhase.RUNNING
        self._trace(TraceKind.STATIC, ordinal=self.ordinal, replicas=self._replicas)

    def _publish(self, kv: KeyValue | None) -> KeyValue | None:
        """The first registration's part of the count: write it when the group has none, raise it to ordinal + 1
        when it is below (compare-and-set, retried while others change it). Returns the stored record."""
        key = self.keys.replicas
        while True:
            if kv is None:
                compare, count = absent(key), self.replicas
            elif self.ordinal >= replicas_of(kv):
                compare, count = mod_revision_is(key, kv.mod_revision), self.ordinal + 1
            else:
                return kv
            if self.store.txn([compare], [Put(key, encode({"replicas": count}))]).succeeded:
                previous = None if kv is None else replicas_of(kv)
                self._trace(TraceKind.SCALE, ordinal=self.ordinal, replicas=count, previous=previous)
                return self.store.get(key)
            kv = self.store.get(key)

    def _resync_keys(self) -> list[str]:
        return [self.keys.replicas]

    def _on_event(self, event: Event) -> None:
        kv = event.kv
        if event.type is not EventType.PUT:
            return
        if kv.key == self.keys.replicas and kv.mod_revision > self._replicas_revision:
            self._replicas, self._replicas_revision = replicas_of(kv), kv.mod_revision
            self._trace(TraceKind.STATIC, ordinal=self.ordinal, replicas=self._replicas)
        elif kv.key == self.keys.resource and kv.mod_revision > self._config_revision:
            self.config, self._config_revision = GroupConfig.from_record(kv), kv.mod_revision

    def _advance(self, now: float) -> float:
        self._recorder.prune(self.store, now)  # at most once a minute: the history's retention
        target: set[PartitionId] = set(self.target())
        with self._belief.lock:
            owned = set(self._belief.owned)
        revoke = sorted_pids(owned - target)
        if revoke:
            self._revoke(revoke)
            if self.busy_until is not None:
                return self.busy_until
        self._claims.wanted = target - owned
        deadlines = [self._lapse_at()]
        if self._claims.wanted:
            self._claim(now)
            if self._claims.wanted:
                deadlines.append(now + self.claim_retry_s)
        if self._claims.to_release:
            deadlines.append(now + self.claim_retry_s)
        return min(deadlines)

    def _reset(self) -> None:
        self.phase = StaticPhase.STARTING

    def _stop(self) -> None:
        super()._stop()
        self.phase = StaticPhase.STOPPED


__all__ = [
    "StaticMember",
    "StaticPhase",
    "ordinal_from_hostname",
    "static_block",
    "set_replicas",
    "replicas_of",
    "stored_replicas",
]
