"""apportion: continuously assign the partitions of a resource to a changing fleet of workers.

Balanced (by count or capacity), sticky (few moves), exclusive (one owner at a time, fenced by epochs).
"""

from apportion.errors import (
    ApportionError,
    Compacted,
    Conflict,
    Fenced,
    InvalidRequest,
    LeaseNotFound,
    NotEnoughMembers,
    PlanViolation,
    StoreUnavailable,
)
from apportion.group import Router
from apportion.model import AssignRequest, Member, Move, Partition, Plan, PlanStats, Resource
from apportion.store import Store, connect
from apportion.worker import Group, PartitionLease, Worker

__version__ = "0.1.0"

__all__ = [
    "ApportionError",
    "AssignRequest",
    "Compacted",
    "Conflict",
    "Fenced",
    "Group",
    "InvalidRequest",
    "PartitionLease",
    "LeaseNotFound",
    "Member",
    "Move",
    "NotEnoughMembers",
    "Partition",
    "Plan",
    "PlanViolation",
    "PlanStats",
    "Resource",
    "Router",
    "Store",
    "StoreUnavailable",
    "Worker",
    "connect",
]
