"""What the conformance suite cannot say about the PostgreSQL backend: crashes and restarts of the server, a frozen
server under a time limit, schemas shared in one database, a role limited to its schema, secrets, read-only opens.

The server-killing tests use a server of their own (module-scoped, fsync on: the kill -9 test checks durability);
the others a fresh database on the session's server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from apportion import Group
from apportion._ports import free_port
from apportion.clock import SYSTEM_CLOCK
from apportion.errors import InvalidRequest, LeaseNotFound, NoSuchStore, StoreUnavailable
from apportion.store import EventType, Store, connect
from apportion.store._postgres import PostgresConfig
from apportion.waiting import wait_for
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.postgres

PW = "s3cr3t-PW"


@pytest.fixture(scope="module")
def own_server(postgres_server: PostgresServer) -> Iterator[PostgresServer]:
    """A server these tests may kill, freeze and restart (fsync on), apart from the session's."""
    with PostgresServer.start_new(postgres_server.bin_dir, durable=True) as server:
        yield server


@pytest.fixture
def own_url(own_server: PostgresServer) -> Iterator[str]:
    if not own_server.running:
        own_server.start()
    own_server.thaw()
    yield own_server.url(own_server.create_database(f"d{time.monotonic_ns()}"))
    own_server.thaw()
    if not own_server.running:
        own_server.start()


def _first_answer(store: Store, deadline_s: float = 10.0) -> int:
    """The store's revision once it answers again (a server restarting refuses connections for a moment)."""
    answer: list[int] = []

    def answers() -> bool:
        try:
            answer.append(store.revision())
        except StoreUnavailable:
            return False
        return True

    wait_for("the store to answer after the restart", answers, deadline_s)
    return answer[-1]


def test_kill_9_loses_no_acknowledged_write_and_a_lease_that_lapsed_meanwhile_expires_on_the_server_clock(
    own_server: PostgresServer, own_url: str
) -> None:
    with connect(own_url) as store, connect(own_url) as watcher:
        short, long = store.grant(1.0), store.grant(60.0)
        granted = time.monotonic()
        store.put("/lease/short", b"s", short)
        store.put("/lease/long", b"l", long)
        watch = watcher.watch("/", store.revision() + 1)
        acknowledged: dict[str, int] = {}
        stop = threading.Event()

        def write() -> None:  # writes until the server dies under it: some transaction is cut mid-way
            i = 0
            while not stop.is_set():
                try:
                    acknowledged[f"/w/{i:06d}"] = store.put(f"/w/{i:06d}", b"x" * 100)
                except StoreUnavailable:
                    return
                i += 1

        writer = threading.Thread(target=write)
        writer.start()
        wait_for("a few hundred acknowledged writes", lambda: len(acknowledged) >= 200, 10)
        own_server.kill()
        stop.set()
        writer.join(10)
        last = max(acknowledged.values())
        time.sleep(1.2)  # the short lease's ttl passes while the server is down
        own_server.start()

        assert _first_answer(store) >= last
        found = {kv.key: kv.mod_revision for kv in store.range("/w/")}
        lost = {key: rev for key, rev in acknowledged.items() if found.get(key) != rev}
        assert not lost, f"{len(lost)} acknowledged writes lost or changed after kill -9: {sorted(lost)[:5]}"
        assert store.get("/lease/short") is None, "a lease whose ttl passed while the server was down must expire"
        with pytest.raises(LeaseNotFound):
            store.time_to_live(short)
        left, elapsed = store.time_to_live(long), time.monotonic() - granted
        # the lease outlived the restart, its clock the server's: neither reset to 60 s nor ended early (a bound
        # from this test's own elapsed time, which a loaded machine stretches, not a fixed 50 s)
        assert store.get("/lease/long") is not None and 60.0 - elapsed - 2.0 <= left <= 60.0, (left, elapsed)
        after = store.put("/after", b"a")
        assert after > max(found.values()), "revisions go on from where the durable history ended"

        events = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(e.kv.key == "/after" for e in events):
            try:
                events += watch.wait(0.5)
            except StoreUnavailable:
                continue  # the watch's poll met the dead connection: the next one reconnects
        revisions = [e.revision for e in events]
        assert revisions == sorted(revisions) and len({(e.revision, e.kv.key) for e in events}) == len(events)
        assert [e.kv.key for e in events if e.type is EventType.DELETE] == ["/lease/short"]
        assert {e.kv.key for e in events if e.type is EventType.PUT} == {*found, "/after"}


def test_a_frozen_server_is_store_unavailable_within_the_time_limit_and_a_stopped_one_at_once(
    own_server: PostgresServer, own_url: str
) -> None:
    with connect(own_url) as store:
        store.put("/a", b"1")
        own_server.freeze()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="no answer within"), store.time_limit(0.5):
            store.put("/a", b"2")
        assert time.monotonic() - started < 1.0
        own_server.thaw()
        assert store.get("/a") is not None  # a fresh connection: the frozen one was dropped
        own_server.stop()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as info, store.time_limit(2.0):
            store.put("/a", b"3")
        assert time.monotonic() - started < 2.5
        assert "\n" not in str(info.value) and "Traceback" not in str(info.value)
        own_server.start()
        assert _first_answer(store) >= 1


def test_a_member_ends_its_belief_on_time_when_the_server_freezes_and_comes_back_after(
    own_server: PostgresServer, own_url: str
) -> None:
    ttl_s = 2.0
    lost_at: list[float] = []
    with connect(own_url) as store:
        group = Group(store, "g", 4, settle_s=0.2, min_interval_s=0.4, ttl_s=ttl_s)
        with group.join("w0", on_lost=lambda parts: lost_at.append(SYSTEM_CLOCK.now())) as worker:
            wait_for("w0 to own the 4 partitions", lambda: len(worker.owned()) == 4, 15)
            own_server.freeze()
            frozen_at = SYSTEM_CLOCK.now()
            try:
                wait_for("on_lost while the server is frozen", lambda: bool(lost_at), ttl_s * 0.8 + 2)
            finally:
                own_server.thaw()
            ended = worker.belief_ended_at
            assert ended is not None and ended <= frozen_at + ttl_s * 0.8 + 0.05
            assert lost_at[0] - ended <= 0.3, f"on_lost {lost_at[0] - ended:.2f} s after the belief's deadline"
            wait_for("w0 to own its partitions again after the thaw", lambda: len(worker.owned()) == 4, 20)


def test_two_groups_share_one_database_in_two_schemas(postgres_url: str) -> None:
    with connect(postgres_url + "?schema=alpha") as alpha, connect(postgres_url + "?schema=beta") as beta:
        watch = beta.watch("/k/")
        alpha.put("/k/1", b"a")
        alpha.put("/k/2", b"a")
        beta.put("/k/1", b"b")
        assert alpha.revision() == 2 and beta.revision() == 1
        assert [kv.value for kv in alpha.range("/k/")] == [b"a", b"a"]
        assert [(kv.key, kv.value) for kv in beta.range("/k/")] == [("/k/1", b"b")]
        events = watch.wait(2.0)
        assert [(e.kv.key, e.kv.value) for e in events] == [("/k/1", b"b")]
    with connect(postgres_url) as default:
        assert default.revision() == 0, "no schema option: the schema 'apportion', a third store"


def test_a_role_limited_to_its_own_schema_runs_a_store_there_and_is_refused_elsewhere(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    database = postgres_url.rsplit("/", 1)[1]
    role = f"r_{database[-8:]}"
    postgres_server.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{PW}'")
    postgres_server.execute(f"CREATE SCHEMA mine; GRANT USAGE, CREATE ON SCHEMA mine TO {role}", database)
    postgres_server.execute(f"REVOKE CREATE, TEMPORARY ON DATABASE {database} FROM PUBLIC", database)
    url = postgres_server.url(database, user=role, password=PW)
    with connect(url + "?schema=mine") as store:
        revision = store.put("/k", b"v")
        assert store.get("/k") is not None and store.revision() == revision
        lease = store.grant(5)
        store.put("/l", b"v", lease)
        store.revoke(lease)
        assert store.get("/l") is None
    with pytest.raises(InvalidRequest, match="permission denied") as info:
        connect(url + "?schema=theirs")
    assert PW not in str(info.value) and "\n" not in str(info.value)
    with connect(postgres_url + "?schema=theirs"):  # the superuser creates it: the role still may not use it
        pass
    with pytest.raises(InvalidRequest, match="permission denied"):
        connect(url + "?schema=theirs")


def test_the_password_is_redacted_in_errors_and_repr(postgres_server: PostgresServer, postgres_url: str) -> None:
    database = postgres_url.rsplit("/", 1)[1]
    role = f"p_{database[-8:]}"
    postgres_server.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{PW}'")
    postgres_server.execute(f"GRANT CREATE ON DATABASE {database} TO {role}")
    # the session's server trusts every local login: a server that checks passwords, for the wrong-password case
    with connect(postgres_server.url(database, user=role, password=PW)) as store:
        assert PW not in repr(store) and PW not in store.url and "***" in store.url
    refused = f"postgresql://{role}:{PW}@127.0.0.1:{free_port()}/{database}?timeout=1"
    with pytest.raises(StoreUnavailable) as down:
        connect(refused)
    assert PW not in str(down.value) and "***" in str(down.value)
    with pytest.raises(StoreUnavailable) as query:
        connect(f"postgresql://{role}@127.0.0.1:{free_port()}/{database}?password={PW}&timeout=1")
    assert PW not in str(query.value)
    with pytest.raises(InvalidRequest) as unknown_db:
        connect(postgres_server.url("no_such_db", user=role, password=PW))
    assert "does not exist" in str(unknown_db.value) and PW not in str(unknown_db.value)


def test_a_wrong_password_is_an_invalid_request_without_the_password(own_server: PostgresServer) -> None:
    own_server.execute("ALTER SYSTEM SET password_encryption = 'scram-sha-256'")
    hba = own_server.data_dir / "pg_hba.conf"
    original = hba.read_text()
    try:
        hba.write_text(
            "local all all trust\nhost all apportion 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
        )
        own_server.execute("SELECT pg_reload_conf()")
        own_server.execute("DROP ROLE IF EXISTS wrongpw; CREATE ROLE wrongpw LOGIN PASSWORD 'right-one'")
        with pytest.raises(InvalidRequest, match="authentication failed") as info:
            connect(own_server.url("postgres", user="wrongpw", password=PW))
        assert PW not in str(info.value) and "\n" not in str(info.value)
    finally:
        hba.write_text(original)
        own_server.execute("SELECT pg_reload_conf()")


def test_read_only_opening_of_a_missing_group_or_database_raises_no_such_store(postgres_url: str) -> None:
    with pytest.raises(NoSuchStore, match="no apportion store in schema 'ghost'"):
        connect(postgres_url + "?schema=ghost", read_only=True)
    with pytest.raises(NoSuchStore, match="does not exist"):
        connect(postgres_url.rsplit("/", 1)[0] + "/no_such_database", read_only=True)
    with connect(postgres_url + "?schema=ghost"):
        pass  # created now
    with (
        connect(postgres_url + "?schema=ghost") as writer,
        connect(postgres_url + "?schema=ghost", read_only=True) as reader,
    ):
        watch = reader.watch("/k", prefix=False)  # the dashboard's: LISTEN works in a read-only session
        writer.put("/k", b"v", writer.grant(60))
        assert reader.get("/k") is not None
        assert [e.kv.value for e in watch.wait(5.0)] == [b"v"]
        with pytest.raises(InvalidRequest, match="read-only"):
            reader.put("/k", b"w")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("postgresql://h:5432", "names no database"),
        ("postgresql://h:5432/db/x", "names no database"),
        ("postgresql://h:notaport/db", "not a valid URL"),
        ("postgresql://h/db?schema=Bad-Name", "lower-case name"),
        ("postgresql://h/db?timeout=-1", "positive"),
        ("postgresql://h/db?history=1.5", "whole number"),
    ],
)
def test_bad_postgres_urls_are_invalid_requests(url: str, reason: str) -> None:
    with pytest.raises(InvalidRequest, match=reason):
        PostgresConfig.parse(url)


def test_postgres_scheme_alias_and_libpq_options_pass_through() -> None:
    config = PostgresConfig.parse(f"postgres://u:{PW}@h:6543/db?sslmode=disable&schema=grp&timeout=2")
    assert config.schema == "grp" and config.timeout_s == 2.0
    assert config.conninfo == f"postgresql://u:{PW}@h:6543/db?sslmode=disable"
