"""Run one worker as ``apportion worker`` does: wait for the store, join, commit checkpoints, emit every change.

``run_worker(url, group, worker_id, requested, emit=..., ...)`` is the command without its option parsing;
``run_member(group, worker_id, emit=...)`` runs an already defined :class:`apportion.Group` the same way. Each
change is one ``emit(kind, partitions=[...])`` call (``assigned``, ``revoked``, ``lost``; the committer's
``commit`` adds ``epoch``, the store ``revision`` of the transaction and ``checkpoint``, its ``fenced`` adds ``epoch``
and ``error``, ``commit_failed`` adds ``error``) and ``emit("stopped")`` ends the run; emit is called from several
threads. These lines are the worker's history that tests/nemesis/checker.py reads.

Start-up and a store that cannot be reached (:class:`StartUp`)::

    OPENING      connect(url), first request, read the group's definition; each attempt bounded by
                 min(1 s, what is left of connect_timeout_s)
      --StoreUnavailable--> log "waiting for store <url>: <reason>", pause (0.1 s doubling to 2 s), OPENING again
      --StoreFull (an SQLite store on a full disk)--> FAILED at once, as below
    REGISTERING  the member's steps until FencedMember._start has registered it (trace "registered"); a step that
                 meets StoreUnavailable is retried by the member itself, logged here like an attempt
    STARTED      from then on the member's lease logic applies: renewal failures, on_lost, registering again; each
                 change is one log line (worker.py logs them; "registered again" is logged here)
    OPENING/REGISTERING --(connect_timeout_s passes)--> FAILED: the worker stops; StoreUnavailable (exit 1)
                 "cannot reach the store <url> within N s (--connect-timeout): <reason>"
    REGISTERING --StoreFull (the store refuses writes for lack of space: etcd's NOSPACE alarm)--> FAILED at once:
                 the worker stops; StoreFull (exit 1), its one line says what the operator must do. Waiting would
                 only repeat it: space comes back by an operator's hand, and a supervisor restarts the worker then

A live member holding the same id is not a store fault: the member decides about it (refused after 1.5 ttl, exit 2),
whatever connect_timeout_s says.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from apportion.errors import Fenced, InvalidRequest, StoreFull, StoreUnavailable
from apportion.events import Emit, WorkerEvent
from apportion.group import GroupConfig, Mode, PartitionId, TraceKind, sorted_pids
from apportion.store import Store, connect, redact_url
from apportion.worker import Group, JoinOptions, Tracer, Worker

if TYPE_CHECKING:
    from apportion.metrics import MetricsTracer

T = TypeVar("T")
Callbacks = tuple[Callable[[list[Any]], None], Callable[[list[Any]], None], Callable[[list[Any]], None]]
"""A member's ``(on_assigned, on_revoked, on_lost)``, each called with the partitions."""

log = logging.getLogger("apportion.worker")

DEFAULT_CONNECT_TIMEOUT_S = 30.0
_FIRST_PAUSE_S = 0.1
_MAX_PAUSE_S = 2.0
_ATTEMPT_S = 1.0


def run_worker(
    store_url: str,
    group: str,
    worker_id: str,
    requested: GroupConfig | Mode,
    *,
    emit: Emit,
    ordinal: int | None = None,
    update: bool = False,
    options: JoinOptions | None = None,
    commit_every_s: float = 0.0,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    on_started: Callable[[Worker], None] | None = None,
    callbacks: Callbacks | None = None,
    stopped: Callable[[], Mapping[str, Any]] | None = None,
) -> None:
    """Run worker ``worker_id`` of ``group`` on the store at ``store_url`` until SIGINT/SIGTERM (graceful leave).

    ``requested`` is the group's definition as this worker asks for it (:meth:`apportion.Group.of`): a whole
    ``GroupConfig``, or only its mode (join the stored definition); ``ordinal`` a static member's, ``update``
    writes ``requested`` over the stored definition; ``options`` are the member's (:class:`apportion.JoinOptions`:
    capacity, replace, history retention, subscriptions, ...; with ``metrics_port`` the metrics are the tracer, and
    a tracer of the caller's is refused). Both values are checked when they are made, so a mistyped
    option never creates a store file; a mismatch with the stored definition (another mode, other partitions) is
    refused before the worker starts (exit 2). The store is waited for up to
    ``connect_timeout_s`` (:class:`StartUp`); ``metrics_port`` serves Prometheus metrics and the probes
    ``/healthz``, ``/readyz`` (the metrics extra). ``on_started(worker)`` hears the running
    :class:`apportion.Worker` (``worker.stop()`` ends the run as a signal does). ``callbacks`` are the member's
    (``on_assigned``, ``on_revoked``, ``on_lost``) when an application handles its partitions (``apportion rabbitmq
    consume``: a queue consumer, which emits the changes itself); by default each change is emitted. ``stopped()``
    gives the fields of the final ``stopped`` event (a consumer's ``handled`` count)."""

    if metrics_port is not None and options is not None and options.get("tracer") is not None:
        raise InvalidRequest("metrics_port", "the metrics are the member's tracer: give no tracer with it")
    startup = StartUp(store_url, worker_id, connect_timeout_s)
    store = startup.attempt(lambda: connect(store_url))
    try:

        def open_group() -> Group:
            store.revision()  # the first request (an etcd store sends none when it is opened)
            return Group.of(store, group, requested, ordinal=ordinal, update=update)

        defined = startup.attempt(open_group, store)
        metrics = None if metrics_port is None else serve_metrics(defined, worker_id, metrics_port, metrics_host)

        def started(worker: Worker) -> None:
            if metrics is not None:  # the probes answer for this worker from now on
                metrics.set_probes(live=worker.liveness, ready=worker.readiness)
            if on_started is not None:
                on_started(worker)

        member_options = JoinOptions(**(options or {}))
        if metrics is not None:
            member_options["tracer"] = metrics
        run_member(
            defined,
            worker_id,
            emit=emit,
            commit_every_s=commit_every_s,
            startup=startup,
            on_started=started,
            options=member_options,
            callbacks=callbacks,
            stopped=stopped,
        )
    finally:
        store.close()


class StartUp:
    """The worker's start-up (states in the module docstring): waits for a store that does not answer, logging
    ``waiting for store <url>: <reason>`` per attempt (and per change of reason), and fails after ``timeout_s``.
    Thread-safe: the member's steps report through :meth:`tracer` on the worker thread."""

    def __init__(self, url: str, worker_id: str, timeout_s: float) -> None:
        self.url = redact_url(url)
        self.worker_id = worker_id
        self.timeout_s = timeout_s
        self.error: StoreUnavailable | None = None
        self._deadline = time.monotonic() + timeout_s
        self._lock = threading.Lock()
        self._registered = threading.Event()
        self._pause = _FIRST_PAUSE_S
        self._next_log = 0.0
        self._reason: str | None = None
        self._last: TraceKind | None = None  # the member's last start-up trace: STORE_UNAVAILABLE or ID_TAKEN
        self._worker: Worker | None = None  # the worker being started, once run_member knows it

    def _left(self) -> float:
        return self._deadline - time.monotonic()

    def attempt(self, call: Callable[[], T], store: Store | None = None) -> T:
        """``call()`` until it does not raise StoreUnavailable; each try bounded on ``store`` by min(1 s, what is
        left); after the deadline, StoreUnavailable (exit 1) with the last reason."""
        while True:
            try:
                if store is None:
                    return call()
                with store.time_limit(min(_ATTEMPT_S, max(self._left(), 0.001))):
                    return call()
            except StoreFull:  # space comes back by an operator's hand: fail now (module docstring), exit 1
                raise
            except StoreUnavailable as exc:
                pause = self._failed(str(exc))
                if self._left() <= 0:
                    raise self._give_up() from exc
            time.sleep(min(pause, max(self._left(), 0.0)))

    def _failed(self, reason: str) -> float:
        """Log one ``waiting for store`` line when the reason changed or the pause since the last line is over; the
        pause doubles with each line (0.1 s to 2 s). Returns the pause before the next attempt."""
        now = time.monotonic()
        with self._lock:
            pause = self._pause
            if reason != self._reason or now >= self._next_log:
                self._reason = reason
                self._next_log = now + pause
                self._pause = min(pause * 2, _MAX_PAUSE_S)
                log.warning("waiting for store %s: %s", self.url, reason)
        return pause

    def _give_up(self) -> StoreUnavailable:
        return StoreUnavailable(
            f"cannot reach the store {self.url} within {self.timeout_s:g} s (--connect-timeout): "
            f"{self._reason or 'no answer yet'}"
        )

    def tracer(self, inner: Tracer | None) -> Tracer:
        """The member's tracer: notes its registration and, before it, every step that met StoreUnavailable."""

        def trace(kind: TraceKind, fields: Mapping[str, Any]) -> None:
            if kind == TraceKind.REGISTERED:
                self._on_registered(fields)
            elif kind in (TraceKind.STORE_UNAVAILABLE, TraceKind.ID_TAKEN) and not self._registered.is_set():
                self._last = kind
                if kind == TraceKind.STORE_UNAVAILABLE and fields.get("full"):
                    self._refused(str(fields.get("reason")))
                elif kind == TraceKind.STORE_UNAVAILABLE:
                    self._failed(str(fields.get("reason") or "the store did not answer"))
            if inner is not None:
                inner(kind, fields)

        return trace

    def _refused(self, reason: str) -> None:
        """The store refused to register the member for lack of space (StoreFull): fail now (see the module
        docstring); the run loop ends at the next step and the run raises this error."""
        with self._lock:
            if self.error is None:
                self.error = StoreFull(reason)
            worker = self._worker
        if worker is not None:
            worker.stop(0)

    def _on_registered(self, fields: Mapping[str, Any]) -> None:
        with self._lock:
            if self.error is not None:
                return  # gave up already: the worker is stopping
            again = self._registered.is_set()
            self._registered.set()
        if again:
            log.warning("worker %s registered again (lease %s)", self.worker_id, fields.get("lease"))
        else:
            log.info("worker %s registered with %s (lease %s)", self.worker_id, self.url, fields.get("lease"))

    def watch(self, worker: Worker) -> None:
        """Stop ``worker`` (and fail the run) if it has not registered by the deadline because the store does not
        answer; runs on a daemon thread."""

        with self._lock:
            self._worker = worker
            refused = self.error is not None  # StoreFull before the worker was known: stop it now
        if refused:
            worker.stop(0)
            return

        def monitor() -> None:
            if self._registered.wait(max(self._left(), 0.0)):
                return
            while not worker.stopped:
                with self._lock:
                    if self._registered.is_set():
                        return
                    if self._last != TraceKind.ID_TAKEN:
                        self.error = self._give_up()
                if self.error is not None:
                    with contextlib.suppress(BaseException):
                        worker.stop(0)  # sets the stop flag; the run loop ends, the worker leaves
                    return
                self._registered.wait(0.2)  # the member decides about a live twin itself

        threading.Thread(target=monitor, name=f"apportion-startup-{self.worker_id}", daemon=True).start()


def serve_metrics(group: Group, worker_id: str, port: int, host: str = "127.0.0.1") -> MetricsTracer:
    """A :class:`apportion.metrics.MetricsTracer` serving on ``host:port`` (0: any free port, logged): ``/metrics``,
    and the probes ``/healthz`` and ``/readyz`` (503 ``starting`` until the caller sets them)."""
    from apportion.metrics import MetricsTracer  # optional extra: raises InvalidRequest when missing

    tracer = MetricsTracer(group.name, worker_id, clock=group.clock)
    where = f"[{host}]" if ":" in host else host
    try:
        bound = tracer.serve(port, host)
    except OSError as exc:
        raise InvalidRequest("metrics-port", f"cannot serve metrics on {where}:{port}: {exc.strerror or exc}") from exc
    log.info("metrics on http://%s:%d/metrics (probes: /healthz, /readyz)", where, bound)
    return tracer


def run_member(
    group: Group,
    worker_id: str,
    *,
    emit: Emit,
    commit_every_s: float = 0.0,
    startup: StartUp | None = None,
    on_started: Callable[[Worker], None] | None = None,
    options: JoinOptions | None = None,
    callbacks: Callbacks | None = None,
    stopped: Callable[[], Mapping[str, Any]] | None = None,
) -> None:
    """Join ``group`` as ``worker_id`` with ``options`` and block until SIGINT/SIGTERM (``Group.run``), emitting
    every change (or calling ``callbacks``); with ``commit_every_s`` > 0 a committer thread stands in for a pipeline
    (see :func:`_committer`). ``on_started``, ``callbacks``, ``stopped``: as in :func:`run_worker`; ``startup``
    watches the member's registration (:func:`run_worker` passes its own)."""
    member_options = JoinOptions(**(options or {}))
    if startup is not None:
        member_options["tracer"] = startup.tracer(member_options.get("tracer"))
    stopping = threading.Event()
    holder: list[Worker] = []

    def callback(kind: WorkerEvent) -> Callable[[list[int]], None]:
        def cb(parts: list[int]) -> None:
            emit(kind, partitions=parts)

        return cb

    def started(worker: Worker) -> None:
        holder.append(worker)
        if startup is not None:
            startup.watch(worker)
        if on_started is not None:
            on_started(worker)

    thread = threading.Thread(target=_committer, args=(holder, worker_id, commit_every_s, stopping, emit), daemon=True)
    if commit_every_s > 0:
        thread.start()
    try:
        on_assigned, on_revoked, on_lost = callbacks or (
            callback(WorkerEvent.ASSIGNED),
            callback(WorkerEvent.REVOKED),
            callback(WorkerEvent.LOST),
        )
        group.run(worker_id, on_assigned, on_revoked, on_lost, on_started=started, **member_options)
        if startup is not None and startup.error is not None:
            raise startup.error
    finally:
        stopping.set()
        if thread.is_alive():
            thread.join(10)  # its commit in flight ends before the store is closed
        emit(WorkerEvent.STOPPED, **(stopped() if stopped is not None else {}))


class Cadence:
    """A batch every ``every_s`` from the start, not ``every_s`` after the last one ended: on etcd a commit of 512
    partitions takes ~0.5 s at load, and a fleet that slept after each commit offered 10 % fewer commits than
    ``--commit-every`` promises. A batch that ends past the next start begins the next one at once (late, never two
    at once); the one after that is back on the grid when it can be."""

    def __init__(self, every_s: float, now: float) -> None:
        self.every_s = every_s
        self.due = now + every_s

    def wait_s(self, now: float) -> float:
        """How long to wait, at ``now``, before the next batch starts."""
        return max(0.0, self.due - now)

    def started(self, now: float) -> None:
        """A batch started at ``now``: the next is due one period after the one it was due at (or at once)."""
        self.due = max(self.due + self.every_s, now)


def _committer(holder: list[Worker], worker_id: str, every_s: float, stopping: threading.Event, emit: Emit) -> None:
    """A stand-in for a pipeline: take the leases, process a batch (one every ``every_s``), commit the batch in one
    ``commit_many`` with the epochs taken at the start — so a worker frozen mid-batch commits stale epochs when it
    resumes (and those are fenced). A commit the store could not take (``StoreUnavailable``) is reported and retried
    with the next batch: the thread must outlive a slow or restarting store, or the worker would silently stop
    committing. Each partition's outcome is one event line (``commit``, ``fenced``, ``commit_failed``), as when
    every partition was committed on its own."""
    n = 0
    leases: dict[PartitionId, int] = {}
    cadence = Cadence(every_s, time.monotonic())
    while not stopping.wait(cadence.wait_s(time.monotonic())):
        cadence.started(time.monotonic())
        if not holder:
            continue
        w = holder[0]
        checkpoints: dict[PartitionId, str] = {}
        for p in sorted_pids(leases):
            n += 1
            checkpoints[p] = f"{worker_id}:{n}"
        result = w.commit_many(checkpoints, epochs=leases)  # nothing to commit: no store call
        retry: dict[PartitionId, int] = {}
        for p, checkpoint in checkpoints.items():  # one line per partition, as the nemesis checker reads them
            epoch = leases[p]
            if p in result.committed:
                emit(
                    WorkerEvent.COMMIT, partitions=[p], epoch=epoch, revision=result.committed[p], checkpoint=checkpoint
                )
            elif p in result.fenced:
                emit(WorkerEvent.FENCED, partitions=[p], epoch=epoch, error=str(result.error(p)))
            else:
                emit(WorkerEvent.COMMIT_FAILED, partitions=[p], error=result.failed[p])
                retry[p] = epoch
        leases = retry
        for p in w.owned():
            with contextlib.suppress(Fenced):
                leases.setdefault(p, w.lease(p).epoch)


__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "Cadence",
    "Callbacks",
    "Emit",
    "StartUp",
    "run_member",
    "run_worker",
    "serve_metrics",
]
