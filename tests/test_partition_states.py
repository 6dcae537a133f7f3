"""The partitions' state machine without servers: hypothesis drives `PartitionStates` through any
order of claims, fetches, batches, seeks, pauses, releases, session losses and records lost in the
fetcher, against a stand-in fetcher that keeps its positions the way Kafka's consumer does, and
checks the rules the module promises after every step."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from aio_cluster import NotOwnedError
from aio_cluster.kafka.records import Record
from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.member.delivery.claims import UNPOSITIONED, Batch, Claim
from aio_cluster.member.delivery.partitions import IllegalTransition, PartitionStates

PARTITIONS = 3
LOG_END = 40
"""Every partition's log holds offsets 0 .. LOG_END - 1."""

partitions = st.integers(0, PARTITIONS - 1).map(PartitionKey)
"""A partition's key (one topic: the keys are the partition ids)."""
P0, P1, P2, P3, P4 = (PartitionKey(p) for p in range(5))


@dataclass(frozen=True)
class FakeRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int = 0
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    serialized_key_size: int = -1
    serialized_value_size: int = 100


class FakeFetcher:
    """Positions per assigned partition, kept across everything but assign() and seek(), like
    aiokafka's consumer: it knows nothing of claims."""

    def __init__(self) -> None:
        self.positions: dict[PartitionKey, int] = {}

    def assign(self, positions: Mapping[PartitionKey, int]) -> None:
        self.positions = dict(positions)

    def seek(self, partition: PartitionKey, offset: int) -> None:
        assert partition in self.positions
        self.positions[partition] = offset

    def fetch(self, partitions: Collection[PartitionKey]) -> dict[PartitionKey, list[FakeRecord]]:
        fetched = {}
        for partition in partitions:
            if partition not in self.positions:
                continue
            start = self.positions[partition]
            end = min(start + 3, LOG_END)
            if start < end:
                fetched[partition] = [FakeRecord("t", partition, o) for o in range(start, end)]
                self.positions[partition] = end
        return fetched


@dataclass(eq=False)
class Body:
    """A batch handed out whose loop body still runs."""

    claim: Claim
    batch: Batch
    overtaken: bool = False
    """A seek, a loss or an abandon came while it ran: it must never commit."""
    abandoned: bool = False
    """The handover gave up waiting for it (the body itself may still run)."""
    partition: PartitionKey = field(init=False)

    def __post_init__(self) -> None:
        self.partition = self.claim.partition


class PartitionStatesMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.states = PartitionStates()
        self.fetcher = FakeFetcher()
        self.zookeeper: dict[int, int] = {}
        """The offsets stored, as ZooKeeper holds them."""
        self.paused: set[int] = set()
        """What the application paused and did not resume (and no release ended)."""
        self.next: dict[int, int] = {}
        """Owned, positioned partition -> the offset its next batch must start at."""
        self.bodies: list[Body] = []
        self.fetching: dict[PartitionKey, list[FakeRecord]] | None = None
        """A fetch sent to the broker whose answer has not come yet."""
        self.asked: list[PartitionKey] = []
        """The partitions that fetch asked for."""
        self.lost_at: dict[PartitionKey, int] = {}
        """Partition -> the offset from which the fetcher lost records (see `lose_records`)."""
        self.revoking: set[PartitionKey] = set()

    @initialize(owned=st.sets(partitions))
    def start(self, owned: set[int]) -> None:
        for partition in sorted(owned):
            self.claim(partition)
        self.position(0, store=False)

    def _live(self, partition: PartitionKey) -> list[Body]:
        return [b for b in self.bodies if b.partition == partition and not b.abandoned]

    # -- owning ------------------------------------------------------------------------------

    @rule(partition=partitions)
    def claim(self, partition: PartitionKey) -> None:
        if self.states.owned(partition):
            with pytest.raises(IllegalTransition):
                self.states.claimed(Claim(partition, 0, 0, None))
            return
        stored = self.zookeeper.get(partition)
        self.states.claimed(Claim(partition, 0, UNPOSITIONED if stored is None else stored, stored))
        if stored is not None:
            self.next[partition] = stored

    @rule(start=st.integers(0, 5), store=st.booleans())
    def position(self, start: int, store: bool) -> None:
        for partition in self.states.commits.unpositioned():
            assert self.states.commits.positioned(partition, start, earliest=0, store=store)
            self.next[partition] = start
            assert not self.states.commits.positioned(partition, start + 1), "positioned only once"

    @precondition(lambda self: self.fetching is None)
    @rule()
    def assign(self) -> None:
        # Under the fetch lock: never while a fetch is out.
        positions = self.states.assignment()
        if positions is not None:
            self.fetcher.assign(positions)
        assert self.states.assignment() is None, "the fetcher has what the claims say"
        for partition, offset in (positions or {}).items():
            claim = self.states.claims[partition]
            assert offset == (claim.buffered[-1][-1].offset + 1 if claim.buffered else offset)
            assert claim.buffered or offset == claim.next_offset, (
                "the fetcher reads a claim from its position, never from an earlier one's"
            )
        fetchable = set(self.states.fetchable())
        for partition, claim in self.states.claims.items():
            if (
                claim.next_offset != UNPOSITIONED
                and not claim.buffered
                and not claim.fenced
                and not self.states.suspended
                and partition not in self.paused | set(self.states.withheld)
                and not self.states.running([partition])
            ):
                assert partition in fetchable, "a claim the fetcher has is fetched"

    @rule(partition=partitions)
    def revoke_begin(self, partition: PartitionKey) -> None:
        if not self.states.owned(partition):
            with pytest.raises(NotOwnedError):
                self.states.drain([partition])
            return
        self.states.drain([partition])
        self.revoking.add(partition)

    @precondition(lambda self: self.revoking)
    @rule(data=st.data())
    def revoke_end(self, data: st.DataObject) -> None:
        partition = data.draw(st.sampled_from(sorted(self.revoking)))
        self.revoking.discard(partition)
        self._abandon(partition)
        self.store()
        claim = self.states.released(partition)
        self.states.hand_out([partition])
        if claim is not None:
            self.zookeeper_release(partition)

    @rule(partition=partitions)
    def give_up(self, partition: PartitionKey) -> None:
        """What close() does: no waiting for bodies, the offsets stored, the claim released."""
        if not self.states.owned(partition):
            return
        self.states.drain([partition])
        self._abandon(partition)
        self.store()
        assert self.states.released(partition) is not None
        self.zookeeper_release(partition)

    def _abandon(self, partition: PartitionKey) -> None:
        abandoned = self.states.abandoned([partition])
        for body in self._live(partition):
            if body.claim is self.states.claims.get(partition) or partition in abandoned:
                body.abandoned = body.overtaken = True
        assert not self.states.running([partition])

    def zookeeper_release(self, partition: PartitionKey) -> None:
        self.paused.discard(partition)
        self.next.pop(partition, None)
        self.revoking.discard(partition)

    @rule()
    def lose(self) -> None:
        self.states.lost()
        assert self.states.suspended
        for body in self.bodies:
            body.overtaken = True
        self.next.clear()
        self.revoking.clear()

    @rule(store=st.booleans())
    def expire_and_rejoin(self, store: bool) -> None:
        """The session expires and the rebalance on the new one gives back the same partitions
        (the usual case after a long pause of the process)."""
        owned = sorted(self.states.claims)
        self.lose()
        self.reconnect()
        for partition in owned:
            self.claim(partition)
        self.position(0, store=store)

    @rule()
    def reconnect(self) -> None:
        self.states.suspended = False

    @rule(assigned=st.sets(partitions))
    def expect(self, assigned: set[PartitionKey]) -> None:
        self.states.expected(assigned)
        self.paused &= assigned | set(self.states.claims)

    # -- fetching ----------------------------------------------------------------------------

    @precondition(lambda self: self.fetching is None)
    @rule(ahead=st.sampled_from([None, 150, 10_000]))
    def fetch_send(self, ahead: int | None = None) -> None:
        # ahead: as a member with a budget, fetching on while batches run or wait (up to
        # `ahead` bytes waiting: one FakeRecord, or many).
        for partition, offset in self.states.seeks().items():
            self.fetcher.seek(partition, offset)
        self.asked = self.states.fetchable(ahead=ahead)
        self.fetching = self.fetcher.fetch(self.asked)

    @precondition(lambda self: self.fetching is not None)
    @rule()
    def fetch_answer(self) -> None:
        assert self.fetching is not None
        for partition, records in self.fetching.items():
            self.states.fetched(partition, list(records))
        self.fetching = None
        for partition in self.asked:
            # As delivery does after each fetch: the position the fetcher reads from next.
            self.states.stepped_over(partition, self.fetcher.positions.get(partition))

    @precondition(lambda self: self.fetching is None)
    @rule(partition=partitions, count=st.integers(1, 3))
    def lose_records(self, partition: PartitionKey, count: int) -> None:
        """The fetcher hands records out that never arrive (a fetch cancelled half-way): its
        position moves on past them (to the log end, maybe). One loss at a time: the records
        lost before were handed out since."""
        start = self.fetcher.positions.get(partition)
        if start is None or start + count > LOG_END:
            return
        lost_at = self.lost_at.get(partition)
        if lost_at is not None and self.next.get(partition, lost_at) <= lost_at:
            return
        self.lost_at[partition] = start
        self.fetcher.positions[partition] = start + count

    # -- handing out -------------------------------------------------------------------------

    @rule(picks=st.integers(1, 3))
    def deliver(self, picks: int) -> None:
        """The usual way round: the fetcher gets its positions, fetches, and batches go out."""
        if self.fetching is None:
            self.assign()
            self.fetch_send()
        self.fetch_answer()
        for _ in range(picks):
            self.pick()

    @rule()
    def pick(self) -> None:
        picked = self.states.pick()
        if picked is None:
            return
        claim, batch = picked
        partition = claim.partition
        assert self.states.claims.get(partition) is claim
        assert not self.states.suspended
        assert not claim.fenced, "a fenced claim hands out nothing"
        assert partition not in self.paused, "a paused partition hands out nothing"
        assert partition not in self.revoking, "a partition being handed over hands out nothing"
        assert not self._live(partition), "one batch in flight per partition"
        assert [r.offset for r in batch] == list(range(batch[0].offset, batch[-1].offset + 1))
        assert batch[0].offset == self.next[partition], (
            "a batch starts at the partition's position: a claim made again starts at the stored "
            "offset, a seek where it asked, a failed body where it began"
        )
        self.next[partition] = batch[-1].offset + 1
        self.bodies.append(Body(claim, batch))

    @precondition(lambda self: self.bodies)
    @rule(data=st.data(), completed=st.booleans(), commit=st.booleans())
    def finish(self, data: st.DataObject, completed: bool, commit: bool) -> None:
        body = data.draw(st.sampled_from(self.bodies))
        self.bodies.remove(body)
        claim, batch = body.claim, body.batch
        before = claim.pending
        self.states.finished(claim, batch, completed=completed, commit=commit)
        current = self.states.claims.get(body.partition) is claim
        if body.overtaken or not current:
            assert claim.pending == before, "an overtaken batch never commits"
        elif completed and commit:
            assert claim.pending == batch[-1].offset + 1
        elif completed:
            assert claim.pending == before
        else:
            self.next[body.partition] = batch[0].offset

    @rule(partition=partitions, offset=st.integers(0, LOG_END))
    def seek(self, partition: PartitionKey, offset: int) -> None:
        if not self.states.owned(partition):
            with pytest.raises(NotOwnedError):
                self.states.sought(partition, offset)
            return
        self.states.sought(partition, offset)
        self.next[partition] = offset
        for body in self._live(partition):
            body.overtaken = True

    @rule(partition=partitions)
    def pause(self, partition: PartitionKey) -> None:
        if not self.states.owned(partition):
            with pytest.raises(NotOwnedError):
                self.states.pause([partition])
            return
        self.states.pause([partition])
        self.paused.add(partition)

    @rule(partition=partitions)
    def resume(self, partition: PartitionKey) -> None:
        self.states.resume([partition])
        self.paused.discard(partition)

    @rule(partition=partitions, past_end=st.booleans(), trail=st.booleans())
    def out_of_range(self, partition: PartitionKey, past_end: bool, trail: bool) -> None:
        """The broker no longer holds the partition's position (here: log 10 .. LOG_END)."""
        claim = self.states.claims.get(partition)
        if claim is None or claim.next_offset == UNPOSITIONED:
            return
        offset = LOG_END + 5 if past_end else 3
        running = self.states.running([partition])
        start = self.states.out_of_range(partition, offset, 10, LOG_END, trail=trail)
        assert start == (LOG_END if past_end and trail else 10)
        self.next[partition] = start
        if not running:
            assert claim.pending == start, "the new start is stored at once"

    @rule(partition=partitions)
    def fence(self, partition: PartitionKey) -> None:
        """A write found the claim gone: it stores nothing more; the rebalance drops it."""
        claim = self.states.claims.get(partition)
        if claim is None:
            return
        assert self.states.commits.fenced_off([claim]) == [partition]
        assert partition in self.states.fenced
        with pytest.raises(NotOwnedError):
            self.states.to_store(partition, 0)

    # -- storing -----------------------------------------------------------------------------

    @rule()
    def store(self) -> None:
        due = self.states.commits.unstored(map(PartitionKey, range(PARTITIONS)))
        written = {}
        for claim in due:
            assert claim.pending is not None
            assert self.states.claims.get(claim.partition) is claim, (
                "nothing is written for a partition not owned"
            )
            assert not claim.fenced, "nothing is written for a fenced claim"
            for body in self._live(claim.partition):
                if body.claim is claim and not body.overtaken:
                    assert claim.pending <= body.batch[0].offset, (
                        "an offset stored never passes a batch not finished"
                    )
            written[claim] = claim.pending
        self.zookeeper.update({claim.partition: offset for claim, offset in written.items()})
        held = self.states.commits.stored(written)
        assert held == {claim.partition: offset for claim, offset in written.items()}

    # -- what holds after every step ---------------------------------------------------------

    @invariant()
    def pauses_last_until_resumed(self) -> None:
        assert self.states.paused == sorted(self.paused), (
            "a pause lasts until resume(), across a loss and the claim that regains it"
        )

    @invariant()
    def claims_are_their_partitions(self) -> None:
        for partition, claim in self.states.claims.items():
            assert claim.partition == partition
            if claim.next_offset != UNPOSITIONED:
                assert self.next.get(partition, claim.next_offset) == claim.next_offset

    @invariant()
    def the_budget_counts_what_is_buffered(self) -> None:
        buffered = sum(len(b) for claim in self.states.claims.values() for b in claim.buffered)
        assert self.states.buffered_bytes == 99 * buffered, "each FakeRecord: 100 B, no key"

    @invariant()
    def nothing_fetchable_that_is_not_owned(self) -> None:
        assert set(self.states.fetchable()) <= set(self.states.claims)
        assert self.states.withheld <= set(self.states.claims)


PartitionStatesMachine.TestCase.settings = settings(
    max_examples=4 * settings().max_examples, stateful_step_count=80, deadline=None
)  # four times the profile's cases: 400, or 40 under the compat profile (tests/conftest.py)
test_partition_states = PartitionStatesMachine.TestCase


def test_a_pause_survives_a_loss_and_the_claim_that_regains_it() -> None:
    states = PartitionStates()
    states.claimed(Claim(P0, 0, 5, 5))
    states.pause([P0])
    states.lost()
    assert states.paused == [0]
    states.claimed(Claim(P0, 0, 5, 5))
    states.expected({P0})
    assert states.paused == [0]
    states.suspended = False
    assert states.assignment() == {0: 5}
    assert states.fetchable() == [], "still paused"


def test_a_partition_regained_restarts_at_its_stored_offset() -> None:
    states = PartitionStates()
    fetcher = FakeFetcher()
    states.claimed(Claim(P0, 0, 3, 3))
    positions = states.assignment()
    assert positions == {0: 3}
    fetcher.assign(positions)
    for records in fetcher.fetch([P0]).values():
        states.fetched(P0, list(records))
    picked = states.pick()
    assert picked is not None
    assert [r.offset for r in picked[1]] == [3, 4, 5]
    states.lost()
    states.suspended = False
    states.claimed(Claim(P0, 0, 3, 3))
    assert fetcher.fetch(states.fetchable()) == {}, "nothing fetched before the fetcher moves"
    positions = states.assignment()
    assert positions == {0: 3}, "the fetcher is moved back to the stored offset"


def _fed(states: PartitionStates, fetcher: FakeFetcher) -> None:
    positions = states.assignment()
    if positions is not None:
        fetcher.assign(positions)


def test_a_partition_consumed_to_its_end_moves_past_what_is_no_record() -> None:
    """The fetcher's position passed transaction markers after the last record: once that
    record's batch is committed, the claim goes on (and stores) from there."""
    states = PartitionStates()
    fetcher = FakeFetcher()
    states.claimed(Claim(P0, 0, 3, 3))
    _fed(states, fetcher)
    states.fetched(P0, [FakeRecord("t", 0, 3), FakeRecord("t", 0, 4)])
    assert not states.stepped_over(P0, 7), "records buffered: nothing moves"
    picked = states.pick()
    assert picked is not None
    claim, batch = picked
    assert not states.stepped_over(P0, 7), "a batch runs: nothing moves"
    assert states.finished(claim, batch, completed=True, commit=True, position=7)
    assert (claim.next_offset, claim.pending) == (7, 7)


def records(*offsets: int) -> list[Record]:
    return [FakeRecord("t", 0, offset) for offset in offsets]


def _three_and_four_committed() -> tuple[PartitionStates, tuple[Claim, Batch]]:
    """A claim of P0 from offset 3 whose records 3 and 4 were delivered and committed: the
    fetcher's next record is 5."""
    states = PartitionStates()
    states.claimed(Claim(P0, 0, 3, 3))
    _fed(states, FakeFetcher())
    assert states.fetched(P0, records(3, 4)) is None
    assert not states.stepped_over(P0, 5)
    picked = states.pick()
    assert picked is not None
    assert states.finished(*picked, completed=True, commit=True, position=5)
    return states, picked


def test_a_fetch_that_starts_past_the_fetchers_position_is_refused() -> None:
    """Records 5 and 6 were taken out of the fetcher and lost (a fetch cancelled half-way): the
    batch that starts at 7 is refused, and the partition read again from 5, so no commit passes
    records nobody received."""
    states, picked = _three_and_four_committed()
    assert states.fetched(P0, records(7, 8)) is None
    assert states.pick() is None, "refused"
    assert not states.stepped_over(P0, 9), "never past the gap"
    assert (picked[0].next_offset, picked[0].pending) == (5, 5)
    assert states.seeks() == {P0: 5}, "read again from the claim's next offset"
    assert states.fetched(P0, records(5, 6, 7)) == (5, 7), "the fetcher lost 5 and 6"
    again = states.pick()
    assert again is not None
    assert [r.offset for r in again[1]] == [5, 6, 7]


def test_a_fetcher_that_lost_the_last_records_is_not_followed_past_them() -> None:
    """Records 5 to 7, the last, were taken out of the fetcher and lost: a fetch returns nothing,
    and the fetcher says it reads from 8 next. The claim does not move there (its commit would
    pass them); the partition is read again from 5."""
    states, picked = _three_and_four_committed()
    assert not states.stepped_over(P0, 8), "no fetch of records reached 8"
    assert (picked[0].next_offset, picked[0].pending) == (5, 5)
    assert states.seeks() == {P0: 5}
    assert states.fetched(P0, records(5, 6, 7)) == (5, 8), "the fetcher lost 5 to 7"


def test_a_position_reached_after_records_is_followed_at_once() -> None:
    """A commit marker after the last record, in the same fetch: the claim moves past it once
    the batch is committed, without reading again."""
    states = PartitionStates()
    fetcher = FakeFetcher()
    states.claimed(Claim(P0, 0, 3, 3))
    _fed(states, fetcher)
    assert states.fetched(P0, records(3, 4)) is None
    assert not states.stepped_over(P0, 6), "records buffered"
    picked = states.pick()
    assert picked is not None
    assert states.finished(*picked, completed=True, commit=True, position=6)
    assert (picked[0].next_offset, picked[0].pending) == (6, 6)
    assert states.seeks() == {}


def test_a_gap_met_again_from_the_same_position_is_what_the_broker_holds() -> None:
    """Offsets 5 and 6 hold no record (compaction, or a transaction marker the fetcher had not
    read yet): the batch from 7 is refused once, then taken when the fetch from 5 returns it
    again; reading goes on."""
    states = PartitionStates()
    fetcher = FakeFetcher()
    states.claimed(Claim(P0, 0, 5, 5))
    _fed(states, fetcher)
    assert states.fetched(P0, records(7, 8)) is None
    assert states.seeks() == {P0: 5}, "refused: read again from 5"
    assert states.fetched(P0, records(7, 8)) is None, "the same gap: nothing was lost"
    picked = states.pick()
    assert picked is not None
    assert states.finished(*picked, completed=True, commit=True, position=9)
    assert (picked[0].next_offset, picked[0].pending) == (9, 9)
    assert states.fetched(P0, records(9)) is None


def test_with_batches_buffered_a_gap_is_read_again_from_the_first_not_handed_out() -> None:
    """A member with a budget fetches on while batches wait: a gap after them drops them too,
    and the partition is read again from its first record not handed out."""
    states = PartitionStates()
    fetcher = FakeFetcher()
    states.claimed(Claim(P0, 0, 3, 3))
    _fed(states, fetcher)
    assert states.fetched(P0, records(3, 4)) is None
    assert not states.stepped_over(P0, 5)
    assert states.fetched(P0, records(8)) is None
    assert states.buffered_bytes == 0, "refused, and what was buffered dropped"
    assert states.seeks() == {P0: 3}
    assert states.fetched(P0, records(3, 4)) is None
    assert not states.stepped_over(P0, 5), "records buffered"
    assert states.fetched(P0, records(5, 6, 7, 8)) == (5, 8), "the fetcher lost 5 to 7"


def test_an_uncommitted_partition_moves_on_without_storing() -> None:
    states = PartitionStates()
    fetcher = FakeFetcher()
    states.claimed(Claim(P0, 0, 3, 3))
    _fed(states, fetcher)
    states.fetched(P0, [FakeRecord("t", 0, 3)])
    picked = states.pick()
    assert picked is not None
    states.finished(*picked, completed=True, commit=False, position=6)
    assert (picked[0].next_offset, picked[0].pending) == (6, None), (
        "a record before was not committed: the position is not stored"
    )


def test_a_claim_made_anew_never_moves_to_the_old_claims_position() -> None:
    states = PartitionStates()
    fetcher = FakeFetcher()
    states.claimed(Claim(P0, 0, 3, 3))
    _fed(states, fetcher)
    states.lost()
    states.suspended = False
    states.claimed(Claim(P0, 0, 3, 3))
    assert not states.stepped_over(P0, 30), "the fetcher's position belongs to the lost claim"
    assert states.claims[P0].next_offset == 3
    states.sought(P0, 8)
    assert states.seeks() == {0: 8}
    assert states.assignment() is None, "the seek set the fetcher's position from this claim"
    assert not states.stepped_over(P0, 9), "no fetch of records reached 9: read again first"
    assert states.seeks() == {0: 8}
    assert states.stepped_over(P0, 9), "the same step again: the broker holds nothing there"


@pytest.mark.parametrize(
    ("offset", "trail", "start"), [(50, False, 10), (50, True, 40), (3, True, 10)]
)
def test_out_of_range_restarts_where_none_is_stored_or_at_the_earliest(
    offset: int, trail: bool, start: int
) -> None:
    states = PartitionStates()
    states.claimed(Claim(P0, 0, offset, offset))
    assert states.out_of_range(P0, offset, 10, 40, trail=trail) == start
    assert (states.claims[P0].next_offset, states.claims[P0].pending) == (start, start)
    assert states.out_of_range(P1, offset, 10, 40, trail=trail) is None, "not owned"


def test_a_fenced_claim_stores_nothing_more() -> None:
    states = PartitionStates()
    claim = Claim(P0, 0, 3, 3)
    states.claimed(claim)
    states.to_store(P0, 5)
    assert states.commits.fenced_off([claim]) == [0]
    assert states.fenced == [0]
    assert states.commits.unstored([P0]) == []
    with pytest.raises(NotOwnedError):
        states.to_store(P0, 6)
    assert states.released(P0) is claim, "the rebalance drops it"
    assert states.fenced == []


def test_a_fenced_claim_hands_out_nothing_more() -> None:
    states = PartitionStates()
    claim = Claim(P0, 0, 0, 0)
    states.claimed(claim)
    assert states.assignment() == {0: 0}
    states.fetched(P0, [FakeRecord("t", 0, offset) for offset in range(3)])
    assert states.commits.fenced_off([claim]) == [0]
    assert states.pick() is None, "its buffered records stay where they are"
    assert states.fetchable() == [], "and nothing more is fetched for it"


def test_an_abandoned_batch_is_read_again_from_its_first_unfinished_record() -> None:
    """A batch given up after its records 0 and 1 finished: if the partition stays (the store
    that would release it failed), the next batch starts at 2, never past the gap."""
    states = PartitionStates()
    claim = Claim(P0, 0, 0, 0)
    states.claimed(claim)
    states.assignment()
    states.fetched(P0, [FakeRecord("t", 0, offset) for offset in range(5)])
    picked = states.pick()
    assert picked is not None
    _, batch = picked
    states.progressed(claim, batch, 2)
    assert states.abandoned([P0]) == {0: 2}
    assert claim.pending == 2, "the finished prefix is kept"
    assert states.seeks() == {0: 2}, "the fetcher reads again from the first unfinished"
    states.fetched(P0, [FakeRecord("t", 0, offset) for offset in range(2, 5)])
    again = states.pick()
    assert again is not None
    assert [r.offset for r in again[1]] == [2, 3, 4]
    states.finished(claim, batch, completed=True, commit=True)
    assert claim.pending == 2, "the abandoned batch never commits"


def test_migrate_takes_kafkas_offset_only_when_further_and_unmoved() -> None:
    states = PartitionStates()
    states.claimed(Claim(P0, 0, UNPOSITIONED, None))
    states.claimed(Claim(P1, 0, 20, 20))
    states.claimed(Claim(P2, 0, 20, 20))
    states.claimed(Claim(P3, 0, 20, 20))
    states.sought(P3, 25)
    assert states.commits.migrated(P0, 40)
    assert states.commits.migrated(P1, 30)
    assert not states.commits.migrated(P2, 10), "behind the stored offset"
    assert not states.commits.migrated(P3, 30), "a seek came first"
    assert not states.commits.migrated(P4, 30), "not owned"
    claims = states.claims
    assert [(c.next_offset, c.pending) for c in claims.values()] == [
        (40, 40),
        (30, 30),
        (20, None),
        (25, None),
    ]


def test_a_raw_partition_id_is_no_key() -> None:
    """A type checker keeps Kafka's partition ids apart from a member's keys: mypy strict warns
    of an unused ignore, so this line fails the type check the day a plain int is taken where a
    key is meant."""
    states = PartitionStates()
    assert not states.owned(0)  # type: ignore[arg-type]
    assert not states.owned(PartitionKey(0))


def test_a_running_batch_grows_by_the_next_one_and_stays_one_batch() -> None:
    """`pick(grows)`: the running batch of a partition whose processor asks for more takes the
    next buffered batch in, in place; it commits, and is read again, as one batch."""
    states = PartitionStates()
    states.claimed(Claim(P0, 0, 3, 3))
    _fed(states, FakeFetcher())
    assert states.fetched(P0, records(3, 4)) is None
    assert not states.stepped_over(P0, 5)
    claim, batch = states.pick() or (None, [])
    assert states.fetched(P0, records(5, 6)) is None
    assert not states.stepped_over(P0, 7)
    assert states.fetchable() == [], "without growth, nothing more is fetched while it runs"
    assert states.pick(lambda partition: False) is None
    assert states.fetchable(grows=lambda partition: True) == [], "one batch buffered is enough"
    grown = states.pick(lambda partition: True)
    assert grown is not None
    assert grown[1] is batch, "the running batch itself"
    assert [r.offset for r in batch] == [3, 4, 5, 6]
    assert states.fetchable(grows=lambda partition: True) == [P0]
    assert claim is not None
    states.progressed(claim, batch, 5)
    assert claim.pending == 5
    assert states.finished(claim, batch, completed=False, commit=False)
    assert (claim.next_offset, states.seeks()) == (5, {P0: 5}), "read again from 5"


def test_a_batch_grows_only_while_nothing_voids_withholds_or_pauses_it() -> None:
    grows: Callable[[PartitionKey], bool] = lambda partition: True  # noqa: E731
    for stop in ("sought", "withheld", "paused"):
        states = PartitionStates()
        states.claimed(Claim(P0, 0, 3, 3))
        _fed(states, FakeFetcher())
        assert states.fetched(P0, records(3, 4)) is None
        assert not states.stepped_over(P0, 5)
        assert states.pick() is not None
        assert states.fetched(P0, records(5, 6)) is None
        assert not states.stepped_over(P0, 7)
        if stop == "sought":
            states.sought(P0, 3)
            states.seeks()
        elif stop == "withheld":
            states.withhold([P0])
        else:
            states.pause([P0])
        assert states.pick(grows) is None, stop


def test_exactly_once_a_completed_offset_waits_for_its_transaction_before_it_is_stored() -> None:
    """Transactional states: what a batch or a prefix completes is ``ready``, never pending,
    until `committed()` says Kafka committed it (a prefix told again as far as it got already,
    as `Delivery.abandon()` asks, is not ready again); a seek or a loss drops it."""
    states = PartitionStates(transactional=True)
    claim = Claim(P0, 0, 0, 0)
    states.claimed(claim)
    _fed(states, FakeFetcher())
    states.fetched(P0, records(0, 1, 2, 3))
    picked = states.pick()
    assert picked is not None
    states.progressed(claim, picked[1], 2)
    assert (claim.ready, claim.pending) == (2, None), "a prefix is ready, not pending"
    assert states.commits.unstored([P0]) == [], "nothing for ZooKeeper before Kafka committed"
    assert states.commits.committed(claim, 2)
    assert (claim.ready, claim.pending) == (None, 2)
    states.progressed(claim, picked[1], 2)
    assert (claim.ready, claim.pending) == (None, 2), "told again: no second transaction"
    assert states.finished(*picked, completed=True, commit=True)
    assert (claim.ready, claim.pending) == (4, 2)
    states.to_store(P0, 3)
    assert (claim.ready, claim.pending) == (3, 2), "commit() goes through a transaction too"
    states.sought(P0, 1)
    assert claim.ready is None
    assert not states.commits.committed(Claim(P0, 0, 0, 0), 9), (
        "another claim's commit changes nothing"
    )
    states.to_store(P0, 5)
    states.lost()
    assert claim.ready is None
