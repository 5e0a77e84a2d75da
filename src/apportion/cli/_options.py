"""``--option KEY=VALUE`` strategy options, shared by the commands that create a group or a simulation."""

from __future__ import annotations

import json

from apportion.errors import InvalidRequest


def parse_options(items: tuple[str, ...]) -> dict[str, object]:
    """``KEY=VALUE`` strategy options; a VALUE that parses as JSON is used as such, else as a string."""
    options: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise InvalidRequest("option", f"expected KEY=VALUE, got {item!r}")
        try:
            options[key.strip()] = json.loads(text)
        except ValueError:
            options[key.strip()] = text
    return options


__all__ = ["parse_options"]
