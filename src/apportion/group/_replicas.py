"""The standby and learner replicas a rounds member holds (seed 2, ``high_availability``; ``_rounds``' module doc,
"Replicas").

``Replicas`` keeps what the applied plan gives this member besides its partitions: standby replicas and learners
(warm-up replicas), to which it adds, as learners, the partitions the plan gives it that it has not claimed yet (their
previous owner is finishing its batch: they keep warming up until it releases them). The member's application hears
each change through ``on_replicas(standby, learners)``, and reports in each participation record the replicas it
holds with their lags (``replica_lags()``), which the next plan reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Set
from typing import Any

from apportion.group._context import MemberContext
from apportion.group._keys import PartitionId, sorted_pids
from apportion.group._trace import TraceKind

ReplicaLags = Callable[[], Mapping[Any, int]]
"""partition id -> lag of the replica (standby or learner) this member holds of it; called when joining a round."""
ReplicasCallback = Callable[[list[Any], list[Any]], None]
"""``on_replicas(standby, learners)``: the replicas the current plan gives this member (called when they change)."""


class Replicas:
    """The replicas of one rounds member: the plan's, and those it has told its application of."""

    def __init__(self, ctx: MemberContext, lags: ReplicaLags | None, on_replicas: ReplicasCallback | None) -> None:
        self._ctx = ctx
        self._lags = lags
        self._on_replicas = on_replicas
        self.standby: tuple[PartitionId, ...] = ()
        self.learners: tuple[PartitionId, ...] = ()
        self._plan_standby: tuple[PartitionId, ...] = ()
        self._plan_learners: frozenset[PartitionId] = frozenset()

    def planned(self, standby: Iterable[PartitionId], learners: Iterable[PartitionId]) -> None:
        """The replicas the plan just applied gives this member."""
        self._plan_standby = tuple(standby)
        self._plan_learners = frozenset(learners)

    def refresh(self, claiming: Set[PartitionId]) -> None:
        """The plan's replicas, plus (as learners) the partitions given to me but not claimed yet (``claiming``):
        their previous owner is finishing its batch, and they keep warming up until it releases them."""
        standby, learners = self._plan_standby, tuple(sorted_pids(self._plan_learners | claiming))
        if (standby, learners) == (self.standby, self.learners):
            return
        self.standby, self.learners = standby, learners
        self._ctx.trace(TraceKind.REPLICAS, standby=list(standby), learners=list(learners))
        if self._on_replicas is not None:
            self._on_replicas(list(standby), list(learners))

    def report(self, assignment: Set[PartitionId]) -> dict[str, Any]:
        """What a participation record says of the replicas held (none without ``replica_lags``): the standby
        replicas and learners with a lag, and each lag (the partitions of ``assignment`` are not replicas)."""
        if self._lags is None:
            return {}
        parse = self._ctx.config.parse_pid
        given = ((parse(p, "replica_lags"), lag) for p, lag in self._lags().items())
        lags = {p: int(lag) for p, lag in given if p not in assignment}
        return {
            "standby": [p for p in self.standby if p in lags],
            "learners": [p for p in self.learners if p in lags],
            "lag": {str(p): lag for p, lag in sorted(lags.items())},
        }


__all__ = ["ReplicaLags", "Replicas", "ReplicasCallback"]
