"""Claims at size (issue 27): a claim whose answer was lost is adopted or given back, claims wait for the owner
record's deletion instead of polling, and claimed partitions are applied chunk by chunk."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from apportion.errors import StoreUnavailable
from apportion.group import GroupConfig
from apportion.group._ownership import CHUNK
from apportion.store import Compare, MemoryStore, Op, Put, TxnResult
from tests.group.harness import Harness


class LosingStore(MemoryStore):
    """A memory store that applies the next ``lose`` successful claims and then loses their answers, as a network
    that drops the reply of a write that reached the store does (the outcome is unknown to the caller)."""

    lose = 0
    claim_txns = 0
    on_lost_answer: Callable[[], None] | None = None

    def txn(self, compares: Sequence[Compare], on_success: Sequence[Op], on_failure: Sequence[Op] = ()) -> TxnResult:
        result = super().txn(compares, on_success, on_failure)
        if any(isinstance(op, Put) and "/owner/" in op.key for op in on_success):
            self.claim_txns += 1
            if result.succeeded and self.lose > 0:
                self.lose -= 1
                if self.on_lost_answer is not None:
                    self.on_lost_answer()
                raise StoreUnavailable("no answer (the write's outcome is unknown)")
        return result


def losing_harness(config: GroupConfig) -> tuple[Harness, LosingStore]:
    h = Harness(config)
    store = LosingStore(h.store.url + "-losing", clock=h.clock)
    h.store = store
    return h, store


def assigned(h: Harness, member: str) -> list[int]:
    return [p for kind, mid, parts, _ in h.log.calls if kind == "assigned" and mid == member for p in parts]


def test_a_claim_whose_answer_was_lost_is_adopted_not_held_unused() -> None:
    h, store = losing_harness(GroupConfig(partitions=12, settle_s=0.5, min_interval_s=1.0, ttl_s=3.0))
    a = h.add("a")
    store.lose = 1
    h.run(3.0)
    assert a.owned() == list(range(12))
    assert sorted(assigned(h, "a")) == list(range(12)), "each partition assigned once"
    assert not [c for c in h.log.calls if c[0] == "lost"]
    for p in range(12):  # adopted with the epoch the lost claim wrote: no second claim
        assert a.lease(p).epoch == 1


def test_a_claim_whose_answer_was_lost_and_is_no_longer_wanted_is_given_back() -> None:
    """The member is frozen after the lost answer while a plan without it gives everything to b: its owner records
    (bound to its live lease) would keep b from claiming anything for as long as it lives; it gives them back."""
    h, store = losing_harness(GroupConfig(partitions=12, settle_s=0.5, min_interval_s=1.0, ttl_s=6.0))
    a = h.add("a")
    store.lose = 1
    store.on_lost_answer = lambda: h.frozen.add("a")  # frozen right after the claim whose answer it never got
    h.run(1.0)
    assert h.members["a"].owned() == []
    assert store.claim_txns == 1
    h.add("b")
    h.run(1.8)  # b opens a round, closes it without the silent a, wants all 12; a's records stop it
    assert h.members["b"].owned() == []
    lease = a.store_lease
    h.frozen.clear()  # within its belief window (ttl 6 s): a keeps its lease, and with it the records
    h.run(8.0)
    assert a.store_lease is lease, "a's lease lapsed: the records went with it, nothing was given back"
    owners = h.owners()
    assert sorted(owners) == list(range(12)), f"unowned: {sorted(set(range(12)) - set(owners))}"
    assert sorted(len(h.members[m].owned()) for m in "ab") == [6, 6]
    assert not [c for c in h.log.calls if c[0] == "lost"]


def test_claims_wait_for_the_owner_records_deletion_instead_of_polling() -> None:
    """A partition held by a member frozen inside its revocation is claimed once after the record goes, not every
    claim_retry_s (at 16,384 partitions the polling was most of the store's load)."""
    h, store = losing_harness(GroupConfig(partitions=CHUNK * 2, settle_s=0.5, min_interval_s=1.0, ttl_s=3.0))
    h.add("a")
    h.run(2.0)
    assert len(h.members["a"].owned()) == CHUNK * 2
    h.frozen.add("a")  # a will neither renew nor release: its records go when its lease expires (3 s)
    h.add("b")
    before = store.claim_txns
    h.run(2.0)
    waiting = store.claim_txns - before
    assert waiting <= 3, f"{waiting} claim transactions while every partition was held"
    h.run(4.0)
    assert len(h.members["b"].owned()) == CHUNK * 2


def test_claimed_chunks_are_applied_as_they_land() -> None:
    """More partitions than one claim transaction holds: on_assigned runs once per chunk, each chunk's partitions
    believed before the next chunk's transaction."""
    h, _ = losing_harness(GroupConfig(partitions=CHUNK * 3, settle_s=0.5, min_interval_s=1.0, ttl_s=3.0))
    h.add("a")
    h.run(2.0)
    calls = [parts for kind, mid, parts, _ in h.log.calls if kind == "assigned"]
    assert [len(c) for c in calls] == [CHUNK] * 3
    assert sorted(p for c in calls for p in c) == list(range(CHUNK * 3))
