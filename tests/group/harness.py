"""A tiny single-threaded driver for RoundsMember on the memory store with a VirtualClock (unit tests only)."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field

from apportion.clock import VirtualClock
from apportion.group import GroupConfig, RoundsMember
from apportion.store import MemoryStore, renew_interval_s

FAST = GroupConfig(partitions=12, strategy="sticky", settle_s=0.5, min_interval_s=1.0, heartbeat_s=30.0, ttl_s=3.0)


@dataclass
class Recorded:
    calls: list[tuple[str, str, list[int], float]] = field(default_factory=list)


class Harness:
    def __init__(self, config: GroupConfig = FAST, group: str = "g") -> None:
        self.clock = VirtualClock(1000.0)
        self.store = MemoryStore(f"memory://{uuid.uuid4().hex}", clock=self.clock)
        self.config = config
        self.group = group
        self.members: dict[str, RoundsMember] = {}
        self.frozen: set[str] = set()
        self.log = Recorded()
        self._next_keepalive: dict[str, float] = {}

    def add(self, member_id: str, **kwargs: object) -> RoundsMember:
        def cb(kind: str) -> object:
            return lambda parts: self.log.calls.append((kind, member_id, parts, self.clock.now()))

        member = RoundsMember(
            self.store,
            self.group,
            member_id,
            kwargs.pop("config", self.config),  # type: ignore[arg-type]
            clock=self.clock,
            on_assigned=cb("assigned"),  # type: ignore[arg-type]
            on_revoked=cb("revoked"),  # type: ignore[arg-type]
            on_lost=cb("lost"),  # type: ignore[arg-type]
            **kwargs,  # type: ignore[arg-type]
        )
        self.members[member_id] = member
        self._next_keepalive[member_id] = self.clock.now() + renew_interval_s(member.config.ttl_s)
        return member

    def run(self, seconds: float, tick: float = 0.01) -> None:
        """Step every live member at least every ``tick`` of virtual time (keepalive every ttl/4)."""
        end = self.clock.now() + seconds
        for _ in itertools.count():
            now = self.clock.now()
            for mid, member in list(self.members.items()):
                if mid in self.frozen:
                    continue
                if now >= self._next_keepalive[mid]:
                    member.keepalive(now)
                    self._next_keepalive[mid] = now + renew_interval_s(member.config.ttl_s)
                member.step(now)
            if now >= end:
                return
            self.clock.advance(tick)

    def assignment(self) -> dict[str, list[int]]:
        return {mid: m.owned() for mid, m in self.members.items() if mid not in self.frozen}

    def owners(self) -> dict[int, str]:
        out: dict[int, str] = {}
        for mid, parts in self.assignment().items():
            for p in parts:
                assert p not in out, f"partition {p} believed owned by {out[p]} and {mid}"
                out[p] = mid
        return out
