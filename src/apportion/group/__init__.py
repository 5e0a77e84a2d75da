"""Protocols: seed 0's continuous assignment rounds with fenced, epoch-numbered ownership.

``RoundsMember`` is the stepped state machine (documented in ``_rounds``); ``GroupConfig`` the resource definition;
``history`` the bounded event history; ``group_status`` an operator's snapshot; ``Keys`` the key space.
"""

from apportion.group._config import STRATEGIES, GroupConfig
from apportion.group._history import EVENT_TYPES, history
from apportion.group._keys import Keys, decode, encode, validate_group, validate_member_id
from apportion.group._rounds import Lease, Ownership, Phase, RoundsMember, default_planner
from apportion.group._status import group_status

__all__ = [
    "EVENT_TYPES",
    "STRATEGIES",
    "GroupConfig",
    "Keys",
    "Lease",
    "Ownership",
    "Phase",
    "RoundsMember",
    "decode",
    "default_planner",
    "encode",
    "group_status",
    "history",
    "validate_group",
    "validate_member_id",
]
