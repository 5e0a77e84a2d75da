"""The moves a plan makes that its strategy cannot see: the partitions of a holder that is gone (issue 45.5).

A strategy counts as a move a partition that a member of its request owned and another member gets
(``assign._core``: ``stats.moved``); a member that left or crashed is not in the request, so its partitions come in
unowned and their new placement counted as 0 moves, while they did change hands (``_sticky``: "one leave moves
exactly the leaver's partitions"). The group layer knows who held them — the previous round's plan (rounds mode),
the partition table (coordinator mode) — and adds them here to both the plan's moves and its lower bound: any plan
must move every partition of a holder that is gone. A static group has no such moves: a stopped ordinal's block
waits for it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any


def departed_moves(
    previous: Mapping[str, Iterable[Any]], present: Collection[str], held: Collection[Any], placed: Collection[Any]
) -> int:
    """How many partitions ``previous`` (holder -> partitions) gave a holder not in ``present`` that someone now
    holds (``placed``), leaving out those a present member reported holding (``held``: the strategy counted them
    already, from their ``owned``)."""
    return sum(
        1 for holder, parts in previous.items() if holder not in present for p in parts if p in placed and p not in held
    )


__all__ = ["departed_moves"]
