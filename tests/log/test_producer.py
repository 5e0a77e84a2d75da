"""Sample record generation shared by the demo, the benchmarks and `apportion pipeline produce`."""

from __future__ import annotations

import random

import pytest

from apportion.errors import InvalidRequest
from apportion.log import synthetic_records


def test_synthetic_records_are_reproducible_from_the_seed_and_validated() -> None:
    first = synthetic_records(random.Random(3), 5, 10, 100)
    assert first == synthetic_records(random.Random(3), 5, 10, 100)
    assert [v.split("-")[1] for _, v in first] == [str(i) for i in range(10, 110)]
    assert {k for k, _ in first} <= {f"key-{n}" for n in range(5)} and len({k for k, _ in first}) == 5
    for keys, count in ((0, 1), (1, -1)):
        with pytest.raises(InvalidRequest):
            synthetic_records(random.Random(), keys, 0, count)
