"""A group over several resources through the public API and the CLI: real threads on the memory and SQLite
stores, subscriptions at join and at run time (``Worker.subscribe``, ``apportion subscribe``), status."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

import apportion
from apportion.errors import InvalidRequest
from apportion.group import GroupConfig, Static, group_status, settled
from apportion.group.internals import Keys, encode
from apportion.model import resource_of
from apportion.waiting import wait_for
from tests.cli.run import cli

RESOURCES = "orders:4,payments:2,refunds:2"


def _resources_held(worker: apportion.Worker) -> set[str]:
    return {str(resource_of(p)) for p in worker.owned()}


def test_workers_with_mixed_subscriptions_split_a_two_resource_group_and_follow_a_subscription_change() -> None:
    store = apportion.connect(f"memory://res-{uuid.uuid4().hex}")
    group = apportion.Group(store, "g", resources={"orders": 4, "payments": 2}, settle_s=0.1, min_interval_s=0.2)
    with group.join("w1", subscriptions=["orders"]) as w1, group.join("w2") as w2:
        wait_for("w1 and w2 settled", lambda: settled(store, "g", ["w1", "w2"]), 10)
        assert _resources_held(w1) == {"orders"}
        everything = ["orders-0", "orders-1", "orders-2", "orders-3", "payments-0", "payments-1"]
        assert sorted(map(str, w1.owned() + w2.owned())) == everything
        lease = w2.lease("payments-1")
        w2.commit("payments-1", "cp", epoch=lease.epoch)
        assert w1.checkpoint("payments-1") == "cp"
        assert store.get("/apportion/.commit/g/payments-1") is not None
        w1.subscribe(["payments"])
        wait_for("w1 holds payments only", lambda: _resources_held(w1) == {"payments"}, 10)
        wait_for("settled after the change", lambda: settled(store, "g", ["w1", "w2"]), 10)
        assert _resources_held(w2) >= {"orders"}
    store.close()


def test_a_subscription_to_an_unknown_resource_or_in_a_one_resource_group_is_refused() -> None:
    with apportion.connect(f"memory://res-{uuid.uuid4().hex}") as store:
        named = apportion.Group(store, "g", resources=RESOURCES)
        with pytest.raises(InvalidRequest, match="not a resource of the group"):
            named.join("w1", subscriptions=["nope"])
        plain = apportion.Group(store, "h", partitions=4)
        with pytest.raises(InvalidRequest, match="one-resource group"):
            plain.join("w1", subscriptions=["h"])
        static = apportion.Group(store, "s", resources=RESOURCES, mode=Static(1), ordinal=0)
        with pytest.raises(InvalidRequest, match="static mode has no subscriptions"):
            static.join("w1", subscriptions=["orders"])


def test_apportion_subscribe_changes_a_live_members_subscriptions_and_status_shows_them(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with apportion.connect(url) as store:
        group = apportion.Group(store, "g", resources=RESOURCES, settle_s=0.1, min_interval_s=0.2)
        with group.join("w1") as w1, group.join("w2", subscriptions=["orders", "refunds"]) as w2:
            wait_for("settled", lambda: settled(store, "g", ["w1", "w2"]), 15)
            assert "payments" not in _resources_held(w2)
            done = cli("subscribe", "--store", url, "--group", "g", "--id", "w1", "refunds", "--json")
            assert done.code == 0, done.stderr
            assert json.loads(done.stdout)["subscriptions"] == ["refunds"]
            wait_for("w1 holds refunds only", lambda: _resources_held(w1) == {"refunds"}, 10)
            wait_for("settled after the change", lambda: settled(store, "g", ["w1", "w2"]), 15)
            snapshot = group_status(store, "g")
            assert snapshot.members["w1"].subscriptions == ("refunds",)
            assert all(info.owner is None for p, info in snapshot.partitions.items() if p.startswith("payments"))
            shown = cli("status", "--store", url, "--group", "g")
            assert shown.code == 0 and "subscriptions" in shown.stdout and "orders (4)" in shown.stdout
            assert cli("subscribe", "--store", url, "--group", "g", "--id", "w1", "--clear").code == 0
            wait_for("w1 back on every resource", lambda: "payments" in _resources_held(w1), 10)
    bad = cli("subscribe", "--store", url, "--group", "g", "--id", "w1", "nope")
    assert bad.code == 2 and "not a resource of the group" in bad.one_error_line()
    missing = cli("subscribe", "--store", url, "--group", "nogroup", "--id", "w1", "orders")
    assert missing.code == 2 and "no such group" in missing.one_error_line()


def test_apportion_subscribe_on_a_static_group_is_refused_in_one_line(tmp_path: Path) -> None:
    """Issue 28 class 1: it stored an operator's subscriptions that no static member can use."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with apportion.connect(url) as store:
        store.put(Keys("g").resource, encode(GroupConfig(resources=RESOURCES, mode=Static()).to_json()))
    result = cli("subscribe", "--store", url, "--group", "g", "--id", "w1", "orders")
    assert result.code == 2, result.stderr
    assert "subscriptions: static mode has no subscriptions" in result.one_error_line()
    with apportion.connect(url) as store:
        assert store.get(Keys("g").subscription("w1")) is None


def test_worker_command_refuses_a_malformed_resource_list_before_opening_the_store(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    result = cli("worker", "--store", f"sqlite:///{db}", "--group", "g", "--id", "w1", "--resources", "orders:x")
    assert result.code == 2 and "<name>:<partitions>" in result.one_error_line()
    assert not db.exists()


def test_route_and_explain_name_the_resource_of_a_partition(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with apportion.connect(url) as store:
        group = apportion.Group(store, "g", resources=RESOURCES, settle_s=0.1, min_interval_s=0.2)
        with group.join("w1", subscriptions=["orders"]), group.join("w2"):
            wait_for("settled", lambda: settled(store, "g", ["w1", "w2"]), 15)
            routed = cli("route", "--store", url, "--group", "g", "--resource", "orders", "key-42")
            assert routed.code == 0, routed.stderr
            found = json.loads(routed.stdout)
            assert found["partition"].startswith("orders-") and found["owner"] in ("w1", "w2")
            with apportion.Router(store, "g", follow=False) as router:
                assert router.route("key-42", "orders").partition == found["partition"]
            told = cli("explain", "--store", url, "--group", "g", "--json", "payments-1")
            assert told.code == 0, told.stderr
            assert json.loads(told.stdout)["owner"] == "w2"  # w1 does not subscribe to payments
    unnamed = cli("route", "--store", url, "--group", "g", "key-42")
    assert unnamed.code == 2 and "name one of orders, payments, refunds" in unnamed.one_error_line()
    beyond = cli("explain", "--store", url, "--group", "g", "payments-9")
    assert beyond.code == 2 and "not a partition of payments (0..1)" in beyond.one_error_line()
    number = cli("explain", "--store", url, "--group", "g", "3")
    assert number.code == 2 and "<resource>-<index>" in number.one_error_line()


def test_pipeline_run_over_several_resources_refuses_a_single_resource_option_and_an_unknown_subscription(
    tmp_path: Path,
) -> None:
    from apportion.log import PartitionedLog

    PartitionedLog(tmp_path / "log").create("clicks", 2)
    base = ["pipeline", "run", "--store", f"sqlite:///{tmp_path / 's.db'}", "--group", "g", "--id", "w1",
            "--input", str(tmp_path / "log"), "--output", str(tmp_path / "out"), "--resources", "clicks"]  # fmt: skip
    both = cli(*base, "--resource", "clicks")
    assert both.code == 2 and "several log resources take no --resource" in both.one_error_line()
    unknown = cli(*base, "--subscribe", "orders")
    assert unknown.code == 2 and "not among the group's resources" in unknown.one_error_line()
    assert not (tmp_path / "s.db").exists()
