"""A bad definition never reaches the store, and a corrupt record in it is one line naming the key (issue 14, item 5).

Every path that writes the resource definition validates it fully first; a record that is not what apportion writes
there (tampered with, or written by something else) is ``CorruptRecord``: exit 2 and ``store record <key> is
corrupt: <why>`` from ``status``, ``route``, ``explain``, ``rebalance`` and ``worker`` — never a traceback, an
internal error or a hang. History events, the history mark, registrations and participation records only inform:
a corrupt one is skipped with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from apportion import Group, InvalidRequest
from apportion.errors import CorruptRecord
from apportion.group import Coordinator, GroupConfig, Mode, Rounds, explain, group_status
from apportion.group.internals import Keys, decode, encode
from apportion.store import connect
from tests.cli.run import cli

KEYS = Keys("g")
ROUTED_TO_3 = "k2"  # partition_for("k2", 4) == 3

RESOURCE = [b"not json", b"[1,2]", b'{"partitions": "x"}', b'{"partitions": 100000000000}', b"\xff\xfe\x00"]
RESOURCE += [b'{"partitions": 4, "strategy": "nope"}', b'{"partitions": 4, "ttl_s": -1}', b"[" * 100_000]
RESOURCE += [b'{"partitions": 4, "options": {"vnodes": 0}}', b'{"strategy": "sticky"}']
# another strategy's option, as older versions stored it (every option was accepted for every strategy)
FOREIGN_OPTION = b'{"partitions": 4, "strategy": "high_availability", "options": {"tolerance": 0.1}}'
RESOURCE += [FOREIGN_OPTION, b'{"partitions": 4, "strategy": "sticky", "options": {"vnodes": 64}}']

# key (under the group's prefix) -> value: corrupt records every looking command must name
CORRUPT = {
    "owner/3": [b"zz", b"[1]", b'{"member": "w1", "epoch": "abc"}', b'{"member": "", "epoch": 1}'],
    "epoch/3": [b"abc", b"-1"],
    "commit/3": [b"{", b'{"epoch": 1}'],
    "latest": [b"garbage", b'{"round": "x"}'],
    "table/3": [b"garbage", b'{"state": "FLYING"}', b'{"owner": 5, "state": "online"}', b'{"owner": "w1"}'],
}


def make_store(
    tmp_path: Path, records: dict[str, bytes] | None = None, *, lease: bool = False, mode: Mode | None = None
) -> str:
    """A SQLite store holding group ``g`` (4 partitions, rounds mode unless ``mode``) plus ``records`` written as
    they are (bound to a fresh lease with ``lease``)."""
    url = f"sqlite:///{tmp_path}/s.db"
    with connect(url) as store:
        store.put(KEYS.resource, GroupConfig(partitions=4, mode=mode or Rounds()).record())
        lease_id = store.grant(60.0).id if lease else 0
        for key, value in (records or {}).items():
            if key == "latest":  # status reads the latest round's plan: make one that is fine
                store.put(KEYS.plan(5), encode({"participants": []}))
            store.put(full_key(key), value, lease=lease_id)
    return url


def full_key(key: str) -> str:
    """The store key of a group record named relative to the group (owner and epoch records beside its prefix)."""
    return (KEYS.ownership if key.startswith(("owner/", "epoch/")) else KEYS.prefix) + key


def snapshot(url: str) -> list[tuple[str, bytes]]:
    with connect(url) as store:
        return [(kv.key, kv.value) for kv in store.range("/apportion/")]


def assert_names(line: str, key: str) -> None:
    assert line.startswith(f"apportion: error: store record {full_key(key)} is corrupt: "), line


@pytest.mark.parametrize("value", RESOURCE, ids=lambda v: v[:30].decode("latin-1"))
@pytest.mark.parametrize("args", [["status"], ["status", "--json"], ["route", "key"], ["explain", "1"]])
def test_a_corrupt_definition_is_exit_2_naming_the_key(args: list[str], value: bytes, tmp_path: Path) -> None:
    url = make_store(tmp_path, {"resource": value})
    result = cli(args[0], "--store", url, "--group", "g", *args[1:])
    assert result.code == 2, result.stderr
    assert_names(result.one_error_line(), "resource")


@pytest.mark.parametrize(
    ("key", "value"), [(key, value) for key, values in CORRUPT.items() for value in values], ids=str
)
def test_a_corrupt_record_is_exit_2_naming_the_key_in_status(key: str, value: bytes, tmp_path: Path) -> None:
    url = make_store(tmp_path, {key: value}, lease=key.startswith("owner/"))
    for args in (["status"], ["status", "--json"]):
        result = cli(*args, "--store", url, "--group", "g")
        assert result.code == 2, result.stderr
        assert_names(result.one_error_line(), key)


@pytest.mark.parametrize("value", CORRUPT["commit/3"], ids=str)
def test_a_corrupt_commit_record_beside_the_group_prefix_is_exit_2_naming_its_key(value: bytes, tmp_path: Path) -> None:
    """``CORRUPT``'s ``commit/3`` is the layout before (still read); a commit record of the current layout is named
    the same way."""
    url = make_store(tmp_path)
    with connect(url) as store:
        store.put(KEYS.commit(3), value)
    for args in (["status"], ["status", "--json"]):
        result = cli(*args, "--store", url, "--group", "g")
        assert result.code == 2, result.stderr
        assert result.one_error_line().startswith(f"apportion: error: store record {KEYS.commit(3)} is corrupt: ")


@pytest.mark.parametrize(("key", "value"), [(k, v) for k in ("owner/3", "table/3") for v in CORRUPT[k]], ids=str)
def test_route_names_a_corrupt_owner_or_table_record(key: str, value: bytes, tmp_path: Path) -> None:
    url = make_store(tmp_path, {key: value}, lease=key.startswith("owner/"))
    result = cli("route", "--store", url, "--group", "g", ROUTED_TO_3)
    assert result.code == 2, result.stderr
    assert_names(result.one_error_line(), key)


@pytest.mark.parametrize("value", CORRUPT["owner/3"], ids=str)
def test_explain_names_a_corrupt_owner_record(value: bytes, tmp_path: Path) -> None:
    url = make_store(tmp_path, {"owner/3": value}, lease=True)
    result = cli("explain", "--store", url, "--group", "g", "3")
    assert result.code == 2, result.stderr
    assert_names(result.one_error_line(), "owner/3")


def test_an_owner_record_no_claim_wrote_is_corrupt(tmp_path: Path) -> None:
    """A foreign owner record bound to no lease would hold the partition forever; one above the last epoch handed
    out was not written by a claim either."""
    url = make_store(tmp_path, {"owner/3": b'{"epoch":7,"member":"ghost"}'})
    for args in (["status"], ["route", ROUTED_TO_3], ["explain", "3"]):
        result = cli(args[0], "--store", url, "--group", "g", *args[1:])
        assert result.code == 2, result.stderr
        assert "not bound to a lease" in result.one_error_line()
    (tmp_path / "b").mkdir()
    url = make_store(tmp_path / "b")
    with connect(url) as store:
        store.put(KEYS.epoch(3), b"2")
        store.put(KEYS.owner(3), b'{"epoch":7,"member":"ghost"}', lease=store.grant(60.0).id)
    result = cli("status", "--store", url, "--group", "g")
    assert result.code == 2
    assert "epoch 7 is above the last one handed out (2)" in result.one_error_line()


def test_an_owner_value_seen_before_is_still_corrupt_on_a_record_bound_to_no_lease(tmp_path: Path) -> None:
    """status decodes each distinct owner value once (issue 27): the lease check is still made on every record."""
    url = make_store(tmp_path)
    value = b'{"epoch":1,"member":"w1"}'
    with connect(url) as store:
        lease = store.grant(60.0).id
        for p in (1, 2, 3):
            store.put(KEYS.epoch(p), b"1")
        store.put(KEYS.owner(1), value, lease=lease)
        store.put(KEYS.owner(2), value, lease=lease)
        store.put(KEYS.owner(3), value)
    result = cli("status", "--store", url, "--group", "g")
    assert result.code == 2
    assert_names(result.one_error_line(), "owner/3")


@pytest.mark.parametrize(
    "raw", [b'{"a": NaN}', b'{"a": 1e400}', b'{"a": "\\ud800"}', b'\xef\xbb\xbf{"a": 1}', b'{"a": [1, {"b": null}]}']
)
def test_decode_gives_what_json_loads_gives(raw: bytes) -> None:
    """decode reads with msgspec and leaves to json.loads what msgspec refuses: the same value either way."""
    assert repr(decode(raw)) == repr(json.loads(raw))


@pytest.mark.parametrize("raw", [b"{", b"[1]", b'{"a": 1} x', b'{"a": "\x01"}', b"\xff", b"[" * 100_000])
def test_decode_names_the_key_of_what_is_not_a_json_object(raw: bytes) -> None:
    with pytest.raises(CorruptRecord, match="/k"):
        decode(raw, "/k")


def test_a_corrupt_plan_of_the_latest_round_is_exit_2(tmp_path: Path) -> None:
    url = make_store(tmp_path, {"latest": b'{"round": 5}'})
    with connect(url) as store:
        store.put(KEYS.plan(5), b"garbage")
    result = cli("status", "--store", url, "--group", "g")
    assert result.code == 2
    assert_names(result.one_error_line(), "round/5/plan")
    with connect(url) as store:
        store.put(KEYS.plan(5), encode({"participants": ["w1"], "assignment": {"w1": [[1]]}}))
    result = cli("status", "--store", url, "--group", "g")
    assert result.code == 2 and "'assignment' must map member ids" in result.one_error_line()


def test_corrupt_registrations_participations_and_history_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = make_store(tmp_path, {"latest": b'{"round": 5}', "members/w9": b"garbage", "round/5/w9": b"[1"})
    with connect(url) as store:
        store.put(KEYS.plan(5), encode({"participants": ["w9"]}))
        store.put(KEYS.history, b"not json")
        store.put(f"{KEYS.events}0000000000/w9/1", b"garbage")
        store.put(f"{KEYS.events}0000000000/w9/2", b'{"type": "claim", "partitions": "x", "seq": 2}')
    with caplog.at_level(logging.WARNING), connect(url, read_only=True) as store:
        status = group_status(store, "g")
        explained = explain(store, "g", 3)
    assert status.members["w9"].alive is True
    assert explained.epochs == ()
    warned = {r.getMessage().split(" is corrupt")[0] for r in caplog.records}
    assert {f"store record {KEYS.prefix}members/w9", f"store record {KEYS.prefix}round/5/w9"} <= warned
    assert sum(f"store record {KEYS.events}" in w for w in warned) == 2
    for args in (["status"], ["explain", "3"]):
        assert cli(args[0], "--store", url, "--group", "g", *args[1:]).code == 0


def test_rebalance_names_a_corrupt_definition_before_requesting_anything(tmp_path: Path) -> None:
    url = make_store(tmp_path, {"resource": b'{"partitions": 100000000000}'})
    before = snapshot(url)
    result = cli("rebalance", "--store", url, "--group", "g")
    assert result.code == 2
    assert_names(result.one_error_line(), "resource")
    assert snapshot(url) == before


# -- the worker and the Python API ---------------------------------------------------------------------------


def run_worker(url: str, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``apportion worker`` in a subprocess that must exit on its own (a hang fails the test)."""
    argv = [sys.executable, "-m", "apportion.cli", "worker", "--store", url, "--group", "g", "--id", "w1", *args]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=os.environ.copy())
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"worker {args} did not exit within {timeout_s} s: {exc.stderr!r}") from exc


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one ``apportion: error:`` line of a worker (its other stderr lines are its log)."""
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("apportion: error: ")]
    assert len(errors) == 1, result.stderr
    assert "internal error" not in errors[0]
    return errors[0]


@pytest.mark.parametrize(
    ("key", "value", "args"),
    [
        ("resource", b"not json", []),
        ("resource", b'{"partitions": 100000000000}', []),
        ("resource", b"[1,2]", ["--partitions", "4"]),
        ("resource", FOREIGN_OPTION, []),
        ("epoch/3", b"abc", []),
        ("owner/3", b'{"epoch":1,"member":"ghost"}', []),
        ("table/3", b'{"state": "FLYING"}', ["--mode", "coordinator"]),
        ("table/3", b'{"owner": 5, "state": "online"}', ["--mode", "coordinator"]),
    ],
    ids=[
        "definition",
        "huge-definition",
        "with-partitions",
        "foreign-option",
        "epoch",
        "foreign-owner",
        "table",
        "table-owner",
    ],
)
def test_a_worker_on_a_corrupt_record_exits_2_naming_the_key(
    key: str, value: bytes, args: list[str], tmp_path: Path
) -> None:
    url = make_store(tmp_path, {key: value}, mode=Coordinator() if "coordinator" in args else None)
    result = run_worker(url, "--settle", "0.1", "--min-interval", "0.2", *args)
    assert result.returncode == 2, result.stderr
    assert_names(error_line(result), key)


def test_update_repairs_a_corrupt_definition(tmp_path: Path) -> None:
    """The way out that the error line's key points to: a worker with ``--update`` rewrites the definition."""
    url = make_store(tmp_path, {"resource": b"not json"})
    with connect(url) as store:
        group = Group(store, "g", partitions=4, update=True)
        with group.join("w1") as worker:
            assert worker.wait_until_stable(timeout_s=30)
        assert GroupConfig.from_record(store.get(KEYS.resource)).partitions == 4  # type: ignore[arg-type]


BAD_DEFINITIONS = [
    ["--partitions", "100000000000"],
    ["--partitions", "0"],
    ["--partitions", "4", "--strategy", "nope"],
    ["--partitions", "4", "--settle", "nan"],
    ["--partitions", "4", "--ttl", "100000"],
    ["--partitions", "4", "--heartbeat", "0.1"],
    ["--partitions", "100000000000", "--update"],
    ["--partitions", "4", "--heartbeat", "1e9", "--update"],
]


@pytest.mark.parametrize("args", BAD_DEFINITIONS, ids=" ".join)
def test_a_bad_definition_never_reaches_the_store(args: list[str], tmp_path: Path) -> None:
    url = make_store(tmp_path)
    before = snapshot(url)
    result = cli("worker", "--store", url, "--group", "g", "--id", "w1", *args)
    assert result.code == 2
    result.one_error_line()
    assert snapshot(url) == before


@pytest.mark.parametrize(
    "kwargs",
    [
        {"partitions": 100_000_000_000},
        {"partitions": 4.0},
        {"partitions": 4, "strategy": "nope"},
        {"partitions": 4, "options": {"load_factor": float("inf")}},
        {"partitions": 4, "options": {"nope": 1}},
        {"partitions": 4, "ttl_s": 1e12},
        {"partitions": 4, "settle_s": 2.0, "min_interval_s": 1.0},
        {"partitions": 4, "stateful": "yes"},
    ],
    ids=str,
)
def test_the_python_api_validates_before_anything_is_written(kwargs: dict[str, object]) -> None:
    with connect("memory://") as store:
        with pytest.raises(InvalidRequest):
            Group(store, "g", update=True, **kwargs)  # type: ignore[arg-type]
        assert store.range("/apportion/") == []


def test_the_python_api_names_a_corrupt_stored_definition() -> None:
    with connect("memory://") as store:
        store.put(KEYS.resource, b'{"partitions": 4, "heartbeat_s": 0}')
        with pytest.raises(CorruptRecord, match=f"store record {KEYS.resource} is corrupt: heartbeat_s: "):
            Group(store, "g")


def test_a_stored_option_of_another_strategy_is_a_corrupt_record_naming_the_key_and_the_option() -> None:
    """Not a plan that fails later inside a worker's round: reading the definition back refuses it."""
    reason = "options.tolerance: unknown strategy option 'tolerance' for high_availability (known: "
    with connect("memory://") as store:
        store.put(KEYS.resource, FOREIGN_OPTION)
        with pytest.raises(CorruptRecord, match=f"store record {KEYS.resource} is corrupt: {re.escape(reason)}"):
            GroupConfig.from_record(store.get(KEYS.resource))  # type: ignore[arg-type]
        with pytest.raises(CorruptRecord, match=re.escape(reason)):
            Group(store, "g")


@pytest.mark.parametrize("args", BAD_DEFINITIONS, ids=" ".join)
def test_a_bad_definition_never_creates_a_store_file(args: list[str], tmp_path: Path) -> None:
    """A mistyped option on a store that does not exist yet: one line, and no empty database left behind."""
    path = tmp_path / "new.db"
    result = cli("worker", "--store", f"sqlite:///{path}", "--group", "g", "--id", "w1", *args)
    assert result.code == 2
    result.one_error_line()
    assert not path.exists()
