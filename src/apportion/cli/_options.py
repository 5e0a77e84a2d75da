"""``--option KEY=VALUE`` strategy options (the commands that create a group or a simulation), ``NAME,...`` lists
of resource names (``--subscribe``, ``apportion subscribe``) and a member's ``--rack``."""

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


def resource_names(text: str, field: str) -> list[str]:
    """``NAME,...`` as the store keeps it: each name stripped, duplicates dropped, sorted (``orders,orders`` was
    echoed as given); InvalidRequest naming ``field`` for an empty name (``orders,,payments``, ``""``). Whether each
    is one of the group's resources is the group's definition's to say."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise InvalidRequest(field, f"an empty resource name in {text!r} (NAME,...)")
    return sorted(set(names))


def rack_name(text: str | None) -> str | None:
    """``--rack NAME``: a member's failure domain as the strategies compare it (``Member.rack``), or None; refused
    (InvalidRequest) when empty or blank, which would silently put the member on a rack of its own."""
    if text is None:
        return None
    if not text.strip():
        raise InvalidRequest("rack", f"a rack is a non-empty name, got {text!r}")
    return text


__all__ = ["parse_options", "rack_name", "resource_names"]
