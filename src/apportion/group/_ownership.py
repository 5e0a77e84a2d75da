"""Fenced, epoch-numbered ownership of partitions: the part every protocol (rounds, coordinator, static) shares.

``FencedMember`` holds one member lease and the partitions this member believes it owns. A protocol subclass decides
*which* partitions the member should own (``_claims.wanted``) and which it must give up (``_revoke``); this base class
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

Member lifecycle shared by all protocols (``MemberState``, ``FencedMember.state``, changed by ``_enter`` only)::

    STARTING --step: a lapse's clean-up done (old leases revoked, losses recorded), the group watched, its
               definition read or created, the lease granted, members/<id> written (lease-bound)--> ACTIVE
    STARTING --step: another live registration holds the id--> STARTING (again 0.25 s later; 1.5 ttl: an error)
    ACTIVE   --step: the protocol's ``_advance``--> ACTIVE
    ACTIVE   --``_revoke`` with a slow on_revoked (the simulator's delay hook)--> BUSY --step after the delay:
               on_revoked returns, release--> ACTIVE
    ACTIVE   --local deadline passed, or lease gone: on_lost(all) first, then the lease dropped--> STARTING
    any      --``leave`` (on_revoked(all), release, members/<id> says "left", lease revoked), ``give_up``
               (on_lost(all)), ``abandon`` (no callbacks)--> STOPPED

A protocol may plan a leave's handoff first: ``begin_leave``, step until ``leave_ready``, then ``leave``.

The parts, one job each, around the one state above (each shares the member's ``_context``: store, ids, clock,
keys, definition, recorder, tracer):

- ``_belief.Belief``: the lease and the belief (partition -> epoch, the local deadline, renewals), under the lock
  the keepalive and committing threads share;
- ``_claims.Claimer``: the claims and releases of owner records, and what they learn (epochs, records held by
  others, claims of unknown outcome);
- ``_inbox.WatchInbox``: the watches (the group's prefix; the owner records' deletions) and the events heard until
  the next step, and a watch that lost events replaced;
- ``_definition.Definition``: the requested definition against the stored one, at each start;
- ``_registration.Registration``: who holds this member's id (one live process per id, ``replace``), and its
  ``members/<id>`` record;
- ``_committer.Committer``: the fenced commits, the belief checked before each chunk is sent.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Mapping, Set
from typing import Any, Required, TypedDict

from apportion.clock import Clock
from apportion.errors import Fenced, InvalidRequest, LeaseNotFound, StoreFull, StoreUnavailable
from apportion.group._belief import INF, Belief, PartitionLease
from apportion.group._claims import CHUNK, Callback, Claimer, call, chunks
from apportion.group._commits import CHUNK_BYTES, CHUNK_PARTITIONS, CommitResult, read_checkpoint
from apportion.group._committer import Committer
from apportion.group._config import GroupConfig
from apportion.group._context import MemberContext
from apportion.group._definition import Definition
from apportion.group._history import DEFAULT_RETENTION_S, HistoryType, Recorder
from apportion.group._inbox import WatchInbox
from apportion.group._keys import Keys, PartitionId, encode, sorted_pids, validate_member_id
from apportion.group._registration import Registration
from apportion.group._trace import TraceKind, Tracer
from apportion.model import AssignRequest, Plan
from apportion.store import Event, EventType, Get, KeyValue, Op, Put, Store, Watch, absent
from apportion.store import Lease as StoreLease

_ID_RETRY_S = 0.25  # how often a member whose id is held by another registration looks again

Planner = Callable[[AssignRequest], Plan]
DelayHook = Callable[[str, list[Any]], float]


class Ownership(enum.Enum):
    CLAIMING = "claiming"
    OWNED = "owned"
    REVOKING = "revoking"


class MemberState(enum.Enum):
    """Where a member is in its life (the module docstring's lifecycle)."""

    STARTING = "starting"  # no lease: the next step finishes a lapse's clean-up, then registers
    ACTIVE = "active"  # registered under its lease: the protocol advances; beliefs last until the local deadline
    BUSY = "busy"  # inside a slow on_revoked (the simulator's delay hook): stepped again once it returns
    STOPPED = "stopped"  # left, gave up or abandoned: steps do nothing


def default_planner(request: AssignRequest) -> Plan:
    from apportion.assign import plan

    return plan(request)


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
    ``keepalive``, ``commit``, ``commit_many``, ``owned``, ``lease``, ``checkpoint`` and ``stable`` (guarded by the
    belief's lock); everything else runs on one stepping thread. Subclasses implement ``_advance`` (and may
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
        self.group = group
        self.id = member_id
        keys = Keys(group)
        # ``config`` is the effective definition: the requested one until the stored one is read
        recorder = Recorder(keys, member_id, history_retention_s)
        self._ctx = MemberContext(store, group, member_id, clock, keys, config, recorder, tracer)
        self._definition = Definition(self._ctx, config, update=update, partitions_given=partitions_given)
        self._clock = clock
        self._recorder = recorder
        self._on_revoked = on_revoked
        self._on_lost = on_lost
        self.claim_retry_s = claim_retry_s
        self._delay = delay
        self._belief = Belief(self._ctx, safety=safety, revoke_timeout_s=revoke_timeout_s)
        self._claims = Claimer(self._ctx, self._belief, on_assigned)
        self._inbox = WatchInbox(self._ctx, watch)
        self._registrar = Registration(self._ctx, replace=replace)
        self._committer = Committer(self._ctx, self._belief)
        self.state = MemberState.STARTING
        self._busy: tuple[float, Callable[[], None]] | None = None  # BUSY: until when, and what then
        self.error: BaseException | None = None

    def _enter(self, state: MemberState, busy: tuple[float, Callable[[], None]] | None = None) -> None:
        """The one place the member's state changes (``busy``: BUSY's end and what runs then)."""
        self.state = state
        self._busy = busy

    # -- what the parts share ------------------------------------------------------------------------------

    @property
    def keys(self) -> Keys:
        return self._ctx.keys

    @keys.setter
    def keys(self, keys: Keys) -> None:
        self._ctx.keys = keys

    @property
    def config(self) -> GroupConfig:
        """The effective definition: the requested one until the stored one is read, then the stored one."""
        return self._ctx.config

    @config.setter
    def config(self, config: GroupConfig) -> None:
        self._ctx.config = config

    @property
    def _config_revision(self) -> int:
        """The revision of the stored definition ``config`` is (0: not read yet)."""
        return self._ctx.config_revision

    @_config_revision.setter
    def _config_revision(self, revision: int) -> None:
        self._ctx.config_revision = revision

    @property
    def safety(self) -> float:
        return self._belief.safety

    @property
    def revoke_timeout_s(self) -> float:
        return self._belief.revoke_timeout_s

    @property
    def stopped(self) -> bool:
        return self.state is MemberState.STOPPED

    @property
    def busy_until(self) -> float | None:
        """When a slow on_revoked returns (BUSY); None otherwise."""
        busy = self._busy
        return None if busy is None else busy[0]

    @property
    def wanted(self) -> Set[PartitionId]:
        """The partitions the protocol wants this member to hold and it does not hold yet (read only)."""
        return self._claims.wanted

    # -- public, thread-safe -------------------------------------------------------------------------------

    def owned(self) -> list[PartitionId]:
        """Partitions currently believed owned (empty once the local lease deadline has passed)."""
        return self._belief.owned_at(self._clock.now())

    def lease(self, partition: PartitionId) -> PartitionLease:
        return self._belief.lease_of(partition, self._clock.now())

    def stable(self) -> bool:
        """True when the member holds exactly what its protocol wants it to hold."""
        raise NotImplementedError

    @property
    def local_deadline(self) -> float:
        return self._belief.local_deadline()

    @property
    def belief_ended_at(self) -> float | None:
        """When the belief that the latest ``on_lost`` ended came to its end: the local deadline if it had passed
        (a frozen process learns of its loss late, but it believed only until then), else the moment of the loss.
        None before any loss. Read it in ``on_lost`` to report the loss with its true end."""
        return self._belief.belief_ended_at()

    @property
    def store_lease(self) -> StoreLease | None:
        return self._belief.lease

    def may_renew(self, now: float) -> bool:
        """False while a revocation overruns ``revoke_timeout_s`` (bounded revocation: let the lease lapse)."""
        return self._belief.may_renew(now)

    def keepalive(self, now: float) -> bool:
        """Renew the member lease; ``now`` is the local time of the request. Called by the keepalive thread / sim.
        The request may take at most what is left of the belief window (a renewal that lands later revives
        nothing). True when the lease was renewed."""
        if self.stopped:
            return False
        return self._belief.keepalive(now)

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
        return self._committer.fence_only(partition, checkpoint, epoch, now)

    def _commit(
        self, checkpoints: Mapping[PartitionId, str], epochs: Mapping[PartitionId, int] | None
    ) -> tuple[CommitResult, StoreUnavailable | None]:
        """``commit_many``, and the StoreUnavailable that ended it early (``commit`` raises it): ``_committer``."""
        count, budget = self.max_commit_partitions, self.max_commit_bytes
        return self._committer.commit(checkpoints, epochs, count=count, budget=budget)

    @property
    def claiming(self) -> int:
        """How many wanted partitions still wait for their previous owner's release."""
        return len(self._claims.wanted)

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
        self._inbox.wait(timeout_s, owners=bool(self._claims.held))

    def step(self, now: float | None = None) -> float:
        """Advance the protocol; return the local time by which it wants to be stepped again."""
        if self.state is MemberState.STOPPED:
            return INF
        now = self._clock.now() if now is None else now
        try:
            busy = self._busy
            if busy is not None:
                until, continuation = busy
                if now < until:
                    return until
                self._enter(MemberState.ACTIVE)
                with self._within_belief():
                    continuation()
                now = self._clock.now()
            return self._step(now)
        except LeaseNotFound:
            self._belief.lose_lease()
            return now
        except StoreUnavailable as exc:  # StoreFull too: retried until an operator gives the store space again
            self._trace(TraceKind.STORE_UNAVAILABLE, reason=str(exc), full=isinstance(exc, StoreFull))
            return min(now + max(self.claim_retry_s, 0.05) * 2, self._lapse_at())

    def _lapse_at(self) -> float:
        return self._belief.lapse_at()

    def _step(self, now: float) -> float:
        self._drain_events()
        belief, claims = self._belief, self._claims
        if belief.lapsed(now):
            self._lapse(now, "lease lost" if belief.lease_lost else "lease deadline passed")
        self._clean_up()
        if self.state is MemberState.STARTING:
            if not self._start(now):
                return now + _ID_RETRY_S
            now = self._clock.now()
        with self._within_belief():
            if self._inbox.resync_pending:
                self._watch_again()
            if belief.fenced:
                fenced = belief.take_fenced(now)
                self._trace(TraceKind.LOST, partitions=list(fenced), epochs=list(fenced.values()), reason="fenced")
                call(self._on_lost, list(fenced))
                # a commit refused here (belief over, lease perhaps renewed since) leaves our owner record behind:
                # free it (the release compares our value, so a record the store already gave away is untouched)
                claims.release(now, fenced)
            if claims.to_release:
                claims.release(now, dict(claims.to_release))
            lease = belief.lease
            if claims.uncertain and lease is not None:
                claims.settle_uncertain(lease)
            busy_until = self.busy_until
            if busy_until is not None:
                return busy_until
            return self._advance(now)

    def _within_belief(self) -> contextlib.AbstractContextManager[None]:
        """A time limit for the store calls of this step: what is left of the belief window (none without a lease)."""
        return self._belief.within()

    def _clean_up(self) -> None:
        """Finish what lapses left undone (``Belief.clean_up``): the member registers again only after."""
        self._belief.clean_up()

    def _advance(self, now: float) -> float:
        """The protocol's part of a step (the member is started and not busy); returns the next deadline."""
        raise NotImplementedError

    def _drain_events(self) -> None:
        events, failed = self._inbox.drain()
        owners = self.keys.owners
        for event in events:
            if event.kv.key.startswith(owners):
                self._claims.note_owner_event(event)
            self._on_event(event)
        if failed is not None:
            # the watch broke (an etcd member restarted, a stream went idle) and resumed below the store's compaction
            # point: what changed meanwhile is gone from the history. The step opens a new one from now and re-reads
            # what the lost events would have told (``_resync``), never guessing past them.
            self._inbox.lost(failed)
            self._claims.held.clear()  # the deletions a claim waits for may be among the lost events: claim again
            self._trace(TraceKind.WATCH_LOST, reason=str(failed))

    def _watch_again(self) -> None:
        """Open the new watch (``_start`` may have) and re-read; a store that does not answer leaves both to the
        next step. Runs inside the belief's time limit, after a lapse is handled, like every store call of a step."""
        self._inbox.open()
        self._inbox.watch_owners()
        self._resync()
        self._inbox.resync_pending = False

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
        self._inbox.open()
        self._load_config(now)
        self._inbox.watch_owners()
        if not self._registrar.id_free(now):
            return False
        lease = self.store.grant(self.config.ttl_s)
        member_key = self.keys.member(self.id)
        ops: list[Op] = [Put(member_key, encode(self._member_info(revoking=False)), lease.id)]
        ops += self._recorder.put(HistoryType.REGISTERED, now)
        result = self.store.txn([absent(member_key)], ops)
        if not result.succeeded:  # another process took the id between our read and our write
            with contextlib.suppress(StoreUnavailable):
                self.store.revoke(lease)
            return False
        self._belief.grant(lease, now)
        self._enter(MemberState.ACTIVE)
        self._registrar.registered_under(lease.id)
        self._trace(TraceKind.RENEW, deadline=self._belief.deadline)
        self._started(now, result.revision)
        self._trace(TraceKind.REGISTERED, lease=lease.id)
        return True

    def _registration(self) -> dict[str, Any]:
        """Extra fields of this member's ``members/<id>`` record (hook)."""
        return {}

    def _member_info(self, *, revoking: bool, left: bool = False) -> dict[str, Any]:
        return self._registrar.record(self._registration(), revoking=revoking, left=left)

    def _announce(self, *, revoking: bool) -> None:
        """Publish in ``members/<id>`` whether this member is inside ``on_revoked``: it cannot take part in a round
        while its callback runs, and a closing round waits for such a member (not for a silent one)."""
        lease = self._belief.lease
        if lease is None:
            return
        with contextlib.suppress(StoreUnavailable, LeaseNotFound):
            self.store.put(self.keys.member(self.id), encode(self._member_info(revoking=revoking)), lease.id)

    def _started(self, now: float, revision: int) -> None:
        """Called once the lease is granted and ``members/<id>`` written at ``revision`` (hook)."""

    def _load_config(self, now: float) -> None:
        """Read the group's definition (create it when absent; ``update``: replace it) and adopt it as ``config``,
        with the key names of its layout (``_definition``: what is checked, created and updated, when)."""
        config, revision, rewritten = self._definition.load()
        self._adopt(config, revision)
        if rewritten:
            self._config_changed(revision)

    def _adopt(self, config: GroupConfig, revision: int) -> None:
        self.config, self._config_revision = config, revision
        if self.keys.layout != config.layout:
            self.keys = config.keys(self.group)

    def _config_changed(self, revision: int) -> None:
        """This member rewrote the resource definition at ``revision`` (hook)."""

    def _lapse(self, now: float, reason: str) -> None:
        """The belief ended (local deadline or lease gone): on_lost for everything at once (no store call before
        it), then drop the lease and start over (what the store must still be told: ``_clean_up``)."""
        held = self._belief.end(now, reason)
        self._claims.forget()
        self._enter(MemberState.STARTING)
        self._reset()
        self._trace(TraceKind.LOST, partitions=list(held), epochs=list(held.values()), reason=reason)
        call(self._on_lost, list(held))

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
        if self.stopped:
            return
        now = self._clock.now()
        belief = self._belief
        owned = sorted_pids(belief.held())
        self._claims.wanted.clear()
        try:
            if owned and belief.lease is not None and now < belief.deadline:
                belief.revoke_started = now
                self._trace(TraceKind.REVOKING, partitions=owned)
                try:
                    call(self._on_revoked, owned)
                finally:
                    belief.revoke_started = None
                    self._finish_revoke(owned)
            elif owned:
                self._lapse(now, "lease deadline passed")
            with contextlib.suppress(StoreUnavailable):
                self._clean_up()
            lease = belief.lease
            if lease is not None:
                with contextlib.suppress(StoreUnavailable, LeaseNotFound):
                    # members/<id> says "left" before it goes: its deletion is then not a failure (the coordinator
                    # lists members whose lease ended otherwise)
                    left = encode(self._member_info(revoking=False, left=True))
                    ops: list[Op] = [Put(self.keys.member(self.id), left, lease.id)]
                    ops += self._recorder.put(HistoryType.LEFT, self._clock.now())
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
            if not self.stopped:
                self._lapse(self._clock.now(), reason)
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Stop without callbacks (after a callback error): beliefs end, the leases are revoked (best effort)."""
        leases = self._belief.leases()
        self._stop()
        for lease in leases:
            with contextlib.suppress(Exception):
                self.store.revoke(lease)

    def _stop(self) -> None:
        self._belief.clear()
        self._enter(MemberState.STOPPED)
        self._inbox.close()
        self._trace(TraceKind.STOPPED)

    # -- ownership -----------------------------------------------------------------------------------------

    def _claim(self, now: float) -> None:
        """Claim the wanted partitions (``_claims``)."""
        self._claims.claim(now)

    def _revoke(self, parts: list[PartitionId]) -> None:
        started = self._belief.revoke_started = self._clock.now()
        self._trace(TraceKind.REVOKING, partitions=parts)
        self._announce(revoking=True)
        delay = self._delay("revoked", parts) if self._delay is not None else 0.0
        if delay > 0:  # the simulator's slow callback: the member is busy until the callback "returns"
            self._enter(MemberState.BUSY, (started + delay, lambda: self._finish_revoke(parts, slow=True)))
            return
        try:
            call(self._on_revoked, parts)
        finally:
            self._belief.revoke_started = None
        self._finish_revoke(parts)

    def _finish_revoke(self, parts: list[PartitionId], *, slow: bool = False) -> None:
        if slow:
            try:
                call(self._on_revoked, parts)
            finally:
                self._belief.revoke_started = None
        self._announce(revoking=False)
        releasing = self._belief.drop(parts)
        self._trace(TraceKind.REVOKED, partitions=parts)
        self._claims.release(self._clock.now(), releasing)

    # -- helpers -------------------------------------------------------------------------------------------

    def _owner_value(self, epoch: int) -> bytes:
        return self._ctx.owner_value(epoch)

    def _trace(self, kind: TraceKind, **fields: Any) -> None:
        self._ctx.trace(kind, **fields)


__all__ = [
    "CHUNK",
    "INF",
    "Callback",
    "DelayHook",
    "FencedMember",
    "MemberOptions",
    "MemberState",
    "PartitionLease",
    "Ownership",
    "Planner",
    "chunks",
    "default_planner",
]
