"""`apportion scale` and ``Group.scale``: the replica count of a static-mode group, as `kubectl scale` sets it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

import apportion
from apportion.group import GroupConfig, Static, group_status, stored_replicas
from apportion.group.internals import Keys, encode, mode_named
from apportion.store import connect
from tests.cli.run import cli

STATIC = GroupConfig(partitions=4, mode=Static())


def defined_group(url: str, config: GroupConfig = STATIC) -> None:
    with connect(url) as store:
        store.put(Keys("g").resource, encode(config.to_json()))


def test_scale_sets_the_replica_count_and_says_what_it_was(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    defined_group(url)
    first = cli("scale", "--store", url, "--group", "g", "--replicas", "3")
    assert first.code == 0, first.stderr
    assert first.stdout.strip() == "group g: replica count - -> 3"
    second = cli("scale", "--store", url, "--group", "g", "--replicas", "2", "--json")
    assert json.loads(second.stdout) == {"group": "g", "previous": 3, "replicas": 2}
    with connect(url) as store:
        assert stored_replicas(store, "g") == 2


def test_scale_of_an_unknown_group_is_one_line_exit_2_and_creates_no_store(tmp_path: Path) -> None:
    result = cli("scale", "--store", f"sqlite:///{tmp_path / 'none.db'}", "--group", "g", "--replicas", "2")
    assert result.code == 2
    assert "no such group 'g'" in result.one_error_line()
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize(
    ("replicas", "message"),
    [
        ("0", "must be an integer >= 1"),
        ("-3", "must be an integer >= 1"),
        ("1000001", "must be at most 1,000,000"),  # MAX_REPLICAS
        ("1" * 20, "must be at most 1,000,000"),  # was stored: the count raised to 1e20 for good
    ],
)
def test_scale_to_fewer_than_one_or_more_than_the_most_replicas_is_one_line_exit_2(
    replicas: str, message: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    defined_group(url)
    result = cli("scale", "--store", url, "--group", "g", "--replicas", replicas)
    assert result.code == 2
    assert f"replicas: {message}" in result.one_error_line()


def test_group_scale_is_the_python_analogue() -> None:
    store = apportion.connect(f"memory://scale-{uuid.uuid4().hex}")
    group = apportion.Group(store, "g", partitions=4, mode=Static())
    with pytest.raises(apportion.InvalidRequest, match="no resource definition"):
        group.scale(2)  # nothing to scale before the group exists
    store.put(Keys("g").resource, encode(group.requested.to_json()))
    group.scale(5)
    assert stored_replicas(store, "g") == 5
    with pytest.raises(apportion.InvalidRequest, match="replicas"):
        group.scale(0)


@pytest.mark.parametrize("mode", ["rounds", "coordinator"])
def test_scale_of_a_group_of_another_mode_is_refused_and_changes_nothing(mode: str, tmp_path: Path) -> None:
    """Issue 28 class 1: a rounds group scaled turned its status and dashboard into static mode's."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    defined_group(url, GroupConfig(partitions=4, mode=mode_named(mode)))
    result = cli("scale", "--store", url, "--group", "g", "--replicas", "3")
    assert result.code == 2, result.stderr
    expected = f"replicas: group 'g' is a {mode} group: only a static group has a replica count"
    assert result.one_error_line().endswith(expected)
    with connect(url) as store:
        assert stored_replicas(store, "g") is None
        status = group_status(store, "g")
    assert status.replicas is None and status.mode == mode


def test_scale_of_a_group_stored_before_modes_were_works_as_before(tmp_path: Path) -> None:
    """A definition written by an older version records no mode: it may be a static group, so it is scaled."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    legacy = GroupConfig(partitions=4).to_json()
    del legacy["mode"]
    with connect(url) as store:
        store.put(Keys("g").resource, encode(legacy))
    result = cli("scale", "--store", url, "--group", "g", "--replicas", "3")
    assert result.code == 0, result.stderr
    with connect(url) as store:
        assert stored_replicas(store, "g") == 3
