"""Value types of the store contract (mirrors etcd v3: revisions, compares, ops, events, leases)."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Literal

from apportion.errors import InvalidRequest

_KEY_CHARS = re.compile(r"^[\x21-\x7e]+$")


def validate_key(key: str, field_name: str = "key", *, prefix: bool = False) -> str:
    """Check a key (or a prefix): printable ASCII, starts with '/', no empty segment, no '.' or '..' segment.

    A prefix may end with '/' (``/a/b/``); the root prefix '/' is allowed for ranges and watches.
    """
    if not isinstance(key, str) or not key:
        raise InvalidRequest(field_name, "must be a non-empty string")
    if not _KEY_CHARS.fullmatch(key):  # fullmatch: "$" alone would accept a trailing newline
        raise InvalidRequest(field_name, f"{key!r} must be printable ASCII without spaces")
    if not key.startswith("/"):
        raise InvalidRequest(field_name, f"{key!r} must start with '/'")
    if prefix and key == "/":
        return key
    body = key[1:-1] if (prefix and key.endswith("/")) else key[1:]
    for segment in body.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidRequest(field_name, f"{key!r} has an empty, '.' or '..' segment")
    return key


@dataclass(frozen=True, slots=True)
class KeyValue:
    """A stored key with its etcd-style metadata; ``lease`` is 0 when the key has none."""

    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0


class EventType(enum.Enum):
    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class Event:
    """A change at ``revision``; for a DELETE, ``kv.value`` is empty and ``kv.mod_revision == revision``."""

    type: EventType
    kv: KeyValue

    @property
    def revision(self) -> int:
        return self.kv.mod_revision


CompareTarget = Literal["value", "mod_revision", "create_revision", "version"]
CompareOp = Literal["==", "!=", "<", ">"]


@dataclass(frozen=True, slots=True)
class Compare:
    """One condition of a transaction, evaluated on ``key`` (an absent key has revisions/version 0, value b"")."""

    key: str
    target: CompareTarget
    op: CompareOp
    operand: bytes | int

    def holds(self, kv: KeyValue | None) -> bool:
        actual: bytes | int
        if self.target == "value":
            actual = b"" if kv is None else kv.value
            if kv is None:
                return False  # etcd: a value compare on a missing key fails
        elif self.target == "mod_revision":
            actual = 0 if kv is None else kv.mod_revision
        elif self.target == "create_revision":
            actual = 0 if kv is None else kv.create_revision
        else:
            actual = 0 if kv is None else kv.version
        operand = self.operand
        if self.op == "==":
            return actual == operand
        if self.op == "!=":
            return actual != operand
        if self.op == "<":
            return actual < operand  # type: ignore[operator]
        return actual > operand  # type: ignore[operator]


def absent(key: str) -> Compare:
    """The key does not exist."""
    return Compare(key, "create_revision", "==", 0)


def exists(key: str) -> Compare:
    return Compare(key, "create_revision", ">", 0)


def value_is(key: str, value: bytes) -> Compare:
    return Compare(key, "value", "==", value)


def mod_revision_is(key: str, revision: int) -> Compare:
    return Compare(key, "mod_revision", "==", revision)


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete ``key``; with ``prefix=True`` every key starting with ``key``."""

    key: str
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class Get:
    """Read ``key``; with ``prefix=True`` every key starting with ``key`` (sorted)."""

    key: str
    prefix: bool = False


Op = Put | Delete | Get


@dataclass(frozen=True, slots=True)
class TxnResult:
    """``responses[i]`` answers the i-th op of the branch taken: a list of KeyValue for Get, the number of keys
    deleted for Delete, None for Put. ``revision`` is the store revision after the transaction."""

    succeeded: bool
    responses: tuple[list[KeyValue] | int | None, ...]
    revision: int


@dataclass(frozen=True, slots=True)
class Lease:
    id: int
    ttl_s: float


__all__ = [
    "Compare",
    "Delete",
    "Event",
    "EventType",
    "Get",
    "KeyValue",
    "Lease",
    "Op",
    "Put",
    "TxnResult",
    "absent",
    "exists",
    "mod_revision_is",
    "validate_key",
    "value_is",
]
