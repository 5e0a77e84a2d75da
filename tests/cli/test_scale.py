"""`apportion scale` and ``Group.scale``: the replica count of a static-mode group, as `kubectl scale` sets it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

import apportion
from apportion.group import GroupConfig, Keys, encode, stored_replicas
from apportion.store import connect
from tests.cli.run import cli


def defined_group(url: str) -> None:
    with connect(url) as store:
        store.put(Keys("g").resource, encode(GroupConfig(partitions=4).to_json()))


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


@pytest.mark.parametrize("replicas", ["0", "-3"])
def test_scale_to_fewer_than_one_replica_is_one_line_exit_2(replicas: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    defined_group(url)
    result = cli("scale", "--store", url, "--group", "g", "--replicas", replicas)
    assert result.code == 2
    assert "replicas: must be an integer >= 1" in result.one_error_line()


def test_group_scale_is_the_python_analogue() -> None:
    store = apportion.connect(f"memory://scale-{uuid.uuid4().hex}")
    group = apportion.Group(store, "g", partitions=4)
    with pytest.raises(apportion.InvalidRequest, match="no resource definition"):
        group.scale(2)  # nothing to scale before the group exists
    store.put(Keys("g").resource, encode(group.requested.to_json()))
    group.scale(5)
    assert stored_replicas(store, "g") == 5
    with pytest.raises(apportion.InvalidRequest, match="replicas"):
        group.scale(0)
