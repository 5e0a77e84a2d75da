"""`explain`: the round, the strategy's decision and the epoch history of a partition, from the group's history."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from apportion.errors import InvalidRequest
from apportion.group import GroupConfig, explain, parse_resources
from tests.group.harness import Harness


def _owner_of(h: Harness, p: int) -> str:
    return h.owners()[p]


def test_first_round_partitions_are_filled_then_kept_and_moves_name_over_quota_and_leavers() -> None:
    h = Harness()
    h.add("a")
    h.run(3.0)
    first = explain(h.store, "g", 0)
    assert first.owner == "a" and first.epoch == 1
    assert first.decision.kind == "filled", first
    assert "unowned" in first.decision.text
    assert [e.type for e in first.epochs] == ["claim"]

    h.add("b")
    h.run(4.0)
    moved = [p for p, m in h.owners().items() if m == "b"]
    assert len(moved) == 6
    out = explain(h.store, "g", moved[0])
    assert out.owner == "b" and out.epoch == 2
    assert out.decision.kind == "moved" and out.decision.source == "a"
    assert "over quota" in out.decision.text, out
    assert [(e.type, e.member, e.epoch) for e in out.epochs] == [
        ("claim", "a", 1),
        ("release", "a", 1),
        ("claim", "b", 2),
    ]
    assert out.round is not None

    h.frozen.add("b")  # b stops: its lease expires, a takes its partitions back
    h.run(8.0)
    back = explain(h.store, "g", moved[0])
    assert back.owner == "a" and back.epoch == 3
    assert back.decision.kind == "moved" and back.decision.source == "b"
    assert "b left" in back.decision.text, back

    stayed = [p for p, m in h.owners().items() if p not in moved]
    kept = explain(h.store, "g", stayed[0])
    assert kept.decision.kind == "kept", kept
    assert kept.acquired.kind == "filled"


def test_a_partition_whose_owner_stopped_subscribing_to_its_resource_is_explained_by_that_not_by_quota() -> None:
    config = GroupConfig(resources=parse_resources("orders:4,payments:4"), settle_s=0.5, min_interval_s=1.0)
    h = Harness(config)
    a = h.add("a")
    h.run(3.0)
    h.add("b")
    h.run(4.0)
    had = [p for p in a.owned() if str(p).startswith("orders-")]
    assert had and len(a.owned()) == 4, h.assignment()
    a.subscribe(["payments"])
    h.run(4.0)
    assert all(h.owners()[p] == "b" for p in had), h.assignment()
    out = explain(h.store, "g", had[0])
    assert out.acquired.kind == "moved" and out.acquired.source == "a", out
    assert out.acquired.text.startswith("moved from a because a stopped subscribing to orders in round"), out
    assert "stopped subscribing to orders" in out.decision.text and "quota" not in out.decision.text


def test_unknown_partition_is_an_invalid_request() -> None:
    h = Harness()
    h.add("a")
    h.run(2.0)
    with pytest.raises(InvalidRequest, match="partition"):
        explain(h.store, "g", 12)
    with pytest.raises(InvalidRequest, match="group"):
        explain(h.store, "nope", 0)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "apportion.cli", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_cli_explain_prints_json_and_exits_2_on_an_unknown_partition(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/g.db"
    from apportion.store import connect

    with connect(url) as store:
        h = Harness()
        h.store = store  # type: ignore[assignment]
        h.add("a")
        h.run(2.0)
        for member in h.members.values():
            member.leave()
    done = _cli("explain", "--store", url, "--group", "g", "--json", "3")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["partition"] == 3 and out["owner"] is None
    assert [e["type"] for e in out["epochs"]] == ["claim", "release"]
    text = _cli("explain", "--store", url, "--group", "g", "3")
    assert text.returncode == 0 and "epoch history" in text.stdout
    bad = _cli("explain", "--store", url, "--group", "g", "99")
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "partition" in bad.stderr
