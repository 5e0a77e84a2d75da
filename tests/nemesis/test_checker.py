"""The nemesis checker on hand-written histories: a clean one passes, and each guarantee's breach is caught."""

from __future__ import annotations

import json
from typing import Any

from tests.nemesis.checker import check


def put(revision: int, key: str, value: Any) -> dict[str, Any]:
    return {"revision": revision, "type": "put", "key": key, "value": json.dumps(value), "lease": 7}


def delete(revision: int, key: str) -> dict[str, Any]:
    return {"revision": revision, "type": "delete", "key": key, "value": "", "lease": 0}


def claim(revision: int, p: int, member: str, epoch: int) -> list[dict[str, Any]]:
    return [put(revision, f"owner/{p}", {"member": member, "epoch": epoch}), put(revision, f"epoch/{p}", epoch)]


def commit(revision: int, p: int, member: str, epoch: int, checkpoint: str = "c") -> dict[str, Any]:
    """A commit record as the dump names it: ``.commit/<group>/<p>``, relative to ``/apportion/``."""
    return put(revision, f".commit/g/{p}", {"checkpoint": checkpoint, "epoch": epoch, "member": member})


def legacy_commit(revision: int, p: int, member: str, epoch: int, checkpoint: str = "c") -> dict[str, Any]:
    """A commit record of the layout before: ``commit/<p>`` under the group's prefix."""
    return put(revision, f"commit/{p}", {"checkpoint": checkpoint, "epoch": epoch, "member": member})


def ev(t: float, event: str, parts: list[int], **fields: Any) -> dict[str, Any]:
    return {"event": event, "time": t, "partitions": parts, **fields}


# a handoff of partition 0 from w0 (epoch 1) to w1 (epoch 2) after w0's lease expired, each committing once
CLEAN_STORE = [
    *claim(1, 0, "w0", 1),
    commit(2, 0, "w0", 1, "a"),
    delete(3, "owner/0"),
    *claim(4, 0, "w1", 2),
    commit(5, 0, "w1", 2, "b"),
]
CLEAN_WORKERS = {
    "w0": [
        ev(10.0, "assigned", [0]),
        ev(10.5, "commit", [0], epoch=1, revision=2, checkpoint="a"),
        ev(14.0, "lost", [0]),
    ],
    "w1": [ev(15.5, "assigned", [0]), ev(16.0, "commit", [0], epoch=2, revision=5, checkpoint="b")],
}
JOURNAL = [{"event": "fault", "kind": "isolate-worker", "target": "w0", "time": 11.0}, {"event": "end", "time": 20.0}]


def kinds(violations: list[str]) -> set[str]:
    return {line.split(":")[0] for line in violations}


def test_a_clean_handoff_passes_and_reports_the_gap_after_the_fault() -> None:
    report = check(CLEAN_STORE, CLEAN_WORKERS, JOURNAL, partitions=1)
    assert report.ok, report.violations
    assert report.store_commits == report.worker_commits == 2
    assert report.faults["isolate-worker"].injected == 1
    assert report.faults["isolate-worker"].longest_gap_s == 1.5  # w0 lost it at 14.0, w1 took it at 15.5
    assert report.availability[0] == (4.0 + 4.5) / 10.0  # owned 10-14 and 15.5-20 of 10-20


def test_a_commit_by_a_member_that_no_longer_owns_the_partition_breaks_the_fence() -> None:
    store = [*CLEAN_STORE[:4], *claim(4, 0, "w1", 2), commit(5, 0, "w0", 1)]  # w0's epoch-1 commit after w1's claim
    assert "fence" in kinds(check(store, {}, [], partitions=1).violations)


def test_a_commit_whose_epoch_the_counter_has_passed_breaks_the_fence() -> None:
    store = [*claim(1, 0, "w0", 1), put(2, "epoch/0", 2), commit(3, 0, "w0", 1)]
    assert "fence" in kinds(check(store, {}, [], partitions=1).violations)


def test_commits_of_an_older_epoch_after_a_newer_ones_break_the_order() -> None:
    store = [*claim(1, 0, "w1", 2), commit(2, 0, "w1", 2), put(3, "owner/0", {"member": "w0", "epoch": 1})]
    store.append(commit(4, 0, "w0", 1))  # an owner record rolled back and an old epoch committing again
    assert "order" in kinds(check(store, {}, [], partitions=1).violations)


def test_commit_records_of_the_layout_before_are_checked_alike_and_ordered_with_the_current_ones() -> None:
    store = [*claim(1, 0, "w0", 1), legacy_commit(2, 0, "w0", 1, "a"), delete(3, "owner/0"), *claim(4, 0, "w1", 2)]
    store.append(commit(5, 0, "w1", 2, "b"))
    workers = {"w0": [ev(10.0, "commit", [0], epoch=1, revision=2, checkpoint="a")]}
    report = check(store, workers, [], partitions=1)
    assert report.ok and report.store_commits == 2, report.violations
    stale = [*store, put(6, "owner/0", {"member": "w0", "epoch": 1}), legacy_commit(7, 0, "w0", 1)]
    assert {"fence", "order"} <= kinds(check(stale, {}, [], partitions=1).violations)


def test_a_batch_committed_in_one_transaction_is_checked_partition_by_partition() -> None:
    store = [*claim(1, 0, "w0", 1), *claim(1, 1, "w0", 1), commit(2, 0, "w0", 1, "a"), commit(2, 1, "w0", 1, "b")]
    workers = {
        "w0": [
            ev(10.0, "assigned", [0, 1]),
            ev(10.5, "commit", [0], epoch=1, revision=2, checkpoint="a"),
            ev(10.5, "commit", [1], epoch=1, revision=2, checkpoint="b"),
        ]
    }
    report = check(store, workers, [], partitions=2)
    assert report.ok and report.store_commits == report.worker_commits == 2, report.violations
    workers["w0"].append(ev(10.6, "commit", [1], epoch=1, revision=2, checkpoint="a"))  # not what rev 2 stored
    assert kinds(check(store, workers, [], partitions=2).violations) == {"durability"}


def test_an_epoch_counter_that_skips_or_an_owner_record_without_its_bump_is_caught() -> None:
    skipped = [*claim(1, 0, "w0", 1), *claim(2, 0, "w1", 3)]
    assert "epochs" in kinds(check(skipped, {}, [], partitions=1).violations)
    unbumped = [*claim(1, 0, "w0", 1), delete(2, "owner/0"), put(3, "owner/0", {"member": "w1", "epoch": 1})]
    assert "epochs" in kinds(check(unbumped, {}, [], partitions=1).violations)


def test_an_acknowledged_commit_missing_from_the_store_breaks_durability() -> None:
    workers = {"w0": [ev(10.0, "assigned", [0]), ev(10.5, "commit", [0], epoch=1, revision=3, checkpoint="a")]}
    report = check(CLEAN_STORE, workers, [], partitions=1)
    assert kinds(report.violations) == {"durability"}, report.violations


def test_overlapping_beliefs_beyond_the_slack_are_violations_within_it_or_with_a_skewed_clock_tolerated() -> None:
    late = {"w0": [ev(10.0, "assigned", [0]), ev(15.0, "lost", [0])], "w1": [ev(14.0, "assigned", [0])]}
    assert kinds(check([], late, [], partitions=1).violations) == {"belief"}
    stamped = {"w0": [ev(10.0, "assigned", [0]), ev(14.05, "lost", [0])], "w1": [ev(14.0, "assigned", [0])]}
    report = check([], stamped, [], partitions=1, slack_s=0.1)
    assert report.ok and len(report.tolerated_overlaps) == 1
    report = check([], late, [], partitions=1, skewed=["w0"])
    assert report.ok and "skewed" in report.tolerated_overlaps[0]


def test_a_killed_worker_believes_nothing_after_its_kill() -> None:
    workers = {"w0": [ev(10.0, "assigned", [0]), ev(30.0, "assigned", [1])], "w1": [ev(16.0, "assigned", [0])]}
    journal = [{"event": "kill", "target": "w0", "time": 12.0}, {"event": "start", "target": "w0", "time": 29.0}]
    report = check([], workers, journal, partitions=2)
    assert report.ok, report.violations
    without_the_kill = check([], workers, [], partitions=2)
    assert kinds(without_the_kill.violations) == {"belief"}
