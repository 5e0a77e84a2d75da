"""`apportion status` lists the members that failed recently (seed 1's failed member list): when and what they owned;
a group of more than 200 partitions gets a summary (per-member and per-resource counts, the partitions not at rest,
bounded), ``--all`` lists every partition and ``--json`` has everything (issue 27)."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from rich.console import Console

from apportion.cli._status import SUMMARY_ABOVE, SUMMARY_ROWS, render
from apportion.group import CoordinatorMember, GroupConfig, GroupStatus, MemberStatus, PartitionStatus, parse_resources
from apportion.group._status_records import FailedMember
from apportion.group.internals import Entry, TableState
from apportion.store import connect
from tests.cli.run import cli
from tests.group.large_group import LargeGroup, build_group
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


# -- a large group (issue 27): a summary, --all, --json ------------------------------------------------------------

LARGE = 20_000  # partitions over 64 members: far above SUMMARY_ABOVE, built in about a second


@pytest.fixture(scope="module")
def large() -> tuple[str, LargeGroup]:
    """64 members x 20,000 partitions on a named memory store; the last 30 of the plan unowned (moving)."""
    url = f"memory://{uuid.uuid4().hex}"
    return url, build_group(connect(url), "big", partitions=LARGE, unowned=30)


def test_a_large_group_is_summarised_with_each_members_count_in_bounded_lines(
    large: tuple[str, LargeGroup], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, group = large
    monkeypatch.setenv("COLUMNS", "160")  # a terminal of 160 columns: no cell wraps
    result = cli("status", "--store", url, "--group", "big")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) <= len(group.members) + 3 * SUMMARY_ROWS + 20, f"{len(lines)} lines"
    unowned = set(group.unowned)
    for mid in group.members:
        count = sum(1 for p in group.assignment[mid] if p not in unowned)
        assert any(re.fullmatch(rf"│ {mid} +│ yes +│ +{count:,} │", line) for line in lines), (mid, count)
    text = " ".join(result.stdout.split())  # the counts line may wrap
    assert f"partitions: {LARGE:,} — {LARGE - 30:,} owned, 30 unowned, 0 lapsing, 30 moving; 30 not at rest" in text
    assert "--all lists every partition" in text
    assert f"partitions not at rest: the first {SUMMARY_ROWS} of 30" in text
    listed = [line.split("│")[1].strip() for line in lines if re.match(r"│ \d+ ", line)]
    assert listed == [str(p) for p in group.unowned[:SUMMARY_ROWS]]  # the first not at rest, in id order
    planned = {p: mid for mid, parts in group.assignment.items() for p in parts}
    assert f"unowned (planned for {planned[group.unowned[0]]})" in text
    assert f"… and {30 - SUMMARY_ROWS} more" in text


def test_all_lists_every_partition_of_a_large_group_one_line_each(large: tuple[str, LargeGroup]) -> None:
    url, group = large
    result = cli("status", "--store", url, "--group", "big", "--all")
    assert result.code == 0, result.stderr
    rows = {}
    for line in result.stdout.splitlines():
        cells = line.split()
        if cells and cells[0].isdigit() and len(cells) >= 4 and not line.startswith("│"):
            rows[int(cells[0])] = cells
    assert sorted(rows) == list(range(LARGE))
    owner = {p: mid for mid, parts in group.assignment.items() for p in parts}
    assert all(cells[1] == ("-" if p in group.unowned else owner[p]) for p, cells in rows.items())
    assert rows[7][2:] == ["1", '{"offset":', "1007}", "1007"]  # epoch, checkpoint, offset
    w00 = next(line for line in result.stdout.splitlines() if line.startswith("│ w00 "))
    assert " ".join(map(str, group.assignment["w00"][:4])) in w00  # each member's partition ids, as before


def test_json_of_a_large_group_has_every_partition_and_says_which_are_moving(large: tuple[str, LargeGroup]) -> None:
    url, group = large
    result = cli("status", "--store", url, "--group", "big", "--json")
    assert result.code == 0, result.stderr
    out = json.loads(result.stdout)
    assert len(out["partitions"]) == LARGE and sorted(out["members"]) == list(group.members)
    planned = {p: mid for mid, parts in group.assignment.items() for p in parts}
    moving = {int(p): info["moving_to"] for p, info in out["partitions"].items() if "moving_to" in info}
    assert moving == {p: planned[p] for p in group.unowned}
    assert all(out["partitions"][str(p)]["owner"] is None for p in group.unowned)


def test_a_summary_counts_each_resource_of_a_group_over_named_resources() -> None:
    url = f"memory://{uuid.uuid4().hex}"
    config = GroupConfig(resources=parse_resources("clicks:300,orders:900"))
    group = build_group(connect(url), "big", members=4, config=config, unowned=5)
    result = cli("status", "--store", url, "--group", "big")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    for mid in group.members:
        parts = group.assignment[mid]
        clicks = sum(1 for p in parts if str(p).startswith("clicks-"))
        owned = sum(1 for p in parts if p not in group.unowned)
        orders = owned - clicks  # the unowned ones are the last orders
        assert any(re.fullmatch(rf"│ {mid} +│ yes +│ +{owned:,} │ +{clicks} │ +{orders} │", line) for line in lines)
    assert any(re.fullmatch(r"│ orders +│ +900 │ +895 │ +5 │ +5 │", line) for line in lines), result.stdout
    assert any(re.fullmatch(r"│ clicks +│ +300 │ +300 │ +0 │ +0 │", line) for line in lines), result.stdout


def test_a_summary_names_table_moves_and_waiting_ordinals() -> None:
    """Coordinator and static modes in a summary: the partition table's entries counted by state, a MIGRATING one
    listed with its target, an unowned one waiting for its ordinal (a snapshot as group_status gives it)."""
    partitions = {str(p): PartitionStatus("w1", 1, None) for p in range(300)}
    partitions["7"] = PartitionStatus(None, 3, None, waiting_for=2)
    table = {str(p): Entry("w1", None, TableState.ONLINE) for p in range(300)}
    table["12"] = Entry("w1", "w2", TableState.MIGRATING)
    snapshot = GroupStatus(
        members={"w1": MemberStatus(True, tuple(str(p) for p in range(300) if p != 7))},
        partitions=partitions,
        round=0,
        plan_round=0,
        resource=None,
        table=table,
        failed={"w3": FailedMember(1.0, tuple(range(40)), "w1")},
        coordinator={"member": "w1"},
    )
    console = Console(record=True, width=200)
    console.print(render("g", snapshot))
    text = console.export_text()
    assert "299 owned, 1 unowned (1 waiting for their ordinal)" in text and "2 not at rest" in text
    assert "partition table (coordinator w1): 1 MIGRATING, 299 ONLINE" in text
    assert "waiting for ordinal 2" in text and "MIGRATING → w2" in text
    assert "40 partitions" in text and " 0 1 2 3 " not in text  # the failed member's count, not its list


def test_the_help_says_what_a_summary_leaves_out_and_how_to_list_everything() -> None:
    text = " ".join(cli("status", "--help").stdout.split())
    assert f"A group of more than {SUMMARY_ABOVE} partitions gets a summary" in text
    assert f"at most {SUMMARY_ROWS} of the partitions not at rest" in text
    assert "It leaves out each member's partition ids and the owner, epoch and checkpoint of every other" in text
    assert "--all lists them, --json always has them" in text


def test_json_of_a_group_over_named_resources_has_them_and_each_members_subscriptions() -> None:
    """Issue 28: the table showed the resources (title) and each member's subscriptions (a column); --json left both
    out. And `subscribe orders,orders` was echoed as given: now stripped, deduplicated and sorted, an empty name
    refused."""
    import apportion
    from apportion.group import settled
    from apportion.waiting import wait_for

    url = f"memory://{uuid.uuid4().hex}"
    store = connect(url)
    group = apportion.Group(store, "g", resources="orders:4,payments:2", settle_s=0.1, min_interval_s=0.2)
    with group.join("w1", subscriptions=["orders"]), group.join("w2"):
        wait_for("w1 and w2 settled", lambda: settled(store, "g", ["w1", "w2"]), 15)
        out = json.loads(cli("status", "--store", url, "--group", "g", "--json").stdout)
        assert out["resources"] == [{"name": "orders", "partitions": 4}, {"name": "payments", "partitions": 2}]
        assert out["members"]["w1"]["subscriptions"] == ["orders"]
        assert out["members"]["w2"].get("subscriptions") in (None, ["orders", "payments"])
        done = cli("subscribe", "--store", url, "--group", "g", "--id", "w1", " payments , orders,orders", "--json")
        assert done.code == 0, done.stderr
        assert json.loads(done.stdout)["subscriptions"] == ["orders", "payments"]
        said = cli("subscribe", "--store", url, "--group", "g", "--id", "w1", "payments,orders,payments")
        assert said.stdout.strip() == "group g: w1 subscribes to orders,payments"
        for bad, why in (("orders,,payments", "an empty resource name"), ("", "an empty resource name"),
                         ("orders,nope", "'nope' is not a resource of the group")):  # fmt: skip
            refused = cli("subscribe", "--store", url, "--group", "g", "--id", "w1", bad)
            assert refused.code == 2 and why in refused.one_error_line()
    store.close()
