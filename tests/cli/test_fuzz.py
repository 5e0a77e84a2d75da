"""Fuzzing the CLI's inputs (issue 14, item 10a): `apportion assign` requests, command-line arguments, worker TOML
configs and APPORTION_* variables. Whatever comes in, the CLI exits 0, 1 or 2, prints no traceback and, on error,
exactly one ``apportion: error: ...`` line — never an "internal error" (see ``tests.cli.run.check_exit``).

Everything runs in this process through ``apportion.cli.main`` (milliseconds an example). The worker's run loop is
replaced by a no-op, so a valid worker configuration creates its group in a memory store and returns at once.
``APPORTION_FUZZ_EXAMPLES`` raises the number of examples for a long run (``make soak``-style).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apportion import runner
from apportion.assign import STRATEGY_NAMES
from tests.cli.run import check_exit, cli

EXAMPLES = int(os.environ.get("APPORTION_FUZZ_EXAMPLES", "80"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(autouse=True)
def worker_does_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that passed validation returns instead of running; no metrics port is ever bound."""
    monkeypatch.setattr(runner, "run_member", lambda *args, **kwargs: None)
    monkeypatch.setattr(runner, "serve_metrics", lambda *args, **kwargs: None)
    for name in list(os.environ):
        if name.startswith("APPORTION_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("fuzz")
    cwd = Path.cwd()
    os.chdir(path)  # a relative sqlite:/// path or a pipeline directory lands here, not in the repository
    try:
        yield path
    finally:
        os.chdir(cwd)


# -- apportion assign ------------------------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e308, -1e308, 5e-324, 2**63, 10**6, 10**6 + 1]),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip
names = st.sampled_from(["t1", "t2", "t-1", "", "²", "a-b-3"]) | st.text(max_size=5)
partition_ids = st.one_of(
    st.builds(lambda r, i: f"{r}-{i}", st.sampled_from(["t1", "t2", "x"]), st.integers(-2, 12)),
    st.sampled_from(["t1-²", "t1-\u0661", "t1-" + "9" * 30, "t1-", "-3", "t1-03", "t1-1.5"]),
    st.text(max_size=8),
)
resource_specs = st.one_of(
    st.integers(-3, 20),
    st.sampled_from([0, 10**6, 10**6 + 1, 10**12, 2.5, True, "4", None]),
    st.fixed_dictionaries(
        {"partitions": st.integers(-1, 12)},
        optional={"weights": st.lists(st.floats() | st.integers(-2, 3), max_size=13), "stateful": json_values},
    ),
    json_values,
)
member_specs = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "owned": st.lists(partition_ids, max_size=6) | json_values,
            "standby": st.lists(partition_ids, max_size=3),
            "learners": st.lists(partition_ids, max_size=3),
            "lag": st.dictionaries(partition_ids, st.integers(-5, 10**20) | json_scalars, max_size=3),
            "subscriptions": st.lists(names, max_size=3) | json_values,
            "generation": st.integers(-2, 10**20) | json_scalars,
            "capacity": st.floats() | st.integers(-2, 10) | json_scalars,
            "rack": json_scalars,
        },
    ),
    json_values,
)
requests = st.fixed_dictionaries(
    {},
    optional={
        "strategy": st.sampled_from([*STRATEGY_NAMES, "nope"]) | json_scalars,
        "resources": st.dictionaries(names, resource_specs, max_size=3) | json_values,
        "members": st.dictionaries(names, member_specs, max_size=4) | json_values,
        "options": st.dictionaries(
            st.sampled_from(["tolerance", "load_factor", "num_standby_replicas", "max_warmup_replicas", "x"]),
            json_values,
            max_size=3,
        ),
    },
)


def to_json(value: Any) -> str:
    """JSON as a user might write it, infinities and NaN included (Python's json reads them)."""
    return json.dumps(value, allow_nan=True)


@FUZZ
@given(request=requests, fmt=st.sampled_from(["json", "table"]))
def test_assign_survives_any_request(request: dict[str, Any], fmt: str) -> None:
    result = cli("assign", "--format", fmt, stdin=to_json(request))
    check_exit(result)
    if result.code == 0 and fmt == "json":
        out = json.loads(result.stdout)
        assigned = sum(len(v) for v in out["assignment"].values())
        # every partition is assigned, unless there is nobody to assign to (found by a 10-minute fuzz run)
        assert assigned == (out["stats"]["partitions"] if out["stats"]["members"] else 0)


@FUZZ
@given(data=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_assign_survives_any_bytes(data: bytes) -> None:
    check_exit(cli("assign", stdin=data))


@FUZZ
@given(depth=st.integers(1, 200_000), opener=st.sampled_from(["[", '{"a":', '{"options": {"tolerance": [']))
def test_assign_survives_any_nesting(depth: int, opener: str) -> None:
    closer = {"[": "]", '{"a":': "}", '{"options": {"tolerance": [': "]}}"}[opener]
    text = opener + "[" * depth + "]" * depth + closer
    check_exit(cli("assign", stdin=text))


# -- command-line arguments ------------------------------------------------------------------------------------

VALUES = [
    "-1", "0", "1", "3", "2.5", "inf", "-inf", "nan", "1e400", "99999999999999999999", "", "x", "²", "t1-3", "--",
    "k=v", "tolerance=0.1", "tolerance=inf", "num_standby_replicas=-1", "{}", "[1,2]", "w1", "g", "orders-0",
]  # fmt: skip
STORES = [
    "memory://fuzz", "sqlite:///fuzz.db", "sqlite:///no/such/dir/x.db", "sqlite://", "sqlite:///", "etcd://root:PW@",
    "etcd:/root:PW@h:p", "etcd://h:0", "bogus://x", "memory", "",
]  # fmt: skip
COMMANDS: dict[tuple[str, ...], list[str]] = {
    ("assign",): ["--format", "--input"],
    ("simulate",): ["--members", "--partitions", "--events", "--seed", "--strategy", "--option", "--no-faults",
                    "--stateful", "--trace", "--mode", "--max-in-flight"],
    ("status",): ["--store", "--group", "--json", "--interval", "--all"],
    ("explain",): ["--store", "--group", "--json"],
    ("route",): ["--store", "--group"],
    ("rebalance",): ["--store", "--group", "--dry-run", "--json"],
    ("worker",): ["--store", "--group", "--id", "--partitions", "--strategy", "--settle", "--min-interval",
                  "--heartbeat", "--ttl", "--capacity", "--update", "--commit-every", "--mode", "--ordinal",
                  "--hostname", "--replicas", "--min-members", "--rebalance", "--max-in-flight"],
    ("pipeline", "produce"): ["--input", "--resource", "--partitions", "--records", "--keys", "--seed",
                              "--batch-records"],
}  # fmt: skip
FLAGS = {"--no-faults", "--stateful", "--trace", "--json", "--dry-run", "--update", "--all"}
SMALL = {"--members", "--partitions", "--events", "--records", "--keys"}  # keeps valid runs short


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(sorted(COMMANDS)))
    args = list(command)
    for _ in range(draw(st.integers(0, 8))):
        option = draw(st.sampled_from([*COMMANDS[command], "--nope", "-x"]))
        args.append(option)
        if option in FLAGS:
            continue
        if option == "--store":
            args.append(draw(st.sampled_from(STORES)))
        elif option in SMALL:
            args.append(draw(st.sampled_from(["-1", "0", "1", "3", "x", "inf", "1000001", "99999999999999999999"])))
        elif option == "--input" and command == ("assign",):
            args.append(draw(st.sampled_from(["/proc", "/dev/null", "/nonexistent", "/etc/hostname"])))
        elif option == "--mode" and command == ("simulate",):
            args.append(draw(st.sampled_from(["rounds", "coordinator", "static", "x"])))
        elif option == "--input":
            args.append(draw(st.sampled_from(["log", "/proc/x", "/dev/null"])))
        else:
            args.append(draw(st.sampled_from(VALUES) | st.text(max_size=6).filter(lambda t: "\x00" not in t)))
    args += draw(st.lists(st.sampled_from(VALUES), max_size=2))  # stray positionals
    return args


@FUZZ
@given(args=command_lines())
def test_any_command_line_exits_0_1_or_2_with_at_most_one_error_line(args: list[str], workdir: Path) -> None:
    check_exit(cli(*args, stdin='{"strategy": "sticky", "resources": {"t": 4}, "members": {"a": {}}}'))


# -- worker configuration: TOML and environment -----------------------------------------------------------------

WORKER_KEYS = [
    "store", "group", "id", "partitions", "strategy", "settle", "min-interval", "min_interval", "heartbeat", "ttl",
    "capacity", "update", "commit-every", "mode", "ordinal", "hostname", "replicas", "min-members", "rebalance",
    "max-in-flight", "metrics-port", "config", "nope",
]  # fmt: skip
toml_scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.text(max_size=8),
    st.dates(),
    st.datetimes(),
    st.times(),
    st.sampled_from(["memory://fuzz-toml", "rounds", "static", "coordinator", "sticky", "manual", "w-3"]),
)
toml_values = st.recursive(
    toml_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def toml(value: Any) -> str:
    """A TOML literal (a string escaped as JSON, which TOML basic strings read alike)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return ("-" if value < 0 else "") + "inf" if math.isinf(value) else "nan" if math.isnan(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml(v)}" for k, v in value.items()) + "}"


@FUZZ
@given(
    table=st.dictionaries(st.sampled_from(WORKER_KEYS), toml_values, max_size=6),
    under_worker=st.booleans(),
    junk=st.binary(max_size=30),
)
def test_any_worker_toml_config_exits_0_1_or_2(
    table: dict[str, Any], under_worker: bool, junk: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    base = {"store": "memory://fuzz-toml", "group": "g", "id": "w"}
    body = "\n".join(f"{json.dumps(k)} = {toml(v)}" for k, v in {**base, **table}.items())
    config = tmp_path_factory.mktemp("toml") / "worker.toml"
    config.write_text(("[worker]\n" if under_worker else "") + body + "\n", encoding="utf-8", errors="surrogatepass")
    check_exit(cli("worker", "--config", str(config)))
    config.write_bytes(junk)
    check_exit(cli("worker", "--config", str(config)))


ENV_NAMES = [f"APPORTION_{k.replace('-', '_').upper()}" for k in WORKER_KEYS if "_" not in k]


@FUZZ
@given(env=st.dictionaries(st.sampled_from(ENV_NAMES), st.sampled_from(VALUES) | st.text(max_size=8), max_size=5))
def test_any_worker_environment_exits_0_1_or_2(env: dict[str, str]) -> None:
    env = {k: v.replace("\x00", "") for k, v in env.items()}
    env.setdefault("APPORTION_STORE", "memory://fuzz-env")
    env.pop("APPORTION_CONFIG", None)  # a file name: covered by the TOML fuzzer
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        check_exit(cli("worker", "--group", "g", "--id", "w"))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
