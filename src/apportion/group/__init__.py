"""The group's public face: the members, what they call back with, the definition, and what a group says of itself.

Protocols on fenced, epoch-numbered ownership (``FencedMember``, documented in ``_ownership``): ``RoundsMember`` (seed
0's continuous assignment rounds, ``_rounds``), ``CoordinatorMember`` (seed 1's elected coordinator and partition table,
``_coordinator``) and ``StaticMember`` (seed 3's StatefulSet ordinals, ``_static``) are stepped state machines, built
for a definition's mode (``Rounds``, ``Coordinator``, ``Static``: ``_mode``) by ``new_member`` with ``MemberOptions``;
they call back with lists of ``PartitionId`` (``Callback``, ``ReplicasCallback``, ``ReplicaLags``, ``Restored``), hand
out ``PartitionLease``/``CommitResult`` and report to a ``Tracer`` in ``TraceKind``. ``GroupConfig`` is the definition
(``parse_resources`` reads its resources text, ``sorted_pids`` puts partition ids in their one order). What a group says
of itself: ``group_status`` (a typed ``GroupStatus`` of ``MemberStatus`` and ``PartitionStatus``),
``owners``/``owner_of``/``owned_by``/``settled`` (who owns what, is it at rest), ``committed``/``checkpoint_offset``
(the fenced checkpoints), ``explain`` (why a partition is where it is, an ``Explanation``), ``history`` (the events,
kept ``DEFAULT_RETENTION_S`` by default; ``history_expired_before`` says since when; ``HistoryType`` their types,
``EVENT_TYPES`` all of them). An operator's writes: ``set_replicas``/``stored_replicas`` (static mode),
``set_subscriptions``, ``request_rebalance`` (coordinator). ``Router`` is seed 1's client (a key's partition and owner
from a watch-backed copy of the partition table, a ``Route``).

``__all__`` is exactly the list in docs/ARCHITECTURE.md ("The faces"; checked by tests/test_public_api.py). The
group raises only ``apportion.errors``' hierarchy, so it has no errors of its own to export. ``MemberState`` (where a
member is in its life) is not public: a user reads a member through its methods (``stopped``, ``owned``,
``lease``); its states are the member's own bookkeeping, written in ``_ownership``'s docstring. The key space and
its record codec, the partition table's records and reads, the validators and the status helpers that apportion's
other packages (``sim``, the CLI's ``status``, ``web``, ``spark``, ...) need are in :mod:`apportion.group.internals`,
which is not a stable API.
"""

from apportion.group._commits import CommitResult
from apportion.group._config import GroupConfig, parse_resources
from apportion.group._coordinator import CoordinatorMember, Restored
from apportion.group._explain import Explanation, explain
from apportion.group._history import DEFAULT_RETENTION_S, EVENT_TYPES, HistoryType, history, history_expired_before
from apportion.group._keys import PartitionId, sorted_pids
from apportion.group._members import new_member
from apportion.group._mode import Coordinator, Mode, Rounds, Static
from apportion.group._ownership import Callback, FencedMember, MemberOptions, PartitionLease
from apportion.group._replicas import ReplicaLags, ReplicasCallback
from apportion.group._rounds import RoundsMember
from apportion.group._router import Route, Router
from apportion.group._static import StaticMember, set_replicas, stored_replicas
from apportion.group._status import checkpoint_offset, committed, group_status, owned_by, owner_of, owners, settled
from apportion.group._status_records import GroupStatus, MemberStatus, PartitionStatus
from apportion.group._subscriptions import set_subscriptions
from apportion.group._table import request_rebalance
from apportion.group._trace import TraceKind, Tracer

__all__ = [
    # the members and what they call back with
    "FencedMember",
    "RoundsMember",
    "CoordinatorMember",
    "StaticMember",
    "MemberOptions",
    "new_member",
    "Callback",
    "ReplicasCallback",
    "ReplicaLags",
    "Restored",
    "PartitionLease",
    "CommitResult",
    "TraceKind",
    "Tracer",
    # the definition
    "GroupConfig",
    "Mode",
    "Rounds",
    "Coordinator",
    "Static",
    "PartitionId",
    "parse_resources",
    "sorted_pids",
    # what a group says of itself
    "group_status",
    "GroupStatus",
    "MemberStatus",
    "PartitionStatus",
    "owners",
    "owner_of",
    "owned_by",
    "settled",
    "committed",
    "checkpoint_offset",
    "explain",
    "Explanation",
    "history",
    "history_expired_before",
    "DEFAULT_RETENTION_S",
    "EVENT_TYPES",
    "HistoryType",
    # an operator's writes and seed 1's client
    "set_replicas",
    "stored_replicas",
    "set_subscriptions",
    "request_rebalance",
    "Router",
    "Route",
]
