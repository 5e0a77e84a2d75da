"""The etcd backend against real etcd servers: failover, restarts under a watcher, lease loss, auth and TLS.

The conformance suite runs on etcd through tests/store/conftest.py; these tests cover what only a real
distributed server can show. Real time is unavoidable here: every wait polls a condition with a deadline.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from apportion.errors import Compacted, InvalidRequest, LeaseNotFound, StoreUnavailable
from apportion.group import group_status, history
from apportion.store import Event, EventType, Put, Store, Watch, absent, connect
from apportion.store._etcd import EtcdConfig
from apportion.worker import Group
from tests.etcd_server import EtcdCluster, EtcdServer, TlsFiles
from tests.store.keepalive import KeepAlive

pytestmark = pytest.mark.etcd


def wait_for_events(watch: Watch, count: int, deadline_s: float) -> list[Event]:
    """Gather ``count`` events from ``watch`` or fail saying how many arrived."""
    events: list[Event] = []
    deadline = time.monotonic() + deadline_s
    while len(events) < count and time.monotonic() < deadline:
        events += watch.wait(max(0.0, min(0.5, deadline - time.monotonic())))
    assert len(events) >= count, f"expected {count} events within {deadline_s}s, got {len(events)}: {events}"
    return events


def create_once(store: Store, key: str, deadline_s: float) -> int:
    """Create ``key`` with a CAS, retrying while the store is unavailable; return how many attempts it took."""
    deadline = time.monotonic() + deadline_s
    attempts = 0
    while True:
        attempts += 1
        try:
            result = store.txn([absent(key)], [Put(key, key.encode())])
        except StoreUnavailable:
            if time.monotonic() >= deadline:
                raise
            continue
        if result.succeeded:
            return attempts
        existing = store.get(key)  # an earlier attempt with an unknown outcome did land
        assert existing is not None and existing.value == key.encode()
        return attempts


# -- cluster ---------------------------------------------------------------------------------------------------


def test_transactions_continue_through_other_endpoints_when_the_leader_is_killed(etcd_cluster: EtcdCluster) -> None:
    leader = etcd_cluster.leader()
    others = [m for m in etcd_cluster.members if m is not leader]
    # The client starts on the leader. timeout=2: a write forwarded by a follower to the dead leader is answered
    # "outcome unknown" after 2 s (not etcd's 6 s); create_once re-checks it with its compare.
    url = "etcd://" + ",".join(m.endpoint for m in [leader, *others]) + "?timeout=2"
    with connect(url) as store:
        for i in range(5):
            assert create_once(store, f"/c/before/{i}", 1.0) == 1
        etcd_cluster.kill(leader)
        killed_at = time.monotonic()
        create_once(store, "/c/after/0", 10.0)
        recovered_s = time.monotonic() - killed_at
        attempts = [create_once(store, f"/c/after/{i}", 5.0) for i in range(1, 20)]
        new_leader = etcd_cluster.leader()
        assert new_leader is not leader
        assert recovered_s < 5.0, f"writes resumed only {recovered_s:.1f}s after the leader was killed"
        assert attempts == [1] * 19, "once a new leader is elected every transaction succeeds first time"
        assert [kv.key for kv in store.range("/c/after/")] == sorted(f"/c/after/{i}" for i in range(20))
        assert len(store.range("/c/before/")) == 5


# -- single node: restart under a watcher -----------------------------------------------------------------------


def test_watcher_misses_no_event_when_its_node_is_killed_and_restarted(etcd_bin: str, tmp_path: Path) -> None:
    with EtcdServer.single(etcd_bin, tmp_path / "etcd") as server, connect(server.url) as store:
        watch = store.watch("/w/")
        for i in range(10):
            store.put(f"/w/{i:02d}", b"before")
        server.kill()
        server.restart()
        for i in range(10, 20):
            store.put(f"/w/{i:02d}", b"after")
        events = wait_for_events(watch, 20, 15.0)
        assert [e.kv.key for e in events] == [f"/w/{i:02d}" for i in range(20)]
        revisions = [e.revision for e in events]
        assert revisions == sorted(set(revisions)), "events arrive once each, in revision order"
        store.delete("/w/", prefix=True)
        deletes = wait_for_events(watch, 20, 5.0)
        assert {e.type for e in deletes} == {EventType.DELETE}
        watch.close()


# -- leases ------------------------------------------------------------------------------------------------------


def test_lease_holder_that_stops_keepalives_loses_its_keys_within_ttl_plus_one_second(etcd_url: str) -> None:
    with connect(etcd_url) as store:
        lease = store.grant(1)
        assert lease.ttl_s == 1.0
        store.put("/l/owned", b"v", lease)
        watch = store.watch("/l/")
        with KeepAlive(store, lease, interval_s=0.25) as keeper:
            assert watch.wait(2.5) == [], "kept alive for 2.5 x ttl: the key must stay"
            assert not keeper.lost.is_set()
        stopped_at = time.monotonic()
        events = wait_for_events(watch, 1, lease.ttl_s + 1.0)
        lost_after_s = time.monotonic() - stopped_at
        assert events[0].type is EventType.DELETE and events[0].kv.key == "/l/owned"
        assert lost_after_s <= lease.ttl_s + 1.0
        assert store.get("/l/owned") is None
        with pytest.raises(LeaseNotFound):
            store.keepalive(lease)
        with pytest.raises(LeaseNotFound):
            store.put("/l/again", b"v", lease)
        watch.close()


def test_keepalive_helper_reports_a_revoked_lease_as_lost(etcd_url: str) -> None:
    with connect(etcd_url) as store:
        lease = store.grant(5)
        seen: list[LeaseNotFound] = []
        keeper = KeepAlive(store, lease, interval_s=0.05, on_lost=seen.append).start()
        store.revoke(lease)
        assert keeper.lost.wait(5.0), "the keepalive thread must notice the revoked lease"
        keeper.stop()
        assert len(seen) == 1 and isinstance(seen[0], LeaseNotFound)


# -- auth ----------------------------------------------------------------------------------------------------------


def enable_auth(etcd_url: str, password: str) -> None:
    base = "http://" + etcd_url.removeprefix("etcd://")
    with httpx.Client(timeout=5.0) as client:
        for path, body in (
            ("/v3/auth/user/add", {"name": "root", "password": password}),
            ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
            ("/v3/auth/enable", {}),
        ):
            reply = client.post(base + path, json=body)
            assert reply.status_code == 200, f"{path}: {reply.text}"


def test_etcd_auth_accepts_the_right_password_and_rejects_a_wrong_one_in_one_line(etcd_url: str) -> None:
    enable_auth(etcd_url, "s3cret/pw")
    host = etcd_url.removeprefix("etcd://")
    with connect(f"etcd://root:s3cret%2Fpw@{host}") as store:
        watch = store.watch("/a/")
        store.put("/a/k", b"v")
        assert store.get("/a/k") is not None
        assert [e.kv.key for e in wait_for_events(watch, 1, 5.0)] == ["/a/k"]
        watch.close()
    with pytest.raises(InvalidRequest) as wrong, connect(f"etcd://root:bad-pw@{host}") as refused:
        refused.revision()  # the first request authenticates
    message = str(wrong.value)
    assert "authentication failed" in message and "wrong user name or password" in message
    assert "\n" not in message and "bad-pw" not in message
    with pytest.raises(InvalidRequest, match="requires a user:password@"), connect(etcd_url) as anonymous:
        anonymous.put("/a/k", b"v")


def test_a_user_whose_role_allows_only_the_apportion_prefix_can_run_a_worker_status_and_history(etcd_url: str) -> None:
    """Everything the backend and the group do stays inside ``/apportion/``: revision probes, history, leases."""
    enable_auth(etcd_url, "rootpw")
    host = etcd_url.removeprefix("etcd://")
    root = httpx.Client(base_url=f"http://{host}", timeout=5.0)
    token = root.post("/v3/auth/authenticate", json={"name": "root", "password": "rootpw"}).json()["token"]
    prefix = base64.b64encode(b"/apportion/").decode()
    prefix_end = base64.b64encode(b"/apportion0").decode()
    for path, body in (
        ("/v3/auth/role/add", {"name": "apportion"}),
        (
            "/v3/auth/role/grant",
            {"name": "apportion", "perm": {"permType": "READWRITE", "key": prefix, "range_end": prefix_end}},
        ),
        ("/v3/auth/user/add", {"name": "app", "password": "apppw"}),
        ("/v3/auth/user/grant", {"user": "app", "role": "apportion"}),
    ):
        reply = root.post(path, json=body, headers={"Authorization": token})
        assert reply.status_code == 200, f"{path}: {reply.text}"
    root.close()
    with connect(f"etcd://app:apppw@{host}") as store:
        with pytest.raises(InvalidRequest, match="permission denied"):
            store.put("/elsewhere", b"v")  # the role is real: outside the prefix is refused
        assert store.revision() > 0
        with Group(store, "limited", 4).join("w1") as worker:
            deadline = time.monotonic() + 20
            while len(worker.owned()) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert worker.owned() == [0, 1, 2, 3]
            worker.commit(0, "c1")
            status = group_status(store, "limited")
            assert status.partitions["0"].checkpoint == "c1"
            assert any(event["type"] == "commit" for event in history(store, "limited"))


# -- TLS ----------------------------------------------------------------------------------------------------------


def test_tls_with_a_generated_certificate_and_client_certificate(
    etcd_bin: str, tmp_path: Path, tls_files: TlsFiles
) -> None:
    with EtcdServer.single(etcd_bin, tmp_path / "etcd", tls=tls_files) as server:
        assert server.url.startswith("etcds://")
        with connect(server.url) as store:
            watch = store.watch("/t/")
            store.put("/t/k", b"secure")
            assert store.get("/t/k") is not None
            assert wait_for_events(watch, 1, 5.0)[0].kv.value == b"secure"
            watch.close()
        with pytest.raises(StoreUnavailable, match="TLS"), connect(f"etcds://{server.endpoint}?timeout=1") as bad:
            bad.get("/t/k")  # the server's certificate is not signed by a system CA


# -- URLs ------------------------------------------------------------------------------------------------------------


def test_etcd_url_lists_endpoints_credentials_and_tls_files() -> None:
    config = EtcdConfig.parse("etcds://u%40x:p%3Aw@h1:2379,h2:2380?cacert=/ca.pem&cert=/c.pem&key=/k.pem&timeout=2")
    assert config.endpoints == ("https://h1:2379", "https://h2:2380")
    assert (config.user, config.password) == ("u@x", "p:w")
    assert (config.cacert, config.cert, config.key, config.timeout_s) == ("/ca.pem", "/c.pem", "/k.pem", 2.0)
    assert EtcdConfig.parse("etcd://127.0.0.1:2379").endpoints == ("http://127.0.0.1:2379",)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("etcd://", "names no host"),
        ("etcd://h1", "host:port"),
        ("etcd://h1:2379?cacert=/x", "need TLS"),
        ("etcds://h1:2379?cert=/x", "both cert= and key="),
        ("etcd://h1:2379?timeout=-1", "positive"),
        ("etcd://h1:2379?colour=red", "unknown option"),
        ("etcd://user@h1:2379", "user:password@"),
    ],
)
def test_bad_etcd_urls_are_invalid_requests(url: str, reason: str) -> None:
    with pytest.raises(InvalidRequest, match=reason):
        EtcdConfig.parse(url)


def test_unreachable_etcd_is_store_unavailable_after_the_timeout() -> None:
    from apportion._ports import free_port

    with connect(f"etcd://127.0.0.1:{free_port()},127.0.0.1:{free_port()}?timeout=0.5") as store:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="unreachable"):
            store.put("/x", b"v")
        assert time.monotonic() - started < 2.0


# -- large ranges --------------------------------------------------------------------------------------------------


def test_a_range_larger_than_a_page_is_read_page_by_page_as_one_snapshot(
    etcd_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A range is read in pages of RANGE_PAGE keys (one answer of 300,000 keys took etcd longer to marshal than a
    request may wait): the pages after the first read at its revision, so a write between two pages is not seen;
    a limit stops it; a compaction between two pages reads everything again at the new revision."""
    from apportion.store import _etcd

    monkeypatch.setattr(_etcd, "RANGE_PAGE", 3)
    with connect(etcd_url) as store, connect(etcd_url) as writer:
        for i in range(10):
            store.put(f"/r/{i:02d}", str(i).encode())
        store.put("/s", b"outside")
        calls: list[dict[str, str]] = []
        between: list[Callable[[], None]] = []  # what happens before the second page is asked for
        real_call = store._call  # type: ignore[attr-defined]

        def call(path: str, body: dict[str, str], **kwargs: bool) -> dict[str, object]:
            if path == "/v3/kv/range" and body.get("limit"):
                calls.append(dict(body))
                if len(calls) == 2 and between:
                    between.pop()()
            return real_call(path, body, **kwargs)  # type: ignore[no-any-return]

        monkeypatch.setattr(store, "_call", call)
        between.append(lambda: (writer.put("/r/05", b"changed"), writer.put("/r/99", b"new")))
        found = store.range("/r/")
        assert [kv.key for kv in found] == [f"/r/{i:02d}" for i in range(10)]
        assert [kv.value for kv in found] == [str(i).encode() for i in range(10)]
        assert len(calls) == 4 and all(c.get("revision") == calls[1]["revision"] for c in calls[1:])
        calls.clear()
        assert [kv.key for kv in store.range("/r/", limit=4)] == ["/r/00", "/r/01", "/r/02", "/r/03"]
        assert [c["limit"] for c in calls] == ["3", "1"]
        calls.clear()
        assert [kv.value for kv in store.range("/r/")][5] == b"changed"  # a new snapshot sees it
        calls.clear()
        # the first page's revision compacted away before the second page: read again at the new revision
        between.append(lambda: (writer.put("/r/06", b"changed too"), writer.compact(writer.revision())))
        found = store.range("/r/")
        assert len(found) == 11 and found[6].value == b"changed too"
        assert len(calls) > 5  # read again from the first page


# -- compaction -----------------------------------------------------------------------------------------------------


def test_watch_at_or_below_the_compaction_point_raises_compacted_like_the_other_backends(etcd_url: str) -> None:
    with connect(etcd_url) as store:
        first = store.put("/k/a", b"1")
        point = store.put("/k/a", b"2")
        store.put("/k/a", b"3")
        store.compact(point)
        store.compact(first)  # compacting below the point again is a no-op
        for start in (first, point):
            with pytest.raises(Compacted) as raised:
                store.watch("/k/", start)
            assert raised.value.compacted == point
        with store.watch("/k/", point + 1) as watch:
            assert [e.kv.value for e in wait_for_events(watch, 1, 5.0)] == [b"3"]
        with pytest.raises(InvalidRequest, match="revision"):
            store.compact(store.revision() + 10)
