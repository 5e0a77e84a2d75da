"""Protocols on fenced, epoch-numbered ownership (``FencedMember``, documented in ``_ownership``).

``RoundsMember`` (seed 0's continuous assignment rounds, ``_rounds``), ``CoordinatorMember`` (seed 1's elected
coordinator and partition table, ``_coordinator``) and ``StaticMember`` (seed 3's StatefulSet ordinals, ``_static``)
are stepped state machines; ``GroupConfig`` the resource definition; ``history`` the event history (kept
``history_retention_s``; ``history_expired_before`` says since when); ``group_status`` an operator's snapshot;
``owners``/``owned_by``/``settled`` what it says of who owns what; ``Keys`` the key space.
"""

from apportion.group._config import STRATEGIES, GroupConfig
from apportion.group._coordinator import CoordinatorMember, CoordinatorPhase, Entry, TableState
from apportion.group._explain import explain
from apportion.group._history import EVENT_TYPES, history, history_expired_before
from apportion.group._keys import Keys, decode, encode, validate_group, validate_member_id
from apportion.group._ownership import FencedMember, Lease, Ownership, default_planner
from apportion.group._rounds import Phase, ReplicaLags, ReplicasCallback, RoundsMember
from apportion.group._static import StaticMember, StaticPhase, ordinal_from_hostname, set_replicas
from apportion.group._status import group_status, owned_by, owners, settled

__all__ = [
    "EVENT_TYPES",
    "STRATEGIES",
    "CoordinatorMember",
    "CoordinatorPhase",
    "Entry",
    "FencedMember",
    "GroupConfig",
    "Keys",
    "Lease",
    "Ownership",
    "Phase",
    "ReplicaLags",
    "ReplicasCallback",
    "RoundsMember",
    "StaticMember",
    "StaticPhase",
    "TableState",
    "decode",
    "default_planner",
    "encode",
    "explain",
    "group_status",
    "history",
    "history_expired_before",
    "ordinal_from_hostname",
    "owned_by",
    "owners",
    "set_replicas",
    "settled",
    "validate_group",
    "validate_member_id",
]
