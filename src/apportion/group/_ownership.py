"""Fenced, epoch-numbered ownership of partitions: the part every protocol (rounds, coordinator, static) shares.

``FencedMember`` holds one member lease and the partitions this member believes it owns. A protocol subclass decides
*which* partitions the member should own (``_claiming``) and which it must give up (``_revoke``); this base class
claims, releases, fences commits and ends beliefs. Per partition, from this member's point of view (``Ownership``)::

    (wanted) CLAIMING --txn [absent(owner/p), epoch/p unchanged] -> [owner/p (my lease), epoch/p = e+1]-->
        OWNED --on_assigned--> (believed)
    OWNED --commit: txn [owner/p == (me, epoch)] -> [put .commit/<group>/p]--> OWNED
    OWNED --protocol gives p up--> REVOKING --on_revoked returns--> release txn [owner/p is mine] -> delete
    OWNED --commit fails (owner/p not mine+epoch, or refused here): fenced--> on_lost(p) --> release txn
    OWNED --local lease deadline passes / lease gone--> on_lost(p)

The belief "I own p" lasts from on_assigned until on_revoked returns or on_lost is called, and never beyond the
local lease deadline: last successful keepalive *request* time + ttl x ``safety`` (0.8), which is earlier than the
store can expire the lease. Belief is a timer, not a side effect of I/O: every store call made while a lease is held
runs under ``store.time_limit(deadline - now)``, so a store that does not answer cannot hold the stepping thread past
the deadline; at the deadline ``on_lost`` is called *first*, and only then are the lease revoked and the ``lost``
event recorded (retried at every later step until they succeed or the lease is gone, before the member registers
again). After ``on_lost`` the member itself refuses commits for the lost epoch (``Fenced``), whatever the store
still holds. A commit compares the owner record's value (member and epoch), so a frozen zombie can never commit
after losing a partition. ``commit_many`` commits a batch in as few transactions as the store's limits allow, each
partition still fenced by its own compare (``_commits``: the chunks, the retry of a chunk without its fenced
partitions, what a commit costs the store); the belief is checked before each chunk is sent, and fenced partitions
are reported in its result where ``commit``, its batch of one, raises ``Fenced``. A revocation that overruns
``revoke_timeout_s`` stops lease renewal: the lease lapses and others take over. Every claim, release, commit and
loss is recorded in the group's history inside the transaction that makes it true (a commit: one event per
transaction, whatever the number of partitions in it).

The member's watches: the group's prefix, and in a layout-2 group (``_keys``) the deletions of the owner records,
which live beside it (a claim waiting for a partition another member holds is retried at that record's deletion,
``_held``; the ttl bounds a missed one). Both follow one state machine::

    FOLLOWING --poll/wait raises Compacted (it resumed below the store's compaction point: events are lost)-->
        LOST (trace "watch_lost"; both closed) --next step, within the belief--> new watches from now, then ``_resync``
        re-reads what the lost events would have told (the group's definition and the protocol's own keys, applied
        as their events) --> FOLLOWING
    LOST --the store does not answer--> LOST (retried at every step; beliefs and renewals go on meanwhile)

Member lifecycle shared by all protocols: ``step`` starts the member when it has no lease (watch the group, read or
create the resource definition, grant the lease, register ``members/<id>`` lease-bound if no other registration
holds the id: a holder that is dead lets go within its ttl, a live one makes this member fail after 1.5 ttl unless
``replace`` fences it, and its record ``replaces`` that lease: the fenced process, registering again, finds its own
lease named there and stops with ``Fenced`` "replaced by another process", not the duplicate-id error that would tell
the operator to --replace it back), then hands over to the protocol's ``_advance``; ``leave`` revokes everything
(on_revoked), releases and revokes the lease (a protocol may first plan the handoff: ``begin_leave``, step until
``leave_ready``, then ``leave``); a lapse (local deadline or lease gone) calls on_lost for everything and starts over.
"""

from __future__ import annotations

import contextlib
import enum
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Required, TypedDict, TypeVar

from apportion.clock import Clock
from apportion.errors import (
    Compacted,
    CorruptRecord,
    Fenced,
    InvalidRequest,
    LeaseNotFound,
    StoreFull,
    StoreUnavailable,
)
from apportion.group._commits import (
    CHUNK_BYTES,
    CHUNK_PARTITIONS,
    CommitResult,
    chunked,
    commit_record,
    commit_size,
    fence,
    read_checkpoint,
)
from apportion.group._config import GroupConfig
from apportion.group._history import DEFAULT_RETENTION_S, Recorder
from apportion.group._keys import (
    LAYOUT,
    LEGACY_LAYOUT,
    Keys,
    PartitionId,
    decode,
    decode_epoch,
    decode_owner,
    encode,
    owner_value,
    pid_of_key,
    sorted_pids,
    validate_member_id,
)
from apportion.group._trace import TraceKind, Tracer
from apportion.model import AssignRequest, Plan
from apportion.store import (
    Delete,
    Event,
    EventType,
    Get,
    KeyValue,
    Op,
    Put,
    Store,
    Watch,
    absent,
    mod_revision_is,
    value_is,
)
from apportion.store import Lease as StoreLease

INF = math.inf
T = TypeVar("T")
# partitions per claim/release txn: a claim takes 2 compares, 2 puts (+1 history put) and 2 gets per partition, and
# etcd allows 128 of each per txn by default (``--max-txn-ops``)
CHUNK = 60
OWNER_WAIT_SLICE_S = 0.02  # how often a member waiting for owner records to go looks at their watch (wait_events)
CLAIM_SLICE_S = 0.5  # claiming one step does before it drains its watch again (a newer plan may want other things)
_ID_RETRY_S = 0.25  # how often a member whose id is held by another registration looks again

# partition ids: ints in a one-resource group, ``<resource>-<index>`` strings otherwise (``Any``: a callback typed
# for either kind fits)
Callback = Callable[[list[Any]], None]
Planner = Callable[[AssignRequest], Plan]
DelayHook = Callable[[str, list[Any]], float]


class Ownership(enum.Enum):
    CLAIMING = "claiming"
    OWNED = "owned"
    REVOKING = "revoking"


@dataclass(frozen=True, slots=True)
class PartitionLease:
    """A partition this worker believes it owns, with the epoch that fences its commits."""

    partition: PartitionId
    epoch: int
    member: str


def default_planner(request: AssignRequest) -> Plan:
    from apportion.assign import plan

    return plan(request)


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterable[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class MemberOptions(TypedDict, total=False):
    """The keyword arguments every member kind passes unchanged to :class:`FencedMember` (defaults there)."""

    clock: Required[Clock]
    on_assigned: Callback | None
    on_revoked: Callback | None
    on_lost: Callback | None
    update: bool
    watch: Watch | None
    safety: float
    claim_retry_s: float
    revoke_timeout_s: float
    history_retention_s: float
    tracer: Tracer | None
    delay: DelayHook | None
    replace: bool
    partitions_given: bool


class FencedMember:
    """Lease, beliefs, claims, releases and fenced commits of one member. Not thread-safe except for
    ``keepalive``, ``commit``, ``commit_many``, ``owned``, ``lease``, ``checkpoint`` and ``stable`` (guarded by an
    internal lock); everything else runs on one stepping thread. Subclasses implement ``_advance`` (and may
    override the hooks ``_on_event``, ``_started``, ``_reset``, ``_resync``, ``_resync_keys``, ``_registration``,
    ``stable``)."""

    # the most partitions and bytes of one commit transaction (``_commits``: etcd's defaults; lower them for a
    # server configured with smaller limits)
    max_commit_partitions: int = CHUNK_PARTITIONS
    max_commit_bytes: int = CHUNK_BYTES

    def __init__(
        self,
        store: Store,
        group: str,
        member_id: str,
        config: GroupConfig,
        *,
        clock: Clock,
        on_assigned: Callback | None = None,
        on_revoked: Callback | None = None,
        on_lost: Callback | None = None,
        update: bool = False,
        watch: Watch | None = None,
        safety: float = 0.8,
        claim_retry_s: float = 0.05,
        revoke_timeout_s: float = 10.0,
        history_retention_s: float = DEFAULT_RETENTION_S,
        tracer: Tracer | None = None,
        delay: DelayHook | None = None,
        replace: bool = False,
        partitions_given: bool = True,
    ) -> None:
        validate_member_id(member_id)
        if not 0 < safety < 2:
            raise InvalidRequest("safety", "must be in (0, 1) (values >= 1 are unsafe: for testing the checker)")
        if not revoke_timeout_s > 0:
            raise InvalidRequest("revoke_timeout_s", "must be > 0")
        self.store = store
        self.keys = Keys(group)
        self.group = group
        self.id = member_id
        self.config = config  # the effective definition: the requested one until the stored one is read
        self._wanted = config  # the requested definition
        self._partitions_given = partitions_given
        self._update = update
        self._joined = False  # the requested definition was checked against the stored one (the first start)
        self._config_revision = 0
        self._clock = clock
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._on_lost = on_lost
        self._watch = watch
        self._own_watch = watch is None
        # a layout-2 group's owner records live outside the watched prefix (``_keys``): their deletions come from a
        # second watch of this member's own (a watch the caller passes in carries them: the simulator routes them)
        self._owner_watch: Watch | None = None
        self._inbox: list[Event] = []
        self._watch_failed: Compacted | None = None  # the watch lost events (wait_events saw it): replace it
        self._resync_pending = False  # a new watch replaced a lost one: re-read what its events would have told
        self.safety = safety
        self.claim_retry_s = claim_retry_s
        self.revoke_timeout_s = revoke_timeout_s
        self._tracer = tracer
        self._delay = delay
        self._recorder = Recorder(self.keys, member_id, history_retention_s)
        self._lock = threading.Lock()
        # lease state (shared with the keepalive thread)
        self._lease: StoreLease | None = None
        self._deadline = -INF
        self._lease_lost = False
        self._revoke_started: float | None = None
        self._stopped = False
        # ownership state
        self._owned: dict[PartitionId, int] = {}  # believed: partition -> epoch
        self._claiming: set[PartitionId] = set()
        self._epochs: dict[PartitionId, tuple[int, int]] = {}  # partition -> (last epoch, epoch key mod_revision)
        self._owner_values: dict[int, bytes] = {}  # epoch -> this member's owner value, encoded once
        self._to_release: dict[PartitionId, int] = {}
        # wanted partitions another member's owner record holds -> when that was seen; claimed again at the record's
        # deletion event, not polled (at size, polling every claim_retry_s was most of the store's load)
        self._held: dict[PartitionId, float] = {}
        self._uncertain: set[PartitionId] = set()  # claims whose txn outcome is unknown: ``_settle_uncertain``
        # partitions fenced by commit (-> epoch), awaiting on_lost and release on the stepping thread
        self._fenced: dict[PartitionId, int] = {}
        # store work a lapse left for later, done by _clean_up before the member registers again
        self._dead_leases: list[StoreLease] = []  # lapsed leases not yet revoked
        self._belief_ended: float | None = None  # see belief_ended_at
        self._fenced_deadline = -INF  # the latest local deadline of the leases that held the partitions in _fenced
        self._unrecorded: list[dict[str, Any]] = []  # "lost" history events not yet written: fields (time first)
        self._renew_failing = False
        self._replace = replace
        self._taken_since: tuple[int, float] | None = None  # (lease, since when) of another holder of this id
        self._registered: int | None = None  # the lease of this member's latest registration
        self._replaced: int | None = None  # the lease of the holder this member fenced (--replace), in its record
        self._busy_until: float | None = None
        self._continuation: Callable[[], None] | None = None
        self.error: BaseException | None = None

    # -- public, thread-safe -------------------------------------------------------------------------------

    def owned(self) -> list[PartitionId]:
        """Partitions currently believed owned (empty once the local lease deadline has passed)."""
        now = self._clock.now()
        with self._lock:
            if now >= self._deadline:
                return []
            return sorted_pids(self._owned)

    def lease(self, partition: PartitionId) -> PartitionLease:
        now = self._clock.now()
        with self._lock:
            epoch = self._owned.get(partition)
            if epoch is None or now >= self._deadline:
                raise Fenced(f"partition {partition} is not owned by {self.id}")
            return PartitionLease(partition, epoch, self.id)

    def stable(self) -> bool:
        """True when the member holds exactly what its protocol wants it to hold."""
        raise NotImplementedError

    @property
    def local_deadline(self) -> float:
        with self._lock:
            return self._deadline

    @property
    def belief_ended_at(self) -> float | None:
        """When the belief that the latest ``on_lost`` ended came to its end: the local deadline if it had passed
        (a frozen process learns of its loss late, but it believed only until then), else the moment of the loss.
        None before any loss. Read it in ``on_lost`` to report the loss with its true end."""
        with self._lock:
            return self._belief_ended

    @property
    def store_lease(self) -> StoreLease | None:
        return self._lease

    def may_renew(self, now: float) -> bool:
        """False while a revocation overruns ``revoke_timeout_s`` (bounded revocation: let the lease lapse)."""
        started = self._revoke_started
        return started is None or now - started <= self.revoke_timeout_s

    def keepalive(self, now: float) -> bool:
        """Renew the member lease; ``now`` is the local time of the request. Called by the keepalive thread / sim.
        The request may take at most what is left of the belief window (a renewal that lands later revives
        nothing). True when the lease was renewed."""
        lease = self._lease
        if lease is None or self._stopped or not self.may_renew(now):
            return False
        with self._lock:
            left = self._deadline - now
        if left <= 0:
            return False
        try:
            with self.store.time_limit(left):
                self.store.keepalive(lease)
        except LeaseNotFound:
            with self._lock:
                if self._lease is lease:
                    self._lease_lost = True
            return False
        except StoreUnavailable as exc:
            if not self._renew_failing:
                self._renew_failing = True
                self._trace(TraceKind.RENEW_FAILED, deadline=now + left, reason=str(exc))
            return False
        with self._lock:
            if self._lease is lease and now < self._deadline:
                self._deadline = now + lease.ttl_s * self.safety
                deadline = self._deadline
            else:
                return False
        if self._renew_failing:
            self._renew_failing = False
            self._trace(TraceKind.RENEW_RECOVERED, deadline=deadline)
        self._trace(TraceKind.RENEW, deadline=deadline)
        return True

    def commit(self, partition: PartitionId, checkpoint: str, *, epoch: int | None = None) -> int:
        """Record ``checkpoint`` for ``partition`` if this member still owns it with ``epoch`` (default: the epoch
        it owns it with now); else raise Fenced. Returns the store revision of the commit's transaction. The batch
        of one of :meth:`commit_many` (StoreUnavailable when the store does not answer)."""
        result, error = self._commit({partition: checkpoint}, None if epoch is None else {partition: epoch})
        revision = result.committed.get(partition)
        if revision is not None:
            return revision
        if error is not None:
            raise error  # the store did not answer: the exception itself, with its cause
        raise result.error(partition) or Fenced(f"partition {partition}: not committed")  # fenced: says why

    def commit_many(
        self, checkpoints: Mapping[PartitionId, str], *, epochs: Mapping[PartitionId, int] | None = None
    ) -> CommitResult:
        """Record each partition's checkpoint if this member still owns it with its epoch in ``epochs`` (default:
        the epoch it owns it with now), in as few store transactions as the store's limits allow (``_commits``),
        each partition fenced by its own compare. Never raises Fenced nor StoreUnavailable: the result says what
        was committed (with its revision), fenced (reported through ``on_lost`` as by ``commit``) or left unknown
        by a store that did not answer (the partitions after it are not sent). InvalidRequest for a checkpoint that
        is not a string, an epoch that is not an int, an epoch without a checkpoint, or a partition that is
        neither owned here nor one of the group's."""
        return self._commit(checkpoints, epochs)[0]

    def commit_txn(self, partition: PartitionId, checkpoint: str, epoch: int, now: float) -> int:
        """The fence itself, without the local check of the belief (the simulator's zombie, whose commits were sent
        before it froze): ``_commits.fence`` of one partition. The store revision of the accepted commit; 0 when
        the store refused it."""
        record = commit_record(checkpoint, epoch, self.id)
        chunk, epochs = {partition: record}, {partition: epoch}
        committed, _ = fence(self.store, self.keys, self._recorder, chunk, epochs, self._owner_value, now)
        for p, revision in committed.items():
            self._trace(TraceKind.COMMIT, partition=p, epoch=epoch, revision=revision)
        return committed.get(partition, 0)

    def _commit(
        self, checkpoints: Mapping[PartitionId, str], epochs: Mapping[PartitionId, int] | None
    ) -> tuple[CommitResult, StoreUnavailable | None]:
        """``commit_many``, and the StoreUnavailable that ended it early (``commit`` raises it). Chunk by chunk: the
        belief is checked just before the chunk is sent (a partition whose belief ended meanwhile — ``on_lost``, the
        local deadline — is refused here, never sent), and the chunk's store calls run under what is left of the
        belief window (``store.time_limit``)."""
        uses = self._commit_epochs(checkpoints, epochs)
        fenced: dict[PartitionId, int | None] = {p: None for p, use in uses.items() if use is None}
        epoch_of = {p: use for p, use in uses.items() if use is not None}
        sending = sorted_pids(epoch_of)
        records = {p: commit_record(checkpoints[p], epoch_of[p], self.id) for p in sending}
        sizes = [commit_size(self.keys, p, records[p], self._owner_value(epoch_of[p])) for p in sending]
        committed: dict[PartitionId, int] = {}
        failed: dict[PartitionId, str] = {}
        error: StoreUnavailable | None = None
        for chunk in chunked(sending, sizes, count=self.max_commit_partitions, budget=self.max_commit_bytes):
            if error is not None:  # the store did not answer: the rest is not sent (each would wait as long)
                failed.update(dict.fromkeys(chunk, str(error)))
                continue
            now = self._clock.now()
            with self._lock:
                deadline = self._deadline
                send = [p for p in chunk if now < deadline and self._owned.get(p) == epoch_of[p]]
            sent = frozenset(send)
            refused = {p: epoch_of[p] for p in chunk if p not in sent}  # the belief has ended: no store call
            self._fence_here(refused, now, deadline, rejected=False)
            fenced.update(refused)
            if not send:
                continue
            try:
                batch = {p: records[p] for p in send}
                with self.store.time_limit(deadline - now):
                    done, rejected = fence(
                        self.store, self.keys, self._recorder, batch, epoch_of, self._owner_value, now
                    )
            except StoreUnavailable as exc:
                error = exc
                failed.update(dict.fromkeys(send, str(exc)))
                continue
            for p, revision in done.items():
                self._trace(TraceKind.COMMIT, partition=p, epoch=epoch_of[p], revision=revision)
            committed.update(done)
            self._fence_here(rejected, now, deadline, rejected=True)
            fenced.update(rejected)
        return CommitResult(committed, fenced, failed, self.id), error

    def _commit_epochs(
        self, checkpoints: Mapping[PartitionId, str], epochs: Mapping[PartitionId, int] | None
    ) -> dict[PartitionId, int | None]:
        """Check a commit's input (InvalidRequest); each partition's epoch to commit under (the given one, else the
        one owned now; None: neither)."""
        if not isinstance(checkpoints, Mapping):
            raise InvalidRequest("checkpoints", "must map partitions to checkpoints")
        given: Mapping[PartitionId, int] = {} if epochs is None else epochs
        if not isinstance(given, Mapping):
            raise InvalidRequest("epochs", "must map partitions to epochs")
        extra = [p for p in given if p not in checkpoints]
        if extra:
            raise InvalidRequest("epochs", f"partitions {extra[:5]!r} have an epoch but no checkpoint")
        with self._lock:
            owned = {p: self._owned[p] for p in checkpoints if p in self._owned}
        uses: dict[PartitionId, int | None] = {}
        for p, checkpoint in checkpoints.items():
            if isinstance(p, bool) or not isinstance(p, int | str):  # True would pass for partition 1
                raise InvalidRequest("partition", f"{p!r} is not a partition id (an int or <resource>-<index>)")
            if not isinstance(checkpoint, str):
                raise InvalidRequest("checkpoint", f"must be a string (partition {p!r}: {type(checkpoint).__name__})")
            epoch = given.get(p)
            if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int)):
                raise InvalidRequest("epochs", f"partition {p!r}: an epoch is an int, got {epoch!r}")
            if epoch is None and p not in owned and self.config.check_pid(p) != p:
                # a partition never owned here and not the group's: "3" for 3, a typo (check_pid raises for most)
                raise InvalidRequest("partition", f"{p!r} is not a partition id of group {self.group!r}")
            uses[p] = owned.get(p) if epoch is None else epoch
        return uses

    def _fence_here(self, parts: Mapping[PartitionId, int], now: float, deadline: float, *, rejected: bool) -> None:
        """The partitions whose commit was refused (by the store: ``rejected``; else here, the belief having ended):
        this member's belief in (p, epoch) ends — the stepping thread calls ``on_lost`` and releases — and a
        refusal by the store is recorded (one ``fenced`` event; best effort, it is only history)."""
        if not parts:
            return
        with self._lock:
            for p, use in parts.items():
                if self._owned.get(p) == use:
                    del self._owned[p]
                    self._fenced[p] = use
                    self._fenced_deadline = max(self._fenced_deadline, deadline)
        for p, use in parts.items():
            self._trace(TraceKind.FENCED, partition=p, epoch=use)
        if rejected:
            with contextlib.suppress(StoreUnavailable), self.store.time_limit(max(0.0, deadline - self._clock.now())):
                self._put_event("fenced", now, partitions=list(parts), epochs=list(parts.values()))

    @property
    def claiming(self) -> int:
        """How many wanted partitions still wait for their previous owner's release."""
        return len(self._claiming)

    def checkpoint(self, partition: PartitionId) -> str | None:
        """``partition``'s last committed checkpoint, whoever wrote it (either key layout, ``_keys``)."""
        return read_checkpoint(self.store, self.keys, partition)

    # -- stepping ------------------------------------------------------------------------------------------

    def wait_events(self, timeout_s: float) -> None:
        """Block (real time) until the watch has events or ``timeout_s`` passes; keep them for the next step. A
        watch that lost events (``Compacted``) is left to the next step, which replaces it; a store that does not
        answer (``StoreUnavailable``: SQLite's write lock not taken in time, a server gone) too: the step reads
        again, says so and keeps the member (a watch moves its position only with a read that succeeded). Before,
        the error left the worker's loop: at 64 members x 100,000 partitions committing on SQLite a watch's poll
        (which expires leases, so takes the write lock) waited 5 s for the lock and the worker exited with code 1."""
        if self._watch is None or self._watch_failed is not None:
            time.sleep(max(0.0, timeout_s))  # no watch to wake us (the store did not answer): the step retries
            return
        try:
            if self._owner_watch is None or not self._held:
                self._inbox.extend(self._watch.wait(max(0.0, timeout_s)))
                return
            # waiting to claim partitions another member holds: their deletions wake us too (one watch blocks,
            # the other is looked at every OWNER_WAIT_SLICE_S: a wait on two watches of any backend)
            deadline = time.monotonic() + max(0.0, timeout_s)
            while True:
                events = self._watch.wait(min(OWNER_WAIT_SLICE_S, max(0.0, deadline - time.monotonic())))
                freed = self._owner_watch.poll()
                self._inbox.extend(events)
                self._inbox.extend(freed)
                if events or freed or time.monotonic() >= deadline:
                    return
        except Compacted as exc:
            self._watch_failed = exc
        except StoreUnavailable as exc:
            self._trace(TraceKind.STORE_UNAVAILABLE, reason=str(exc), full=isinstance(exc, StoreFull))

    def step(self, now: float | None = None) -> float:
        """Advance the protocol; return the local time by which it wants to be stepped again."""
        if self._stopped:
            return INF
        now = self._clock.now() if now is None else now
        try:
            if self._busy_until is not None:
                if now < self._busy_until:
                    return self._busy_until
                continuation, self._continuation, self._busy_until = self._continuation, None, None
                if continuation is not None:
                    with self._within_belief():
                        continuation()
                now = self._clock.now()
            return self._step(now)
        except LeaseNotFound:
            with self._lock:
                self._lease_lost = True
            return now
        except StoreUnavailable as exc:  # StoreFull too: retried until an operator gives the store space again
            self._trace(TraceKind.STORE_UNAVAILABLE, reason=str(exc), full=isinstance(exc, StoreFull))
            return min(now + max(self.claim_retry_s, 0.05) * 2, self._lapse_at())

    def _lapse_at(self) -> float:
        with self._lock:
            return self._deadline if (self._owned or self._lease is not None) else INF

    def _step(self, now: float) -> float:
        self._drain_events()
        with self._lock:
            lapsed = self._lease is not None and (self._lease_lost or now >= self._deadline)
        if lapsed:
            self._lapse(now, "lease lost" if self._lease_lost else "lease deadline passed")
        self._clean_up()
        if self._lease is None:
            if not self._start(now):
                return now + _ID_RETRY_S
            now = self._clock.now()
        with self._within_belief():
            if self._resync_pending:
                self._watch_again()
            if self._fenced:
                with self._lock:
                    fenced, self._fenced = dict(sorted(self._fenced.items())), {}
                    self._belief_ended, self._fenced_deadline = min(now, self._fenced_deadline), -INF
                self._trace(TraceKind.LOST, partitions=list(fenced), epochs=list(fenced.values()), reason="fenced")
                self._call(self._on_lost, list(fenced))
                # a commit refused here (belief over, lease perhaps renewed since) leaves our owner record behind:
                # free it (the release compares our value, so a record the store already gave away is untouched)
                self._release(now, fenced)
            if self._to_release:
                self._release(now, dict(self._to_release))
            if self._uncertain and self._lease is not None:
                self._settle_uncertain(self._lease)
            if self._busy_until is not None:
                return self._busy_until
            return self._advance(now)

    def _within_belief(self) -> contextlib.AbstractContextManager[None]:
        """A time limit for the store calls of this step: what is left of the belief window (none without a lease)."""
        with self._lock:
            left = None if self._lease is None else self._deadline - self._clock.now()
        return self.store.time_limit(left)

    def _clean_up(self) -> None:
        """Finish what lapses left undone: revoke the old leases, then record the losses, oldest first; a store that
        still does not answer raises StoreUnavailable and the step is retried (the member registers again only
        after). Revoking a lease that is gone already is not an error (the contract)."""
        while self._dead_leases:
            self.store.revoke(self._dead_leases[0])
            self._dead_leases.pop(0)
        while self._unrecorded:
            fields = dict(self._unrecorded[0])
            self._put_event("lost", fields.pop("time"), **fields)
            self._unrecorded.pop(0)

    def _advance(self, now: float) -> float:
        """The protocol's part of a step (the member is started and not busy); returns the next deadline."""
        raise NotImplementedError

    def _drain_events(self) -> None:
        events = self._inbox
        self._inbox = []
        failed, self._watch_failed = self._watch_failed, None
        if self._watch is not None and failed is None:
            try:
                events.extend(self._watch.poll())
                if self._owner_watch is not None:
                    events.extend(self._owner_watch.poll())
            except Compacted as exc:
                failed = exc
        owners = self.keys.owners
        for event in events:
            if event.kv.key.startswith(owners):
                self._note_owner_event(event)
            self._on_event(event)
        if failed is not None:
            self._replace_watch(failed)

    def _replace_watch(self, failed: Compacted) -> None:
        """The watch lost events: it broke (an etcd member restarted, a stream went idle) and resumed below the
        store's compaction point, so what changed meanwhile is gone from the history. Close it; the step opens a
        new one from now and re-reads what the lost events would have told (``_resync``), never guessing past them.
        A watch the caller passed in is the caller's to replace: the error goes to it."""
        if not self._own_watch:
            raise failed
        if self._watch is not None:
            self._watch.close()
        if self._owner_watch is not None:
            self._owner_watch.close()
        self._watch = self._owner_watch = None
        self._resync_pending = True
        self._held.clear()  # the deletions a claim waits for may be among the lost events: claim again
        self._trace(TraceKind.WATCH_LOST, reason=str(failed))

    def _watch_again(self) -> None:
        """Open the new watch (``_start`` may have) and re-read; a store that does not answer leaves both to the
        next step. Runs inside the belief's time limit, after a lapse is handled, like every store call of a step."""
        if self._watch is None:
            self._watch = self.store.watch(self.keys.prefix)
        self._watch_owners()
        self._resync()
        self._resync_pending = False

    def _resync(self) -> dict[str, KeyValue | None]:
        """Re-read, in one snapshot, the keys whose changes this member takes from its watch (``_resync_keys``;
        the group's definition here) and apply each present one as the PUT event of its last change; returns what
        was read (None: absent) for an override that must act on an absence (hook)."""
        keys = [self.keys.resource, *self._resync_keys()]
        result = self.store.txn([], [Get(key) for key in keys])
        found: dict[str, KeyValue | None] = {}
        for key, kvs in zip(keys, result.responses, strict=True):
            found[key] = kvs[0] if isinstance(kvs, list) and kvs else None
        for kv in found.values():
            if kv is not None:
                self._on_event(Event(EventType.PUT, kv))
        return found

    def _resync_keys(self) -> list[str]:
        """The keys besides the group's definition that ``_resync`` re-reads (hook)."""
        return []

    def _on_event(self, event: Event) -> None:
        """One watched change under the group's prefix (hook)."""

    # -- membership ----------------------------------------------------------------------------------------

    def _start(self, now: float) -> bool:
        """Register: grant the lease and write ``members/<id>`` if no other live process holds that id. False when
        the id is taken (try again later); raises InvalidRequest once it has been taken for longer than a lease
        could outlive a dead holder (1.5 ttl): a second live member with the same id is an operator's mistake."""
        if self._watch is None:
            self._watch = self.store.watch(self.keys.prefix)
        self._load_config(now)
        self._watch_owners()
        if not self._id_free(now):
            return False
        lease = self.store.grant(self.config.ttl_s)
        member_key = self.keys.member(self.id)
        ops: list[Op] = [Put(member_key, encode(self._member_info(revoking=False)), lease.id)]
        ops += self._recorder.put("registered", now)
        result = self.store.txn([absent(member_key)], ops)
        if not result.succeeded:  # another process took the id between our read and our write
            with contextlib.suppress(StoreUnavailable):
                self.store.revoke(lease)
            return False
        with self._lock:
            self._lease = lease
            self._lease_lost = False
            self._deadline = now + lease.ttl_s * self.safety
        self._registered = lease.id
        self._replace = False  # fence a duplicate once, at the first start; never ping-pong with it afterwards
        self._taken_since = None
        self._trace(TraceKind.RENEW, deadline=self._deadline)
        self._started(now, result.revision)
        self._trace(TraceKind.REGISTERED, lease=lease.id)
        return True

    def _watch_owners(self) -> None:
        """Open the watch of the owner records' deletions where they live outside the watched prefix (layout 2),
        before the first claim, so that no release it waits for falls before it."""
        if self._own_watch and self._owner_watch is None and self.keys.ownership != self.keys.prefix:
            self._owner_watch = self.store.watch(self.keys.owners, deletes_only=True)

    def _id_free(self, now: float) -> bool:
        kv = self.store.get(self.keys.member(self.id))
        if kv is None:
            return True
        if self._registered is not None and _replaces(kv) == self._registered:
            # the holder fenced this member's registration (--replace): not a duplicate to fence back
            raise Fenced(f"member {self.id!r} of group {self.group!r}: replaced by another process with id {self.id!r}")
        if self._replace:  # revoking its lease fences the other holder: its owner records go, its renewals fail
            self._replaced = kv.lease
            self.store.revoke(kv.lease)
            self._trace(TraceKind.REPLACED, lease=kv.lease)
            return True
        if self._taken_since is None or self._taken_since[0] != kv.lease:
            self._taken_since = (kv.lease, now)
            self._trace(TraceKind.ID_TAKEN, lease=kv.lease)
        elif now - self._taken_since[1] > self.config.ttl_s * 1.5:
            raise InvalidRequest(
                "worker_id",
                f"member {self.id!r} is already live in group {self.group!r} (stop it, or --replace to fence it)",
            )
        return False

    def _registration(self) -> dict[str, Any]:
        """Extra fields of this member's ``members/<id>`` record (hook)."""
        return {}

    def _member_info(self, *, revoking: bool, left: bool = False) -> dict[str, Any]:
        info = {"pid": os.getpid(), "host": socket.gethostname(), **self._registration(), "revoking": revoking}
        if self._replaced is not None:  # so that the fenced process, registering again, knows it was replaced
            info["replaces"] = self._replaced
        return {**info, "left": True} if left else info

    def _announce(self, *, revoking: bool) -> None:
        """Publish in ``members/<id>`` whether this member is inside ``on_revoked``: it cannot take part in a round
        while its callback runs, and a closing round waits for such a member (not for a silent one)."""
        lease = self._lease
        if lease is None:
            return
        with contextlib.suppress(StoreUnavailable, LeaseNotFound):
            self.store.put(self.keys.member(self.id), encode(self._member_info(revoking=revoking)), lease.id)

    def _started(self, now: float, revision: int) -> None:
        """Called once the lease is granted and ``members/<id>`` written at ``revision`` (hook)."""

    def _load_config(self, now: float) -> None:
        """Read the group's definition (create it when absent; ``update``: replace it) and adopt it as ``config``,
        with the key names of its layout: a group keeps the layout it was created with, an update included
        (``_keys``). At the first start only, the requested definition is checked against the stored one
        (``GroupConfig.check_join``: another mode, or other partitions without ``update``, raise InvalidRequest and
        this member stops before registering); a stored definition that records no mode (an older version's) gets
        this member's, once. A definition changed later by another member is adopted, whatever it says
        (``apportion.group._config``: requested and effective definitions)."""
        kv = self.store.get(self.keys.resource)
        if kv is None:
            wanted = self._wanted.record()
            result = self.store.txn([absent(self.keys.resource)], [Put(self.keys.resource, wanted)])
            if result.succeeded:
                self._adopt(self._wanted, result.revision)
                self._joined = True
                return
            kv = self.store.get(self.keys.resource)
            if kv is None:
                raise StoreUnavailable("resource definition vanished while being created")
        try:
            stored: GroupConfig | None = GroupConfig.from_record(kv)
        except CorruptRecord:
            if not self._update:
                raise  # this worker stops (exit 2) naming the key; ``--update`` is the way out (below)
            stored = None
        if not self._joined:
            if stored is not None:
                self._wanted.check_join(stored, self.group, update=self._update, partitions=self._partitions_given)
            self._joined = True
            if stored is not None and stored.mode is None and not self._update:  # an older version's: this mode, once
                adopted = replace(stored, mode=self._wanted.mode).record()
                compare = mod_revision_is(self.keys.resource, kv.mod_revision)
                self.store.txn([compare], [Put(self.keys.resource, adopted)])
                kv = self.store.get(self.keys.resource) or kv
                stored = GroupConfig.from_record(kv)
        wanted_config = replace(self._wanted, layout=self._layout_of(stored))
        if self._update and kv.value != wanted_config.record():
            result = self.store.txn(
                [mod_revision_is(self.keys.resource, kv.mod_revision)],
                [Put(self.keys.resource, wanted_config.record())],
            )
            self._update = False
            if result.succeeded:
                self._adopt(wanted_config, result.revision)
                self._config_changed(result.revision)
                return
            kv = self.store.get(self.keys.resource) or kv
            stored = GroupConfig.from_record(kv)
        self._update = False
        if stored is None:  # pragma: no cover - an update either wrote the definition or read another's
            stored = GroupConfig.from_record(kv)
        self._adopt(stored, kv.mod_revision)

    def _layout_of(self, stored: GroupConfig | None) -> int:
        """The layout of the group: its stored definition's; when that is corrupt (an update replaces it), layout 1
        if epoch records exist where layout 1 keeps them (epochs outlive their owners), else the current one."""
        if stored is not None:
            return stored.layout
        legacy = Keys(self.group, LEGACY_LAYOUT)
        return LEGACY_LAYOUT if self.store.range(legacy.epochs, limit=1) else LAYOUT

    def _adopt(self, config: GroupConfig, revision: int) -> None:
        self.config, self._config_revision = config, revision
        if self.keys.layout != config.layout:
            self.keys = config.keys(self.group)

    def _config_changed(self, revision: int) -> None:
        """This member rewrote the resource definition at ``revision`` (hook)."""

    def _lapse(self, now: float, reason: str) -> None:
        """The belief ended (local deadline or lease gone): on_lost for everything at once (no store call before
        it), then drop the lease and start over; revoking the lease (frees the owner records now instead of at
        expiry) and recording the loss are left to ``_clean_up``, retried until done."""
        with self._lock:
            # partitions a commit refused at the deadline (moved to _fenced by the committer's thread) end here too:
            # their on_lost must not wait for the fenced branch, which runs only once the store answers again
            held = dict(sorted({**self._fenced, **self._owned}.items()))
            self._owned.clear()
            self._fenced, self._fenced_deadline = {}, -INF
            lease, self._lease = self._lease, None
            self._belief_ended = min(now, self._deadline)
            self._deadline = -INF
        lost = list(held)
        epochs = list(held.values())
        self._claiming.clear()
        self._held.clear()
        self._uncertain.clear()  # records an unknown claim may have written die with the lapsed lease
        self._to_release.clear()
        self._revoke_started = None
        self._renew_failing = False
        self._reset()
        self._trace(TraceKind.LOST, partitions=lost, epochs=epochs, reason=reason)
        if lease is not None:
            self._dead_leases.append(lease)
        if lost:
            self._unrecorded.append({"time": now, "partitions": lost, "epochs": epochs, "reason": reason})
        self._call(self._on_lost, lost)

    def _reset(self) -> None:
        """Forget the protocol state after a lapse; the member starts over (hook)."""

    def begin_leave(self, now: float) -> None:
        """Start a planned leave (hook): a protocol that can plan the handoff first (rounds) keeps its partitions
        until a plan without this member moves them, so that each one is unowned only from its release to its new
        owner's claim; keep stepping until ``leave_ready``, then call ``leave``."""

    def leave_ready(self, now: float) -> bool:
        """True once ``leave`` may run: the planned handoff is done, or could not be planned in time (hook)."""
        return True

    def leave(self) -> None:
        """Graceful leave: on_revoked for everything, commit is the callback's job, release, drop membership."""
        if self._stopped:
            return
        now = self._clock.now()
        with self._lock:
            owned = sorted_pids(self._owned)
        self._claiming.clear()
        try:
            if owned and self._lease is not None and now < self._deadline:
                self._revoke_started = now
                self._trace(TraceKind.REVOKING, partitions=owned)
                try:
                    self._call(self._on_revoked, owned)
                finally:
                    self._revoke_started = None
                    self._finish_revoke(owned)
            elif owned:
                self._lapse(now, "lease deadline passed")
            with contextlib.suppress(StoreUnavailable):
                self._clean_up()
            lease = self._lease
            if lease is not None:
                with contextlib.suppress(StoreUnavailable, LeaseNotFound):
                    # members/<id> says "left" before it goes: its deletion is then not a failure (the coordinator
                    # lists members whose lease ended otherwise)
                    left = encode(self._member_info(revoking=False, left=True))
                    ops: list[Op] = [Put(self.keys.member(self.id), left, lease.id)]
                    ops += self._recorder.put("left", self._clock.now())
                    self.store.txn([], ops)
                with contextlib.suppress(StoreUnavailable):
                    self.store.revoke(lease)
        finally:
            self._stop()

    def give_up(self, reason: str) -> None:
        """Stop at once and write nothing to the group (it is in a format this version cannot read: ``NewerFormat``):
        ``on_lost`` for everything held (stop processing, do not commit), then the leases revoked (best effort: a
        revocation deletes this member's own records, whatever format the group is in)."""
        try:
            if not self._stopped:
                self._lapse(self._clock.now(), reason)
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Stop without callbacks (after a callback error): beliefs end, the leases are revoked (best effort)."""
        leases = [*self._dead_leases, *([self._lease] if self._lease is not None else [])]
        self._stop()
        for lease in leases:
            with contextlib.suppress(Exception):
                self.store.revoke(lease)

    def _stop(self) -> None:
        with self._lock:
            self._owned.clear()
            self._lease = None
            self._deadline = -INF
        self._stopped = True
        if self._watch is not None and self._own_watch:
            self._watch.close()
        if self._owner_watch is not None:
            self._owner_watch.close()
        self._trace(TraceKind.STOPPED)

    # -- ownership -----------------------------------------------------------------------------------------

    def _revoke(self, parts: list[PartitionId]) -> None:
        self._revoke_started = self._clock.now()
        self._trace(TraceKind.REVOKING, partitions=parts)
        self._announce(revoking=True)
        delay = self._delay("revoked", parts) if self._delay is not None else 0.0
        if delay > 0:  # the simulator's slow callback: the member is busy until the callback "returns"
            self._busy_until = self._revoke_started + delay
            self._continuation = lambda: self._finish_revoke(parts, call=True)
            return
        try:
            self._call(self._on_revoked, parts)
        finally:
            self._revoke_started = None
        self._finish_revoke(parts)

    def _finish_revoke(self, parts: list[PartitionId], *, call: bool = False) -> None:
        if call:
            try:
                self._call(self._on_revoked, parts)
            finally:
                self._revoke_started = None
        self._announce(revoking=False)
        with self._lock:
            releasing = {p: self._owned.pop(p) for p in parts if p in self._owned}
        self._trace(TraceKind.REVOKED, partitions=parts)
        self._release(self._clock.now(), releasing)

    def _release(self, now: float, parts: Mapping[PartitionId, int]) -> None:
        lease = self._lease
        if lease is None:
            self._to_release.clear()
            return
        self._to_release.update(parts)
        for chunk in chunks(sorted_pids(parts)):
            compares = [value_is(self.keys.owner(p), self._owner_value(parts[p])) for p in chunk]
            ops: list[Op] = [Delete(self.keys.owner(p)) for p in chunk]
            ops += self._recorder.put("release", now, partitions=list(chunk), epochs=[parts[p] for p in chunk])
            if not self.store.txn(compares, ops).succeeded:
                for p in chunk:  # some record is not ours any more: release the others one by one
                    self.store.txn([compares[chunk.index(p)]], [Delete(self.keys.owner(p))])
            for p in chunk:
                self._to_release.pop(p, None)
        self._trace(TraceKind.RELEASED, partitions=sorted_pids(parts))

    def _claim(self, now: float) -> None:
        """Claim the wanted partitions not known to be held by another member, chunk by chunk, applying each chunk
        as it lands (on_assigned per chunk: a member never holds owner records it does not act on), for at most
        ``CLAIM_SLICE_S`` per step (the step then drains its watch: a newer plan may want something else)."""
        lease = self._lease
        with self._lock:
            if lease is None or now >= self._deadline:
                return
        try:
            began = self._clock.now()
            for chunk in chunks(self._claimable(began)):
                claimed = self._claim_chunk(now, lease, list(chunk), retry=True)
                if claimed and not self._apply_claims(lease, claimed):
                    return
                if self._clock.now() - began >= CLAIM_SLICE_S:
                    break
        except LeaseNotFound:
            with self._lock:
                self._lease_lost = True

    def _claimable(self, now: float) -> list[PartitionId]:
        """The wanted partitions worth a claim now: not held by another member's record, unless that record was
        seen more than a ttl ago (its deletion event is what frees it: ``_note_owner_event``; the ttl is a bound
        on a missed one)."""
        held = self._held
        for p in [p for p in held if p not in self._claiming]:
            del held[p]
        retry_before = now - self.config.ttl_s
        return sorted_pids(p for p in self._claiming if held.get(p, -INF) <= retry_before)

    def _apply_claims(self, lease: StoreLease, claimed: Mapping[PartitionId, int]) -> bool:
        """Believe ``claimed`` and call on_assigned; False when the lease ended meanwhile (the claims die with it)."""
        parts = sorted_pids(claimed)
        self._claiming.difference_update(parts)
        now = self._clock.now()
        with self._lock:
            if now >= self._deadline or self._lease is not lease:
                return False  # the lapse path runs at the next step
            self._owned.update(claimed)
        self._trace(TraceKind.ASSIGNED, partitions=parts, epochs=[claimed[p] for p in parts])
        self._call(self._on_assigned, parts)
        return True

    def _settle_uncertain(self, lease: StoreLease) -> None:
        """Claims whose transaction's outcome is unknown (the store did not answer) may have written owner records
        under this lease: read them; adopt those still wanted, give the others back (a record nobody acts on would
        keep its partition from everyone for as long as this member lives)."""
        while self._uncertain:
            chunk = sorted_pids(self._uncertain)[:CHUNK]
            found = self.store.txn([], [Get(self.keys.owner(p)) for p in chunk]).responses
            mine: dict[PartitionId, int] = {}
            for p, kvs in zip(chunk, found, strict=True):
                assert isinstance(kvs, list)
                if kvs and kvs[0].lease == lease.id:
                    member, epoch = decode_owner(kvs[0])
                    if member == self.id:
                        mine[p] = epoch
                        self._epochs[p] = (epoch, kvs[0].mod_revision)  # a claim writes owner and epoch together
            wanted = {p: e for p, e in mine.items() if p in self._claiming}
            self._uncertain.difference_update(chunk)
            if mine.keys() - wanted.keys():
                self._trace(TraceKind.GIVE_BACK, partitions=sorted_pids(mine.keys() - wanted.keys()))
                self._release(self._clock.now(), {p: e for p, e in mine.items() if p not in wanted})
            if wanted and not self._apply_claims(lease, wanted):
                return

    def _note_owner_event(self, event: Event) -> None:
        """An owner record was deleted (released, or its lease ended): a claim of that partition may succeed now."""
        if event.type is EventType.DELETE:
            pid = pid_of_key(event.kv.key[len(self.keys.owners) :])
            if pid is not None:
                self._held.pop(pid, None)

    def _claim_chunk(
        self, now: float, lease: StoreLease, chunk: list[PartitionId], *, retry: bool
    ) -> dict[PartitionId, int]:
        """One claim transaction: every partition of ``chunk`` (absent owner record, unchanged epoch) or none. On
        failure the owner and epoch records read back say which are free (claimed again once, ``retry``), which
        another member holds (``_held``) and which are this member's own under this lease: a claim whose outcome
        it did not learn (adopted)."""
        compares = []
        success: list[Op] = []
        failure: list[Op] = []
        for p in chunk:
            epoch, rev = self._epochs.get(p, (0, 0))
            owner_key, epoch_key = self.keys.owner(p), self.keys.epoch(p)
            compares += [absent(owner_key), mod_revision_is(epoch_key, rev)]
            success += [
                Put(owner_key, self._owner_value(epoch + 1), lease.id),
                Put(epoch_key, str(epoch + 1).encode()),
            ]
            failure += [Get(owner_key), Get(epoch_key)]
        epochs = [self._epochs.get(p, (0, 0))[0] + 1 for p in chunk]
        success += self._recorder.put("claim", now, partitions=chunk, epochs=epochs)
        try:
            result = self.store.txn(compares, success, failure)
        except StoreUnavailable:
            self._uncertain.update(chunk)  # written or not: settled by reading back (``_settle_uncertain``)
            raise
        if result.succeeded:
            for p, epoch in zip(chunk, epochs, strict=True):
                self._epochs[p] = (epoch, result.revision)
            self._trace(TraceKind.CLAIM, partitions=chunk, epochs=epochs)
            return dict(zip(chunk, epochs, strict=True))
        free: list[PartitionId] = []
        mine: dict[PartitionId, int] = {}
        seen = self._clock.now()
        for i, p in enumerate(chunk):
            owner_kvs, epoch_kvs = result.responses[2 * i], result.responses[2 * i + 1]
            assert isinstance(owner_kvs, list) and isinstance(epoch_kvs, list)
            if epoch_kvs:  # the fence's counter: a corrupt one cannot be guessed past (CorruptRecord: exit 2)
                self._epochs[p] = (decode_epoch(epoch_kvs[0].value, epoch_kvs[0].key), epoch_kvs[0].mod_revision)
            else:
                self._epochs[p] = (0, 0)
            if not owner_kvs:
                free.append(p)
                continue
            # a record no claim wrote (bound to no lease) would hold p forever: say so instead of waiting
            member, epoch = decode_owner(owner_kvs[0])
            if member == self.id and owner_kvs[0].lease == lease.id:
                mine[p] = epoch
            else:
                self._held[p] = seen
        if mine:
            self._trace(TraceKind.ADOPTED, partitions=sorted_pids(mine))
        if free and retry:
            mine.update(self._claim_chunk(now, lease, free, retry=False))
        return mine

    # -- helpers -------------------------------------------------------------------------------------------

    def _owner_value(self, epoch: int) -> bytes:
        value = self._owner_values.get(epoch)
        if value is None:
            if len(self._owner_values) >= 4096:
                self._owner_values.clear()
            value = self._owner_values[epoch] = owner_value(self.id, epoch)
        return value

    def _call(self, callback: Callback | None, parts: list[PartitionId]) -> None:
        if callback is not None and parts:
            callback(list(parts))

    def _put_event(self, kind: str, now: float, **fields: Any) -> None:
        ops = self._recorder.put(kind, now, **fields)
        if ops:
            self.store.txn([], ops)

    def _trace(self, kind: TraceKind, **fields: Any) -> None:
        if self._tracer is not None:
            self._tracer(kind, fields)


def _replaces(kv: KeyValue) -> int | None:
    """The lease a ``members/<id>`` record says its process fenced (``replaces``: --replace), None when it fenced
    none (a corrupt record fenced none: registrations only inform)."""
    try:
        value = decode(kv.value, kv.key).get("replaces")
    except CorruptRecord:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


__all__ = [
    "CHUNK",
    "INF",
    "Callback",
    "DelayHook",
    "FencedMember",
    "MemberOptions",
    "PartitionLease",
    "Ownership",
    "Planner",
    "chunks",
    "default_planner",
]
