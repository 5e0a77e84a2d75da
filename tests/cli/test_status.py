"""`apportion status` lists the members that failed recently (seed 1's failed member list): when and what they owned."""

from __future__ import annotations

import json
import uuid

from apportion.group import CoordinatorMember
from apportion.store import connect
from tests.cli.run import cli
from tests.group.modes_harness import ModeHarness


def test_status_lists_a_failed_member_with_when_and_what_it_owned() -> None:
    h = ModeHarness()
    url = f"memory://{uuid.uuid4().hex}"
    h.store = connect(url, clock=h.clock)  # type: ignore[assignment]
    for mid in ("a", "b", "c"):
        h.add_coordinated(mid)
    h.run(1.0)
    victim = next(m.id for m in h.members.values() if isinstance(m, CoordinatorMember) and not m.is_coordinator)
    owned = h.members[victim].owned()
    h.crash(victim)
    h.run(4.0)
    result = cli("status", "--store", url, "--group", "g", "--json")
    assert result.code == 0, result.stderr
    record = json.loads(result.stdout)["failed"][victim]
    assert record["partitions"] == owned and record["failed_at"] > 0
    table = cli("status", "--store", url, "--group", "g")
    assert table.code == 0, table.stderr
    assert "failed members" in table.stdout and victim in table.stdout
    assert " ".join(map(str, owned)) in table.stdout
