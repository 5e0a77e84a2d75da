"""The JSON shape of requests and plans (what ``apportion assign`` reads and writes).

Request::

    {"strategy": "sticky",
     "resources": {"t1": 10, "t2": {"partitions": 4, "weights": [1, 1, 2, 2]}},
     "members": {"C0": {"subscriptions": ["t1"], "owned": ["t1-0"], "generation": 3, "capacity": 1, "rack": "a"},
                 "C1": {}},
     "options": {}}

``options`` are the strategy's own (``{"tolerance": 0.1}`` for ``weighted``; see ``validate_options``): another
strategy's option is an error. Every member field is optional (subscriptions default to every resource).
``"join_revision": 17`` (an integer >= 0) puts ``round_robin``'s members in join order (see ``_simple``): give it to
every member or to none. ``"standby"``, ``"learners"``, ``"lag"`` (``{"t1-3": 120}``) and ``"ready"`` (the replicas
the previous plan's ``"ready"`` listed for the member) feed ``high_availability`` (see ``_high_availability``).
Partitions are ``<resource>-<index>``, split at the last hyphen. Every problem raises :class:`InvalidRequest` naming
the field, e.g. ``members.C0.owned[2]: 't1-12' is out of range (t1 has 10 partitions)``.

Speed (a request of a million partitions is ~12 MB): the text is decoded by msgspec when it can vouch for the result
(no duplicate key was dropped: see :func:`_decode_fast`), else by the standard library, which also words every
syntax error. Each partition list is first checked as a column (every string at once, by C-level passes:
:func:`_columnar`); only a list that fails those checks is walked one partition at a time, and that walk raises the
exact error (field path and value) or accepts what the column checks were too strict for (e.g. ``t-00000001``).
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from itertools import islice, repeat
from types import MappingProxyType
from typing import Any

import msgspec

from apportion.assign._core import _first, _new_tuple, _second, gc_paused
from apportion.assign._registry import strategy_named, validate_options
from apportion.errors import InvalidRequest
from apportion.model import (
    MAX_PARTITIONS,
    SEPARATOR,
    AssignRequest,
    Member,
    Partition,
    PartitionColumn,
    Plan,
    Resource,
    resource_of,
)  # fmt: skip

_TOP = ("strategy", "resources", "members", "options")
_MEMBER = (
    "subscriptions", "owned", "generation", "capacity", "rack", "standby", "learners", "lag", "join_revision", "ready",
)  # fmt: skip


_DECODER = msgspec.json.Decoder()
_third = operator.itemgetter(2)
_ENCODER = msgspec.json.Encoder()
_INT_LIST = msgspec.json.Decoder(list[int])
_PARTITION_FORMAT = "%s-%s"  # Partition.__str__, applied to the (resource, index) tuple without a Python call
_KEY_END = re.compile(r'"[ \t\n\r]*:')
_NO_LAG: Mapping[Partition, int] = MappingProxyType({})


def _keys(obj: object) -> int:
    """How many keys the objects of a decoded value hold, counting the objects reached through objects only."""
    count = 0
    stack = [obj]
    while stack:
        value = stack.pop()
        if type(value) is dict:
            count += len(value)
            stack.extend(value.values())
    return count


def _decode_fast(text: str) -> object | None:
    """The decoded value, or None when the standard library must decode it (and word any error).

    msgspec keeps the last of duplicate keys silently; we refuse duplicates. Every key in the text is a closing
    ``"`` followed by whitespace and ``:``, so the text has at least as many such matches as keys, and at least as
    many keys as the decoded objects hold; equality of the first and last counts proves that no key was dropped (a
    colon inside a string, or an object inside a list, only sends the text to the standard library). Anything
    msgspec refuses (syntax, ``NaN``, ``1e400``, nesting) goes there too."""
    try:
        obj = _DECODER.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    return obj if _key_ends(text) == _keys(obj) else None


def _key_ends(text: str) -> int:
    """How many ``"<whitespace>:`` the text holds (at least as many as its keys). When every colon follows a quote
    (none follows whitespace), they are the ``":``: two counts, ~2x faster than the regex scan, which stops at each
    of the text's two million quotes."""
    quoted = text.count('":')
    return quoted if text.count(":") == quoted else len(_KEY_END.findall(text))


def loads_request(text: str) -> AssignRequest:
    """Parse JSON text into a validated request; duplicate keys (e.g. member ids) are an error, not last-wins."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise InvalidRequest(key, "duplicate key (ids must be unique)")
            out[key] = value
        return out

    try:
        with gc_paused():
            obj = _decode_fast(text)
            if obj is None:
                obj = json.loads(text, object_pairs_hook=no_duplicates)
        return parse_request(obj)
    except json.JSONDecodeError as exc:
        raise InvalidRequest("input", f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except RecursionError as exc:  # decoding, validating or printing a value nested thousands deep
        raise InvalidRequest("input", "JSON nested too deeply") from exc


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)) and math.isfinite(value)


def _object(value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequest(field, f"must be an object, got {type(value).__name__}")
    return value


def _unknown(obj: Mapping[str, Any], known: tuple[str, ...], field: str) -> None:
    for key in obj:
        if key not in known:
            prefix = f"{field}." if field else ""
            raise InvalidRequest(f"{prefix}{key}", f"unknown field (expected one of {', '.join(sorted(known))})")


def parse_request(obj: object) -> AssignRequest:
    """A JSON-shaped value (as from ``json.loads``) -> a validated :class:`AssignRequest`."""
    with gc_paused():  # a million partitions are a million tuples: see gc_paused
        return _parse_request(obj)


def _parse_request(obj: object) -> AssignRequest:
    top = _object(obj, "request")
    _unknown(top, _TOP, "")
    strategy = top.get("strategy")
    if not isinstance(strategy, str):
        raise InvalidRequest("strategy", "required, a string")
    strategy_named(strategy)
    resources = _resources(top.get("resources", {}))
    by_name = {r.name: r for r in resources}
    members_obj = _object(top.get("members", {}), "members")
    members = tuple(_member(mid, value, by_name) for mid, value in members_obj.items())
    if not math.isfinite(sum(m.capacity for m in members)):
        raise InvalidRequest("members", "the capacities add up to more than a float can hold")
    options = dict(_object(top.get("options", {}), "options"))
    validate_options(strategy, options)
    return AssignRequest(strategy, resources, members, MappingProxyType(options))


def _resources(value: object) -> tuple[Resource, ...]:
    obj = _object(value, "resources")
    out = []
    total = 0
    for name, spec in obj.items():
        field = f"resources.{name}"
        if not name:
            raise InvalidRequest(field, "a resource name must not be empty")
        weights = None
        stateful = False
        if isinstance(spec, dict):
            _unknown(spec, ("partitions", "weights", "stateful"), field)
            count = spec.get("partitions")
            field_count = f"{field}.partitions"
            raw_weights = spec.get("weights")
            stateful_value = spec.get("stateful", False)
            if not isinstance(stateful_value, bool):
                raise InvalidRequest(f"{field}.stateful", "must be true or false")
            stateful = stateful_value
        else:
            count, field_count, raw_weights = spec, field, None
        if not isinstance(count, int) or isinstance(count, bool):
            raise InvalidRequest(field_count, f"partition count must be an integer, got {count!r}")
        if count < 0:
            raise InvalidRequest(field_count, f"partition count must be >= 0, got {count}")
        total += count
        if total > MAX_PARTITIONS:  # before anything is allocated for them
            raise InvalidRequest(field_count, f"at most {MAX_PARTITIONS:,} partitions in a request, got {total:,}")
        if raw_weights is not None:
            if not isinstance(raw_weights, list) or len(raw_weights) != count:
                raise InvalidRequest(f"{field}.weights", f"must be a list of {count} numbers")
            for i, w in enumerate(raw_weights):
                if not _is_number(w) or w <= 0:
                    raise InvalidRequest(f"{field}.weights[{i}]", f"must be a positive number, got {w!r}")
            weights = tuple(float(w) for w in raw_weights)
            if not math.isfinite(sum(weights)):
                raise InvalidRequest(f"{field}.weights", "add up to more than a float can hold")
        out.append(Resource(name, count, weights, stateful))
    return tuple(out)


def _member(
    mid: str, value: object, resources: Mapping[str, Resource], owned_column: PartitionColumn | None = None
) -> Member:
    """One member; ``owned_column`` its ``owned`` list already checked by :func:`_owned_columns`."""
    field = f"members.{mid}"
    if not mid:
        raise InvalidRequest(field, "a member id must not be empty")
    obj = _object(value if value is not None else {}, field)
    _unknown(obj, _MEMBER, field)
    subscriptions = None
    if "subscriptions" in obj and obj["subscriptions"] is not None:
        subs = obj["subscriptions"]
        if not isinstance(subs, list):
            raise InvalidRequest(f"{field}.subscriptions", "must be a list of resource names")
        for i, s in enumerate(subs):
            if not isinstance(s, str) or s not in resources:
                raise InvalidRequest(f"{field}.subscriptions[{i}]", f"unknown resource {s!r}")
        if len(set(subs)) != len(subs):
            raise InvalidRequest(f"{field}.subscriptions", "lists a resource twice")
        subscriptions = frozenset(subs)
    owned = (
        owned_column if owned_column is not None else _partition_list(obj.get("owned", []), f"{field}.owned", resources)
    )
    # absent fields (most members of a big request) skip their parsers: an empty list parses to ()
    standby = _partition_list(obj["standby"], f"{field}.standby", resources) if "standby" in obj else ()
    learners = _partition_list(obj["learners"], f"{field}.learners", resources) if "learners" in obj else ()
    lag = MappingProxyType(_lag(obj["lag"], f"{field}.lag", resources)) if "lag" in obj else _NO_LAG
    ready = _partition_list(obj["ready"], f"{field}.ready", resources) if "ready" in obj else ()
    generation = obj.get("generation", 0)
    if not _is_int(generation) or generation < 0:
        raise InvalidRequest(f"{field}.generation", f"must be an integer >= 0, got {generation!r}")
    capacity = obj.get("capacity", 1)
    if not _is_number(capacity) or capacity <= 0:
        raise InvalidRequest(f"{field}.capacity", f"must be a positive number, got {capacity!r}")
    rack = obj.get("rack")
    if rack is not None and not isinstance(rack, str):
        raise InvalidRequest(f"{field}.rack", f"must be a string, got {rack!r}")
    join_revision = obj.get("join_revision")
    if join_revision is not None and (not _is_int(join_revision) or join_revision < 0):
        raise InvalidRequest(f"{field}.join_revision", f"must be an integer >= 0, got {join_revision!r}")
    return Member(
        mid, subscriptions, owned, generation, float(capacity), rack, _tuple(standby), _tuple(learners),
        lag, join_revision, _tuple(ready),
    )  # fmt: skip


def _tuple(parts: Sequence[Partition]) -> tuple[Partition, ...]:
    return parts if isinstance(parts, tuple) else tuple(parts)


def _partition(text: object, where: str, resources: Mapping[str, Resource]) -> Partition:
    if not isinstance(text, str):
        raise InvalidRequest(where, f"must be a '<resource>-<index>' string, got {text!r}")
    part = Partition.parse(text, where)
    res = resources.get(part.resource)
    if res is None:
        raise InvalidRequest(where, f"unknown resource {part.resource!r}")
    if part.index >= res.partitions:
        raise InvalidRequest(where, f"{text!r} is out of range ({res.name} has {res.partitions} partitions)")
    return part


def _indices(tails: Sequence[str]) -> list[int] | None:
    """The ints of index strings when every one is ASCII digits, else None. (An index within its resource's range
    has at most 7 digits once leading zeros are stripped: what :meth:`Partition.parse` accepts; the caller checks
    the range.)"""
    digits = "".join(tails)
    if not (digits.isascii() and digits.isdigit()):
        return None
    try:
        return list(map(int, tails))
    except ValueError:  # an empty index ("t-"), or more digits than int() converts
        return None


def _columnar(raw: list[Any], resources: Mapping[str, Resource]) -> Sequence[Partition] | None:
    """The partitions of a list of strings checked as a column (C-level passes, no Python call per partition), or
    None when any check fails; then the walk in :func:`_partition_list` finds and words the problem. The split is
    :func:`~apportion.model.split_partition_name`'s, done on the whole column at once (the text's one format is
    ``model``'s: what this accepts, :meth:`Partition.parse` accepts)."""
    if not raw:
        return ()
    try:
        res = resources.get(resource_of(raw[0]) or "")
        if res is not None and "\n" not in res.name:
            ints = _one_resource(raw, res.name + SEPARATOR)
            if ints is not None:
                return _column(res, ints)
        split = list(map(str.rpartition, raw, repeat(SEPARATOR)))
    except (TypeError, AttributeError):  # a value that is not a string
        return None
    found = list(map(_first, split))
    if not set(found) <= resources.keys():
        return None
    ints = _indices(list(map(_third, split)))
    sizes = {r.name: r.partitions for r in resources.values()}
    if ints is None or not all(map(operator.lt, ints, map(sizes.__getitem__, found))):
        return None
    names = map({r.name: r.name for r in resources.values()}.__getitem__, found)  # one str object per resource
    parts = tuple(map(_new_tuple, repeat(Partition), zip(names, ints, strict=True)))
    return parts if len(set(parts)) == len(parts) else None


def _column(res: Resource, ints: list[int]) -> PartitionColumn | None:
    """The indices of one resource as a column (a ``range`` when they are one increasing run), or None when one is
    out of range or listed twice."""
    if ints[-1] - ints[0] == len(ints) - 1 and ints[-1] < res.partitions and ints == list(range(ints[0], ints[-1] + 1)):
        return PartitionColumn(res.name, range(ints[0], ints[-1] + 1))
    if ints[-1] < res.partitions and all(map(operator.lt, ints, islice(ints, 1, None))):
        return PartitionColumn(res.name, ints)
    if max(ints) < res.partitions and len(set(ints)) == len(ints):
        return PartitionColumn(res.name, ints)
    return None


def _one_resource(raw: list[str], prefix: str) -> list[int] | None:
    """The indices when every string is ``prefix`` then ASCII digits, else None (``prefix`` holds no newline).

    The strings joined behind newlines, with each newline + prefix replaced by a comma, are the indices as a JSON
    list, decoded in C. That holds only when every string is prefix + digits: the joined text has no comma of its
    own, so the n commas of the result are n replacements, and a result of digits and commas alone has no newline
    left, so each string was prefix + digits (an empty or zero-led index is no JSON number: None)."""
    joined = "\n" + "\n".join(raw)
    if "," in joined:
        return None
    numbers = joined.replace("\n" + prefix, ",")
    if numbers.count(",") != len(raw) or not numbers.startswith(","):
        return None
    ascii_text = numbers.encode("ascii", "replace")  # anything not ASCII becomes "?"
    if ascii_text.translate(None, b"0123456789,"):  # one C pass: something besides digits and commas is left
        return None
    try:
        ints: list[int] = _INT_LIST.decode(b"[" + ascii_text[1:] + b"]")
    except msgspec.DecodeError:
        return None
    return ints


def _partition_list(raw: object, field: str, resources: Mapping[str, Resource]) -> Sequence[Partition]:
    """A list of distinct '<resource>-<index>' strings naming existing partitions."""
    if not isinstance(raw, list):
        raise InvalidRequest(field, "must be a list of '<resource>-<index>' strings")
    fast = _columnar(raw, resources)
    return fast if fast is not None else tuple(_walk(raw, field, resources))


def _walk(raw: list[Any], field: str, resources: Mapping[str, Resource]) -> list[Partition]:
    """:func:`_partition_list` one partition at a time: the first problem raises, naming its index and value."""
    out: list[Partition] = []
    seen: set[Partition] = set()
    for i, text in enumerate(raw):
        where = f"{field}[{i}]"
        part = _partition(text, where, resources)
        if part in seen:
            raise InvalidRequest(where, f"{text!r} is listed twice")
        seen.add(part)
        out.append(part)
    return out


def _lag(raw: object, field: str, resources: Mapping[str, Resource]) -> dict[Partition, int]:
    """``{"t1-0": 120, ...}``: offsets behind the partition's changelog end (high availability)."""
    obj = _object(raw, field)
    if obj and set(map(type, obj.values())) == {int} and min(obj.values()) >= 0:
        parts = _columnar(list(obj), resources)  # None: a bad or twice-named partition, which the walk words
        if parts is not None:
            return dict(zip(parts, obj.values(), strict=True))
    out: dict[Partition, int] = {}
    for text, value in obj.items():
        where = f"{field}.{text}"
        if not _is_int(value) or value < 0:
            raise InvalidRequest(where, f"must be an integer >= 0, got {value!r}")
        out[_partition(text, where, resources)] = int(value)
    return out


def _names(parts: Sequence[Partition]) -> list[str]:
    """``["t-0", ...]``: ``str`` of each partition by one C-level format per partition."""
    return list(map(_PARTITION_FORMAT.__mod__, parts))


def _raw_names(parts: Sequence[Partition]) -> msgspec.Raw:
    """The JSON text of ``_names(parts)``. For one resource: its indices encoded as a JSON list of ints (in C), each
    comma then widened to ``","<resource>-``; a :class:`PartitionColumn` gives its indices without a Partition made."""
    if isinstance(parts, PartitionColumn):
        if not parts:
            return msgspec.Raw(b"[]")
        resource, indices = parts.resource, parts.indices
    elif len(set(map(_first, parts))) != 1:
        return msgspec.Raw(_ENCODER.encode(_names(parts)))
    else:
        resource, indices = parts[0][0], list(map(_second, parts))
    quoted = _ENCODER.encode(f"{resource}-")[:-1]  # b'"t-'
    listed = indices if isinstance(indices, list) else list(indices)
    text = _ENCODER.encode(listed)[1:-1].replace(b",", b'",' + quoted)
    return msgspec.Raw(b"[" + quoted + text + b'"]')


def plan_to_json(plan: Plan, names: Callable[[Sequence[Partition]], object] = _names) -> dict[str, Any]:
    """The JSON answer: assignment (every member, sorted lists), moves (``from`` null for a placement), stats.
    ``names`` renders each list of partitions (:func:`dumps_plan` passes one that renders JSON text)."""
    out: dict[str, Any] = {
        "assignment": {m: names(parts) for m, parts in sorted(plan.assignment.items())},
        "moves": [{"partition": str(mv.partition), "from": mv.source, "to": mv.target} for mv in plan.moves],
        "stats": {
            "partitions": plan.stats.partitions,
            "members": plan.stats.members,
            "min": plan.stats.min,
            "max": plan.stats.max,
            "moved": plan.stats.moved,
            "min_moves": plan.stats.min_moves,
            "deferred": plan.stats.deferred,
        },
    }
    if plan.standby:
        out["standby"] = {m: names(parts) for m, parts in sorted(plan.standby.items())}
    if plan.learners:
        out["learners"] = {m: names(parts) for m, parts in sorted(plan.learners.items())}
    if plan.ready:
        out["ready"] = {m: names(parts) for m, parts in sorted(plan.ready.items())}
    if plan.probe_after_s is not None:
        out["probe_after_s"] = plan.probe_after_s
    return out


def dumps_plan(plan: Plan) -> bytes:
    """:func:`plan_to_json` as compact UTF-8 JSON (what ``apportion assign`` prints)."""
    with gc_paused():
        return _ENCODER.encode(plan_to_json(plan, _raw_names))
