"""Seed 3's static ordinal mode: a StatefulSet ordinal and a replica count decide the partitions, no coordination.

A member knows its ordinal ``o`` and the replica count ``R`` (``--ordinal/--replicas``, or a host name
``name-<o>`` plus ``--replicas``: the StatefulSet convention, see ``ordinal_from_hostname``). Its partitions are
``range_block(o, R, partitions)`` (the range formula: sizes differ by at most one); an ordinal >= R owns nothing.
The replica count is shared through the ``replicas`` key: a member publishes its ``--replicas`` when it first
starts (the newest configuration wins, as after ``kubectl scale`` + rolling update) and every member follows the
stored value, so scaling changes everybody's formula. ``set_replicas`` lets an operator change it directly.

Single active consumer: each partition is still claimed through the lease-bound ``owner/<p>`` record with a new
epoch (``FencedMember``), so two members with the same ordinal (a rolling update, a split brain) never both hold
it: the second one waits and claims when the first releases or its lease expires. After a scale, a member first
releases what the new formula took away; others claim it only once the record is free (compare-absent).

Member phases (``StaticPhase``)::

    STARTING --lease granted, members/<id> put (ordinal), replicas published once and read--> RUNNING
    RUNNING  --each step: revoke owned - target (on_revoked, release); claim target - owned (when free)--> RUNNING
    RUNNING  --replicas or resource changed (watch)--> RUNNING with the new target
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
from apportion.group._keys import Keys, decode, encode, field
from apportion.group._ownership import FencedMember, MemberOptions
from apportion.store import Event, EventType, KeyValue, Put, Store

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
    return int(match.group("ordinal"))


def validate_ordinal(ordinal: object, replicas: object) -> tuple[int, int]:
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise InvalidRequest("replicas", f"must be an integer >= 1, got {replicas!r}")
    if isinstance(ordinal, bool) or not isinstance(ordinal, int) or ordinal < 0:
        raise InvalidRequest("ordinal", f"must be an integer >= 0, got {ordinal!r}")
    if ordinal >= replicas:
        raise InvalidRequest("ordinal", f"{ordinal} must be < replicas ({replicas}): ordinals run 0..replicas-1")
    return ordinal, replicas


def set_replicas(store: Store, group: str, replicas: int) -> None:
    """Publish a new replica count (scaling): every static member of ``group`` follows it."""
    validate_ordinal(0, replicas)
    store.txn([], [Put(Keys(group).replicas, encode({"replicas": replicas}))])


def stored_replicas(store: Store, group: str) -> int | None:
    kv = store.get(Keys(group).replicas)
    return None if kv is None else _replicas_of(kv)


def _replicas_of(kv: KeyValue) -> int:
    """The stored replica count (``{"replicas": n}``, n >= 1); CorruptRecord naming the key otherwise."""
    return int(field(decode(kv.value, kv.key), kv.key, "replicas", int, minimum=1))


class StaticMember(FencedMember):
    """One member of a static-ordinal group: owns ``range_block(ordinal, replicas, partitions)``, claimed fenced."""

    def __init__(
        self,
        store: Store,
        group: str,
        member_id: str,
        config: GroupConfig,
        *,
        ordinal: int,
        replicas: int,
        **options: Unpack[MemberOptions],
    ) -> None:
        self.ordinal, self.replicas = validate_ordinal(ordinal, replicas)
        super().__init__(store, group, member_id, config, **options)
        self.phase = StaticPhase.STARTING
        self._published = False
        self._replicas = replicas  # the stored (effective) replica count
        self._replicas_revision = 0

    @property
    def effective_replicas(self) -> int:
        return self._replicas

    def target(self) -> list[int]:
        """The partitions the range formula gives this ordinal under the stored replica count."""
        if self.ordinal >= self._replicas:
            return []
        return list(range_block(self.ordinal, self._replicas, self.config.partitions))

    def stable(self) -> bool:
        with self._lock:
            return (
                self.phase is StaticPhase.RUNNING
                and not self._claiming
                and set(self._owned) == set(self.target())
                and self._clock.now() < self._deadline
            )

    def _registration(self) -> dict[str, Any]:
        return {"ordinal": self.ordinal, "replicas": self.replicas}

    def _started(self, now: float, revision: int) -> None:
        if not self._published:  # once per process: a restart after a lapse must not undo a later scale
            kv = self.store.get(self.keys.replicas)
            if kv is None or _replicas_of(kv) != self.replicas:
                self.store.txn([], [Put(self.keys.replicas, encode({"replicas": self.replicas}))])
            self._published = True
        kv = self.store.get(self.keys.replicas)
        if kv is not None:
            self._replicas, self._replicas_revision = _replicas_of(kv), kv.mod_revision
        self.phase = StaticPhase.RUNNING
        self._trace("static", ordinal=self.ordinal, replicas=self._replicas)

    def _on_event(self, event: Event) -> None:
        kv = event.kv
        if event.type is not EventType.PUT:
            return
        if kv.key == self.keys.replicas and kv.mod_revision > self._replicas_revision:
            self._replicas, self._replicas_revision = _replicas_of(kv), kv.mod_revision
            self._trace("static", ordinal=self.ordinal, replicas=self._replicas)
        elif kv.key == self.keys.resource and kv.mod_revision > self._config_revision:
            self.config, self._config_revision = GroupConfig.from_record(kv), kv.mod_revision

    def _advance(self, now: float) -> float:
        self._recorder.prune(self.store, now)  # at most once a minute: the history's retention
        target = set(self.target())
        with self._lock:
            owned = set(self._owned)
        revoke = sorted(owned - target)
        if revoke:
            self._revoke(revoke)
            if self._busy_until is not None:
                return self._busy_until
        self._claiming = target - owned
        deadlines = [self._lapse_at()]
        if self._claiming:
            self._claim(now)
            if self._claiming:
                deadlines.append(now + self.claim_retry_s)
        if self._to_release:
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
    "set_replicas",
    "stored_replicas",
    "validate_ordinal",
]
