"""What every strategy's options share: a frozen dataclass read from a mapping, unknown keys and bad values refused.

Each strategy module defines its options type as a subclass of :class:`StrategyOptions`: ``STRATEGY`` names the
strategy, the fields are the option names with their defaults, and ``_read`` checks the values (with
:func:`number_option`/:func:`integer_option`). ``parse`` first refuses every key that is not one of the fields,
naming the strategy and the options it has, so another strategy's option is one clear error wherever options are
checked (the registry's ``validate_options`` is how everyone asks). A bad value is
``InvalidRequest("options.<name>", "<rule>, got <value>")``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import ClassVar, Self

from apportion.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class StrategyOptions:
    """The options of a strategy; this base has none (the strategies that take no options subclass it bare)."""

    STRATEGY: ClassVar[str] = ""

    @classmethod
    def parse(cls, options: Mapping[str, object]) -> Self:
        """The options in ``options`` (absent ones take their defaults); ``InvalidRequest`` naming the option."""
        if not isinstance(options, Mapping):
            raise InvalidRequest("options", f"must be a mapping, got {type(options).__name__}")
        defaults = {f.name: f.default for f in fields(cls)}
        known = sorted(defaults)
        for name in sorted(options, key=str):
            if name not in defaults:
                has = f"known: {', '.join(known)}" if known else "it takes no options"
                raise InvalidRequest(f"options.{name}", f"unknown strategy option {name!r} for {cls.STRATEGY} ({has})")
        return cls._read({**defaults, **options})

    @classmethod
    def _read(cls, options: Mapping[str, object]) -> Self:
        """The options from ``options``, which holds every field (absent ones at their defaults); a subclass with
        fields checks each value."""
        return cls()


def number_option(options: Mapping[str, object], name: str, rule: str, ok: Callable[[float], bool]) -> float:
    """Option ``name`` as a float: a number (not a bool) for which ``ok`` holds, else InvalidRequest with ``rule``."""
    value = options[name]
    number = _as_float(value)
    if number is None or not ok(number):
        raise InvalidRequest(f"options.{name}", f"{rule}, got {value!r}")
    return number


def integer_option(options: Mapping[str, object], name: str, rule: str, ok: Callable[[int], bool]) -> int:
    """Option ``name``: an integer (not a bool) for which ``ok`` holds, else InvalidRequest with ``rule``."""
    value = options[name]
    if isinstance(value, bool) or not isinstance(value, int) or not ok(value):
        raise InvalidRequest(f"options.{name}", f"{rule}, got {value!r}")
    return value


def _as_float(value: object) -> float | None:
    """``value`` as a float when it is an int or a float (not a bool) that a float can hold, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:  # an int beyond a float's range
        return None


__all__ = ["StrategyOptions", "integer_option", "number_option"]
