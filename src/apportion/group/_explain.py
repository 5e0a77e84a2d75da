"""Why a member owns a partition, derived from the group's history (``apportion explain``).

From ``history(store, group)``: the claim event of the current epoch, the ``round_closed`` before it (its
participants and, in a group over named resources, their subscriptions when they differ) and the previous owner's
last event on the partition before that claim::

    no earlier claim                          -> "filled": filled up to quota (it was unowned)
    previous owner = current owner            -> "reclaimed": re-claimed after its own lease lapsed
    previous owner released it, and took part -> "moved": moved from X (X was over quota in round R)
    ... and X's subscriptions in round R
    omit the partition's resource             -> "moved": moved from X because X stopped subscribing to <resource>
    released but not a participant, lost, or
    no event at all (lease expired)           -> "moved": moved from X because X left
    a later round closed with the owner in it -> "kept": kept as previously owned (the acquisition is kept too)

The history is kept for a while (``history_retention_s``): when it no longer reaches back far enough the decision
is "unknown".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from apportion.errors import InvalidRequest
from apportion.group._config import GroupConfig
from apportion.group._history import HistoryType, history
from apportion.group._keys import PartitionId, decode_owner
from apportion.group._status import latest_plan, plan_tags
from apportion.model import resource_of
from apportion.store import Store

EPOCH_EVENTS = (HistoryType.CLAIM, HistoryType.RELEASE, HistoryType.LOST, HistoryType.FENCED, HistoryType.MIGRATED)


class Decision(msgspec.Struct, frozen=True):
    """Why the owner holds the partition: ``kind`` (the module docstring's table, or ``unowned``), the member it came
    ``source`` (JSON: ``from``; None unless it moved or was re-claimed), the ``round`` that gave it, and one line of
    ``text``."""

    kind: str
    source: str | None
    round: int | None
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "from": self.source, "round": self.round, "text": self.text}


class EpochEvent(msgspec.Struct, frozen=True):
    """A claim, release, lost, fenced or migrated event of the partition (a lost event gets the epoch its member
    held); ``reason`` and ``source`` as the event gave them (absent from the JSON when it had none)."""

    type: str  # a HistoryType's word, as stored
    member: str
    epoch: int | None
    time: float | None
    revision: int
    reason: str | None = None
    source: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type, "member": self.member, "epoch": self.epoch, "time": self.time, "revision": self.revision
        }  # fmt: skip
        if self.reason is not None:
            out["reason"] = self.reason
        if self.source is not None:
            out["source"] = self.source
        return out


class Explanation(msgspec.Struct, frozen=True):
    """``explain``'s answer: the partition's owner and epoch now, the ``round`` that gave it (None: unowned, or the
    history no longer reaches back), the ``decision`` that keeps it there and how it was ``acquired`` (the same
    unless a later round kept it), its ``epochs``, and in a ``high_availability`` group the seed's task ``tags`` of
    its holders in the latest plan (None in the other strategies)."""

    group: str
    partition: PartitionId
    owner: str | None
    epoch: int | None
    round: int | None
    decision: Decision
    acquired: Decision
    epochs: tuple[EpochEvent, ...]
    tags: Mapping[str, Mapping[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        """``{"group", "partition", "owner", "epoch", "round", "decision": {"kind", "from", "round", "text"},
        "acquired": {...}, "epochs": [{"type", "member", "epoch", "time", "revision"}...]}`` and ``tags``
        (``{member: {"role", "isLearner", "beingLearned", "isReady"}}``, ``plan_tags``) when there are."""
        out: dict[str, Any] = {
            "group": self.group,
            "partition": self.partition,
            "owner": self.owner,
            "epoch": self.epoch,
            "round": self.round,
            "epochs": [e.to_json() for e in self.epochs],
        }
        if self.tags is not None:
            out["tags"] = {mid: dict(flags) for mid, flags in self.tags.items()}
        out["decision"] = self.decision.to_json()
        out["acquired"] = self.acquired.to_json()
        return out


def explain(store: Store, group: str, partition: PartitionId) -> Explanation:
    """Why ``partition``'s owner holds it (``Explanation``); InvalidRequest for an unknown partition (``partition``:
    an int, or its digits, in a one-resource group; ``<resource>-<index>`` in a named one)."""
    config = GroupConfig.load(store, group)  # CorruptRecord naming the key (exit 2)
    keys = config.keys(group)
    try:
        partition = config.check_pid(partition)
    except InvalidRequest as exc:
        raise InvalidRequest("partition", f"{exc.reason} (group {group!r})") from None
    owner_kv = store.get(keys.owner(partition))
    owner: str | None = None
    epoch: int | None = None
    if owner_kv is not None:
        owner, epoch = decode_owner(owner_kv)
    events = history(store, group)
    rounds = [e for e in events if e.get("type") == HistoryType.ROUND_CLOSED]
    timeline = _epoch_history(events, partition)
    tags = _tags(store, group, partition) if config.strategy == "high_availability" else None

    def answer(decision: Decision, acquired: Decision | None = None, given_round: int | None = None) -> Explanation:
        acquired = decision if acquired is None else acquired
        return Explanation(group, partition, owner, epoch, given_round, decision, acquired, timeline, tags)

    if owner is None:
        return answer(Decision("unowned", None, None, "not owned by anyone now"))
    claim = next(
        (e for e in reversed(timeline) if e.type == HistoryType.CLAIM and e.member == owner and e.epoch == epoch), None
    )
    if claim is None:
        text = f"owned by {owner} at epoch {epoch}; the history no longer reaches back to its claim"
        return answer(Decision("unknown", None, None, text))
    given = _last_before(rounds, claim.revision)
    given_round = None if given is None else int(given["round"])
    acquired = _acquisition(partition, timeline, claim, given)
    later = [r for r in rounds if r["revision"] > claim.revision and owner in r.get("participants", [])]
    if later:
        last = int(later[-1]["round"])
        text = f"kept as previously owned in round {last} (acquired: {acquired.text})"
        return answer(Decision("kept", None, last, text), acquired, given_round)
    return answer(acquired, acquired, given_round)


def _tags(store: Store, group: str, partition: PartitionId) -> dict[str, dict[str, Any]]:
    """Seed 2's task tags of ``partition`` in the latest plan (``plan_tags``): each holder's role and flags."""
    found = latest_plan(store, group)
    if not found:
        return {}
    return next((holders for p, holders in plan_tags(found[0]).items() if str(p) == str(partition)), {})


def _epoch_history(events: list[dict[str, Any]], partition: PartitionId) -> tuple[EpochEvent, ...]:
    """claim/release/lost/fenced/migrated events of ``partition``; a lost event gets the epoch its member held."""
    held: dict[str, int] = {}
    out: list[EpochEvent] = []
    for e in events:
        if e.get("type") not in EPOCH_EVENTS or e.get("partition") != partition:
            continue
        member = str(e.get("member", ""))
        epoch = e.get("epoch")
        if e["type"] == HistoryType.CLAIM and epoch is not None:
            held[member] = int(epoch)
        if epoch is None:
            epoch = held.get(member)
        out.append(EpochEvent(e["type"], member, epoch, e.get("time"), e["revision"], e.get("reason"), e.get("source")))
    return tuple(out)


def _last_before(rows: list[dict[str, Any]], revision: int) -> dict[str, Any] | None:
    found = None
    for row in rows:
        if row["revision"] < revision:
            found = row
    return found


def _acquisition(
    partition: PartitionId, timeline: tuple[EpochEvent, ...], claim: EpochEvent, given: dict[str, Any] | None
) -> Decision:
    rnd = None if given is None else int(given["round"])
    where = "" if rnd is None else f" in round {rnd}"
    before = [e for e in timeline if e.revision < claim.revision]
    previous = next((e for e in reversed(before) if e.type in (HistoryType.CLAIM, HistoryType.MIGRATED)), None)
    if previous is None:
        if claim.epoch == 1:
            return Decision("filled", None, rnd, f"filled up to quota{where} (it was unowned)")
        text = f"claimed at epoch {claim.epoch}{where}; the history no longer shows the previous owner"
        return Decision("unknown", None, rnd, text)
    source = previous.member
    if source == claim.member:
        return Decision("reclaimed", source, rnd, f"re-claimed by {source}{where} after its own ownership ended")
    last = next((e for e in reversed(before) if e.member == source and e.revision > previous.revision), None)
    participants = [] if given is None else list(given.get("participants", []))
    if last is not None and last.type == HistoryType.RELEASE and source in participants:
        subscriptions = (given or {}).get("subscriptions", {}).get(source)
        resource = resource_of(partition)
        if resource is not None and subscriptions is not None and resource not in subscriptions:
            text = f"moved from {source} because {source} stopped subscribing to {resource}{where}"
            return Decision("moved", source, rnd, text)
        return Decision("moved", source, rnd, f"moved from {source} ({source} was over quota{where})")
    if last is None:
        how = "its lease expired"
    elif last.type == HistoryType.RELEASE:
        how = "it released and was not a participant"
    else:
        how = f"{last.type}: {'fenced' if last.reason is None else last.reason}"
    return Decision("moved", source, rnd, f"moved from {source} because {source} left{where} ({how})")


__all__ = ["Decision", "EpochEvent", "Explanation", "explain"]
