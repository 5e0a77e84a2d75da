"""The dashboard's feed and server without a browser: what the state says through a crash (in virtual time on a
named memory store), that the server never writes (a SQLite store's revision and an expired lease stay as they
were), the JSON, event-stream and explain endpoints, "store unreachable" and recovery on a real etcd, and the CLI's
user mistakes."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from apportion.group import Coordinator, GroupConfig, Mode, Static, history, parse_resources
from apportion.group.internals import Keys, encode
from apportion.store import Get, Put, connect
from apportion.waiting import wait_for
from apportion.web import Feed, allowed_hosts, dashboard_app
from apportion.web._feed import LISTED, LISTED_FAULT_PARTITIONS
from tests.cli.run import cli
from tests.group.harness import FAST, Harness
from tests.group.large_group import build_group
from tests.group.modes_harness import RR, ModeHarness

DEADLINE_S = 20.0


def until(feed: Feed, what: str, condition: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    """The feed's first state for which ``condition`` holds (TimedOut naming ``what`` and the last state)."""
    wait_for(
        what,
        lambda: feed.state() and condition(feed.state()),
        DEADLINE_S,
        context=lambda: json.dumps(feed.state())[:2000],
    )
    return feed.state()


@contextlib.contextmanager
def following(url: str, group: str = "g", **kwargs: Any) -> Iterator[Feed]:
    feed = Feed(url, group, **kwargs).start()
    try:
        yield feed
    finally:
        feed.close()


@contextlib.contextmanager
def server(feed: Feed) -> Iterator[str]:
    """The dashboard served on a free loopback port by uvicorn on a thread; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    app = dashboard_app(feed, allowed_hosts("127.0.0.1"))
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for("the dashboard server to start", lambda: running.started, DEADLINE_S)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        running.should_exit = True
        thread.join(10)
        sock.close()


def test_the_state_shows_a_member_dying_its_partitions_moving_and_the_rounds() -> None:
    url = f"memory://{uuid.uuid4().hex}"
    h = Harness()
    h.store = connect(url, clock=h.clock)  # the named store the feed opens too
    for mid in ("w1", "w2", "w3"):
        h.add(mid)
    h.run(6.0)
    assert sorted(o for o in h.owners().values()) and len(h.owners()) == FAST.partitions
    with following(url, now=h.clock.now, refresh_s=0.1) as feed:
        state = until(feed, "three live members owning every partition", lambda s: s["partitions"] and all(
            p["owner"] for p in s["partitions"]) and sum(m["alive"] for m in s["members"]) == 3)  # fmt: skip
        assert state["mode"] == "rounds" and state["status"] == "ok" and state["resource"]["strategy"] == "sticky"
        round_before = state["plan_round"]
        had = sorted(p["partition"] for p in state["partitions"] if p["owner"] == "w2")
        assert had, state["partitions"]
        assert {s["member"] for s in state["timeline"]} == {"w1", "w2", "w3"}  # seeded from the history
        assert state["plans"] and all(p["lower_bound"] <= p["moves"] or p["kept"] for p in state["plans"])
        h.frozen.add("w2")  # it stops heartbeating: its lease expires in virtual time
        h.run(FAST.ttl_s + 4.0)
        state = until(feed, "w2 dead and its partitions taken over", lambda s: not next(
            m for m in s["members"] if m["id"] == "w2")["alive"] and all(
            p["owner"] in ("w1", "w3") for p in s["partitions"]))  # fmt: skip
        dead = next(m for m in state["members"] if m["id"] == "w2")
        assert dead["gone_at"] is not None
        assert state["plan_round"] > round_before
        until(feed, "the plan of w1 and w3", lambda s: s["plans"][0]["participants"] == ["w1", "w3"])
        fault = until(feed, "w2's failover time", lambda s: any(
            f["type"] == "expired" and f["failover_s"] is not None for f in s["faults"]))["faults"][0]  # fmt: skip
        assert fault["member"] == "w2" and fault["partitions"] == had
        assert fault["failover_s"] >= FAST.ttl_s * 0.5  # from its last heartbeat: at least most of a lease
        w2_segments = [s for s in feed.state()["timeline"] if s["member"] == "w2"]
        assert w2_segments and all(s["end"] is not None for s in w2_segments)


@pytest.mark.parametrize("mode", ["coordinator", "static"])
def test_the_state_follows_the_coordinator_and_static_modes_through_a_crash(mode: str) -> None:
    url = f"memory://{uuid.uuid4().hex}"
    h = ModeHarness()
    h.store = connect(url, clock=h.clock)
    for i, mid in enumerate(("w0", "w1", "w2")):
        if mode == "static":
            h.add_static(mid, ordinal=i, replicas=3)
        else:
            h.add_coordinated(mid)
    h.run(8.0)
    with following(url, now=h.clock.now, refresh_s=0.1) as feed:
        state = until(feed, "every partition owned", lambda s: s["partitions"] and all(
            p["owner"] for p in s["partitions"]))  # fmt: skip
        assert state["mode"] == mode and state["plans"] == []
        if mode == "static":
            assert state["replicas"] == 3
        else:
            assert state["coordinator"] in ("w0", "w1", "w2")
            assert all(p["table"]["state"] == "ONLINE" for p in state["partitions"])
        had = [p["partition"] for p in state["partitions"] if p["owner"] == "w2"]
        h.crash("w2")
        h.run(RR.ttl_s + 6.0)
        state = until(feed, "w2 dead", lambda s: not next(m for m in s["members"] if m["id"] == "w2")["alive"])
        fault = next(f for f in state["faults"] if f["type"] == "expired")
        assert fault["member"] == "w2" and fault["partitions"] == had
        if mode == "static":  # its ordinal's partitions wait for it (a StatefulSet keeps them)
            assert all(state["partitions"][p]["waiting_for"] == 2 for p in had)
        else:
            state = until(feed, "w2's partitions taken over", lambda s: all(
                s["partitions"][p]["owner"] in ("w0", "w1") for p in had))  # fmt: skip
            assert "w2" in state["failed"]


def test_a_dashboard_started_after_migrations_shows_their_targets_owning_what_they_acked() -> None:
    # the target writes the "migrated" event when it acks (ONLINE): the timeline seeded from the history had read it
    # as the end of the target's own ownership, so the partitions showed unowned from the ack to their next claim
    url = f"memory://{uuid.uuid4().hex}"
    h = ModeHarness()
    h.store = connect(url, clock=h.clock)
    for mid in ("w0", "w1"):
        h.add_coordinated(mid)
    h.run(8.0)
    h.add_coordinated("w2")  # a join moves a third of the partitions to w2 by migrations
    h.run(8.0)
    with connect(url) as store:
        events = [e for e in history(store, "g") if e["type"] == "migrated"]
    assert "w2" in {e["member"] for e in events}  # (the first table's partitions are acked by w0 and w1)
    with following(url, now=h.clock.now, refresh_s=0.1, window_s=3600) as feed:
        state = until(feed, "every partition owned", lambda s: s["partitions"] and all(
            p["owner"] for p in s["partitions"]))  # fmt: skip
        open_segments = {seg["partition"]: seg for seg in state["timeline"] if seg["end"] is None}
        assert {p: seg["member"] for p, seg in open_segments.items()} == {
            p["partition"]: p["owner"] for p in state["partitions"]
        }
        for e in events:  # w2's ownership runs from its claim on, through the ack: no gap until the feed started
            if e["member"] == "w2":
                assert open_segments[e["partition"]]["start"] <= e["time"], (e, open_segments[e["partition"]])


def make_store(path: Path) -> str:
    """A SQLite store holding group ``g`` (4 partitions) and a member whose lease expired long ago (nobody has
    expired it: a writer would, and so would a dashboard that wrote)."""
    url = f"sqlite:///{path}"
    with connect(url) as store:
        keys = Keys("g")
        store.put(keys.resource, encode(GroupConfig(partitions=4, ttl_s=1.0).to_json()))
        lease = store.grant(1.0)
        store.put(keys.member("w1"), encode({"capacity": 1.0}), lease=lease)
        store.put(keys.owner(2), encode({"member": "w1", "epoch": 1}), lease=lease)
        store.put(keys.prefix + "epoch/2", b"1")
    return url


def test_the_dashboard_never_writes_and_serves_state_events_and_explain(tmp_path: Path) -> None:
    url = make_store(tmp_path / "s.db")
    with connect(url, read_only=True) as store:
        revision = store.revision()
    with connect(url, read_only=True) as reader:  # a read-only reader hides the keys of an expired lease
        wait_for("w1's lease to expire", lambda: not reader.range(Keys("g").members), 10)
    with following(url, refresh_s=0.1) as feed, server(feed) as base:
        first = until(feed, "a snapshot", lambda s: s["status"] == "ok" and s["partitions"])
        version = first["version"]
        until(feed, "three more snapshots", lambda s: s["version"] >= version + 3)
        state = httpx.get(f"{base}/api/state", timeout=10).json()
        assert state["group"] == "g" and [p["partition"] for p in state["partitions"]] == [0, 1, 2, 3]
        page = httpx.get(base, timeout=10)
        assert (
            page.status_code == 200
            and "Ownership timeline" in page.text
            and "http" not in page.text.split("<script>")[1].replace("http://www.w3.org/2000/svg", "")
        )  # fmt: skip  (no external resource)
        with httpx.stream("GET", f"{base}/api/events", timeout=10) as stream:
            lines = stream.iter_lines()
            event = next(line for line in lines if line.startswith("event:"))
            data = next(line for line in lines if line.startswith("data:"))
        assert event == "event: state" and json.loads(data[5:])["group"] == "g"
        why = httpx.get(f"{base}/api/explain/1", timeout=10)
        assert why.status_code == 200 and why.json()["decision"]["kind"] == "unowned"
        wrong = httpx.get(f"{base}/api/explain/9", timeout=10)
        assert wrong.status_code == 400 and "not a partition" in wrong.json()["error"]
        rebound = httpx.get(f"{base}/api/state", headers={"Host": "attacker.example"}, timeout=10)
        assert rebound.status_code == 400  # a DNS name rebound to 127.0.0.1 by another site's page gets nothing
        assert httpx.get(base.replace("127.0.0.1", "localhost"), timeout=10).status_code == 200
    with connect(url, read_only=True) as store:
        assert store.revision() == revision  # the dashboard wrote nothing, not even the expiry of w1's lease
    with connect(url) as store:  # a writer expires the lease: the revision moves (so the check above could fail)
        store.revision()
        assert store.revision() > revision


@pytest.mark.etcd
def test_the_state_says_store_unreachable_while_etcd_is_down_and_recovers(tmp_path: Path) -> None:
    from tests.conftest import etcd_binary
    from tests.etcd_server import EtcdServer

    binary = etcd_binary()
    if binary is None:
        pytest.skip("etcd is not installed (CI installs it)")
    with EtcdServer.single(binary, tmp_path / "etcd") as etcd:
        url = etcd.url
        with connect(url) as store:
            store.put(Keys("g").resource, encode(GroupConfig(partitions=3).to_json()))
        with following(url, refresh_s=0.2) as feed:
            state = until(feed, "a snapshot", lambda s: s["status"] == "ok" and len(s["partitions"]) == 3)
            etcd.kill()
            state = until(feed, "'store unreachable'", lambda s: s["status"] == "unreachable")
            assert "etcd unreachable" in state["problem"]
            assert len(state["partitions"]) == 3  # the last state seen stays on the page
            etcd.start()
            etcd.wait_ready()
            until(feed, "the feed to recover", lambda s: s["status"] == "ok" and s["problem"] is None)


def test_a_corrupt_owner_record_is_a_store_error_until_it_is_mended(tmp_path: Path) -> None:
    url = make_store(tmp_path / "s.db")
    with connect(url) as store:
        store.put(Keys("g").owner(1), b"not json")
    with following(url, refresh_s=0.1) as feed:
        state = until(feed, "the store error", lambda s: s["status"] == "error")
        assert "is corrupt" in state["problem"] and Keys("g").owner(1) in state["problem"]
        with connect(url) as store:
            store.delete(Keys("g").owner(1))
        until(feed, "the feed to recover", lambda s: s["status"] == "ok")


def test_an_unknown_group_is_exit_2_before_anything_listens(tmp_path: Path) -> None:
    url = make_store(tmp_path / "s.db")
    result = cli("dashboard", "--store", url, "--group", "nope", "--port", "0")
    assert result.code == 2 and "no such group 'nope'" in result.one_error_line()


def test_a_port_in_use_is_exit_2(tmp_path: Path) -> None:
    url = make_store(tmp_path / "s.db")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = cli("dashboard", "--store", url, "--group", "g", "--port", str(port))
    assert result.code == 2 and f"{port} is already in use" in result.one_error_line()


def test_a_store_password_is_never_in_the_state() -> None:
    with socket.socket() as closed:  # a port nobody listens on: connection refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with following(f"etcd://root:s3cret-pw@127.0.0.1:{port}?timeout=0.5", refresh_s=0.2) as feed:
        state = until(feed, "'store unreachable'", lambda s: s["status"] == "unreachable")
        _, payload = feed.wait_newer(0, 0.0)
    assert state["store"] == f"etcd://root:***@127.0.0.1:{port}?timeout=0.5"
    assert "s3cret-pw" not in payload and state["problem"]


def test_without_the_dashboard_extra_the_command_says_how_to_install_it(tmp_path: Path) -> None:
    url = make_store(tmp_path / "s.db")
    code = "import sys; sys.modules['starlette'] = None; from apportion.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = ["dashboard", "--store", url, "--group", "g", "--port", "0"]
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        "apportion: error: this command needs the dashboard extra (starlette is not installed): "
        "pip install 'apportion[dashboard]'\n"
    )


def test_a_group_over_named_resources_shows_its_ids_in_order_and_explains_one(tmp_path: Path) -> None:
    """Issue 20's ids on the page: ``<resource>-<index>`` in the partitions, the members' lists and the timeline, in
    the groups' one order (resource, then index as a number), and explain answers for one of them."""
    url = f"memory://{uuid.uuid4().hex}"
    h = Harness(GroupConfig(resources=parse_resources("clicks:2,orders:11"), settle_s=0.5, min_interval_s=1.0))
    h.store = connect(url, clock=h.clock)
    for mid, subs in (("a", None), ("b", ["orders"])):
        h.add(mid, subscriptions=subs)
    h.run(4.0)
    with following(url, now=h.clock.now, refresh_s=0.1) as feed, server(feed) as base:
        state = until(feed, "every named partition owned", lambda s: len(s["partitions"]) == 13 and all(
            p["owner"] for p in s["partitions"]))  # fmt: skip
        ids = [p["partition"] for p in state["partitions"]]
        assert ids == ["clicks-0", "clicks-1", *(f"orders-{i}" for i in range(11))]
        b = next(m for m in state["members"] if m["id"] == "b")
        assert b["partitions"] and all(p.startswith("orders-") for p in b["partitions"])
        assert b["partitions"] == sorted(b["partitions"], key=lambda p: int(p.split("-")[1]))  # orders-2 < orders-10
        until(feed, "timeline segments of named partitions", lambda s: {seg["partition"] for seg in s["timeline"]}
              >= set(ids))  # fmt: skip
        why = httpx.get(f"{base}/api/explain/orders-10", timeout=10)
        assert why.status_code == 200 and why.json()["partition"] == "orders-10", why.text
        wrong = httpx.get(f"{base}/api/explain/payments-0", timeout=10)
        assert wrong.status_code == 400, wrong.text


def test_a_large_group_state_lists_what_is_not_at_rest_and_what_moved_and_counts_the_rest() -> None:
    """Issue 27: 64 members x 20,000 partitions. A state lists at most LISTED partitions (the ones not at rest,
    then the latest to change owner) and their timeline, with every count; a member's partitions are counted, not
    listed; a partition that moves is listed; a member that dies lists LISTED_FAULT_PARTITIONS of its partitions."""
    url = f"memory://{uuid.uuid4().hex}"
    store = connect(url)
    group = build_group(store, "big", partitions=20_000, unowned=30, now=store.clock.now() - 600)  # at rest 10 min
    keys = Keys("big")
    with following(url, "big", refresh_s=0.1) as feed:
        state = until(feed, "a snapshot", lambda s: s["status"] == "ok" and s["partition_count"])
        assert state["partition_count"] == 20_000 and state["owned_count"] == 20_000 - 30
        assert [p["partition"] for p in state["partitions"]] == list(group.unowned)  # nothing moved in the window
        assert all(p["owner"] is None and p["moving_to"] for p in state["partitions"])
        assert state["listed"] != "all" and state["timeline"] == []
        w05 = next(m for m in state["members"] if m["id"] == "w05")
        owned = {m: [p for p in parts if p not in group.unowned] for m, parts in group.assignment.items()}
        assert w05["partition_count"] == len(owned["w05"]) and "partitions" not in w05
        _, payload = feed.wait_newer(0, 0.0)
        assert len(payload) < 100_000, len(payload)  # 20,000 partitions listed were ~4 MB
        w01 = store.get(keys.member("w01"))
        assert w01 is not None
        store.txn([], [Put(keys.owner(0), encode({"epoch": 2, "member": "w01"}), w01.lease), Put(keys.epoch(0), b"2")])
        state = until(feed, "partition 0 listed with its new owner", lambda s: any(
            p["partition"] == 0 and p["owner"] == "w01" for p in s["partitions"]))  # fmt: skip
        assert {seg["partition"] for seg in state["timeline"]} == {0}
        assert [seg["member"] for seg in state["timeline"]] == ["w00", "w01"]  # w00's claim (10 min ago), w01's
        lease = store.get(keys.member("w03"))
        assert lease is not None
        store.revoke(lease.lease)  # w03 dies: its registration and owner records go
        state = until(feed, "w03's expiry fault", lambda s: any(f["type"] == "expired" for f in s["faults"]))
        fault = next(f for f in state["faults"] if f["type"] == "expired")
        assert fault["member"] == "w03" and fault["partition_count"] == len(owned["w03"])
        assert fault["partitions"] == owned["w03"][:LISTED_FAULT_PARTITIONS]
        state = until(feed, "w03's partitions unowned", lambda s: len(s["partitions"]) == 1 + 30 + len(owned["w03"]))
        assert [p["partition"] for p in state["partitions"]] == sorted({0, *group.unowned, *owned["w03"]})


def test_a_group_that_just_started_lists_the_not_at_rest_then_the_latest_claims_up_to_the_limit() -> None:
    url = f"memory://{uuid.uuid4().hex}"
    store = connect(url)
    group = build_group(store, "g", members=8, partitions=2_000, unowned=5)  # every claim inside the window
    with following(url, refresh_s=0.1) as feed:
        state = until(feed, "a snapshot", lambda s: s["status"] == "ok" and s["partition_count"])
        listed = [p["partition"] for p in state["partitions"]]
        assert len(listed) == LISTED and set(group.unowned) <= set(listed) and listed == sorted(listed)
        assert {seg["partition"] for seg in state["timeline"]} == set(listed) - set(group.unowned)


def test_snapshots_come_from_the_copy_of_the_keys_not_a_range_of_the_store_each_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first full read the feed applies the group watch's events to its copy (_Mirror): changes show
    without another range of the group's prefix (at 100,000 partitions one costs etcd seconds of CPU)."""
    from apportion.store import _sqlite

    url = make_store(tmp_path / "s.db")
    keys = Keys("g")
    ranges: list[str] = []
    real_range = _sqlite.SqliteStore.range

    def counted(self: Any, prefix: str, limit: int | None = None) -> Any:
        ranges.append(prefix)
        return real_range(self, prefix, limit)

    real_txn = _sqlite.SqliteStore.txn

    def counted_txn(self: Any, compares: Any, on_success: Any, on_failure: Any = ()) -> Any:
        ranges.extend(op.key for op in (*on_success, *on_failure) if isinstance(op, Get) and op.prefix)
        return real_txn(self, compares, on_success, on_failure)

    with connect(url, read_only=True) as reader:  # make_store's w1: its lease expired, its keys hidden from now on
        wait_for("w1's lease to expire", lambda: not reader.range(keys.members), 10)
    monkeypatch.setattr(_sqlite.SqliteStore, "range", counted)
    monkeypatch.setattr(_sqlite.SqliteStore, "txn", counted_txn)  # a prefix read through a txn counts too
    with connect(url) as writer, following(url, refresh_s=0.1) as feed:
        lease = writer.grant(60.0)
        writer.put(keys.member("w2"), encode({"capacity": 1.0}), lease=lease)
        until(feed, "w2 alive", lambda s: any(m["id"] == "w2" and m["alive"] for m in s["members"]))
        full_reads = ranges.count(keys.prefix)
        for epoch, p in enumerate((0, 1, 3), start=1):
            writer.txn([], [Put(keys.owner(p), encode({"epoch": epoch, "member": "w2"}), lease.id),
                            Put(keys.epoch(p), str(epoch).encode())])  # fmt: skip
        state = until(feed, "w2 owning 0, 1 and 3", lambda s: [p["owner"] for p in s["partitions"]] == [
            "w2", "w2", None, "w2"])  # fmt: skip
        assert [p["epoch"] for p in state["partitions"]] == [1, 2, 1, 3]  # epoch/2: w1's (its owner record expired)
        writer.revoke(lease)  # its keys are deleted: events say so
        until(feed, "w2 dead and 0, 1, 3 unowned", lambda s: not any(p["owner"] == "w2" for p in s["partitions"]))
        assert ranges.count(keys.prefix) == full_reads  # every change came through the watch


def test_a_lease_that_expires_with_no_writer_is_seen_on_a_read_only_sqlite_store(tmp_path: Path) -> None:
    """No writer deletes the keys of an expired lease and no event says so: the feed finds the member's lease gone
    when it reads its heartbeat, and reads the group again in full (a read-only store hides those keys)."""
    url = make_store(tmp_path / "s.db")
    keys = Keys("g")
    with connect(url) as writer:
        lease = writer.grant(1.0)
        writer.put(keys.member("w3"), encode({"capacity": 1.0}), lease=lease)
        writer.put(keys.owner(1), encode({"epoch": 1, "member": "w3"}), lease=lease)
        writer.put(keys.epoch(1), b"1")
    with following(url, refresh_s=0.1) as feed:
        state = until(feed, "w3 alive", lambda s: any(m["id"] == "w3" and m["alive"] for m in s["members"]))
        assert state["partitions"][1]["owner"] == "w3"
        state = until(feed, "w3 dead, partition 1 unowned", lambda s: s["partitions"][1]["owner"] is None and not any(
            m["alive"] for m in s["members"] if m["id"] == "w3"))  # fmt: skip
    with connect(url, read_only=True) as store:
        assert store.get(keys.member("w3")) is None  # expired (hidden), and nobody wrote its deletion


def test_the_copy_applies_only_events_newer_than_what_it_holds() -> None:
    """_Mirror: an event at or below the revision of the copy of its key is one the full read already holds (the
    watch starts before the read); newer puts replace, newer deletes remove; other prefixes go to the store."""
    from apportion.store import Event, EventType, KeyValue
    from apportion.web._feed import _Mirror

    store = connect(f"memory://{uuid.uuid4().hex}")
    store.put("/other/x", b"elsewhere")

    def kv(key: str, value: bytes, revision: int) -> KeyValue:
        return KeyValue(key, value, revision, revision, 1)

    mirror = _Mirror(store, ("/g/",), [kv("/g/a", b"a5", 5), kv("/g/b", b"b7", 7), kv("/g/m/1", b"m", 3)])
    events = [
        Event(EventType.PUT, kv("/g/a", b"a4", 4)),  # older than the read: ignored
        Event(EventType.DELETE, KeyValue("/g/b", b"", 0, 6, 0)),  # older: ignored
        Event(EventType.PUT, kv("/g/a", b"a8", 8)),
        Event(EventType.PUT, kv("/g/c", b"c9", 9)),
        Event(EventType.DELETE, KeyValue("/g/m/1", b"", 0, 10, 0)),
        Event(EventType.DELETE, KeyValue("/g/never", b"", 0, 11, 0)),
        Event(EventType.PUT, kv("/g/m/2", b"m2", 12)),
    ]
    mirror.apply(events)
    assert [(x.key, x.value) for x in mirror.range("/g/")] == [
        ("/g/a", b"a8"), ("/g/b", b"b7"), ("/g/c", b"c9"), ("/g/m/2", b"m2")
    ]  # fmt: skip
    assert mirror.changes == 4
    assert [x.key for x in mirror.range("/g/m/")] == ["/g/m/2"] and [x.key for x in mirror.range("/g/", 2)] == [
        "/g/a", "/g/b"]  # fmt: skip
    assert mirror.get("/g/c") is not None and mirror.get("/g/m/1") is None
    assert [x.value for x in mirror.range("/other/")] == [b"elsewhere"]  # not copied: the store's


def test_a_commit_alone_reaches_the_state_though_its_record_lives_beside_the_copied_prefix() -> None:
    """Commit records live under /apportion/.commit/<group>/, outside the copy of the group's keys: the commit
    transaction's history event is what makes the next snapshot read them (an unchanged copy reuses its snapshot)."""
    url = f"memory://{uuid.uuid4().hex}"
    h = Harness()
    h.store = connect(url, clock=h.clock)
    member = h.add("w1")
    h.run(3.0)
    p = member.owned()[0]
    with following(url, now=h.clock.now, refresh_s=0.1) as feed:
        until(feed, "w1 owning every partition", lambda s: s["partitions"] and all(
            q["owner"] == "w1" for q in s["partitions"]))  # fmt: skip
        member.commit(p, json.dumps({"offset": 41}))
        state = until(feed, "the checkpoint of the commit", lambda s: any(
            q["partition"] == p and q["offset"] == 41 for q in s["partitions"]))  # fmt: skip
        assert state["status"] == "ok"


def test_a_store_file_replaced_under_the_dashboard_is_followed_and_the_page_says_so(tmp_path: Path) -> None:
    """`mv new.db store.db` under a running dashboard: the feed's connection would go on reading the deleted file as
    healthy; it follows the new file instead (another group's store: 6 partitions and its own owner), starting afresh,
    and its faults say "replaced"."""
    url = make_store(tmp_path / "store.db")
    other = tmp_path / "new.db"
    with connect(f"sqlite:///{other}") as store:
        keys = Keys("g")
        store.put(keys.resource, encode(GroupConfig(partitions=6).to_json()))
        lease = store.grant(600.0)
        store.put(keys.member("w9"), encode({"capacity": 1.0}), lease=lease)
        store.put(keys.owner(5), encode({"member": "w9", "epoch": 3}), lease=lease)
        store.put(keys.epoch(5), b"3")
    with following(url, refresh_s=0.1) as feed:
        until(feed, "the first file's 4 partitions", lambda s: s["status"] == "ok" and s["partition_count"] == 4)
        other.replace(tmp_path / "store.db")
        state = until(feed, "the new file's 6 partitions", lambda s: s["status"] == "ok" and s["partition_count"] == 6)
        assert state["partitions"][5]["owner"] == "w9"
        assert [f["type"] for f in state["faults"]] == ["replaced"]
        assert "store replaced" in state["faults"][0]["reason"]


def test_a_deleted_store_file_says_store_file_missing_until_a_file_is_back(tmp_path: Path) -> None:
    url = make_store(tmp_path / "store.db")
    with following(url, refresh_s=0.1) as feed:
        until(feed, "a snapshot", lambda s: s["status"] == "ok" and s["partition_count"] == 4)
        (tmp_path / "store.db").unlink()
        state = until(feed, "'store file missing'", lambda s: s["status"] == "unreachable")
        assert state["problem"].startswith("store file missing: ") and state["partition_count"] == 4
        version = state["version"]
        until(feed, "two more retries", lambda s: s["version"] >= version + 2)
        assert feed.state()["problem"] == state["problem"]  # the retries' "no store file" does not hide why
        make_store(tmp_path / "store.db")
        state = until(feed, "the file back", lambda s: s["status"] == "ok")
        assert [f["type"] for f in state["faults"]] == ["replaced"]


@pytest.mark.parametrize("mode", [Coordinator(min_members=3), Static(3)])
def test_the_dashboard_shows_the_stored_mode_before_any_member_has_left_a_trace_of_it(mode: Mode) -> None:
    """It guessed the mode from the keys each mode leaves (``replicas``, ``coordinator``, the table): a static or
    coordinator group with no member yet showed as a rounds group."""
    url = f"memory://{uuid.uuid4().hex}"
    with connect(url) as store:
        store.put(Keys("g").resource, encode(GroupConfig(partitions=4, mode=mode).to_json()))
        with following(url, refresh_s=0.1) as feed:
            state = until(feed, "the first state", lambda s: s["status"] == "ok")
            assert state["mode"] == mode.name
