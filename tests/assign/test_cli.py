"""`apportion assign` through a real subprocess: JSON in and out, one stderr line and exit 2 on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = {
    "strategy": "sticky",
    "resources": {"t1": 10, "t2": 4},
    "members": {
        "C0": {"subscriptions": ["t1"], "owned": ["t1-0"], "generation": 3, "capacity": 1, "rack": "a"},
        "C1": {},
    },
    "options": {},
}

MIXED = {"strategy": "round_robin", "resources": {"t": 2}}


def run(payload: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "apportion.cli", "assign", *args],
        input=payload,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_assign_answers_the_issue_example() -> None:
    proc = run(json.dumps(EXAMPLE))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    stats = {"partitions": 14, "members": 2, "min": 7, "max": 7, "moved": 0, "min_moves": 0, "deferred": 0}
    assert out["stats"] == stats
    assert out["assignment"]["C0"][0] == "t1-0" and all(p.startswith("t1-") for p in out["assignment"]["C0"])
    assert {"partition": "t1-1", "from": None, "to": "C0"} in out["moves"]


def test_seed_4_example_from_a_file_reports_its_three_moves(tmp_path: Path) -> None:
    request = {
        "strategy": "sticky",
        "resources": {"t1": 10},
        "members": {
            "C0": {"owned": [f"t1-{i}" for i in range(5)]},
            "C1": {"owned": [f"t1-{i}" for i in range(5, 10)]},
            "C2": {},
        },
    }
    path = tmp_path / "req.json"
    path.write_text(json.dumps(request))
    out = json.loads(run("", "--input", str(path)).stdout)
    assert out["assignment"]["C2"] == ["t1-4", "t1-8", "t1-9"]
    assert out["moves"][0] == {"partition": "t1-4", "from": "C0", "to": "C2"}


def test_table_format_prints_a_table() -> None:
    proc = run(json.dumps(EXAMPLE), "--format", "table")
    assert proc.returncode == 0 and "C0" in proc.stdout and "lower bound 0" in proc.stdout


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ("{not json", "input"),
        (json.dumps({**EXAMPLE, "strategy": "best"}), "strategy"),
        (json.dumps({**EXAMPLE, "resources": {"t1": -1}}), "resources.t1"),
        (json.dumps({**EXAMPLE, "members": {"C0": {"subscriptions": ["zz"]}}}), "members.C0.subscriptions[0]"),
        (json.dumps({**EXAMPLE, "members": {"C0": {"owned": ["t1-0", "t1-99"]}}}), "members.C0.owned[1]"),
        (json.dumps({**EXAMPLE, "members": {"C0": {"owned": ["nohyphen"]}}}), "members.C0.owned[0]"),
        ('{"strategy": "sticky", "resources": {"t": 1}, "members": {"a": {}, "a": {}}}', "duplicate"),
        (json.dumps({**EXAMPLE, "strategy": "weighted", "options": {"tolerance": 3}}), "options.tolerance"),
        (json.dumps({**EXAMPLE, "options": {"tolerance": 0.1}}), "options.tolerance"),
        (json.dumps({**EXAMPLE, "options": {"bogus": 1}}), "options.bogus"),
        (json.dumps({**EXAMPLE, "members": {"C0": {"capacity": "big"}}}), "members.C0.capacity"),
        (json.dumps({**EXAMPLE, "members": {"C0": {"join_revision": -1}}}), "members.C0.join_revision"),
        (json.dumps({**MIXED, "members": {"a": {"join_revision": 3}, "b": {}}}), "members.b.join_revision"),
        (json.dumps([1, 2]), "request"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_field(payload: str, field: str) -> None:
    proc = run(payload)
    assert proc.returncode == 2, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_zero_members_and_more_members_than_partitions_are_valid() -> None:
    empty = json.loads(run(json.dumps({"strategy": "range", "resources": {"t": 3}, "members": {}})).stdout)
    assert empty["assignment"] == {} and empty["stats"]["members"] == 0
    many = json.loads(
        run(json.dumps({"strategy": "sticky", "resources": {"t": 1}, "members": {"a": {}, "b": {}}})).stdout
    )
    assert many["assignment"] == {"a": ["t-0"], "b": []}


def test_round_robin_deals_in_join_order_given_join_revisions_and_in_id_order_without() -> None:
    members = {"a": {"join_revision": 9}, "b": {"join_revision": 5}, "c": {"join_revision": 7}}
    joined = json.loads(run(json.dumps({"strategy": "round_robin", "resources": {"t": 4}, "members": members})).stdout)
    assert joined["assignment"] == {"a": ["t-2"], "b": ["t-0", "t-3"], "c": ["t-1"]}
    plain = {"strategy": "round_robin", "resources": {"t": 4}, "members": {"a": {}, "b": {}, "c": {}}}
    assert json.loads(run(json.dumps(plain)).stdout)["assignment"] == {"a": ["t-0", "t-3"], "b": ["t-1"], "c": ["t-2"]}


def test_output_is_byte_identical_under_different_hash_seeds() -> None:
    request = {
        "resources": {"t1": 40, "t2": {"partitions": 6, "weights": [1, 2, 3, 1, 2, 3]}},
        "members": {
            f"w{i}": {"owned": [f"t1-{j}" for j in range(i, 40, 7)], "generation": 1, "capacity": 1 + i % 3}
            for i in range(6)
        },
    }
    for strategy in ("sticky", "weighted", "rendezvous", "bounded_load", "range", "round_robin"):
        payload = json.dumps({**request, "strategy": strategy})
        outs = {run(payload, env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "random")}
        assert len(outs) == 1, strategy


def test_high_availability_takes_replicas_and_lag_and_reports_standbys_and_learners() -> None:
    request = {
        "strategy": "high_availability",
        "resources": {"t": {"partitions": 4, "stateful": True}},
        "members": {
            "a": {"owned": ["t-0", "t-1", "t-2", "t-3"]},
            "b": {"learners": ["t-0"], "lag": {"t-0": 0}},
        },
        "options": {"num_standby_replicas": 1, "max_warmup_replicas": 1},
    }
    proc = run(json.dumps(request))
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert sorted(answer["assignment"]["a"] + answer["assignment"]["b"]) == ["t-0", "t-1", "t-2", "t-3"]
    assert "t-0" in answer["assignment"]["b"]  # its learner is caught up: the active moves to it
    for member, standbys in answer["standby"].items():
        assert not set(standbys) & set(answer["assignment"][member])


def test_high_availability_option_out_of_range_exits_2() -> None:
    request = {"strategy": "high_availability", "resources": {"t": 2}, "members": {"a": {}},
               "options": {"max_warmup_replicas": 0}}  # fmt: skip
    proc = run(json.dumps(request))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "options.max_warmup_replicas" in proc.stderr


def test_a_process_ends_without_teardown_only_after_the_whole_plan_is_written() -> None:
    """`apportion assign` as its own process ends with ``os._exit`` (no freeing of the plan, no atexit) once stdout
    is flushed: a plan far larger than a pipe's buffer arrives whole; in process, ``main`` frees what it kept."""
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('teardown ran', file=sys.stderr))\n"
        "from apportion.cli import run\n"
        "run()\n"
    )
    request = {"strategy": "sticky", "resources": {"t": 20_000}, "members": {f"m{i}": {} for i in range(7)}}
    proc = subprocess.run(
        [sys.executable, "-c", code, "assign"], input=json.dumps(request), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert sum(len(parts) for parts in json.loads(proc.stdout)["assignment"].values()) == 20_000
    version = subprocess.run([sys.executable, "-c", code, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stderr == "teardown ran\n", "a command that kept nothing exits normally"

    from apportion.cli import _outcome
    from tests.cli.run import cli

    assert cli("assign", stdin=json.dumps(request)).code == 0
    assert _outcome._KEPT == [], "main() in process must free what the command kept"


def run_args(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "apportion.cli", *args], input=stdin, capture_output=True, timeout=60
    )


def imported_click(proc: subprocess.CompletedProcess[bytes]) -> bool:
    return any(line.rsplit(b"|", 1)[-1].strip() == b"click" for line in proc.stderr.splitlines())


def error_lines(proc: subprocess.CompletedProcess[bytes]) -> list[bytes]:
    return [line for line in proc.stderr.splitlines() if not line.startswith(b"import time:")]


PAYLOADS = [
    json.dumps(EXAMPLE).encode(),
    b"{not json",
    json.dumps({**EXAMPLE, "members": {"C0": {"owned": ["t1-0", "t1-99"]}}}).encode(),
    b'{"strategy": "sticky", "resources": {"t": 1}, "members": {"a": {}, "a": {}}}',
    b'{"strategy": "sticky", "rack": "\xff"}',
    b"",
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=["valid", "syntax", "range", "duplicate", "binary", "empty"])
def test_the_plain_command_line_runs_without_click_and_answers_as_click_does(tmp_path: Path, payload: bytes) -> None:
    path = tmp_path / "request.json"
    path.write_bytes(payload)
    through_click = run_args("assign", "--format", "json", "--input", str(path))
    assert imported_click(through_click)
    for proc in (run_args("assign", "--input", str(path)), run_args("assign", f"--input={path}")):
        assert not imported_click(proc)
        assert (proc.returncode, proc.stdout, error_lines(proc)) == (
            through_click.returncode, through_click.stdout, error_lines(through_click),
        )  # fmt: skip
    from_stdin, click_stdin = run_args("assign", stdin=payload), run_args("assign", "--format", "json", stdin=payload)
    assert not imported_click(from_stdin) and imported_click(click_stdin)
    assert (from_stdin.returncode, from_stdin.stdout, error_lines(from_stdin)) == (
        click_stdin.returncode, click_stdin.stdout, error_lines(click_stdin),
    )  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [("assign", "--input", "-x"), ("assign", "--input", "."), ("assign", "--bogus"), ("assign", "--help")],
)
def test_any_other_assign_command_line_goes_through_click(args: tuple[str, ...]) -> None:
    proc = run_args(*args)
    assert imported_click(proc)
    assert proc.returncode == (0 if "--help" in args else 2)
