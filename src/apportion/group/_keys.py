"""The key space of a group under ``/apportion/<group>/`` and the JSON encoding of its values.

::

    resource            definition: partitions, strategy, options, settle_s, min_interval_s, heartbeat_s, ttl_s
    members/<id>        registration (lease-bound): capacity, rack, pid, host
    current             the open round: {opened_at, opener, prev}; the round id is this key's mod_revision
    latest              {round}: the last round that has a plan
    closing             {round, closer} (lease-bound to the closer's lease): a member is closing that round now;
                        the others wait for it instead of closing too (``_rounds``, "Closing"); deleted by the close
    round/<R>/<id>      participation (lease-bound): owned partitions, the round they were owned in, capacity, rack,
                        subscriptions (absent: every resource)
    subscriptions/<id>  an operator's subscriptions for member <id> (``apportion subscribe``): {subscriptions};
                        they replace the member's own while the record exists
    round/<R>/joined    touched by every participation write: the closer compares its mod_revision (the cut)
    round/<R>/plan      the cut and the plan: participants, assignment, strategy, closer (``PlanRecord``)
    owner/<p>, epoch/<p>  layout 1 only (groups created before layout 2): see "Ownership records" below
    commit/<p>          legacy checkpoint records {checkpoint, epoch, member}: read, no longer written (below)
    history             {expired_before}: history events older than this may have expired (see ``_history``)
    replicas            static mode: {replicas} — the replica count the ordinals are spread over
    coordinator         coordinator mode (lease-bound to the coordinator's member lease): {member, settings}
    table/<p>           coordinator mode: {owner, target, state (ASSIGNED|MIGRATING|ONLINE)} — the partition table
    migrations/<p>      coordinator mode: the move in flight for p: {from, to, state}
    rebalance           coordinator mode, manual policy: an operator's request to rebalance
    failed/<id>         coordinator mode: a member whose lease ended without a graceful leave: {failed_at,
                        partitions, detected_by}; bound to a lease of FAILED_RETENTION_S (kept an hour)

Ownership records: where a group keeps them depends on its layout, stored with its definition (``_config``)::

    layout 2 (every group created now)      /apportion/.own/<group>/owner/<p>, /apportion/.own/<group>/epoch/<p>
    layout 1 (a group created before)       /apportion/<group>/owner/<p>,      /apportion/<group>/epoch/<p>

    owner/<p>           {epoch, member} (<p>: the partition id, ``7`` in a one-resource group, ``orders-7`` in a
                        group over named resources: see ``_config``) (lease-bound to the owner's lease)
    epoch/<p>           last epoch handed out for p (not lease-bound: epochs only grow)

Why layout 2 moves them out of the watched prefix: a claim writes both records of every partition it takes, and
inside the prefix every one of those writes reached every member's watch, although no member acts on another's
claims; only a release or a lapse (the owner record's DELETE) lets a waiting member claim. 32 members x 16,384
partitions converging: ~1,000,000 events delivered for nothing, and on etcd each one costs the server ~20 µs to
encode (161 claim transactions/s with 1 watcher, 11 with 32: the fleet's renewals then timed out and leases
lapsed, a spiral of lost and re-claimed partitions on a busy machine). A member now watches the ownership records
with ``deletes_only`` (etcd drops the PUTs on the server). A group keeps the layout it was created with (layout 1
groups keep working unchanged; ``Keys(group, layout)``). No migration: live owner records cannot move while any
member may claim beside them (a claim compares the one record it knows: two locations would be two owners), so a
move would have to stop the whole group first, which re-creating it does as well. A layout-2 definition is stored
in a form an earlier version refuses to read (``GroupConfig.record``), so an earlier worker cannot claim a layout-2
group's partitions where this version would not see them: mixed versions fail closed.

Three kinds of records live outside the watched prefix, in no group's prefix (group names start with a letter or
digit) but inside ``/apportion/``, so an etcd role limited to that prefix suffices (everything apportion stores is
under ``/apportion/``)::

    /apportion/.history/<group>/...    the history's events (see ``_history``)
    /apportion/.own/<group>/...        the ownership records of a layout-2 group (above)
    /apportion/.commit/<group>/<p>     the last committed checkpoint of p: {checkpoint, epoch, member}

Commits are the group's busiest writes (every owned partition, every few seconds): under the group's prefix every
one of them woke every member's watch (32 members x 16,384 partitions committing every 5 s: ~100,000 events/s
delivered for nothing). Outside it they wake nobody; a fenced commit compares ``owner/<p>``, which stays inside.

Checkpoints of the layout before (``/apportion/<group>/commit/<p>``) are read, never migrated: ``Keys.commit``
is the only key written, and a reader takes, of the two records of p, the one written last (the greater
mod_revision; ``_commits.latest_commits``). Why reading both rather than a migration: a migration would have to copy
every record in one step that no running worker can interleave with (or stop the fleet first), and a crash halfway
leaves both layouts anyway; reading both needs no step at all, costs one more Get in the same read (a txn of two
Gets, one round trip), and a store upgraded in place keeps every checkpoint. The last-written rule (rather than
"new first") stays right even if a worker of the earlier version commits after a current one. (An untagged build
from before these records read only the legacy key; every release, from 0.9.0 on, reads both.) Legacy records are
left in place; the next commit of p supersedes one.

Versions. Everything a group stores (where its records live, the definition's form, each record's fields) is
versioned by ONE number, the group's *format*: its definition's ``layout`` (``GroupConfig.record``), 1 or 2 today
(``FORMATS``: the formats this version reads; ``LAYOUT``: the one it creates groups in). A release reads every
format in ``FORMATS`` and writes the format the group's definition names, never another; it meets a newer one
(``layout`` above ``LAYOUT``) only in the definition, and there it stops: ``NewerFormat``, one line, nothing
written (``GroupConfig.from_record``; a running member gives up its partitions and revokes its lease). Within a
format a record may gain a field that an older release ignores without harm (readers ignore unknown
fields); a change an older release would misread (a field's meaning, a record's place, a
field it would drop when rewriting the record) is a new format. A new format ships in two releases: the first reads
it and still writes the old one (a group may run it beside the release before); the second writes it, and may join
only a group whose members all run the first (README, "Compatibility: which versions run together").

Decoding: every value read back goes through :func:`decode` (a JSON object), :func:`decode_epoch` or
:func:`decode_owner`, which raise :class:`~apportion.errors.CorruptRecord` naming the key when a record is not what
apportion writes there (tampered with, or written by something else) — never a bare ValueError, KeyError or
TypeError deep in the protocol. Whether that is fatal is the reader's choice: a record that decides ownership, a
checkpoint or the definition is (the operator must fix or delete it); a history event or a round participation
record is skipped with a warning.

Group names and member ids: 1-128 characters ``[A-Za-z0-9._-]`` starting with a letter or digit; member ids
``plan`` and ``joined`` are reserved (they name keys of a round).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, TypeAlias, TypeVar

import msgspec

from apportion.errors import CorruptRecord, InvalidRequest
from apportion.model import PartitionId, resource_of, split_partition_name
from apportion.store import KeyValue

ROOT = "/apportion/"
HISTORY_ROOT = ROOT + ".history/"
COMMIT_ROOT = ROOT + ".commit/"
OWN_ROOT = ROOT + ".own/"
LEGACY_LAYOUT = 1  # owner and epoch records under the group's prefix
LAYOUT = 2  # owner and epoch records under OWN_ROOT: the layout of every group created now
FORMATS = (LEGACY_LAYOUT, LAYOUT)  # the group formats (layouts) this version reads: module doc, "Versions"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RESERVED_IDS = ("joined", "plan")


def valid_name(name: str) -> bool:
    """True for 1-128 characters ``[A-Za-z0-9._-]`` starting with a letter or digit (groups, members, resources)."""
    return bool(_NAME.match(name))


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


def pid_of_key(name: str) -> PartitionId | None:
    """The partition id a key's last segment names (``7`` or ``orders-7``), None when it names none."""
    if name.isascii() and name.isdigit():
        return int(name)
    return None if split_partition_name(name) is None else name


def pid_of_text(text: str) -> PartitionId:
    """A partition id that JSON or a key carries as text: its int in a one-resource group (``"7"``), else the text
    itself (``"orders-7"``)."""
    pid = pid_of_key(text)
    return text if pid is None else pid


_P = TypeVar("_P", bound=int | str)


def pid_order(pid: PartitionId) -> tuple[str, int]:
    """The sort key of a partition id, the one order of ids everywhere (callbacks, ``owned()``, status, the
    report): an int (or its digits, as status keys name it) by value; ``<resource>-<index>`` by resource, then
    index as an int (``orders-2`` before ``orders-10``, which text order reverses). Another string sorts by its text,
    before the ids of a resource of that name."""
    if isinstance(pid, int):
        return ("", pid)
    if pid.isascii() and pid.isdigit():
        return ("", int(pid))
    found = split_partition_name(pid)
    return (pid, -1) if found is None else (found[0], int(found[1]))


def sorted_pids(pids: Iterable[_P]) -> list[_P]:
    """``pids`` in :func:`pid_order`."""
    return sorted(pids, key=pid_order)


def subscribed(subscriptions: frozenset[str] | None, pid: PartitionId) -> bool:
    """True when a member with ``subscriptions`` (None: every resource) may hold partition ``pid``: always in a
    one-resource group (int ids), else when it subscribes to the resource of ``<resource>-<index>``."""
    return subscriptions is None or not isinstance(pid, str) or resource_of(pid) in subscriptions


class Keys:
    """Key names of one group."""

    __slots__ = (
        "closing",
        "commits",
        "current",
        "epochs",
        "events",
        "history",
        "latest",
        "layout",
        "legacy_commits",
        "members",
        "owners",
        "ownership",
        "prefix",
        "resource",
        "rounds",
    )

    def __init__(self, group: str, layout: int = LAYOUT) -> None:
        validate_group(group)
        self.layout = layout
        self.prefix = f"{ROOT}{group}/"
        # where owner/ and epoch/ live (module doc, "Ownership records")
        self.ownership = f"{OWN_ROOT}{group}/" if layout >= LAYOUT else self.prefix
        self.owners = self.ownership + "owner/"
        self.epochs = self.ownership + "epoch/"
        self.resource = self.prefix + "resource"
        self.current = self.prefix + "current"
        self.latest = self.prefix + "latest"
        self.closing = self.prefix + "closing"
        self.members = self.prefix + "members/"
        self.rounds = self.prefix + "round/"
        self.history = self.prefix + "history"
        self.events = f"{HISTORY_ROOT}{group}/"
        self.commits = f"{COMMIT_ROOT}{group}/"  # outside the watched prefix: a commit wakes no member
        self.legacy_commits = self.prefix + "commit/"  # read, never written

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

    def owner(self, partition: PartitionId) -> str:
        return f"{self.owners}{partition}"

    def epoch(self, partition: PartitionId) -> str:
        return f"{self.epochs}{partition}"

    def commit(self, partition: PartitionId) -> str:
        """Where a commit writes ``partition``'s checkpoint."""
        return f"{self.commits}{partition}"

    def legacy_commit(self, partition: PartitionId) -> str:
        """Where the layout before kept it (read as a fallback, never written)."""
        return f"{self.legacy_commits}{partition}"

    @property
    def replicas(self) -> str:
        return self.prefix + "replicas"

    @property
    def coordinator(self) -> str:
        return self.prefix + "coordinator"

    @property
    def tables(self) -> str:
        return self.prefix + "table/"

    def table(self, partition: PartitionId) -> str:
        return f"{self.prefix}table/{partition}"

    @property
    def migrations(self) -> str:
        return self.prefix + "migrations/"

    def migration(self, partition: PartitionId) -> str:
        return f"{self.prefix}migrations/{partition}"

    @property
    def rebalance(self) -> str:
        return self.prefix + "rebalance"

    @property
    def failures(self) -> str:
        return self.prefix + "failed/"

    def failed(self, member_id: str) -> str:
        return f"{self.prefix}failed/{member_id}"

    def subscription(self, member_id: str) -> str:
        return f"{self.prefix}subscriptions/{member_id}"


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))  # json.dumps would build one per call


def encode(value: dict[str, Any]) -> bytes:
    """Canonical JSON (sorted keys, no spaces): equal values give equal bytes, so value compares work."""
    return _ENCODER.encode(value).encode()


_DECODER = msgspec.json.Decoder()


def decode(raw: bytes, key: str | None = None) -> dict[str, Any]:
    """A stored JSON object; :class:`CorruptRecord` naming ``key`` when ``raw`` is not one.

    msgspec decodes it (a tenth of ``json.loads``'s time: a status of 100,000 partitions decodes as many commit
    records); what msgspec refuses (``NaN``, ``1e400``, a lone surrogate, a byte-order mark, a syntax error) goes to
    ``json.loads``, which decides and words the error, so the result is always ``json.loads``'s."""
    try:
        value = _DECODER.decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError; RecursionError: nesting
            raise CorruptRecord(key, f"not JSON ({str(exc)[:80]})") from None
    if not isinstance(value, dict):
        raise CorruptRecord(key, f"expected a JSON object, got {_short(raw)}")
    return value


def field(record: dict[str, Any], key: str | None, name: str, kind: type[Any], *, minimum: int | None = None) -> Any:
    """``record[name]`` checked to be a ``kind`` (an int that is not a bool, at least ``minimum``): CorruptRecord
    naming ``key`` otherwise."""
    value = record.get(name)
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if ok and minimum is not None:
        ok = value is not None and value >= minimum
    if not ok:
        wanted = {int: "an integer", str: "a string", list: "a list", dict: "an object"}.get(kind, kind.__name__)
        at_least = "" if minimum is None else f" >= {minimum}"
        raise CorruptRecord(key, f"{name!r} must be {wanted}{at_least}, got {_short(value)}")
    return value


def decode_epoch(raw: bytes, key: str | None = None) -> int:
    """``epoch/<p>``: the last epoch handed out, ASCII digits."""
    text = raw.decode("ascii", "replace")
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise CorruptRecord(key, f"an epoch is a whole number, got {_short(raw)}")
    return int(text)


def decode_owner(kv: KeyValue) -> tuple[str, int]:
    """``owner/<p>``: (member, epoch). Every owner record is written by a claim, bound to its owner's lease (a record
    bound to none would never expire: the partition could never be claimed again) and naming a valid member id."""
    record = decode(kv.value, kv.key)
    member = field(record, kv.key, "member", str)
    epoch = field(record, kv.key, "epoch", int, minimum=1)
    if not _NAME.match(member) or member in RESERVED_IDS:
        raise CorruptRecord(kv.key, f"{_short(member)} is not a member id")
    if kv.lease == 0:
        raise CorruptRecord(kv.key, "not bound to a lease (a claim always binds it to its owner's): it never expires")
    return member, epoch


Assignment: TypeAlias = Mapping[str, list[PartitionId]]
"""member id -> partition ids (a plan's assignment, standby, learners and ready replicas)."""


@dataclass(frozen=True, slots=True)
class PlanRecord:
    """``round/<R>/plan``: a round's cut and plan, as its closer wrote it. The stored JSON object's keys are these
    fields' names; an optional field left empty (no subscriptions, no replicas, no probing round, no violations) is
    not stored. ``to_json`` gives exactly the object stored since layout 1 (old stores read the same), ``from_json``
    reads one back, checking what a reader relies on (``CorruptRecord`` naming the key); fields that a record written
    by hand leaves out take their defaults.

    ``kept``: extension 1, the previous plan's assignment kept (same participants, subscriptions and definition).
    ``moves``/``min_moves``/``deferred``: the strategy's movement figures. ``resource_revision``: the mod_revision of
    the definition the plan was made for. ``subscriptions``: member -> resources, of the participants that declared
    theirs. ``ready``: the replicas the strategy found ready (passed back at the next close: high_availability's
    hysteresis). ``probe_after_s``: learners warm up, a probing round is wanted then. ``violations``: what
    ``assign.check`` found wrong with the plan (never expected)."""

    round: int
    participants: tuple[str, ...]
    assignment: Assignment
    strategy: str | None
    kept: bool | None
    moves: int
    min_moves: int
    deferred: int
    closer: str | None
    closed_at: float | None
    resource_revision: int | None
    partitions: int | None
    subscriptions: Mapping[str, list[str]] = dataclass_field(default_factory=dict)
    standby: Assignment = dataclass_field(default_factory=dict)
    learners: Assignment = dataclass_field(default_factory=dict)
    ready: Assignment = dataclass_field(default_factory=dict)
    probe_after_s: float | None = None
    violations: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "round": self.round,
            "participants": list(self.participants),
            "assignment": dict(self.assignment),
            "strategy": self.strategy,
            "kept": self.kept,
            "moves": self.moves,
            "min_moves": self.min_moves,
            "deferred": self.deferred,
            "closer": self.closer,
            "closed_at": self.closed_at,
            "resource_revision": self.resource_revision,
            "partitions": self.partitions,
        }
        for name in ("subscriptions", "standby", "learners", "ready"):
            table = getattr(self, name)
            if table:
                value[name] = dict(table)
        if self.probe_after_s is not None:
            value["probe_after_s"] = self.probe_after_s
        if self.violations:
            value["violations"] = list(self.violations)
        return value

    @classmethod
    def from_json(cls, value: dict[str, Any], key: str | None = None) -> PlanRecord:
        participants = field(value, key, "participants", list)
        if not all(isinstance(m, str) for m in participants):
            raise CorruptRecord(key, "'participants' must be a list of member ids")
        tables: dict[str, Assignment] = {}
        for kind in ("assignment", "standby", "learners", "ready"):
            table = value.get(kind, {})
            ok = isinstance(table, dict) and all(
                isinstance(parts, list) and all(isinstance(p, int | str) for p in parts) for parts in table.values()
            )
            if not ok:
                raise CorruptRecord(key, f"{kind!r} must map member ids to lists of partitions")
            tables[kind] = table
        subscriptions = value.get("subscriptions", {})
        if not isinstance(subscriptions, dict):
            raise CorruptRecord(key, "'subscriptions' must map member ids to lists of resources")
        probe = value.get("probe_after_s")
        if probe is not None and (isinstance(probe, bool) or not isinstance(probe, int | float)):
            raise CorruptRecord(key, f"'probe_after_s' must be a number of seconds, got {_short(probe)}")
        violations = value.get("violations", ())
        return cls(
            round=_int(value, key, "round"),
            participants=tuple(participants),
            assignment=tables["assignment"],
            strategy=value.get("strategy"),
            kept=value.get("kept"),
            moves=_int(value, key, "moves"),
            min_moves=_int(value, key, "min_moves"),
            deferred=_int(value, key, "deferred"),
            closer=value.get("closer"),
            closed_at=value.get("closed_at"),
            resource_revision=value.get("resource_revision"),
            partitions=value.get("partitions"),
            subscriptions=subscriptions,
            standby=tables["standby"],
            learners=tables["learners"],
            ready=tables["ready"],
            probe_after_s=probe,
            violations=tuple(map(str, violations)) if isinstance(violations, list) else (),
        )


def _int(value: dict[str, Any], key: str | None, name: str) -> int:
    """``value[name]``, an integer (0 when absent); CorruptRecord naming ``key`` otherwise."""
    return 0 if value.get(name) is None else int(field(value, key, name, int))


def _short(value: object) -> str:
    """A value for an error line: repr, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def owner_value(member_id: str, epoch: int) -> bytes:
    return encode({"epoch": epoch, "member": member_id})


__all__ = [
    "FORMATS",
    "LAYOUT",
    "LEGACY_LAYOUT",
    "OWN_ROOT",
    "Assignment",
    "Keys",
    "PartitionId",
    "PlanRecord",
    "decode",
    "decode_epoch",
    "decode_owner",
    "encode",
    "field",
    "owner_value",
    "pid_of_key",
    "pid_of_text",
    "pid_order",
    "sorted_pids",
    "subscribed",
    "validate_group",
    "valid_name",
    "validate_member_id",
]
