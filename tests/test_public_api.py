"""The top-level API is exactly what the README documents."""

import re
from pathlib import Path

import apportion

README = Path(__file__).resolve().parents[1] / "README.md"


def test_top_level_all_is_exactly_the_documented_api() -> None:
    block = README.read_text().split("<!-- api -->")[1].split("<!-- /api -->")[0]
    documented = set(re.findall(r"`(\w+)`", block))
    assert set(apportion.__all__) == documented
    assert len(apportion.__all__) == len(set(apportion.__all__))


def test_every_exported_name_exists() -> None:
    for name in apportion.__all__:
        assert hasattr(apportion, name), name
