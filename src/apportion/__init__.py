"""apportion: continuously assign the partitions of a resource to a changing fleet of workers.

Balanced (by count or capacity), sticky (few moves), exclusive (one owner at a time, fenced by epochs).

Names load lazily (PEP 562): ``import apportion`` costs nothing beyond this module, and ``from apportion import
Group`` loads the group, store and worker layers only then. So `apportion assign` and ``apportion.assign`` never pay
for the layers they do not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apportion._lazy import by_module, lazy_dir, lazy_names

if TYPE_CHECKING:  # the same names, eagerly, for type checkers
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
    from apportion.worker import CommitResult, Group, JoinOptions, PartitionLease, Worker

    __version__: str  # read from the installed distribution on first use (``__getattr__``)

# every public name -> the module it loads from
_LAZY = by_module(
    {
        "apportion.errors": "ApportionError Compacted Conflict Fenced InvalidRequest LeaseNotFound NotEnoughMembers "
        "PlanViolation StoreUnavailable",
        "apportion.group": "Router",
        "apportion.model": "AssignRequest Member Move Partition Plan PlanStats Resource",
        "apportion.store": "Store connect",
        "apportion.worker": "CommitResult Group JoinOptions PartitionLease Worker",
    }
)

_load = lazy_names(__name__, _LAZY)


def __getattr__(name: str) -> object:
    """A public name, loaded on first use; ``__version__``: the installed distribution's version (``_version``)."""
    if name == "__version__":
        from apportion._version import version

        return version()
    return _load(name)


__dir__ = lazy_dir(__name__, _LAZY)


__all__ = [
    "ApportionError",
    "AssignRequest",
    "CommitResult",
    "Compacted",
    "Conflict",
    "Fenced",
    "Group",
    "InvalidRequest",
    "JoinOptions",
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
