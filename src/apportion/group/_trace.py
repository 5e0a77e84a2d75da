"""What a member tells its tracer: ``tracer(kind, fields)``, one call per protocol event, on the member's threads.

``TraceKind`` names every kind; a ``str`` enum, so a tracer written for plain strings (``kind == "assigned"``) keeps
working, and code inside apportion compares ``TraceKind`` members, where a misspelt kind is a type error instead of a
branch that never runs. The fields of each kind::

    registered        lease                       the member's registration is written (start, after a lapse)
    replaced          lease                       it fenced the process its id had (``--replace``)
    id_taken          lease                       another live registration holds its id: it waits
    renew             deadline                    a renewal landed: the belief lasts until ``deadline``
    renew_failed      deadline, reason            a renewal failed; the belief ends at ``deadline`` unless one lands
    renew_recovered   deadline                    a renewal landed again after failures
    store_unavailable reason, full                a step met StoreUnavailable (``full``: StoreFull)
    store_full        reason                      the store started refusing writes (the worker, once per outage)
    store_writes                                  the store takes writes again (the worker)
    watch_lost        reason                      the watch lost events (compaction): re-read the group
    claim             partitions, epochs          owner records written (before ``on_assigned``)
    assigned          partitions, epochs          ``on_assigned`` returned: the member believes it owns them
    adopted           partitions                  records of its own kept across a lapse-free restart
    give_back         partitions                  records of its own it does not want any more, released
    revoking          partitions                  ``on_revoked`` is called
    revoked           partitions                  ``on_revoked`` returned
    released          partitions                  their owner records are deleted
    lost              partitions, epochs?, reason ``on_lost``: the lease lapsed or a commit was fenced
    commit            partition, epoch, revision  a fenced commit was accepted
    fenced            partition, epoch            a commit was refused: the epoch is stale
    stopped                                       the member stopped (``leave``)
    round_opened      round                       rounds: this member opened a round
    round_joined      round                       rounds: it joined one
    round_closed      round, participants, moves, min_moves, deferred, kept    rounds: it wrote a round's plan
    plan              round, in_plan, assigned, revoke, kept                   rounds: it applied a round's plan
    replicas          standby, learners           rounds: the replicas it holds changed
    leaving           until                       rounds: a planned leave began (ends by ``until``)
    subscribed        subscriptions               its subscriptions changed
    coordinator       member                      coordinator: this member became the coordinator
    waiting_for_members live, min_members         coordinator: below the minimum cluster size
    settling          live, until                 coordinator: the first table waits for RST without a join
    table             full, changed, migrating, moves, min_moves               coordinator: the table was written
    ack               partition, source, epoch    coordinator: a migration was acknowledged (stateful: restored)
    failed            members                     coordinator: members whose lease ended without a leave
    static            ordinal, replicas           static: the block it follows
    scale             ordinal, replicas, previous static: the replica count changed (``previous``: raised by it)
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any


class TraceKind(enum.StrEnum):
    REGISTERED = "registered"
    REPLACED = "replaced"
    ID_TAKEN = "id_taken"
    RENEW = "renew"
    RENEW_FAILED = "renew_failed"
    RENEW_RECOVERED = "renew_recovered"
    STORE_UNAVAILABLE = "store_unavailable"
    STORE_FULL = "store_full"
    STORE_WRITES = "store_writes"
    WATCH_LOST = "watch_lost"
    CLAIM = "claim"
    ASSIGNED = "assigned"
    ADOPTED = "adopted"
    GIVE_BACK = "give_back"
    REVOKING = "revoking"
    REVOKED = "revoked"
    RELEASED = "released"
    LOST = "lost"
    COMMIT = "commit"
    FENCED = "fenced"
    STOPPED = "stopped"
    ROUND_OPENED = "round_opened"
    ROUND_JOINED = "round_joined"
    ROUND_CLOSED = "round_closed"
    PLAN = "plan"
    REPLICAS = "replicas"
    LEAVING = "leaving"
    SUBSCRIBED = "subscribed"
    COORDINATOR = "coordinator"
    WAITING_FOR_MEMBERS = "waiting_for_members"
    SETTLING = "settling"
    TABLE = "table"
    ACK = "ack"
    FAILED = "failed"
    STATIC = "static"
    SCALE = "scale"


Tracer = Callable[[TraceKind, Mapping[str, Any]], None]
"""A protocol event observer: ``tracer(kind, fields)`` (the module docstring lists the kinds and their fields)."""


__all__ = ["TraceKind", "Tracer"]
