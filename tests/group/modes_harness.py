"""The virtual-time harness of ``harness.py`` for the coordinator and static modes (unit tests only)."""

from __future__ import annotations

import dataclasses
from typing import Any

from apportion.group import Coordinator, CoordinatorMember, FencedMember, GroupConfig, Static, StaticMember
from apportion.store import renew_interval_s
from tests.group.harness import Harness

RR = GroupConfig(partitions=12, strategy="round_robin", settle_s=0.5, min_interval_s=1.0, ttl_s=3.0)


class ModeHarness(Harness):
    """``add_static`` / ``add_coordinated`` create members of the other modes; ``crash`` stops one for good."""

    def __init__(self, config: GroupConfig = RR) -> None:
        super().__init__(config)
        self.all: dict[str, FencedMember] = {}

    def _callbacks(self, member_id: str) -> dict[str, Any]:
        def cb(kind: str) -> Any:
            return lambda parts: self.log.calls.append((kind, member_id, parts, self.clock.now()))

        return {"on_assigned": cb("assigned"), "on_revoked": cb("revoked"), "on_lost": cb("lost")}

    def _register(self, member: FencedMember) -> FencedMember:
        self.members[member.id] = member  # type: ignore[assignment]
        self._next_keepalive[member.id] = self.clock.now() + renew_interval_s(member.config.ttl_s)
        return member

    def add_static(self, member_id: str, ordinal: int, replicas: int | None, **kwargs: Any) -> StaticMember:
        member = StaticMember(
            self.store,
            self.group,
            member_id,
            dataclasses.replace(self.config, mode=Static(replicas)),
            ordinal=ordinal,
            clock=self.clock,
            **self._callbacks(member_id),
            **kwargs,
        )
        self._register(member)
        return member

    def add_coordinated(self, member_id: str, **kwargs: Any) -> CoordinatorMember:
        """``min_members``, ``rebalance``, ``max_in_flight``, ``first_settle_s``: the group's ``Coordinator`` mode (the
        first member to start stores it); anything else goes to the member. ``first_settle_s`` is the group's RST
        unless given (None: the default rule, 10 s without a minimum): these members start together, and most tests
        are about what follows the first table."""
        names = ("min_members", "rebalance", "max_in_flight", "first_settle_s")
        settings = {"first_settle_s": self.config.settle_s, **{n: kwargs.pop(n) for n in names if n in kwargs}}
        config = dataclasses.replace(self.config, mode=Coordinator(**settings))
        member = CoordinatorMember(
            self.store, self.group, member_id, config, clock=self.clock, **self._callbacks(member_id), **kwargs
        )
        self._register(member)
        return member

    def crash(self, member_id: str) -> None:
        """The process is gone: no more steps or keepalives; its lease expires in the store."""
        del self.members[member_id]
        del self._next_keepalive[member_id]

    def store_owners(self) -> dict[int, str]:
        from apportion.group import group_status

        parts = group_status(self.store, self.group).partitions
        return {int(p): v.owner for p, v in parts.items() if v.owner is not None}
