"""A naive sticky baseline: greedy, one Python step per partition (what one writes first)."""

from __future__ import annotations


def naive_sticky(partitions: list[str], members: list[str], owned: dict[str, list[str]]) -> dict[str, list[str]]:
    """Keep owned partitions up to ceil(P/N), then give each free partition to the least loaded member."""
    members = sorted(members)
    if not members:
        return {}
    cap = -(-len(partitions) // len(members))
    out: dict[str, list[str]] = {m: [] for m in members}
    owner: dict[str, str] = {}
    for m in members:
        for p in owned.get(m, []):
            if p not in owner and len(out[m]) < cap:
                owner[p] = m
                out[m].append(p)
    for p in partitions:
        if p not in owner:
            m = min(members, key=lambda x: len(out[x])) if len(members) < 64 else _least(out)
            owner[p] = m
            out[m].append(p)
    return out


def _least(out: dict[str, list[str]]) -> str:
    best = None
    for m, ps in out.items():
        if best is None or len(ps) < len(out[best]):
            best = m
    assert best is not None
    return best
