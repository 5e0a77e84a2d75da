"""Real `apportion worker` processes in the static and coordinator modes on a shared store (SQLite file, real etcd,
a fresh database on the session's real PostgreSQL server: the ``url`` fixture of conftest.py)."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from apportion.assign import range_block
from apportion.errors import WorkerExited
from apportion.fleet import Fleet, WorkerProcess, worker_args
from apportion.group import history
from apportion.group._table import TableState, read_table
from apportion.store import EventType, connect
from apportion.waiting import wait_for
from tests.group.test_processes import balanced, owners

pytestmark = pytest.mark.slow

PARTITIONS = 12
TTL_S = 2.0


class ModeWorkers:
    """`apportion worker` processes of group "g" started by a test, each with its own log (a replacement under the
    same id reads only its own events); every one is killed when the test ends."""

    def __init__(self, stack: contextlib.ExitStack, log_dir: Path) -> None:
        self.stack = stack
        self.log_dir = log_dir
        self.started: list[WorkerProcess] = []

    def start(self, url: str, worker_id: str, *args: str) -> WorkerProcess:
        options = ["--partitions", str(PARTITIONS), "--ttl", str(TTL_S), "--commit-every", "0.2"]
        fleet = self.stack.enter_context(Fleet(self.log_dir / str(len(self.started)), worker_args(url, "g", *options)))
        worker = fleet.start(worker_id, *args)
        self.started.append(worker)
        return worker


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[ModeWorkers]:
    with contextlib.ExitStack() as stack:
        yield ModeWorkers(stack, tmp_path / "logs")


def expected(replicas: int, ids: dict[int, str]) -> dict[int, str | None]:
    """Who owns what under ``replicas``: ordinal o's block is ``ids[o]``'s (None: waiting for a missing ordinal)."""
    return {p: ids.get(o) for o in range(replicas) for p in range_block(o, replicas, PARTITIONS)}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "apportion.cli", *args], capture_output=True, text=True, timeout=60, check=False
    )


def start_ordinal(procs: ModeWorkers, url: str, o: int, *args: str) -> WorkerProcess:
    """Pod c-<o> of a StatefulSet whose template says --replicas 3 (it never changes on scale)."""
    return procs.start(url, f"c-{o}", "--mode", "static", "--hostname", f"c-{o}", "--replicas", "3", *args)


def alive(*workers: WorkerProcess) -> Callable[[], None]:
    """``wait_for``'s ``alive``: fail at once, with its log, when one of ``workers`` has exited."""

    def check() -> None:
        for w in workers:
            if not w.alive():
                raise WorkerExited(f"{w.id} exited with {w.proc.returncode}:\n{w.tail()}")

    return check


def test_static_kubectl_scale_up_starts_the_new_pod_and_apportion_scale_down_hands_its_partitions_over(
    url: str, procs: ModeWorkers
) -> None:
    workers = {o: start_ordinal(procs, url, o) for o in range(3)}
    ids = {o: f"c-{o}" for o in range(4)}
    wait_for("the range blocks of 3", lambda: owners(url) == expected(3, ids), 30, alive=alive(*workers.values()))
    workers[3] = start_ordinal(procs, url, 3)  # kubectl scale --replicas 4: same template, --replicas 3
    wait_for("c-3 to raise the count to 4", lambda: owners(url) == expected(4, ids), 30, alive=alive(*workers.values()))
    scaled = run_cli("scale", "--store", url, "--group", "g", "--replicas", "3", "--json")  # apportion scale first,
    assert scaled.returncode == 0, scaled.stderr
    assert json.loads(scaled.stdout) == {"group": "g", "previous": 4, "replicas": 3}
    wait_for("c-3 to hand its block over", lambda: owners(url) == expected(3, ids), 30, alive=alive(*workers.values()))
    assert workers[3].of("revoked"), "the leaving ordinal gave its partitions up through on_revoked"
    workers[3].signal(signal.SIGTERM)  # ...then kubectl scale --replicas 3 terminates c-3, which holds nothing
    assert workers[3].proc.wait(15) == 0
    assert owners(url) == expected(3, ids)
    assert not any(w.of("lost") for w in procs.started), "every handoff was a clean release, never a loss"


def test_static_killed_pod_s_partitions_wait_for_its_ordinal_until_it_returns(url: str, procs: ModeWorkers) -> None:
    workers = {o: start_ordinal(procs, url, o) for o in range(3)}
    ids = {o: f"c-{o}" for o in range(3)}
    wait_for("the range blocks of 3", lambda: owners(url) == expected(3, ids), 30, alive=alive(*workers.values()))
    workers[2].proc.kill()
    workers[2].proc.wait()
    block = set(range_block(2, 3, PARTITIONS))
    wait_for("c-2's lease to expire", lambda: {p for p, o in owners(url).items() if o is None} == block, TTL_S + 10)
    status = run_cli("status", "--store", url, "--group", "g", "--json")
    assert status.returncode == 0, status.stderr
    parts = json.loads(status.stdout)["partitions"]
    assert {int(p) for p, info in parts.items() if info.get("waiting_for") == 2} == block
    table = run_cli("status", "--store", url, "--group", "g")
    assert table.stdout.count("waiting for ordinal 2") == len(block), table.stdout
    for o in (0, 1):
        taken = {p for e in workers[o].of("assigned") for p in e["partitions"]}
        assert taken <= set(range_block(o, 3, PARTITIONS)), f"c-{o} took partitions of another ordinal: {taken}"
    workers[2] = start_ordinal(procs, url, 2)  # the StatefulSet restarts the pod
    wait_for("c-2 to take its block back", lambda: owners(url) == expected(3, ids), 30, alive=alive(workers[2]))


def test_static_duplicate_ordinal_never_processes_twice_and_takes_over(url: str, procs: ModeWorkers) -> None:
    first = procs.start(url, "a", "--mode", "static", "--ordinal", "0", "--replicas", "1")
    wait_for("a to own every partition", lambda: set(owners(url).values()) == {"a"}, 20)
    second = procs.start(url, "b", "--mode", "static", "--ordinal", "0", "--replicas", "1")
    wait_for("b to start", lambda: "registered" in [e["type"] for e in history_of(url) if e["member"] == "b"], 15)
    assert not second.of("assigned") and set(owners(url).values()) == {"a"}
    first.proc.kill()
    took = wait_for("b to take over after a's lease expired", lambda: set(owners(url).values()) == {"b"}, TTL_S + 5)
    assert took <= TTL_S + 5
    # the claim is in the store before b prints its on_assigned line: wait for the line, not just the record
    wait_for("b to report on_assigned", lambda: bool(second.of("assigned")), 5)


def history_of(url: str) -> list[dict[str, object]]:
    with connect(url) as store:
        return history(store, "g")


@pytest.mark.parametrize(
    "args",
    [
        ("--hostname", "consumer", "--replicas", "3"),
        ("--ordinal", "-1", "--replicas", "3"),
        ("--hostname", "consumer-5", "--ordinal", "5"),
        ("--ordinal-from-hostname", "--ordinal", "1"),
        ("--hostname", "consumer-1", "--replicas", "0"),
    ],
)
def test_bad_host_name_or_ordinal_is_a_clear_error_with_exit_2(tmp_path: Path, args: tuple[str, ...]) -> None:
    url = f"sqlite:///{tmp_path / 'apportion.db'}"  # rejected before the store is used: one store kind suffices
    result = run_cli(
        "worker", "--store", url, "--group", "g", "--id", "x", "--partitions", "4", "--mode", "static", *args
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("apportion: error: "), lines
    assert any(word in lines[0] for word in ("hostname", "ordinal", "replicas")), lines


def as_pod(hostname: str) -> list[str]:
    """A command prefix: run the rest in a new UTS namespace whose host name is ``hostname``, as a pod's is."""
    return ["unshare", "--uts", "--map-root-user", "sh", "-c", f'hostname {hostname} && exec "$@"', "sh"]


@pytest.fixture
def pods() -> None:
    if subprocess.run([*as_pod("consumer-0"), "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot create a UTS namespace here (unshare --uts --map-root-user)")


@pytest.mark.usefixtures("pods")
def test_ordinal_from_hostname_reads_the_machine_s_host_name_as_a_pod_does(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'apportion.db'}"
    options = ["--partitions", str(PARTITIONS), "--ttl", str(TTL_S), "--mode", "static", "--ordinal-from-hostname"]
    with Fleet(tmp_path / "logs", [*as_pod("consumer-1"), *worker_args(url, "g", *options)]) as fleet:
        pod = fleet.start("consumer-1")
        # ordinal 1 means a count of at least 2: ordinal 0's block waits for its pod
        want = {**dict.fromkeys(range_block(0, 2, PARTITIONS)), **expected(2, {1: "consumer-1"})}
        wait_for("consumer-1 to own ordinal 1's block", lambda: owners(url) == want, 30, alive=alive(pod))
        assert fleet.stop_all(15) == {"consumer-1": 0}
    bad = subprocess.run(
        [*as_pod("consumer"), *worker_args(url, "g", *options), "--id", "x"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.strip().splitlines() == [
        "apportion: error: hostname: 'consumer' does not look like a StatefulSet pod name <name>-<ordinal>"
    ]


def table_states(url: str) -> dict[int, TableState]:
    with connect(url) as store:
        return {p: e.state for p, (e, _) in read_table(store, "g").items()}


def coordinator(url: str) -> str | None:
    with connect(url) as store:
        kv = store.get("/apportion/g/coordinator")
    return None if kv is None else str(json.loads(kv.value)["member"])


def test_coordinator_killed_mid_migration_is_finished_by_its_successor(url: str, procs: ModeWorkers) -> None:
    def start(wid: str) -> WorkerProcess:
        w = procs.start(url, wid, "--mode", "coordinator", "--min-members", "3", "--max-in-flight", "1")
        return w

    workers = {wid: start(wid) for wid in ("w0", "w1")}
    wait_for("a coordinator to be elected", lambda: coordinator(url) is not None, 15)
    assert not table_states(url) and all(o is None for o in owners(url).values()), "min_members=3 holds it back"
    workers["w2"] = start("w2")
    wait_for("the table once the minimum cluster size (3) is reached", lambda: balanced(url, set(workers)), 20)
    route = run_cli("route", "--store", url, "--group", "g", "order-42")
    assert route.returncode == 0, route.stderr
    routed = json.loads(route.stdout)
    assert routed["owner"] in workers and routed["state"] == "ONLINE"

    leader = coordinator(url)
    assert leader is not None
    with connect(url) as store, store.watch("/apportion/g/table/") as watch:
        workers["w3"] = start("w3")

        def moves_planned() -> bool:
            return any(e.type is EventType.PUT and b'"ONLINE"' not in e.kv.value for e in watch.poll())

        # w3's start-up (a Python process, under the suite's load: a CI run beside other suites took over a minute)
        # comes first, no cost when fast.
        # A sticky re-plan moves only 3 partitions, one at a time (--max-in-flight 1), each within milliseconds:
        # the watch sees the coordinator's first write of them, which a poll of the table could miss
        wait_for("the coordinator to plan moves to w3", moves_planned, 180)
    workers[leader].proc.kill()  # SIGKILL mid-migration (the rest of its moves wait their turn)
    alive = set(workers) - {leader}
    wait_for("a new coordinator", lambda: coordinator(url) not in (None, leader), TTL_S + 10)
    wait_for(
        "the successor to finish the migrations: every partition ONLINE, balanced over the live members",
        lambda: balanced(url, alive) and set(table_states(url).values()) == {TableState.ONLINE},
        30,
    )
    # no partition ever had two owners: each claim follows the previous owner's release or the killed one's expiry
    holder: dict[int, str | None] = {}
    for event in history_of(url):
        if "partition" not in event:
            continue
        p = int(event["partition"])  # type: ignore[call-overload]
        if event["type"] == "claim":
            assert holder.get(p) in (None, leader), (
                f"partition {p} claimed by {event['member']} while {holder[p]} held it"
            )
            holder[p] = str(event["member"])
        elif event["type"] in ("release", "lost") and holder.get(p) == event["member"]:
            holder[p] = None


def test_manual_rebalance_shows_the_moves_then_applies_them(url: str, procs: ModeWorkers) -> None:
    def start(wid: str) -> WorkerProcess:
        w = procs.start(url, wid, "--mode", "coordinator", "--rebalance", "manual", "--min-members", "2")
        return w

    start("w0")
    start("w1")
    wait_for("w0 and w1 to share the partitions", lambda: balanced(url, {"w0", "w1"}), 20)
    start("w2")
    wait_for("w2 to register", lambda: "w2" in members(url), 15)
    dry = run_cli("rebalance", "--store", url, "--group", "g", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    moves = json.loads(dry.stdout)["moves"]
    assert moves and all(m["to"] in ("w0", "w1", "w2") for m in moves) and not json.loads(dry.stdout)["requested"]
    assert "w2" not in owners(url).values()  # manual: the new member gets nothing yet
    done = run_cli("rebalance", "--store", url, "--group", "g", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["requested"]
    wait_for("the requested rebalance to give w2 its share", lambda: balanced(url, {"w0", "w1", "w2"}), 20)


def members(url: str) -> list[str]:
    with connect(url) as store:
        return [kv.key.rsplit("/", 1)[1] for kv in store.range("/apportion/g/members/")]


def test_a_second_worker_with_a_live_members_id_exits_2_in_one_line_and_replace_takes_over(
    tmp_path: Path, procs: ModeWorkers
) -> None:
    url = f"sqlite:///{tmp_path / 'apportion.db'}"
    first = procs.start(url, "w1")
    wait_for("w1 to own every partition", lambda: set(owners(url).values()) == {"w1"}, 20)
    twin = run_cli("worker", "--store", url, "--group", "g", "--id", "w1", "--ttl", str(TTL_S))
    lines = twin.stderr.strip().splitlines()
    assert twin.returncode == 2, twin.stderr
    expected = "member 'w1' is already live in group 'g' (stop it, or --replace to fence it)"
    assert lines[-1].startswith("apportion: error: ") and lines[-1].endswith(expected), lines
    assert "Traceback" not in twin.stderr
    assert first.proc.poll() is None and set(owners(url).values()) == {"w1"}
    replacement = procs.start(url, "w1", "--replace")
    wait_for("the replacement to own partitions", lambda: bool(replacement.of("assigned")), 20)
    wait_for("the fenced original to report on_lost", lambda: bool(first.of("lost")), 20)


def test_a_worker_fenced_by_replace_exits_1_saying_it_was_replaced(tmp_path: Path, procs: ModeWorkers) -> None:
    """Issue 28: the fenced original registered again, found the id taken and after 1.5 ttl exited 2 with the
    duplicate-id message telling the operator to --replace it back. The replacement's record names the lease it
    fenced, so the original knows: exit 1, "replaced by another process with id 'w1'"."""
    url = f"sqlite:///{tmp_path / 'apportion.db'}"
    first = procs.start(url, "w1")
    wait_for("w1 to own every partition", lambda: set(owners(url).values()) == {"w1"}, 20)
    replacement = procs.start(url, "w1", "--replace")
    wait_for("the fenced original to exit", lambda: first.proc.poll() is not None, 30, alive=alive(replacement))
    assert first.proc.returncode == 1, first.tail()
    last = first.tail().strip().splitlines()[-1]
    assert last == "apportion: error: member 'w1' of group 'g': replaced by another process with id 'w1'", last
    assert "already live" not in first.log.text()
    wait_for("the replacement to own every partition", lambda: set(owners(url).values()) == {"w1"}, 20)
    assert replacement.proc.poll() is None
