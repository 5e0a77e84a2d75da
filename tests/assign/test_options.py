"""Each strategy has its own options: accepted by it, refused (one message naming the strategy's options) by every
other, alike at every entry point — the group definition, the JSON request of ``apportion assign`` and the
simulator's config — because all of them ask ``assign.validate_options``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.assign import STRATEGIES, STRATEGY_NAMES, parse_request, plan, validate_options
from apportion.errors import InvalidRequest
from apportion.group import GroupConfig
from apportion.model import AssignRequest, Member, Resource
from apportion.sim import SimConfig, Simulation
from tests.cli.run import cli

# every strategy with a valid value for each of its options (none: it takes none)
OWN: dict[str, dict[str, object]] = {
    "round_robin": {},
    "range": {},
    "sticky": {},
    "rendezvous": {},
    "weighted": {"tolerance": 0.2},
    "bounded_load": {"load_factor": 1.5, "vnodes": 16},
    "high_availability": {
        "num_standby_replicas": 1,
        "max_warmup_replicas": 1,
        "acceptable_recovery_lag": 5,
        "probing_rebalance_interval_s": 2.0,
        "imbalance": 0.1,
        "recovery_lag_band": 0.25,
    },
}
VALID = {name: value for options in OWN.values() for name, value in options.items()}
FOREIGN = [(strategy, name) for strategy in OWN for name in VALID if name not in OWN[strategy]]


def refusal(strategy: str, name: str) -> str:
    """The one message for option ``name`` given to ``strategy``, which does not have it."""
    known = ", ".join(sorted(OWN[strategy]))
    has = f"known: {known}" if known else "it takes no options"
    return f"options.{name}: unknown strategy option {name!r} for {strategy} ({has})"


def json_request(strategy: str, options: Mapping[str, object]) -> str:
    return json.dumps({"strategy": strategy, "resources": {"t": 4}, "members": {"a": {}, "b": {}}, "options": options})


def sim_config(strategy: str, options: Mapping[str, object]) -> SimConfig:
    return SimConfig(members=2, partitions=4, events=0, strategy=strategy, options=dict(options))


# Each entry point, called the way its users call it: raises InvalidRequest for options it refuses.
ENTRY_POINTS: dict[str, Callable[[str, Mapping[str, object]], object]] = {
    "validate_options": validate_options,
    "GroupConfig": lambda strategy, options: GroupConfig(partitions=4, strategy=strategy, options=options),
    "JSON request": lambda strategy, options: parse_request(json.loads(json_request(strategy, options))),
    "simulator": lambda strategy, options: Simulation(sim_config(strategy, options)),
}


def test_the_table_lists_every_strategy_and_every_option_it_has() -> None:
    assert sorted(OWN) == sorted(STRATEGY_NAMES)
    for strategy, registered in STRATEGIES.items():
        assert strategy == registered.options.STRATEGY
        assert sorted(f.name for f in fields(registered.options)) == sorted(OWN[strategy])


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("strategy", sorted(OWN))
def test_every_strategy_accepts_its_own_options_at_every_entry_point(strategy: str, entry: str) -> None:
    ENTRY_POINTS[entry](strategy, OWN[strategy])


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(("strategy", "name"), FOREIGN, ids="-".join)
def test_another_strategys_option_is_refused_with_one_message_at_every_entry_point(
    strategy: str, name: str, entry: str
) -> None:
    with pytest.raises(InvalidRequest) as err:
        ENTRY_POINTS[entry](strategy, {**OWN[strategy], name: VALID[name]})
    assert str(err.value) == refusal(strategy, name)
    assert err.value.field == f"options.{name}"


def test_the_issues_examples_are_refused_when_the_group_is_defined() -> None:
    with pytest.raises(InvalidRequest, match=r"'tolerance' for high_availability \(known: acceptable_recovery_lag, "):
        GroupConfig(partitions=4, strategy="high_availability", options={"tolerance": 0.1})
    with pytest.raises(InvalidRequest, match=r"'vnodes' for sticky \(it takes no options\)"):
        GroupConfig(partitions=4, strategy="sticky", options={"vnodes": 64})


@pytest.mark.parametrize("strategy", sorted(OWN))
def test_the_parsed_options_are_the_given_values_over_the_defaults(strategy: str) -> None:
    options_type = STRATEGIES[strategy].options
    assert asdict(validate_options(strategy, OWN[strategy])) == {**asdict(options_type()), **OWN[strategy]}
    assert validate_options(strategy, {}) == options_type()


@pytest.mark.parametrize("strategy", sorted(OWN))
def test_plan_checks_the_options_as_the_definition_does(strategy: str) -> None:
    members = (Member("a"), Member("b"))
    assert plan(AssignRequest(strategy, (Resource("t", 4),), members, OWN[strategy])).stats.partitions == 4
    foreign = next(name for s, name in FOREIGN if s == strategy)
    with pytest.raises(InvalidRequest) as err:
        plan(AssignRequest(strategy, (Resource("t", 4),), members, {foreign: VALID[foreign]}))
    assert str(err.value) == refusal(strategy, foreign)


BAD_VALUES = [
    ("weighted", "tolerance", 1.5, "must be a number in [0, 1], got 1.5"),
    ("weighted", "tolerance", True, "must be a number in [0, 1], got True"),
    ("weighted", "tolerance", float("nan"), "must be a number in [0, 1], got nan"),
    ("bounded_load", "load_factor", 0.5, "must be a number >= 1, got 0.5"),
    ("bounded_load", "load_factor", float("inf"), "must be a number >= 1, got inf"),
    ("bounded_load", "load_factor", 10**400, f"must be a number >= 1, got {10**400!r}"),
    ("bounded_load", "vnodes", 0, "must be an integer in [1, 4096], got 0"),
    ("bounded_load", "vnodes", 2.0, "must be an integer in [1, 4096], got 2.0"),
    ("high_availability", "max_warmup_replicas", 0, "must be an integer >= 1, got 0"),
    ("high_availability", "imbalance", 2, "must be a fraction in [0, 1] (0.2 is +-20%), got 2"),
    ("high_availability", "probing_rebalance_interval_s", "5", "must be a finite number > 0, got '5'"),
    ("high_availability", "recovery_lag_band", -0.5, "must be a finite number >= 0, got -0.5"),
]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(("strategy", "name", "value", "reason"), BAD_VALUES, ids=str)
def test_a_bad_value_is_refused_naming_the_option_at_every_entry_point(
    strategy: str, name: str, value: object, reason: str, entry: str
) -> None:
    with pytest.raises(InvalidRequest) as err:
        ENTRY_POINTS[entry](strategy, {name: value})
    assert err.value.field == f"options.{name}"
    assert err.value.reason == reason


@settings(max_examples=200, deadline=None)
@given(
    strategy=st.sampled_from(sorted(OWN)),
    names=st.sets(st.sampled_from(sorted(VALID))),
)
def test_options_are_accepted_exactly_when_the_strategy_has_them_and_every_entry_point_agrees(
    strategy: str, names: set[str]
) -> None:
    options = {name: VALID[name] for name in names}
    outcomes: dict[str, str] = {}
    for entry in ("validate_options", "GroupConfig", "JSON request"):  # the simulator: parametrized above (slower)
        try:
            ENTRY_POINTS[entry](strategy, options)
            outcomes[entry] = "ok"
        except InvalidRequest as exc:
            outcomes[entry] = str(exc)
    foreign = sorted(names - set(OWN[strategy]))
    expected = refusal(strategy, foreign[0]) if foreign else "ok"
    assert outcomes == dict.fromkeys(outcomes, expected)


# -- through the command line ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("strategy", "name"), FOREIGN[::3], ids="-".join)
def test_apportion_assign_refuses_another_strategys_option_in_one_line(strategy: str, name: str) -> None:
    result = cli("assign", stdin=json_request(strategy, {name: VALID[name]}))
    assert result.code == 2
    assert result.one_error_line() == f"apportion: error: {refusal(strategy, name)}"


@pytest.mark.parametrize("strategy", sorted(OWN))
def test_apportion_assign_accepts_each_strategys_own_options(strategy: str) -> None:
    result = cli("assign", stdin=json_request(strategy, OWN[strategy]))
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["stats"]["partitions"] == 4


@pytest.mark.parametrize(("strategy", "name"), [("sticky", "vnodes"), ("high_availability", "tolerance")])
def test_apportion_simulate_refuses_another_strategys_option_in_one_line(strategy: str, name: str) -> None:
    result = cli("simulate", "--strategy", strategy, "--option", f"{name}={json.dumps(VALID[name])}")
    assert result.code == 2
    assert result.one_error_line() == f"apportion: error: {refusal(strategy, name)}"
