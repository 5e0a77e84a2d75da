"""The run loop a user embeds: ``Group`` (a group's definition on a store) and ``Worker`` (one running member).

A ``Worker`` runs the pure protocol core on two threads — the member ``apportion.group.new_member`` builds for the
group's mode: :class:`apportion.group.RoundsMember` (``Rounds()``, seed 0), :class:`apportion.group.CoordinatorMember`
(``Coordinator(...)``, seed 1) or :class:`apportion.group.StaticMember` (``Static(...)``, seed 3); all share
``FencedMember``'s ownership::

    worker thread:    loop { deadline = member.step(now); member.wait_events(until deadline, at most 0.1 s) }
                      when stopped: member.begin_leave(), the same loop until member.leave_ready() (rounds: a
                      plan without this worker has moved its partitions, at most MRI + RST + ttl), then
                      member.leave() (on_revoked and release of what is left, lease revoked)
    keepalive thread: every ttl/4 (0.5 s on etcd): member.keepalive(request time)  — so a slow callback does not
                      lose the lease, unless a revocation overruns ``revoke_timeout_s`` (then renewal stops and the
                      lease lapses); then a look at ``store.refusing_writes()``: one line when the store starts
                      refusing writes for lack of space (``StoreFull``), one when it takes them again

Worker states::

    RUNNING --stop() / SIGINT / SIGTERM (run)--> LEAVING (rounds: announce it, wait for a plan without this worker
            and hand over as it says; then revoke, commit, release what is left, delete membership) --> STOPPED
    RUNNING --a callback raises--> FAILED (no further callbacks, lease revoked) --> STOPPED; the error is re-raised
            by ``stop()``, the ``with`` block and ``Group.run``

Callbacks (``on_assigned``, ``on_revoked``, ``on_lost``) run on the worker thread with sorted partition numbers.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from types import FrameType, TracebackType
from typing import Any, TypedDict, Unpack

from apportion.clock import SYSTEM_CLOCK, Clock, clock_text
from apportion.errors import CorruptRecord, InvalidRequest, NewerFormat, StoreUnavailable
from apportion.group import (
    DEFAULT_RETENTION_S,
    Callback,
    CommitResult,
    CoordinatorMember,
    FencedMember,
    GroupConfig,
    Mode,
    PartitionId,
    PartitionLease,
    ReplicaLags,
    ReplicasCallback,
    Restored,
    Rounds,
    RoundsMember,
    TraceKind,
    Tracer,
    new_member,
    set_replicas,
)
from apportion.group.internals import NO_STATIC_SUBSCRIPTIONS, validate_group, validate_ordinal
from apportion.store import Store

"""A protocol event observer: ``tracer(kind, fields)``, called on the worker's threads (keep it fast)."""

log = logging.getLogger("apportion.worker")

_MAX_WAIT_S = 0.1
_RETRY_S = 0.1
REFUSAL_REPEAT_S = 60.0  # a store that refuses writes is said again this often while it lasts (_note_refusal)

DEFAULT_REVOKE_TIMEOUT_S = 10.0
"""How long ``on_revoked`` may run before the lease is let go, unless ``JoinOptions.revoke_timeout_s`` says."""


class JoinOptions(TypedDict, total=False):
    """How one worker takes part in its group: everything :meth:`Group.join` takes beside the worker's id and
    callbacks, as one value that travels whole from the CLI (``apportion.runner``), the Spark worker and
    ``apportion.aio`` to :class:`Worker` (the one place that applies the defaults, written here).

    ``capacity`` (1.0) and ``rack`` (None): the worker's weight and failure domain for the strategies that use them.
    ``revoke_timeout_s`` (:data:`DEFAULT_REVOKE_TIMEOUT_S`, 10 s): how long ``on_revoked`` may run before the lease
    is let go. ``history_retention_s`` (one hour; 0 records none): how long the group's history keeps events.
    ``tracer(kind, fields)`` (None): observes every protocol event (e.g. :class:`apportion.metrics.MetricsTracer`).
    ``replica_lags``, ``on_replicas`` (None): a stateful group's standby and learner replicas, rounds mode.
    ``restored`` (None): a coordinator member's migration acks. ``replace`` (False): fence a live worker with the
    same id and take its place. ``subscriptions`` (None: every resource): the resources this worker consumes.
    :meth:`Group.join` says more."""

    capacity: float
    rack: str | None
    revoke_timeout_s: float
    history_retention_s: float
    tracer: Tracer | None
    replica_lags: ReplicaLags | None
    on_replicas: ReplicasCallback | None
    restored: Restored | None
    replace: bool
    subscriptions: Sequence[str] | None


class Worker:
    """One running member of a group. Create with :meth:`Group.join`; use as a context manager."""

    def __init__(
        self,
        group: Group,
        worker_id: str,
        *,
        on_assigned: Callback | None,
        on_revoked: Callback | None,
        on_lost: Callback | None,
        options: JoinOptions,
        on_wake: Callable[[], None] | None = None,
    ) -> None:
        self.group = group
        self._tracer = options.get("tracer")
        # called on the worker's threads whenever ``wait_until_stable``'s condition may have changed (after each
        # step, at the end): how ``apportion.aio`` wakes its waiters on the event loop; keep it quick, never raise
        self._on_wake = on_wake
        self.id = worker_id
        self._clock = group.clock
        self._stop = threading.Event()
        self._done = threading.Event()
        self._changed = threading.Condition()
        # whether the member was stable at the end of its last step, its callbacks run: a claim is believed (stable)
        # before on_assigned is called, so stability read between the two would run ahead of the callbacks
        self._stable_after_step = False
        self.error: BaseException | None = None
        self._refusing: str | None = None  # the store's refusal of writes last logged (StoreFull), None: none
        self._refusal_since = self._refusal_said_at = 0.0  # when the refusal began, when its line was last written
        self._member = new_member(
            group.store,
            group.name,
            worker_id,
            group.requested,
            ordinal=group.ordinal,
            subscriptions=options.get("subscriptions"),
            capacity=options.get("capacity", 1.0),
            rack=options.get("rack"),
            replica_lags=options.get("replica_lags"),
            on_replicas=options.get("on_replicas"),
            restored=options.get("restored"),
            clock=group.clock,
            on_assigned=on_assigned,
            on_revoked=on_revoked,
            on_lost=on_lost,
            update=group.update,
            partitions_given=group.partitions_given,
            revoke_timeout_s=options.get("revoke_timeout_s", DEFAULT_REVOKE_TIMEOUT_S),
            history_retention_s=options.get("history_retention_s", DEFAULT_RETENTION_S),
            tracer=self._log,
            replace=options.get("replace", False),
        )
        self._thread = threading.Thread(target=self._run, name=f"apportion-worker-{worker_id}", daemon=True)
        self._keeper = threading.Thread(target=self._keepalive, name=f"apportion-keepalive-{worker_id}", daemon=True)

    # -- API -----------------------------------------------------------------------------------------------

    def start(self) -> Worker:
        self._thread.start()
        self._keeper.start()
        return self

    def subscribe(self, subscriptions: Sequence[str] | None) -> None:
        """Consume only ``subscriptions`` (resource names; None: every resource) from now on: partitions of the
        others are revoked at once (``on_revoked``), and a new round plans the change with as few moves as it can.
        A membership change like a join or a leave; rounds and coordinator modes."""
        member = self._member
        if not isinstance(member, RoundsMember | CoordinatorMember):
            raise InvalidRequest("subscriptions", NO_STATIC_SUBSCRIPTIONS)
        member.subscribe(subscriptions)
        self._member_wake()

    @property
    def effective(self) -> GroupConfig:
        """The group's definition this worker follows: the stored one once its member has read it (its lease ttl,
        timings and strategy), the requested one (``Group.requested``) until then; see ``apportion.group._config``
        for what happens when the two differ."""
        return self._member.config

    def owned(self) -> list[PartitionId]:
        """Partitions this worker believes it owns now (a thread-safe snapshot)."""
        return self._member.owned()

    @property
    def belief_ended_at(self) -> float | None:
        """When the belief ended by the latest ``on_lost`` came to its end (``FencedMember.belief_ended_at``)."""
        return self._member.belief_ended_at

    def lease(self, partition: PartitionId) -> PartitionLease:
        """The ownership lease (partition, epoch, member) of an owned partition; raises Fenced if not owned."""
        return self._member.lease(partition)

    def commit(self, partition: PartitionId, checkpoint: str, *, epoch: int | None = None) -> int:
        """Fenced commit: succeeds only while this worker owns ``partition`` with ``epoch`` (default: the current
        lease's) and returns the store revision of the commit. Raises Fenced otherwise; the partition is then
        reported through on_lost."""
        try:
            return self._member.commit(partition, checkpoint, epoch=epoch)
        finally:
            self._member_wake()  # a fenced partition's on_lost comes from the worker thread's next step

    def commit_many(
        self, checkpoints: Mapping[PartitionId, str], *, epochs: Mapping[PartitionId, int] | None = None
    ) -> CommitResult:
        """Fenced commits of a batch: each partition's checkpoint is recorded only while this worker owns it with its
        epoch in ``epochs`` (default: the current lease's), in as few store transactions as the store allows. Never
        raises Fenced or StoreUnavailable: the result lists what was ``committed`` (with the store revision),
        ``fenced`` (reported through on_lost, as by ``commit``) and ``failed`` (the store did not answer: outcome
        unknown)."""
        result = self._member.commit_many(checkpoints, epochs=epochs)
        self._member_wake()
        return result

    def checkpoint(self, partition: PartitionId) -> str | None:
        """The last committed checkpoint of ``partition``, whoever wrote it."""
        return self._member.checkpoint(partition)

    def settled(self) -> bool:
        """Whether this worker holds exactly its planned partitions for the current round, every callback of
        getting there returned (``on_assigned`` of the last claim included). Thread-safe."""
        return self._stable_after_step and self._member.stable()

    def wait_until_stable(self, timeout_s: float) -> bool:
        """Wait until this worker holds exactly its planned partitions for the current round and the callbacks of
        getting there returned (``settled``); False on timeout."""
        deadline = self._clock.now() + timeout_s
        with self._changed:
            while not self.settled():
                if self._done.is_set():
                    return False
                left = deadline - self._clock.now()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.05))
        return True

    def liveness(self, timeout_s: float = 1.0) -> str | None:
        """Why this worker is not live (``/healthz``), or None when it is: its threads run and the store answers a
        request within ``timeout_s``. Thread-safe (a probe's thread asks)."""
        if self._done.is_set() or not self._thread.is_alive():
            return "the worker has stopped" + (f": {self.error!r}" if self.error is not None else "")
        if not self._keeper.is_alive():
            return "the keepalive thread has stopped"
        try:
            with self.group.store.time_limit(timeout_s):
                self.group.store.revision()
        except StoreUnavailable as exc:
            return f"store unreachable: {exc}"
        return None

    def readiness(self) -> str | None:
        """Why this worker is not ready (``/readyz``), or None when it is: it is registered (its lease is held and
        believed) and holds exactly its current assignment (every wanted partition claimed, nothing to give up), the
        callbacks of getting there returned (``settled``: a partition is served only once its ``on_assigned`` has
        run). Thread-safe."""
        member = self._member
        if self._done.is_set():
            return "the worker has stopped"
        if member.store_lease is None or self._clock.now() >= member.local_deadline:
            return "not registered in the group"
        if not member.stable():
            waiting = member.claiming
            return f"assignment not claimed yet ({waiting} partitions waiting)" if waiting else "assignment changing"
        if not self.settled():
            return "assignment claimed, its callbacks still running"
        return None

    def stop(self, timeout_s: float | None = None) -> None:
        """Leave gracefully and wait; re-raise a callback error. Rounds mode first has a round planned without this
        worker and hands its partitions over as that plan says (up to MRI + RST, at most MRI + RST + ttl; the
        partitions stay owned meanwhile); then on_revoked for what is left, release, delete membership."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        if self._done.is_set() and self._keeper.is_alive() and threading.current_thread() is not self._keeper:
            # the keepalive thread ends at once once the worker is done; wait for it, so that nothing of this
            # worker still uses the store when the caller closes it (closing a connection in use can crash SQLite)
            self._keeper.join(timeout_s)
        if self.error is not None:
            raise self.error

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the worker has stopped; True if it did."""
        return self._done.wait(timeout_s)

    @property
    def stopped(self) -> bool:
        return self._done.is_set()

    @property
    def member(self) -> FencedMember:
        return self._member

    def __enter__(self) -> Worker:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.stop()
            return
        self._stop.set()
        self._thread.join()
        self._keeper.join()

    # -- threads -------------------------------------------------------------------------------------------

    def _run(self) -> None:
        member = self._member
        leaving = False
        try:
            while True:
                if self._stop.is_set():  # a planned leave: step on until the handoff is planned (bounded)
                    if not leaving:
                        member.begin_leave(self._clock.now())
                        leaving = True
                    if member.leave_ready(self._clock.now()):
                        break
                deadline = member.step(self._clock.now())
                self._stable_after_step = member.stable()
                self._member_wake()
                wait = min(deadline - self._clock.now(), _MAX_WAIT_S)
                if wait > 0:
                    member.wait_events(wait)
            member.leave()
        except NewerFormat as exc:  # a newer release's format: give up what it holds, write nothing, say it once
            self.error = exc
            member.give_up("the group's format is newer than this apportion reads")
        except BaseException as exc:  # a callback error stops the worker with that error
            self.error = exc
            log.error("worker %s stopped by an error: %r", self.id, exc)
            member.abandon()
        finally:
            self._done.set()
            self._member_wake()

    def _keepalive(self) -> None:
        """Renew every ``store.renew_every_s(ttl)`` (ttl/4; 0.5 s on etcd) of the effective ttl (the lease's, not
        the requested one); after a failed renewal (each bounded by what is left of the belief window) try again
        after ``_RETRY_S``, so one lost request during an election or failover costs ~0.1 s, not a quarter ttl."""
        wait = self.group.store.renew_every_s(self.effective.ttl_s)
        while not self._done.wait(wait):
            interval = self.group.store.renew_every_s(self.effective.ttl_s)  # the stored ttl, as the lease's
            renewed = False
            try:
                renewed = self._member.keepalive(self._clock.now())
            except Exception as exc:  # never let the keepalive thread die silently
                log.warning("worker %s keepalive failed: %r", self.id, exc)
            holding = self._member.store_lease is not None and self._clock.now() < self._member.local_deadline
            wait = interval if renewed or not holding else min(interval, _RETRY_S)
            self._note_refusal()

    def _note_refusal(self) -> None:
        """Trace ``store_full`` when the store starts refusing writes (StoreFull: etcd's NOSPACE alarm, a full disk
        under SQLite) and ``store_writes`` when it takes them again: one log line each per outage, whichever write
        was refused (a commit, a step), the first repeated every ``REFUSAL_REPEAT_S`` while it lasts (so the end of a
        log says why a worker is idle). Checked at every renewal. Under etcd's alarm renewals still work, so the
        lease and the partitions are kept meanwhile, and commits raise StoreFull (not applied: commit again later);
        under SQLite a renewal is a write: the partitions are lost at the deadline, and the member registers again
        once the disk has space."""
        why = self.group.store.refusing_writes()
        now = self._clock.now()
        if (why is None) == (self._refusing is None):
            if why is not None and now - self._refusal_said_at >= REFUSAL_REPEAT_S:  # a long outage: say it rarely
                self._refusal_said_at = now
                log.warning("worker %s: %s (for %.0f s now)", self.id, why, now - self._refusal_since)
            return
        self._refusing = why
        self._refusal_since = self._refusal_said_at = now
        if why is not None:
            self._log(TraceKind.STORE_FULL, {"reason": why})
        else:
            self._log(TraceKind.STORE_WRITES, {})

    def _member_wake(self) -> None:
        with self._changed:
            self._changed.notify_all()
        if self._on_wake is not None:
            try:
                self._on_wake()
            except Exception as exc:  # an observer never stops the worker
                log.warning("worker %s wake-up hook failed: %r", self.id, exc)

    def _log(self, kind: TraceKind, fields: Mapping[str, Any]) -> None:
        if self._tracer is not None:
            try:
                self._tracer(kind, fields)
            except Exception as exc:  # an observer never stops the worker
                log.warning("worker %s tracer failed on %s: %r", self.id, kind, exc)
        if kind in (TraceKind.ASSIGNED, TraceKind.REVOKED):
            log.info("worker %s %s %s", self.id, kind, fields.get("partitions"))
        elif kind == TraceKind.LOST:
            if fields.get("partitions"):
                log.warning("worker %s lost %s (%s)", self.id, fields["partitions"], fields.get("reason", "fenced"))
            else:
                log.warning("worker %s lease ended (%s); registering again", self.id, fields.get("reason"))
        elif kind == TraceKind.RENEW_FAILED:
            deadline = float(fields["deadline"])
            log.warning(
                "worker %s cannot renew its lease (%s); belief ends at %s (in %.1f s) unless a renewal lands",
                self.id,
                fields.get("reason"),
                _clock_time(deadline),
                deadline - self._clock.now(),
            )
        elif kind == TraceKind.STATIC:
            log.info("worker %s: ordinal %s, replica count %s", self.id, fields.get("ordinal"), fields.get("replicas"))
        elif kind == TraceKind.SCALE and fields.get("previous") is not None:
            log.warning(
                "worker %s: ordinal %s is at or above the group's replica count %s: a scale-up, count raised to %s",
                self.id,
                fields.get("ordinal"),
                fields.get("previous"),
                fields.get("replicas"),
            )
        elif kind == TraceKind.WATCH_LOST:  # not a fault: a quiet watch re-opened after the store compacted (README)
            log.info("worker %s: its watch lost events (%s); reading the group again", self.id, fields.get("reason"))
        elif kind == TraceKind.STORE_FULL:
            log.warning("worker %s: %s", self.id, fields.get("reason"))
        elif kind == TraceKind.STORE_WRITES:
            log.warning("worker %s: the store takes writes again", self.id)
        elif kind == TraceKind.RENEW_RECOVERED:
            log.warning("worker %s renewed its lease again; belief until %s", self.id, _clock_time(fields["deadline"]))
        elif kind == TraceKind.LEAVING:
            log.info("worker %s leaving: handing its partitions over by a plan without it (by %s at the latest)",
                     self.id, _clock_time(fields["until"]))  # fmt: skip
        elif kind in (TraceKind.PLAN, TraceKind.ROUND_OPENED, TraceKind.ROUND_CLOSED, TraceKind.FENCED):
            log.debug("worker %s %s %s", self.id, kind, dict(fields))


def _clock_time(t: float) -> str:
    """A clock reading for a log line: wall-clock time of day to the millisecond, else seconds."""
    return clock_text(t, ms=True)


class Group:
    """A group: a partitioned resource (``partitions``, ``strategy``, timings, ``mode``) shared by workers on
    ``store``.

    The first worker stores the definition; later ones use the stored one unless ``update=True`` (then they write
    theirs and a new round starts: seed 0 extension 2). ``partitions=None`` means "use the stored definition".
    ``resources`` names several resources instead (``{"orders": 4, "payments": 2}``, ``"orders:4,payments:2"`` or
    :class:`apportion.Resource` values with weights): partition ids are then ``<resource>-<index>`` strings and each
    worker may subscribe to some of them (:meth:`join`); a one-resource group keeps its int ids (see
    ``apportion.group._config``).

    ``ttl_s`` (the member lease) defaults to the store's ``default_ttl_s`` (5 s on etcd, so that a leader election
    costs no partition), else GroupConfig's (3 s). ``mode`` picks the protocol (``apportion.group``): ``Rounds()``
    (seed 0, the default), ``Coordinator(min_members, rebalance, max_in_flight, first_settle_s)`` (seed 1) or
    ``Static(replicas)`` (seed 3: ``replicas`` is the count a group starts with when it has none yet; afterwards
    :meth:`scale` changes it), stored with the definition (with ``partitions=None`` and no ``mode``: the stored
    one's); a static member also needs its ``ordinal``. ``strategy`` defaults to "sticky", or "round_robin" in
    coordinator mode (as in seed 1). :meth:`of` takes the whole definition as one :class:`GroupConfig` (or only a
    mode: "join the stored definition").

    ``requested`` is the definition asked for (with ``partitions=None``: the stored one); the members follow the
    stored one (``Worker.effective``). Another mode than the stored one, or other partitions without ``update``, is
    refused here (``InvalidRequest``) and again when a member starts (``GroupConfig.check_join``, which says what
    happens with every other difference).
    """

    def __init__(
        self,
        store: Store,
        name: str,
        partitions: int | None = None,
        strategy: str | None = None,
        *,
        resources: object = None,
        settle_s: float = GroupConfig.DEFAULT_SETTLE_S,
        min_interval_s: float = GroupConfig.DEFAULT_MIN_INTERVAL_S,
        heartbeat_s: float = GroupConfig.DEFAULT_HEARTBEAT_S,
        ttl_s: float | None = None,
        options: Mapping[str, object] | None = None,
        stateful: bool = False,
        mode: Mode | None = None,
        ordinal: int | None = None,
        update: bool = False,
        clock: Clock | None = None,
    ) -> None:
        requested: GroupConfig | Mode | None = mode
        if partitions is not None or resources is not None:
            requested = GroupConfig.request(
                store, Rounds() if mode is None else mode, partitions=partitions, resources=resources,
                strategy=strategy, settle_s=settle_s, min_interval_s=min_interval_s, heartbeat_s=heartbeat_s,
                ttl_s=ttl_s, options=options, stateful=stateful,
            )  # fmt: skip
        self._open(store, name, requested, ordinal=ordinal, update=update, clock=clock)

    @classmethod
    def of(
        cls,
        store: Store,
        name: str,
        requested: GroupConfig | Mode | None,
        *,
        ordinal: int | None = None,
        update: bool = False,
        clock: Clock | None = None,
    ) -> Group:
        """The group ``name`` on ``store`` as ``requested``: a whole definition, or only a mode (join the stored
        definition, which must exist), or None (the stored definition, its mode included). ``ordinal``: a static
        member's. Checked against the stored definition as the constructor does."""
        group = cls.__new__(cls)
        group._open(store, name, requested, ordinal=ordinal, update=update, clock=clock)
        return group

    def _open(
        self, store: Store, name: str, requested: GroupConfig | Mode | None, *, ordinal: int | None, update: bool,
        clock: Clock | None,
    ) -> None:  # fmt: skip
        if requested is not None and not isinstance(requested, GroupConfig | Mode):
            raise InvalidRequest("mode", f"must be Rounds(), Coordinator(...) or Static(...), got {requested!r}")
        self.store = store
        self.name = validate_group(name)
        self.clock: Clock = clock or getattr(store, "clock", None) or SYSTEM_CLOCK
        self.ordinal = None if ordinal is None else validate_ordinal(ordinal)
        self.partitions_given = isinstance(requested, GroupConfig)
        self.update = update and self.partitions_given
        try:
            stored = GroupConfig.find(store, name)
        except CorruptRecord:
            if not self.update:
                raise
            stored = None  # --update rewrites a corrupt definition
        if isinstance(requested, GroupConfig):
            if requested.mode is None:
                raise InvalidRequest("mode", "a requested definition names its mode")
            self.requested: GroupConfig = requested
        elif stored is None:
            raise InvalidRequest("partitions", f"group {name!r} has no resource definition yet: give partitions")
        else:  # the stored definition with the mode asked for (none: the stored one, rounds if it records none)
            mode = requested if requested is not None else stored.mode or Rounds()
            self.requested = dataclasses.replace(stored, mode=mode)
        if stored is not None:
            self.requested.check_join(stored, self.name, update=self.update, partitions=self.partitions_given)

    @property
    def mode(self) -> Mode:
        """The requested mode (the stored one's kind: another is refused)."""
        return self.requested.mode or Rounds()  # never None: ``_open`` refuses a requested definition without one

    def scale(self, replicas: int) -> None:
        """Set the group's replica count (static mode; ``kubectl scale``'s analogue): every static member follows
        it. Ordinals at or above it give their partitions up (on_revoked, release) and the others claim them.
        InvalidRequest for a group with no definition or one of another mode (``set_replicas``)."""
        set_replicas(self.store, self.name, replicas)

    def join(
        self,
        worker_id: str,
        on_assigned: Callback | None = None,
        on_revoked: Callback | None = None,
        on_lost: Callback | None = None,
        **options: Unpack[JoinOptions],
    ) -> Worker:
        """Start a worker (its threads run until ``stop()`` or the end of the ``with`` block); ``options`` are
        :class:`JoinOptions` (capacity, rack, revoke_timeout_s, history_retention_s, tracer, replica_lags,
        on_replicas, restored, replace, subscriptions), checked by mypy at the call as keywords are.

        Stateful groups (``high_availability``): ``on_replicas(standby, learners)`` hears the replicas the plan
        gives this worker to keep warm, and ``replica_lags()`` reports how far behind each of them is (partition ->
        offsets behind the changelog end) when the worker joins a round; rounds mode only. In coordinator mode,
        ``restored(partition, epoch) -> bool`` says whether this worker has restored a partition's state under the
        epoch it holds: a migration to it is acknowledged (the table's ONLINE) only then (seed 1: the data moves
        before the table says ONLINE; ``apportion.group._coordinator``); called on the worker thread.

        A second live worker with the same ``worker_id`` in the group is refused (its ``InvalidRequest`` after 1.5
        ttl: a crashed holder's registration expires within one ttl, so a restart waits for it instead); with
        ``replace=True`` this worker fences the other one (revokes its lease) and takes its place.

        ``subscriptions``: the resources this worker consumes, in a group over named resources (None: all of them);
        it never gets a partition of another (``Worker.subscribe`` changes them while it runs); rounds mode."""
        worker = Worker(
            self, worker_id, on_assigned=on_assigned, on_revoked=on_revoked, on_lost=on_lost, options=options
        )
        return worker.start()

    def run(
        self,
        worker_id: str,
        on_assigned: Callback | None = None,
        on_revoked: Callback | None = None,
        on_lost: Callback | None = None,
        *,
        on_started: Callable[[Worker], None] | None = None,
        **options: Unpack[JoinOptions],
    ) -> None:
        """Join (:meth:`join`, with ``options``) and block until SIGINT/SIGTERM (graceful leave) or until the worker
        stops; re-raise its error. ``on_started(worker)`` is called once the worker runs."""
        worker = self.join(worker_id, on_assigned, on_revoked, on_lost, **options)
        if on_started is not None:
            on_started(worker)
        previous: dict[signal.Signals, Any] = {}

        def _handle(signum: int, frame: FrameType | None) -> None:
            log.info("worker %s: signal %d, leaving", worker_id, signum)
            worker._stop.set()

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, _handle)
        try:
            while not worker.wait(0.2):
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            worker.stop()


__all__ = ["DEFAULT_REVOKE_TIMEOUT_S", "CommitResult", "Group", "JoinOptions", "PartitionLease", "Tracer", "Worker"]
