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

from typing import Any

from apportion.errors import InvalidRequest
from apportion.group._config import GroupConfig
from apportion.group._history import history
from apportion.group._keys import PartitionId, decode_owner
from apportion.group._status import latest_plan, plan_tags
from apportion.model import resource_of
from apportion.store import Store

EPOCH_EVENTS = ("claim", "release", "lost", "fenced", "migrated")


def explain(store: Store, group: str, partition: PartitionId) -> dict[str, Any]:
    """``{"partition", "owner", "epoch", "round", "decision": {"kind", "from", "round", "text"}, "acquired": {...},
    "epochs": [{"type", "member", "epoch", "time", "revision"}...]}``, and in a ``high_availability`` group the
    seed's task ``tags`` of the partition's holders in the latest plan (``{member: {"role", "isLearner",
    "beingLearned", "isReady"}}``, ``plan_tags``); InvalidRequest for an unknown partition
    (``partition``: an int, or its digits, in a one-resource group; ``<resource>-<index>`` in a named one)."""
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
    rounds = [e for e in events if e.get("type") == "round_closed"]
    timeline = _epoch_history(events, partition)
    out: dict[str, Any] = {
        "group": group,
        "partition": partition,
        "owner": owner,
        "epoch": epoch,
        "round": None,
        "epochs": timeline,
    }
    if config.strategy == "high_availability":
        out["tags"] = _tags(store, group, partition)
    if owner is None:
        out["decision"] = out["acquired"] = _decision("unowned", None, None, "not owned by anyone now")
        return out
    claim = next(
        (e for e in reversed(timeline) if e["type"] == "claim" and e["member"] == owner and e["epoch"] == epoch), None
    )
    if claim is None:
        text = f"owned by {owner} at epoch {epoch}; the history no longer reaches back to its claim"
        out["decision"] = out["acquired"] = _decision("unknown", None, None, text)
        return out
    given = _last_before(rounds, claim["revision"])
    given_round = None if given is None else int(given["round"])
    out["round"] = given_round
    acquired = _acquisition(partition, timeline, claim, given)
    out["acquired"] = acquired
    later = [r for r in rounds if r["revision"] > claim["revision"] and owner in r.get("participants", [])]
    if later:
        last = int(later[-1]["round"])
        text = f"kept as previously owned in round {last} (acquired: {acquired['text']})"
        out["decision"] = _decision("kept", None, last, text)
    else:
        out["decision"] = acquired
    return out


def _tags(store: Store, group: str, partition: PartitionId) -> dict[str, dict[str, Any]]:
    """Seed 2's task tags of ``partition`` in the latest plan (``plan_tags``): each holder's role and flags."""
    found = latest_plan(store, group)
    if not found:
        return {}
    return next((holders for p, holders in plan_tags(found[0]).items() if str(p) == str(partition)), {})


def _epoch_history(events: list[dict[str, Any]], partition: PartitionId) -> list[dict[str, Any]]:
    """claim/release/lost/fenced/migrated events of ``partition``; a lost event gets the epoch its member held."""
    held: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for e in events:
        if e.get("type") not in EPOCH_EVENTS or e.get("partition") != partition:
            continue
        member = str(e.get("member", ""))
        epoch = e.get("epoch")
        if e["type"] == "claim" and epoch is not None:
            held[member] = int(epoch)
        if epoch is None:
            epoch = held.get(member)
        row = {"type": e["type"], "member": member, "epoch": epoch, "time": e.get("time"), "revision": e["revision"]}
        if "reason" in e:
            row["reason"] = e["reason"]
        if "source" in e:
            row["source"] = e["source"]
        out.append(row)
    return out


def _last_before(rows: list[dict[str, Any]], revision: int) -> dict[str, Any] | None:
    found = None
    for row in rows:
        if row["revision"] < revision:
            found = row
    return found


def _acquisition(
    partition: PartitionId, timeline: list[dict[str, Any]], claim: dict[str, Any], given: dict[str, Any] | None
) -> dict[str, Any]:
    rnd = None if given is None else int(given["round"])
    where = "" if rnd is None else f" in round {rnd}"
    before = [e for e in timeline if e["revision"] < claim["revision"]]
    previous = next((e for e in reversed(before) if e["type"] in ("claim", "migrated")), None)
    if previous is None:
        if claim["epoch"] == 1:
            return _decision("filled", None, rnd, f"filled up to quota{where} (it was unowned)")
        text = f"claimed at epoch {claim['epoch']}{where}; the history no longer shows the previous owner"
        return _decision("unknown", None, rnd, text)
    source = str(previous["member"])
    if source == claim["member"]:
        return _decision("reclaimed", source, rnd, f"re-claimed by {source}{where} after its own ownership ended")
    last = next((e for e in reversed(before) if e["member"] == source and e["revision"] > previous["revision"]), None)
    participants = [] if given is None else list(given.get("participants", []))
    if last is not None and last["type"] == "release" and source in participants:
        subscriptions = (given or {}).get("subscriptions", {}).get(source)
        resource = resource_of(partition)
        if resource is not None and subscriptions is not None and resource not in subscriptions:
            text = f"moved from {source} because {source} stopped subscribing to {resource}{where}"
            return _decision("moved", source, rnd, text)
        return _decision("moved", source, rnd, f"moved from {source} ({source} was over quota{where})")
    if last is None:
        how = "its lease expired"
    elif last["type"] == "release":
        how = "it released and was not a participant"
    else:
        how = f"{last['type']}: {last.get('reason', 'fenced')}"
    return _decision("moved", source, rnd, f"moved from {source} because {source} left{where} ({how})")


def _decision(kind: str, source: str | None, rnd: int | None, text: str) -> dict[str, Any]:
    return {"kind": kind, "from": source, "round": rnd, "text": text}


__all__ = ["explain"]
