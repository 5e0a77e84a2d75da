"""The one place a member is built for a group's mode: :func:`new_member` (the worker, the simulator).

``config`` is the requested definition; its ``mode`` picks the protocol: ``Rounds()`` → :class:`RoundsMember`,
``Coordinator(...)`` → :class:`CoordinatorMember`, ``Static(...)`` → :class:`StaticMember`. What only a member is
(not the group) comes as keywords, each refused with a mode that has no use for it: a static member's ``ordinal``;
``subscriptions`` (rounds and coordinator); ``capacity``, ``rack`` and the stateful replicas' ``replica_lags`` and
``on_replicas`` (rounds; a coordinator plans by its strategy alone and ignores capacity and rack, as it always did);
a stateful member's ``restored(partition, epoch)`` (coordinator: the gate of its migration acks, so that the table's
ONLINE means the state is restored; the other modes have no ack to hold back).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Unpack

from apportion.errors import InvalidRequest
from apportion.group._config import GroupConfig
from apportion.group._coordinator import CoordinatorMember, Restored
from apportion.group._mode import NO_STATIC_SUBSCRIPTIONS, Coordinator, Static
from apportion.group._ownership import FencedMember, MemberOptions
from apportion.group._replicas import ReplicaLags, ReplicasCallback
from apportion.group._round_plan import Checker, check_plan
from apportion.group._rounds import RoundsMember
from apportion.group._static import StaticMember
from apportion.store import Store


def new_member(
    store: Store,
    group: str,
    member_id: str,
    config: GroupConfig,
    *,
    ordinal: int | None = None,
    subscriptions: Sequence[str] | None = None,
    capacity: float = 1.0,
    rack: str | None = None,
    replica_lags: ReplicaLags | None = None,
    on_replicas: ReplicasCallback | None = None,
    restored: Restored | None = None,
    checker: Checker = check_plan,
    **options: Unpack[MemberOptions],
) -> FencedMember:
    """A member of ``group`` for ``config.mode`` (see the module docstring); InvalidRequest for a keyword its mode
    cannot use, a static member without an ordinal, or a definition with no mode."""
    mode = config.mode
    if mode is None:
        raise InvalidRequest("mode", "a member needs a mode: Rounds(), Coordinator(...) or Static(...)")
    if not isinstance(mode, Static) and ordinal is not None:
        raise InvalidRequest("ordinal", f"only in static mode (this is {mode.name} mode)")
    if mode.name != "rounds" and (replica_lags is not None or on_replicas is not None):
        raise InvalidRequest("on_replicas", "standby and learner replicas exist only in the rounds mode")
    if not isinstance(mode, Coordinator) and restored is not None:
        raise InvalidRequest("restored", f"only a coordinator member acks a migration (this is {mode.name} mode)")
    if isinstance(mode, Static):
        if ordinal is None:
            raise InvalidRequest("ordinal", "static mode needs an ordinal")
        if subscriptions is not None:
            raise InvalidRequest("subscriptions", NO_STATIC_SUBSCRIPTIONS)
        return StaticMember(store, group, member_id, config, ordinal=ordinal, **options)
    if isinstance(mode, Coordinator):
        return CoordinatorMember(
            store, group, member_id, config, subscriptions=subscriptions, checker=checker, restored=restored, **options
        )
    return RoundsMember(
        store, group, member_id, config, capacity=capacity, rack=rack, checker=checker, replica_lags=replica_lags,
        on_replicas=on_replicas, subscriptions=subscriptions, **options,
    )  # fmt: skip


__all__ = ["new_member"]
