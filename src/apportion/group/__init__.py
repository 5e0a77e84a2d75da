"""Protocols on fenced, epoch-numbered ownership (``FencedMember``, documented in ``_ownership``).

``RoundsMember`` (seed 0's continuous assignment rounds, ``_rounds``), ``CoordinatorMember`` (seed 1's elected
coordinator and partition table, ``_coordinator``) and ``StaticMember`` (seed 3's StatefulSet ordinals, ``_static``)
are stepped state machines, built for a definition's mode (``Rounds``, ``Coordinator``, ``Static``: ``_mode``) by
``new_member``; ``GroupConfig`` the resource definition, its mode included; ``history`` the event history (kept
``history_retention_s``; ``history_expired_before`` says since when); ``group_status`` an operator's snapshot;
``owners``/``owned_by``/``settled`` what it says of who owns what; ``Router`` seed 1's client (a key's partition and
owner from a watch-backed copy of the partition table); ``Keys`` the key space.
"""

from apportion.group._commits import CommitResult
from apportion.group._config import MAX_SECONDS, STRATEGIES, GroupConfig, parse_resources
from apportion.group._coordinator import FAILED_RETENTION_S, CoordinatorMember, CoordinatorPhase, Restored
from apportion.group._explain import Explanation, explain
from apportion.group._history import DEFAULT_RETENTION_S, EVENT_TYPES, history, history_expired_before
from apportion.group._keys import (
    LAYOUT,
    LEGACY_LAYOUT,
    Keys,
    PartitionId,
    PlanRecord,
    decode,
    decode_owner,
    encode,
    pid_of_text,
    pid_order,
    sorted_pids,
    subscribed,
    validate_group,
    validate_member_id,
)
from apportion.group._members import new_member
from apportion.group._mode import (
    MAX_REPLICAS,
    MODES,
    NO_STATIC_SUBSCRIPTIONS,
    POLICIES,
    Coordinator,
    Mode,
    Rounds,
    Static,
    mode_named,
    validate_ordinal,
    validate_replicas,
)
from apportion.group._ownership import (
    CHUNK,
    Callback,
    DelayHook,
    FencedMember,
    MemberOptions,
    Ownership,
    PartitionLease,
    default_planner,
)
from apportion.group._replicas import ReplicaLags, ReplicasCallback
from apportion.group._rounds import Phase, RoundsMember
from apportion.group._router import Route, Router
from apportion.group._static import (
    StaticMember,
    StaticPhase,
    ordinal_from_hostname,
    set_replicas,
    stored_replicas,
)
from apportion.group._status import (
    checkpoint_offset,
    committed,
    group_status,
    not_at_rest,
    owned_by,
    owner_of,
    owners,
    plan_tags,
    settled,
    table_entry,
    table_entry_of,
    tags_text,
)
from apportion.group._status_records import GroupStatus, MemberStatus, PartitionStatus
from apportion.group._subscriptions import set_subscriptions
from apportion.group._table import Entry, TableState, in_flight, planned_moves, read_table, request_rebalance
from apportion.group._trace import TraceKind, Tracer

__all__ = [
    "CHUNK",
    "MAX_REPLICAS",
    "MODES",
    "NO_STATIC_SUBSCRIPTIONS",
    "POLICIES",
    "Coordinator",
    "Mode",
    "Rounds",
    "Static",
    "mode_named",
    "new_member",
    "DEFAULT_RETENTION_S",
    "EVENT_TYPES",
    "FAILED_RETENTION_S",
    "LAYOUT",
    "LEGACY_LAYOUT",
    "MAX_SECONDS",
    "STRATEGIES",
    "Callback",
    "CommitResult",
    "CoordinatorMember",
    "CoordinatorPhase",
    "DelayHook",
    "Entry",
    "FencedMember",
    "GroupConfig",
    "Keys",
    "PartitionId",
    "PartitionLease",
    "PlanRecord",
    "MemberOptions",
    "Ownership",
    "Phase",
    "ReplicaLags",
    "ReplicasCallback",
    "Restored",
    "RoundsMember",
    "Route",
    "Router",
    "StaticMember",
    "StaticPhase",
    "TableState",
    "TraceKind",
    "Tracer",
    "checkpoint_offset",
    "committed",
    "decode",
    "decode_owner",
    "default_planner",
    "encode",
    "Explanation",
    "explain",
    "GroupStatus",
    "MemberStatus",
    "PartitionStatus",
    "group_status",
    "not_at_rest",
    "history",
    "history_expired_before",
    "in_flight",
    "ordinal_from_hostname",
    "owned_by",
    "owner_of",
    "owners",
    "plan_tags",
    "parse_resources",
    "planned_moves",
    "read_table",
    "request_rebalance",
    "set_replicas",
    "set_subscriptions",
    "settled",
    "stored_replicas",
    "pid_of_text",
    "pid_order",
    "sorted_pids",
    "subscribed",
    "table_entry",
    "table_entry_of",
    "tags_text",
    "validate_group",
    "validate_member_id",
    "validate_ordinal",
    "validate_replicas",
]
