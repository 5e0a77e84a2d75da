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

Speed (a request of a million partitions is ~12 MB): first the request is decoded by msgspec into a schema that
leaves each member's ``owned`` list as its JSON text (:func:`_loads_raw`): a list that is exactly
``["<resource>-<int>", ...]`` becomes a column without a string made per partition (:func:`_raw_column`). Any doubt
(a duplicate key, a value the schema refuses, any :class:`InvalidRequest`) sends the text to the general path: it is
decoded by msgspec when it can vouch for the result (no duplicate key was dropped: see :func:`_decode_fast`), else by
the standard library, which also words every syntax error. There each partition list is first checked as a column
(every string at once, by C-level passes: :func:`_columnar`); only a list that fails those checks is walked one
partition at a time, and that walk raises the exact error (field path and value) or accepts what the column checks
were too strict for (e.g. ``t-00000001``).
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from itertools import islice, repeat
from types import MappingProxyType
from typing import Annotated, Any, NamedTuple

import msgspec
from msgspec import UNSET, Meta, UnsetType
from msgspec.structs import astuple

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
_KEY_END_BYTES = re.compile(rb'"[ \t\n\r]*:')
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
    return obj if _no_key_dropped(text, _keys(obj)) else None


def _no_key_dropped(text: str | bytes, keys: int) -> bool:
    """Whether the text holds no more keys than ``keys``, the keys its decoded value holds (so that none was dropped).
    Each key is followed by whitespace and a colon, so the text's colons are at least as many as its keys: equal
    counts prove it in one C count (~3x faster than counting ``":`` too); else the ``"<whitespace>:`` are counted
    (a regex scan that stops at each of the text's two million quotes) for a colon inside a string."""
    if isinstance(text, bytes):
        return text.count(b":") == keys or len(_KEY_END_BYTES.findall(text)) == keys
    return text.count(":") == keys or len(_KEY_END.findall(text)) == keys


def loads_request(text: str | bytes) -> AssignRequest:
    """Parse JSON text (``str``, or ``bytes`` in UTF-8) into a validated request; duplicate keys (e.g. member ids)
    are an error, not last-wins."""
    if isinstance(text, bytes):
        data: bytes | None = text
        if not text.isascii():  # ASCII is UTF-8: the common case costs one C scan, no decode
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidRequest("input", f"not UTF-8 text (byte {exc.start}): a JSON request is") from exc
    else:
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: the standard library words it
            data = None
    with gc_paused():
        try:
            fast = None if data is None else _loads_raw(data)
        except (InvalidRequest, RecursionError):  # the general path raises it again, or the error it finds first
            fast = None
    if fast is not None:
        return fast
    return _loads_text(text if isinstance(text, str) else text.decode("ascii"))


def _loads_text(text: str) -> AssignRequest:
    """:func:`loads_request` by the general path: every value decoded, every error worded."""
    import json  # here: the raw path never needs it

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


class _MemberDoc(msgspec.Struct, forbid_unknown_fields=True):
    """A member as :func:`_loads_raw` decodes it. ``owned`` stays JSON text (:func:`_raw_column`); the scalar fields
    are typed as :func:`_member` checks them, so msgspec refuses what it would refuse (the request then takes the
    general path, which words the error); the replica fields are any JSON value (such a member goes to ``_member``).
    An absent field is UNSET: the present ones are counted for the duplicate-key proof."""

    owned: msgspec.Raw | UnsetType = UNSET
    generation: Annotated[int, Meta(ge=0)] | UnsetType = UNSET
    capacity: Annotated[float, Meta(gt=0)] | UnsetType = UNSET
    rack: str | UnsetType | None = UNSET
    join_revision: Annotated[int, Meta(ge=0)] | UnsetType | None = UNSET
    subscriptions: Any = UNSET  # the fields from here on: _OTHER
    standby: Any = UNSET
    learners: Any = UNSET
    lag: Any = UNSET
    ready: Any = UNSET


class _RequestDoc(msgspec.Struct, forbid_unknown_fields=True):
    """The request as :func:`_loads_raw` decodes it (field order: ``_TOP``'s)."""

    strategy: Any = UNSET
    resources: Any = UNSET
    members: dict[str, _MemberDoc | None] | UnsetType = UNSET
    options: Any = UNSET


_REQUEST_DOC = msgspec.json.Decoder(_RequestDoc)
_DOC_FIELDS: tuple[str, ...] = _MemberDoc.__struct_fields__
_OTHER = _DOC_FIELDS.index("subscriptions")  # the fields from here on are any JSON value, given to _member
_NO_OTHER = (UNSET,) * (len(_DOC_FIELDS) - _OTHER)
_count_unset = operator.methodcaller("count", UNSET)


def _loads_raw(data: bytes) -> AssignRequest | None:
    """:func:`loads_request` without a string made per partition, or None when the general path must parse the text.

    The duplicate-key proof is :func:`_decode_fast`'s: the text holds at least as many ``"<whitespace>:`` as keys,
    and equality with the keys of the decoded value proves that none was dropped. The keys of a member's ``owned``
    text are not counted: one that :func:`_raw_column` accepts holds none, another is decoded, and an object inside
    a list is never counted (its keys send the text to the general path). A member with anything beyond ``owned``,
    ``generation``, ``capacity``, ``rack`` and ``join_revision``, or whose ``owned`` is not that exact form, is
    parsed by :func:`_member`, which raises any error (the caller then parses the whole text the general way)."""
    try:
        doc = _REQUEST_DOC.decode(data)
    except (msgspec.DecodeError, RecursionError):  # a syntax error, a value the schema refuses, deep nesting
        return None
    members: Mapping[str, _MemberDoc | None] = {} if doc.members is UNSET else doc.members
    fields = list(map(astuple, filter(None, members.values())))
    keys = len(_TOP) - astuple(doc).count(UNSET) + _keys(doc.resources) + _keys(doc.options) + len(members)
    keys += len(_DOC_FIELDS) * len(fields) - sum(map(_count_unset, fields))
    keys += sum(_keys(value) for values in fields if values[_OTHER:] != _NO_OTHER for value in values[_OTHER:])
    if not _no_key_dropped(data, keys):
        return None
    top = {name: value for name, value in zip(_TOP, astuple(doc), strict=True) if value is not UNSET}
    return _parse_request(top, _members_raw)


def _members_raw(docs: Mapping[str, Any], resources: Mapping[str, Resource]) -> tuple[Member, ...]:
    """The members :func:`_loads_raw` decoded: those with ``owned`` (if any) in the exact form and none of the
    replica fields or subscriptions made here, field by field as :func:`_member` makes them; the others by it."""
    heads = {_ENCODER.encode(name)[1:-1]: res for name, res in resources.items()}
    layout: list[_Layout] = []
    out: list[Member] = []
    for mid, doc in docs.items():
        if doc is None:
            out.append(_member(mid, doc, resources))
            continue
        values = astuple(doc)
        raw, generation, capacity, rack, join_revision = values[:_OTHER]
        owned = () if raw is UNSET else _raw_column(bytes(raw), heads, layout)
        if owned is None or not mid or values[_OTHER:] != _NO_OTHER:
            value = {name: v for name, v in zip(_DOC_FIELDS, values, strict=True) if v is not UNSET}
            if owned is None:
                value["owned"] = _DECODER.decode(raw)
            out.append(_member(mid, value, resources, owned))
            continue
        member = Member(
            mid, None, owned, 0 if generation is UNSET else generation, 1.0 if capacity is UNSET else capacity,
            None if rack is UNSET else rack, (), (), _NO_LAG, None if join_revision is UNSET else join_revision, (),
        )  # fmt: skip
        out.append(member)
    return tuple(out)


class _Layout(NamedTuple):
    """How a list's text is laid out: ``["<resource>-`` before its first index, the joiner between two indices (its
    closing quote, separator, opening quote and ``<resource>-``: ``", "t-``), and the resource."""

    head: bytes
    joiner: bytes
    resource: Resource


def _raw_column(raw: bytes, heads: Mapping[bytes, Resource], layout: list[_Layout]) -> Sequence[Partition] | None:
    """The partitions of an ``owned`` list given as its JSON text when that text is exactly ``["<resource>-<int>",
    ...]`` (one resource, any separators, indices distinct and in range), else None. ``heads`` maps each resource
    name's JSON string body (``_ENCODER``'s) to it; ``layout`` holds the previous list's :class:`_Layout`, tried
    first (the lists of a request share one), and gets this list's.

    No string is made. The resource is the first string's text up to its last hyphen; the joiner is what stands
    between its first two indices (the separator the text uses). The proof is the way back: the indices found,
    encoded by msgspec (digits and commas only) with each comma widened to the joiner, must be the text between the
    head and the closing ``"]``, byte for byte (:func:`_renders`). Then each string is the resource name, a hyphen
    and an index in canonical digits: what :meth:`Partition.parse` reads as that partition. The indices to try:
    the run from the first to the last index (a previous plan's blocks: no int decoded, :func:`_run`), else the
    ints msgspec decodes from the text with the joiner's other bytes deleted."""
    if layout:
        known = layout[0]
        if raw.startswith(known.head) and raw.endswith(b'"]'):
            run = _run(raw, len(known.head), known.joiner, known.resource.partitions)
            if run is not None:
                return PartitionColumn(known.resource.name, run)
    if raw == b"[]":
        return ()
    end = raw.find(b'"', 2)  # the first string's closing quote (a quote escaped in it: no resource found below)
    cut = raw.rfind(b"-", 2, end)
    res = heads.get(raw[2:cut]) if cut > 2 and raw.startswith(b'["') and raw.endswith(b'"]') else None
    if res is None:
        return None
    if end == len(raw) - 2:  # one string: a joiner without white space (the proof holds with any)
        joiner = b'",' + raw[1 : cut + 1]
    else:
        after = raw.find(b'"', end + 1)
        if raw[end + 1 : after].strip() != b",":
            return None
        joiner = raw[end:after] + raw[1 : cut + 1]  # b'", "t-'
    start = cut + 1  # the indices and joiners: raw[start:-2]
    layout[:] = [_Layout(raw[:start], joiner, res)]
    run = _run(raw, start, joiner, res.partitions)
    if run is not None:
        return PartitionColumn(res.name, run)
    others = _joiner_bytes(joiner)
    try:  # the head and the tail are the joiner's bytes, the brackets and a quote: deleted, the brackets are left
        text = raw.translate(None, others) if others else b"[" + raw[start:-2].replace(joiner, b",") + b"]"
        ints: list[int] = _INT_LIST.decode(text)
    except msgspec.DecodeError:
        return None
    # no int at all (``["t-"]``: the text is not ``[]``, so a string lacks its index): the general path words it
    return _column(res, ints) if ints and min(ints) >= 0 and _renders(ints, joiner, raw, start) else None


def _run(raw: bytes, start: int, joiner: bytes, partitions: int) -> range | None:
    """The indices of ``raw[start:-2]`` when they are one increasing run below ``partitions`` joined by ``joiner``
    (:func:`_renders`): the run from its first to its last index, if any."""
    try:  # more digits than int() reads, or none: no run
        low, high = int(raw[start : raw.find(b'"', start)]), int(raw[raw.rfind(b"-") + 1 : -2])
    except ValueError:
        return None
    if not 0 <= low <= high < partitions or (high - low) * len(joiner) > len(raw):  # its joiners would not fit
        return None
    run = range(low, high + 1)
    return run if _renders(list(run), joiner, raw, start) else None


def _renders(ints: list[int], joiner: bytes, raw: bytes, start: int) -> bool:
    """Whether ``raw[start:-2]`` is ``ints`` encoded with each comma widened to ``joiner``."""
    text = _ENCODER.encode(ints).replace(b",", joiner)
    return len(text) == len(raw) - start and raw.startswith(text[1:-1], start)


@functools.cache
def _joiner_bytes(joiner: bytes) -> bytes:
    """The bytes of ``joiner`` but its comma, to delete from a list's text leaving its indices and commas; empty when
    one of them is a digit or a comma (then the joiner is replaced, a slower C pass)."""
    others = bytes(sorted(set(joiner) - {ord(",")}))
    return b"" if joiner.count(b",") != 1 or others.translate(None, b"0123456789") != others else others


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


def _members(obj: Mapping[str, Any], resources: Mapping[str, Resource]) -> tuple[Member, ...]:
    return tuple(_member(mid, value, resources) for mid, value in obj.items())


def _parse_request(
    obj: object,
    members_of: Callable[[Mapping[str, Any], Mapping[str, Resource]], tuple[Member, ...]] = _members,
) -> AssignRequest:
    top = _object(obj, "request")
    _unknown(top, _TOP, "")
    strategy = top.get("strategy")
    if not isinstance(strategy, str):
        raise InvalidRequest("strategy", "required, a string")
    strategy_named(strategy)
    resources = _resources(top.get("resources", {}))
    by_name = {r.name: r for r in resources}
    members_obj = _object(top.get("members", {}), "members")
    members = members_of(members_obj, by_name)
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
    mid: str, value: object, resources: Mapping[str, Resource], owned_column: Sequence[Partition] | None = None
) -> Member:
    """One member; ``owned_column`` its ``owned`` list already checked (by :func:`_raw_column`)."""
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
            return _EMPTY_LIST
        resource, indices = parts.resource, parts.indices
    elif len(set(map(_first, parts))) != 1:
        return msgspec.Raw(_ENCODER.encode(_names(parts)))
    else:
        resource, indices = parts[0][0], list(map(_second, parts))
    head, joiner = _list_affixes(resource)
    text = _ENCODER.encode(indices if isinstance(indices, list) else list(indices)).replace(b",", joiner)
    return msgspec.Raw(b"".join((head, text[1:-1], b'"]')))


_EMPTY_LIST = msgspec.Raw(b"[]")


@functools.cache
def _list_affixes(resource: str) -> tuple[bytes, bytes]:
    """What :func:`_raw_names` puts before a list's first index (``["t-``) and between two (``","t-``)."""
    quoted = _ENCODER.encode(f"{resource}-")[:-1]  # b'"t-'
    return b"[" + quoted, b'",' + quoted


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
