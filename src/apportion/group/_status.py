"""A read-only snapshot of a group for operators: members, partitions (owner, epoch, checkpoint) and the round."""

from __future__ import annotations

from typing import Any

from apportion.group._keys import Keys, decode
from apportion.store import Store


def group_status(store: Store, group: str) -> dict[str, Any]:
    """``{"members": {id: {"alive", "partitions", ...}}, "partitions": {p: {"owner", "epoch", "checkpoint"}},
    "round": R, "plan_round": R', "resource": {...}, "table": {p: {owner, target, state}}}`` plus ``coordinator``
    and ``replicas`` when those modes run; partition numbers are strings (JSON object keys).

    An owner record is ``"lapsing": true`` when it outlives its owner's belief: the member it names is gone or has
    registered again under a new lease (it gave up that ownership and the record waits for its old lease to be
    revoked or to expire). Nobody processes such a partition; it is not counted in the member's ``partitions``.

    Stateful groups (seed 2) also list, per partition, its ``standby`` and ``learners`` holders of the latest plan
    with the lag each reported in that round (``{member: lag or None}``)."""
    keys = Keys(group)
    kvs = store.range(keys.prefix)
    resource: dict[str, Any] | None = None
    members: dict[str, dict[str, Any]] = {}
    owners: dict[int, dict[str, Any]] = {}
    owner_leases: dict[int, int] = {}
    member_leases: dict[str, int] = {}
    epochs: dict[int, int] = {}
    commits: dict[int, dict[str, Any]] = {}
    current_round = 0
    latest_round = 0
    plans: dict[int, dict[str, Any]] = {}
    records: dict[int, dict[str, dict[str, Any]]] = {}  # round -> member -> participation record
    table: dict[str, dict[str, Any]] = {}
    extra: dict[str, Any] = {}
    prefix = keys.prefix
    for kv in kvs:
        rest = kv.key[len(prefix) :]
        kind, _, name = rest.partition("/")
        if rest == "resource":
            resource = decode(kv.value)
        elif rest == "current":
            current_round = kv.mod_revision
        elif rest == "latest":
            latest_round = int(decode(kv.value)["round"])
        elif kind == "members":
            info = decode(kv.value)
            members[name] = {"alive": True, "partitions": [], "capacity": info.get("capacity")}
            member_leases[name] = kv.lease
        elif kind == "owner" and name.isdigit():
            owners[int(name)] = decode(kv.value)
            owner_leases[int(name)] = kv.lease
        elif kind == "epoch" and name.isdigit():
            epochs[int(name)] = int(kv.value)
        elif kind == "commit" and name.isdigit():
            commits[int(name)] = decode(kv.value)
        elif kind == "table" and name.isdigit():
            table[name] = decode(kv.value)
        elif rest in ("coordinator", "replicas"):
            extra[rest] = decode(kv.value)
        elif kind == "round" and name.endswith("/plan"):
            plans[int(name.split("/", 1)[0])] = decode(kv.value)
        elif kind == "round" and name.count("/") == 1 and not name.endswith("/joined"):
            head, _, mid = name.partition("/")
            if head.isdigit():
                records.setdefault(int(head), {})[mid] = decode(kv.value)
    n = int(resource["partitions"]) if resource else max([*owners, *epochs, *commits, -1]) + 1
    partitions: dict[str, dict[str, Any]] = {}
    for p in range(n):
        owner = owners.get(p)
        commit = commits.get(p)
        partitions[str(p)] = {
            "owner": None if owner is None else owner["member"],
            "epoch": owner["epoch"] if owner is not None else epochs.get(p),
            "checkpoint": None if commit is None else commit["checkpoint"],
        }
        if owner is not None:
            lapsing = member_leases.get(owner["member"]) != owner_leases[p]
            partitions[str(p)]["lapsing"] = lapsing
            entry = members.setdefault(owner["member"], {"alive": False, "partitions": []})
            entry.setdefault("lapsing" if lapsing else "partitions", []).append(str(p))
    plan = plans.get(latest_round)
    if plan is not None:
        for mid in plan["participants"]:
            members.setdefault(mid, {"alive": False, "partitions": []})
        lags = {mid: record.get("lag") or {} for mid, record in records.get(latest_round, {}).items()}
        for kind in ("standby", "learners"):
            for mid, parts in sorted(plan.get(kind, {}).items()):
                for p in parts:
                    if str(p) in partitions:
                        holders = partitions[str(p)].setdefault(kind, {})
                        holders[mid] = lags.get(mid, {}).get(str(p))
    return {
        "members": dict(sorted(members.items())),
        "partitions": partitions,
        "round": current_round,
        "plan_round": latest_round,
        "resource": resource,
        "table": dict(sorted(table.items(), key=lambda item: int(item[0]))),
        **extra,
    }


__all__ = ["group_status"]
