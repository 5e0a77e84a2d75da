"""The one exception hierarchy of apportion.

Every error apportion raises on purpose derives from :class:`ApportionError`; foreign exceptions (sqlite3, httpx,
pyspark) are mapped at the boundary with ``raise ... from exc``.

- ``ApportionError``   — root; ``exit_code`` is what the CLI exits with (1: a runtime fault).
- ``InvalidRequest``   — bad input from the user (field + reason); the CLI exits 2.
- ``NoSuchStore``      — (an ``InvalidRequest``) a read-only open of a store that does not exist: nothing created.
- ``StoreUnavailable`` — the store cannot be reached or locked in time.
- ``StoreFull``        — (a ``StoreUnavailable``) the store refuses writes for lack of space: etcd's NOSPACE alarm.
- ``StoreReplaced``    — (a ``StoreUnavailable``) a read-only SQLite store's file was deleted or replaced since it was
                         opened: reopen the store to read the file there now.
- ``SparkUnavailable`` — Spark cannot be started (no Java) or its Connect server cannot be reached.
- ``BrokerUnavailable`` — RabbitMQ (``apportion.rabbitmq``) or Kafka (``apportion.kafka``) cannot be reached, refused
                         the credentials, closed the connection or refused a message.
- ``TopicUnavailable`` — (a ``BrokerUnavailable``) a Kafka topic does not exist, or has fewer partitions than the
                         group stored (deleted and created again).
- ``RecordsLost``      — (a ``BrokerUnavailable``) a Kafka partition no longer holds records a pipeline has not
                         processed yet (retention deleted them, or the topic was truncated or created again): names
                         the partition and the offsets lost; never skipped.
- ``CorruptRecord``    — a record in the store is not what apportion writes there (names the key); the CLI exits 2.
- ``NewerFormat``      — a group is stored in a format newer than this version reads (a newer apportion wrote it): the
                         member leaves (on_lost, lease revoked) and writes nothing; the CLI exits 2.
- ``CorruptFile``      — a file apportion wrote is not what it wrote (truncated, emptied, deleted, tampered with):
                         names the path and what to do; the CLI exits 2.
- ``Conflict``         — a compare-and-set lost a race that the caller cannot retry on its own.
- ``LeaseNotFound``    — the lease expired or was revoked (or never existed).
- ``Compacted``        — a watch asked for history older than the store's compaction point.
- ``Fenced``           — a commit carried a stale epoch: the partition now belongs to someone else.
- ``NotEnoughMembers`` — a coordinator group is below its minimum cluster size (``Router.route``; exit 1).
- ``PlanViolation``    — a strategy's plan broke one of its invariants (a bug, found by ``assign.check_or_raise``).
- ``TimedOut``         — a wait for a condition passed its time limit (``waiting.wait_for``; names what it waited for).
- ``WorkerExited``     — a worker process that a wait needs has exited (``fleet.Fleet.check``; the end of its log).
- ``SimulationFailed`` — ``apportion simulate`` found a violation (names the failing seed or the grid's table; exit 1).
- ``OverlapFound``     — ``apportion report`` found overlapping ownership intervals (exit 1).
"""

from __future__ import annotations


class ApportionError(Exception):
    """Root of every error apportion raises on purpose."""

    exit_code: int = 1


class InvalidRequest(ApportionError):
    """Bad input: names the field and the reason."""

    exit_code = 2

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason


class NoSuchStore(InvalidRequest):
    """A read-only open of a store that does not exist (an SQLite file that is not there): nothing was created."""


class StoreUnavailable(ApportionError):
    """The store cannot be reached, or a lock could not be taken in time."""


class StoreFull(StoreUnavailable):
    """The store answers but refuses every write for lack of space (etcd's NOSPACE alarm) until an operator frees
    space and disarms the alarm. Reads, lease renewals, revocations and deletes still work, so a running worker
    keeps its partitions; a refused write (a commit) was not applied. A ``StoreUnavailable``: every caller that
    waits for a store that does not answer waits for this one too; start-up and one-shot commands fail at once."""


class StoreReplaced(StoreUnavailable):
    """A read-only SQLite store's file is not at its path any more (deleted or moved), or the path names another file
    (``mv new.db store.db``, a restore): the open store would go on reading the old file, which nobody writes now.
    Reopen the store (``connect``) to read the file at the path."""


class SparkUnavailable(ApportionError):
    """Spark cannot be started (no Java, a server that exits) or a Spark Connect server cannot be reached."""


class BrokerUnavailable(ApportionError):
    """RabbitMQ or Kafka cannot be reached, refused the credentials, closed the connection or channel, or refused a
    published message."""


class TopicUnavailable(BrokerUnavailable):
    """A Kafka topic does not exist, or has fewer partitions than the group stored (a topic cannot shrink: it was
    deleted and created again). Exit 1, as for a broker: a supervisor's restart may find it created."""


class RecordsLost(BrokerUnavailable):
    """A Kafka partition no longer holds records the pipeline has not processed (names the partition and offsets)."""


class CorruptRecord(ApportionError):
    """A record in the store is not what apportion writes there: tampered with, or written by something else.

    Exit 2 (like a user mistake), not 1 (a runtime fault): the store's content is the operator's data, as much their
    input as a command-line option, and retrying cannot heal it — every worker of the group would fail the same way
    until someone rewrites or deletes the record — so the message names the key to fix and a supervisor that
    restarts on runtime faults should not loop on it. ``key`` is None when the caller did not know it."""

    exit_code = 2

    def __init__(self, key: str | None, reason: str) -> None:
        where = f"store record {key}" if key else "a store record"
        reason = reason if len(reason) <= 300 else reason[:297] + "..."
        super().__init__(f"{where} is corrupt: {reason}")
        self.key = key
        self.reason = reason


class NewerFormat(ApportionError):
    """The group's stored format (its definition's ``layout``, ``apportion.group._keys``: "Versions") is newer than
    this version of apportion reads: a newer release wrote it, and this one cannot tell which of the group's records
    mean what. It writes nothing to the group: a starting member stops before registering, a running one gives up
    what it holds (``on_lost``) and revokes its lease (README, "Compatibility: which versions run together").
    Exit 2, like ``CorruptRecord``: retrying cannot help, a deployment of a newer apportion does."""

    exit_code = 2

    def __init__(self, key: str, found: int, reads: tuple[int, ...], version: str) -> None:
        super().__init__(
            f"{key} is format {found}, written by a newer apportion; this one ({version}) reads formats "
            f"{min(reads)}-{max(reads)}: upgrade it"
        )
        self.key, self.found, self.reads = key, found, reads


class CorruptFile(ApportionError):
    """A file apportion wrote and now reads back as input (a log manifest or segment, ``_resource.json``, a committed
    output) is not what it wrote: truncated, emptied, deleted or edited by hand, lost in a copy.

    Exit 2, as ``CorruptRecord`` and for the same reason: the files are the operator's data, retrying cannot heal
    them, and apportion does not guess (it never deletes or rewrites what it cannot prove is its own garbage). The
    message names ``path``, says what is wrong (``reason``) and what to do (``remedy``). A disk that fails to read is
    not this error: that is a runtime fault (exit 1)."""

    exit_code = 2

    def __init__(self, path: object, reason: str, remedy: str) -> None:
        super().__init__(f"{path}: {reason}; {remedy}")
        self.path = str(path)
        self.reason = reason
        self.remedy = remedy


class Conflict(ApportionError):
    """A compare-and-set transaction lost a race."""


class LeaseNotFound(ApportionError):
    """The lease expired, was revoked, or never existed."""


class Compacted(ApportionError):
    """A watch started below the store's compaction point."""

    def __init__(self, requested: int, compacted: int) -> None:
        super().__init__(f"revision {requested} is compacted (history starts after {compacted})")
        self.requested = requested
        self.compacted = compacted


class Fenced(ApportionError):
    """A commit carried a stale epoch: the partition was given to another owner."""


class NotEnoughMembers(ApportionError):
    """Fewer live members than the minimum cluster size."""


class PlanViolation(ApportionError):
    """A plan broke an invariant of its strategy: a bug in the strategy, never a user mistake."""


class TimedOut(ApportionError):
    """A wait for a condition passed its time limit: the message names what was expected."""


class WorkerExited(ApportionError):
    """A worker process that a wait needs has exited (the message holds how, and the end of its log)."""


class SimulationFailed(ApportionError):
    """``apportion simulate``: a scenario violated a check (the message names the seed that replays it)."""


class OverlapFound(ApportionError):
    """``apportion report``: the history shows overlapping ownership intervals (the message names the CSV)."""


__all__ = [
    "ApportionError",
    "Compacted",
    "Conflict",
    "CorruptFile",
    "CorruptRecord",
    "Fenced",
    "InvalidRequest",
    "LeaseNotFound",
    "NewerFormat",
    "NoSuchStore",
    "NotEnoughMembers",
    "OverlapFound",
    "PlanViolation",
    "SimulationFailed",
    "StoreFull",
    "StoreReplaced",
    "StoreUnavailable",
    "TimedOut",
    "TopicUnavailable",
    "WorkerExited",
]
