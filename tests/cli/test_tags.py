"""Seed 2's task tags (isLearner, beingLearned, isReady) where an operator looks (issue 30.6): `apportion status`
(text and --json), `apportion explain` (text and --json) and the dashboard's feed, on a high_availability group
whose newcomer warms learners (rounds mode in virtual time, on a named memory store the in-process CLI opens)."""

from __future__ import annotations

import json
import uuid

import pytest

from apportion.store import connect
from apportion.waiting import wait_for
from apportion.web import Feed
from tests.cli.run import cli
from tests.group.test_replicas import HA, Replicas, ha_group

LEARNER = {"role": "learner", "isLearner": True, "beingLearned": False, "isReady": False}


def warming_group() -> tuple[str, int, str]:
    """m0..m2 hold 12 partitions; m3 joined and warms two learners, far behind: (url, a partition it learns, the
    partition's active)."""
    url = f"memory://{uuid.uuid4().hex}"
    h, replicas = ha_group(0)
    h.store = connect(url, clock=h.clock)  # type: ignore[assignment]
    for i in range(3):
        r = replicas[f"m{i}"] = Replicas()
        h.add(f"m{i}", replica_lags=r.lags, on_replicas=r.on_replicas)
    h.run(3)
    newcomer = replicas["m3"] = Replicas()
    h.add("m3", replica_lags=newcomer.lags, on_replicas=newcomer.on_replicas)
    h.run(3)
    assert len(newcomer.learners) == HA.options["max_warmup_replicas"]
    p = newcomer.learners[0]
    return url, p, h.owners()[p]


def test_status_and_explain_show_each_holder_s_task_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # a terminal wide enough for the tags column on one line
    url, p, active = warming_group()
    status = cli("status", "--store", url, "--group", "g", "--json")
    assert status.code == 0, status.stderr
    parts = json.loads(status.stdout)["partitions"]
    tags = parts[str(p)]["tags"]
    assert tags["m3"] == LEARNER
    assert tags[active] == {"role": "active", "isLearner": False, "beingLearned": True, "isReady": True}
    quiet = next(q for q, info in parts.items() if "m3" not in info["tags"])  # nobody learns it
    assert not any(flags["beingLearned"] for flags in parts[quiet]["tags"].values())
    text = cli("status", "--store", url, "--group", "g")
    assert f"{active} active: beingLearned isReady · m3 learner: isLearner" in text.stdout, text.stdout
    why = cli("explain", "--store", url, "--group", "g", str(p), "--json")
    assert why.code == 0, why.stderr
    assert json.loads(why.stdout)["tags"] == tags
    said = cli("explain", "--store", url, "--group", "g", str(p))
    assert f"tags: {active} active: beingLearned isReady · m3 learner: isLearner" in said.stdout, said.stdout


def test_the_dashboard_feed_carries_the_task_tags() -> None:
    url, p, active = warming_group()
    feed = Feed(url, "g").start()
    try:
        wait_for("the feed's first state", lambda: bool(feed.state().get("partitions")), 20)
        row = next(r for r in feed.state()["partitions"] if r["partition"] == p)
        assert row["tags"]["m3"] == LEARNER and row["tags"][active]["beingLearned"]
    finally:
        feed.close()


def test_a_group_of_another_strategy_shows_no_tags() -> None:
    url = f"memory://{uuid.uuid4().hex}"
    with connect(url) as store:
        from apportion.group import GroupConfig
        from apportion.group.internals import Keys, encode

        store.put(Keys("g").resource, encode(GroupConfig(partitions=4).to_json()))
        status = cli("status", "--store", url, "--group", "g", "--json")
        assert status.code == 0, status.stderr
        assert not any("tags" in info for info in json.loads(status.stdout)["partitions"].values())
