"""A member's life is one state (``MemberState``, ``FencedMember.state``), changed in one place (``_enter``), as the
lifecycle in ``apportion.group._ownership``'s docstring says: STARTING until it registers, ACTIVE while its lease
holds, BUSY inside a slow on_revoked, STARTING again when its belief lapses (on_lost is called from there), STOPPED
once it leaves."""

from __future__ import annotations

import math

from apportion.group import RoundsMember
from apportion.group._ownership import MemberState
from apportion.store import renew_interval_s
from tests.group.harness import FAST, Harness


def _slow_first_revoke(seconds: float) -> object:
    pending = [seconds]
    return lambda kind, parts: pending.pop() if kind == "revoked" and pending else 0.0


def test_a_member_goes_from_starting_to_active_busy_starting_and_stopped_as_its_lifecycle_says() -> None:
    h = Harness()
    states_at_loss: list[MemberState] = []
    a = RoundsMember(
        h.store, h.group, "a", FAST, clock=h.clock, delay=_slow_first_revoke(1.5),  # type: ignore[arg-type]
        on_lost=lambda parts: states_at_loss.append(a.state),
    )  # fmt: skip
    h.members["a"] = a
    h._next_keepalive["a"] = h.clock.now() + renew_interval_s(FAST.ttl_s)
    assert a.state is MemberState.STARTING and a.busy_until is None
    h.run(3.0)
    assert a.state is MemberState.ACTIVE and len(a.owned()) == FAST.partitions

    h.add("b")  # the next plan gives b half: a revokes it, slowly
    for _ in range(500):
        h.run(0.01)
        if a.state is MemberState.BUSY:
            break
    assert a.state is MemberState.BUSY and a.busy_until is not None, "a should be inside its slow on_revoked"
    h.run(3.0)
    assert a.state is MemberState.ACTIVE and a.busy_until is None
    assert len(a.owned()) == FAST.partitions // 2

    h.frozen.add("a")  # neither stepped nor renewed past its local deadline
    h.run(FAST.ttl_s)
    h.frozen.discard("a")
    h.run(0.05)
    assert states_at_loss == [MemberState.STARTING], "on_lost comes first, from STARTING"
    assert a.state is MemberState.ACTIVE, "registered again within the step that handled the lapse"

    a.leave()
    assert a.state is MemberState.STOPPED and a.stopped and a.step() == math.inf
