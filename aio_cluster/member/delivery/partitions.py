"""PartitionStates: the one owner of every partition's state in a member, without I/O.

Each partition this member deals with has a claim (`aio_cluster.member.delivery.claims.Claim`: its
owner node, position, buffered batches, pending and stored offsets) and a place in a few sets:
withheld (being handed over, or not yet announced), paused, in flight (a batch whose body runs),
voided (a running batch that must not be committed). Only this class changes them, with its three
parts: the fetcher's side of each partition (`aio_cluster.member.delivery.feed`: which claim the
fetcher's position was set for, the seeks it owes, the gaps it met), each claim's start and its
offsets on the way to ZooKeeper (`aio_cluster.member.delivery.commits`), and what the listener was
told (`aio_cluster.member.delivery.announcements`). Its methods are the transitions; each checks
that it is legal and returns what the driver must do. The drivers (`delivery` for the fetcher,
`offsets` for ZooKeeper's offset nodes, `mirror` for Kafka, `handover` for the listener, `rebalance`
for the owner nodes) ask it and tell it, and never each other's state.

The life of one partition::

    claimed --positioned--> fed to the fetcher --fetched--> buffered --handed out--> in flight
    in flight --finished(completed)--> pending --stored--> stored
    in flight --finished(not completed) | sought--> buffers dropped, fetched again
    any --sought--> position moved, pending dropped, the running batch voided
    any --released | lost--> not owned; a batch still in flight never commits
    lost --claimed again--> restarts at the stored offset, fed to the fetcher afresh

Rules kept (checked by ``tests/test_partition_states.py``):

- an offset to store never passes the first offset of a batch whose body still runs;
- a batch overtaken by a seek, a release, a loss or an abandon never becomes pending;
- a pause lasts until `resume()`, across a loss and the claim that regains the partition; it ends
  when the partition is released to another member or the assignment no longer gives it to us;
- an operator's hold (`aio_cluster.control`, read from ZooKeeper) is apart from the member's own
  pause: a partition hands out batches only while neither holds it;
- a partition claimed again restarts at its claim's offset, never at the fetcher's old position;
- a partition moves on to the fetcher's position (past transaction markers, aborted records and
  compaction gaps) only when nothing of it is buffered, in flight, withheld or waiting on a seek,
  and only from a position set for its claim; that is stored only when everything before was;
- a fetch that skips records lost on the way is refused (the rules of `feed`);
- a fenced claim (a write found it gone) hands out no batch, until a rebalance drops it; what is
  stored, and what exactly once makes ready, follows the rules of `commits`;
- an abandoned batch is read again from its first unfinished record, so a partition that stays
  (its store failed, say) never goes on past records nobody finished;
- a running batch grows by the partition's next batch (`pick` with ``grows``) only while nothing
  voids, withholds or pauses it; grown, it is still one batch: what it commits, its progress and
  where it is read again from are as for any batch.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Collection, Iterable, Mapping
from types import MappingProxyType

from ...errors import IllegalTransition, NotOwnedError
from ...kafka.records import Record
from ...kafka.topics import PartitionKey
from .announcements import Announcements
from .claims import Batch, Claim
from .commits import Commits
from .feed import Feed, unbuffer

__all__ = ["Grows", "IllegalTransition", "PartitionStates"]

Grows = Callable[[PartitionKey], bool]
"""Whether the running batch of a partition takes its next batch into it now (see
`PartitionStates.pick`)."""


class PartitionStates:
    """Every partition's state in one member, and the legal transitions between states."""

    def __init__(self, *, transactional: bool = False) -> None:
        """Args:
        transactional: the exactly-once mode: completed offsets become ``ready`` for the
            partition's transaction, and pending only once it committed (`Commits.committed`).
        """
        self._claims: dict[PartitionKey, Claim] = {}
        self._view = MappingProxyType(self._claims)
        self.commits = Commits(self._view, transactional=transactional)
        """Each claim's start, and its offsets ready, pending and stored (the drivers of
        offsets, transactions and the mirror ask and tell it)."""
        self._withheld: set[PartitionKey] = set()
        """Partitions no batch is handed out of: being handed over, or claimed and not yet
        announced to the listener."""
        self._paused: set[PartitionKey] = set()
        """Paused partitions, owned or lost and maybe coming back (a pause survives a loss)."""
        self._held: frozenset[PartitionKey] = frozenset()
        """Partitions an operator paused for the whole group, owned or not: the group's
        state in ZooKeeper, which the member follows (see `hold`)."""
        self.controlled: Callable[[PartitionKey], bool] = lambda partition: True
        """Whether the operator's controls of a partition were read: one whose were not is
        neither fetched nor handed out, so that a pause is obeyed from the first batch (the
        member's `aio_cluster.member.controls` sets it)."""
        self._inflight: dict[PartitionKey, tuple[Claim, Batch, int]] = {}
        """Partition -> the claim and batch whose body runs, and the offset of that batch's
        first record not yet finished (its first, or where a processor's progress got)."""
        self._voided: set[PartitionKey] = set()
        """Partitions whose running batch must not be committed (a seek came meanwhile)."""
        self._feed = Feed()
        self.announcements = Announcements(self._view)
        """What the rebalance listener was told (the handover asks and tells it)."""
        self._cursor = -1
        self._order: list[PartitionKey] | None = None
        """The claimed partitions, sorted: the round-robin's order (None: to be sorted again)."""
        self.suspended = False
        """True while ZooKeeper is suspended or lost: no batch is handed out."""
        self.batches = 0
        """Batches handed out."""
        self.records = 0
        """Records handed out."""

    # -- reading -----------------------------------------------------------------------------

    @property
    def claims(self) -> Mapping[PartitionKey, Claim]:
        """The claims this member holds now, by partition (a read-only view)."""
        return self._view

    def owned(self, partition: PartitionKey) -> bool:
        """Whether this member holds a claim of ``partition``."""
        return partition in self._claims

    @property
    def withheld(self) -> frozenset[PartitionKey]:
        """The partitions no batch is handed out of now."""
        return frozenset(self._withheld)

    @property
    def paused(self) -> list[PartitionKey]:
        """The paused partitions, sorted (a lost one that may come back included)."""
        return sorted(self._paused)

    @property
    def held(self) -> list[PartitionKey]:
        """The partitions an operator paused (see `hold`), sorted."""
        return sorted(self._held)

    @property
    def fed(self) -> frozenset[PartitionKey]:
        """The partitions the fetcher was given."""
        return self._feed.partitions

    @property
    def fenced(self) -> list[PartitionKey]:
        """The held partitions whose claims a write found gone, sorted: a rebalance drops them."""
        return sorted(p for p, claim in self._claims.items() if claim.fenced)

    @property
    def in_flight(self) -> list[PartitionKey]:
        """The partitions whose batch is in flight, sorted."""
        return sorted(self._inflight)

    def running(self, partitions: Collection[PartitionKey]) -> bool:
        """Whether a batch of any of ``partitions`` is in flight."""
        return any(partition in self._inflight for partition in partitions)

    def _claim(self, partition: PartitionKey) -> Claim:
        claim = self._claims.get(partition)
        if claim is None:
            raise NotOwnedError(f"partition {partition} is not owned by this member")
        return claim

    # -- owning ------------------------------------------------------------------------------

    def claimed(self, claim: Claim) -> None:
        """The claim's owner node was created: the partition is this member's.

        Its first batch waits until the fetcher was given the claim's position (see
        `assignment()`), so a partition claimed again never goes on from the fetcher's old one.

        Raises:
            IllegalTransition: the partition is claimed already.
        """
        if claim.partition in self._claims:
            raise IllegalTransition(f"partition {claim.partition} is claimed already")
        unbuffer(claim)
        self._claims[claim.partition] = claim
        self._order = None
        self._feed.forget(claim.partition)

    def released(self, partition: PartitionKey) -> Claim | None:
        """The partition goes to another member (its owner node is deleted next): its pause,
        withholding and announcement end with it.

        Returns:
            The claim whose node the driver deletes, or None when none was held.
        """
        self._forget(partition)
        claim = self._claims.pop(partition, None)
        self._order = None
        self._withheld.discard(partition)
        self._paused.discard(partition)
        self.announcements.released(partition)
        return claim

    def lost(self) -> list[PartitionKey]:
        """The session expired: every claim is gone with it. Pending offsets are dropped (the
        partitions may have new owners); running batches will not commit. Pauses are kept for the
        partitions this member claims again.

        Returns:
            The partitions that were owned, sorted.
        """
        gone = sorted(self._claims)
        self.announcements.lost()
        for partition in gone:
            self._claims[partition].pending = None
            self._claims[partition].ready = None
            self._forget(partition)
        self._claims.clear()
        self._order = None
        self._withheld.clear()
        self.suspended = True
        return gone

    def expected(self, partitions: Collection[PartitionKey]) -> None:
        """The assignment gives this member ``partitions``: pauses of others (lost ones that do
        not come back) end."""
        self._paused.intersection_update(set(partitions) | set(self._claims))

    def forget(self) -> None:
        """The member closed: whatever was not released goes with the session."""
        for partition in list(self._claims):
            self._forget(partition)
        self._claims.clear()
        self._order = None
        self._withheld.clear()

    def _forget(self, partition: PartitionKey) -> None:
        """The claim of ``partition`` ends: its buffers, seek and running batch go with it."""
        claim = self._claims.get(partition)
        if claim is not None:
            unbuffer(claim)
        self._feed.forget(partition)
        self._voided.discard(partition)

    # -- fetching ----------------------------------------------------------------------------

    def assignment(self) -> dict[PartitionKey, int] | None:
        """What the fetcher must be given: the claimed, positioned partitions, each from its next
        offset (a staying partition with buffered records from after them), or None when it has
        them already. Once the driver gave the fetcher these positions, they are its own."""
        return self._feed.assign(
            {p: claim for p, claim in self._claims.items() if claim.next_offset >= 0}
        )

    def fetchable(
        self, *, ahead: int | None = None, grows: Grows | None = None
    ) -> list[PartitionKey]:
        """The partitions to fetch now: fed, neither fenced, withheld nor paused, and with no
        batch running (or one that ``grows``, see `pick`) or buffered; none while suspended.

        ``ahead`` is for a member with a budget: a partition is then fetched on while its
        batches run or wait, up to ``ahead`` bytes waiting, since the budget bounds what is
        buffered (`buffered_bytes`, see `aio_cluster.kafka.fetcher`). Without one, a partition
        holds at most one batch buffered besides the one running.
        """
        if self.suspended:
            return []
        return [
            p
            for p, claim in self._claims.items()
            if self._feed.serves(claim)
            and not claim.fenced
            and p not in self._withheld
            and p not in self._paused
            and p not in self._held
            and self.controlled(p)
            and (
                not claim.buffered and (p not in self._inflight or (grows is not None and grows(p)))
                if ahead is None
                else sum(claim.sizes) < ahead
            )
        ]

    @property
    def buffered_bytes(self) -> int:
        """The record bytes (keys and values as the broker holds them) of every batch buffered
        and not yet handed out: what the member's budget bounds on its side."""
        return sum(sum(claim.sizes) for claim in self._claims.values() if claim.sizes)

    def seeks(self) -> dict[PartitionKey, int]:
        """The fetcher's partitions that must be read from another offset before the next fetch
        (partition -> offset); each is returned once."""
        return self._feed.seeks(self._claims)

    def fetched(self, partition: PartitionKey, records: list[Record]) -> tuple[int, int] | None:
        """The fetcher returned ``records`` of ``partition``: they are buffered, unless the
        partition is not owned, withheld, paused, sought meanwhile, or they were read for an
        earlier claim (then they are dropped, and read again once it hands out again), or they
        skip records the fetcher lost on the way (refused: see `Feed.take`).

        Returns:
            The offsets a refused fetch skipped (from, up to), when these records show that the
            broker holds records there after all: the fetcher lost them (the driver warns).
            None otherwise.
        """
        claim = self._claims.get(partition)
        if not records or claim is None or not self._feed.serves(claim):
            return None
        if (
            partition in self._withheld
            or partition in self._paused
            or self._feed.seeking(partition)
        ):
            self._feed.drop(claim)
            return None
        return self._feed.take(claim, records)

    def out_of_range(
        self, partition: PartitionKey, offset: int, earliest: int, latest: int, *, trail: bool
    ) -> int | None:
        """The broker does not hold the partition's position ``offset``; it holds
        ``earliest`` .. ``latest``.

        Before the earliest offset (retention deleted the records): restart at the earliest.
        Past the log end (the topic was made again, or an offset was set by hand): as where none
        is stored, at the earliest or with ``trail`` at the log end. The new start becomes
        pending at once (unless a batch runs), so that neither the next owner nor the lag goes on
        from an offset that is not (exactly once: ready for the partition's next transaction,
        which ZooKeeper follows).

        Returns:
            The new start, or None when the partition is not owned.
        """
        claim = self._claims.get(partition)
        if claim is None:
            return None
        start = latest if trail and offset > latest else earliest
        claim.next_offset = start
        if partition not in self._inflight:
            self.commits.completed(claim, start)
        self._feed.drop(claim)
        return start

    def stepped_over(self, partition: PartitionKey, position: int | None) -> bool:
        """The fetcher reads ``partition`` from ``position`` next: when every record it returned was
        handed out and finished, the claim moves on there, past what follows them without being a
        record (transaction markers, aborted records, compaction gaps), stored as `Commits.step`
        says. Nothing moves while records are buffered, a batch runs, the partition is withheld, or
        the fetcher's side does not vouch for the move (`Feed.moves`: a seek is owed, the position
        was not set for the claim held now, or records lost on the way would be passed). The
        position is where the next fetch's records must start (see `fetched`).

        Returns:
            True when the claim moved on.
        """
        claim = self._claims.get(partition)
        self._feed.reached(partition, claim, position)
        if (
            claim is None
            or position is None
            or claim.buffered
            or partition in self._inflight
            or partition in self._withheld
            or position <= claim.next_offset
            or not self._feed.moves(claim, position)
        ):
            return False
        self.commits.step(claim, position)
        return True

    def _shed(self, partitions: Iterable[PartitionKey]) -> None:
        """Drop what is buffered of ``partitions`` (read again from their next offset once they
        hand out again): a partition that hands nothing out holds none of the budget."""
        for partition in partitions:
            claim = self._claims.get(partition)
            if claim is not None and claim.buffered:
                self._feed.drop(claim)

    # -- handing out -------------------------------------------------------------------------

    def _available(self, partition: PartitionKey, grows: Grows | None = None) -> bool:
        """Whether ``partition`` may hand out a batch: none of it runs (or its running batch
        ``grows``, see `pick`), and nothing withholds or pauses it."""
        if partition in self._inflight and (
            grows is None or partition in self._voided or not grows(partition)
        ):
            return False
        return (
            partition not in self._withheld
            and partition not in self._paused
            and partition not in self._held
            and self.controlled(partition)
        )

    def pick(self, grows: Grows | None = None) -> tuple[Claim, Batch] | None:
        """Hand out the next batch, round-robin over the partitions that may hand one out.

        A partition whose batch runs hands out its next buffered batch too when ``grows`` says
        so (a processor whose running batch waits on a few records, and would hold back the
        others behind them): the records are appended to the running batch, in place, which
        stays the one in flight: it commits, progresses and is read again from its first
        unfinished record as one batch.

        Returns:
            The claim and its batch, now in flight (the running batch, grown, when it grew);
            None when no batch may be handed out.
        """
        if self.suspended:
            return None
        if self._order is None:
            self._order = sorted(self._claims)
        # The first ready partition after the last one handed out, wrapping round: a scan that
        # usually stops at once, where sorting the ready ones cost every batch O(P log P).
        start = bisect.bisect_right(self._order, self._cursor)
        for partition in itertools.chain(self._order[start:], self._order[:start]):
            claim = self._claims[partition]
            if (
                claim.buffered
                and not claim.fenced
                and self._feed.serves(claim)
                and self._available(partition, grows)
            ):
                break
        else:
            return None
        self._cursor = partition
        batch = claim.buffered.popleft()
        claim.sizes.popleft()
        claim.next_offset = batch[-1].offset + 1
        self.records += len(batch)
        running = self._inflight.get(partition)
        if running is not None:
            running[1].extend(batch)
            return claim, running[1]
        self._inflight[partition] = (claim, batch, batch[0].offset)
        self.batches += 1
        return claim, batch

    def finished(
        self,
        claim: Claim,
        batch: Batch,
        *,
        completed: bool,
        commit: bool,
        position: int | None = None,
    ) -> bool:
        """A batch's body ended: when it completed, its end becomes pending (with ``commit``)
        and the claim may move on to the fetcher's ``position`` (see `stepped_over`); when not,
        the partition reads it again from its first record not finished (see `progressed`).

        A batch abandoned, overtaken by a seek, or of a claim no longer held is neither; nor
        is one abandoned whose records were handed out again meanwhile.

        Returns:
            False when the batch was no longer in flight (abandoned, or its claim ended).
        """
        partition = claim.partition
        running = self._inflight.get(partition)
        if running is None or running[0] is not claim or running[1] is not batch:
            return False
        del self._inflight[partition]
        if partition in self._voided:
            self._voided.discard(partition)
        elif self._claims.get(partition) is claim:
            if not completed:
                claim.next_offset = running[2]
                self._feed.drop(claim)
            else:
                if commit:
                    self.commits.completed(claim, batch[-1].offset + 1)
                self.stepped_over(partition, position)
        return True

    def progressed(self, claim: Claim, batch: Batch, offset: int) -> None:
        """The records of ``claim``'s running ``batch`` before ``offset`` completed (a processor
        keeps many of them in flight): ``offset`` becomes pending, unless the batch was abandoned
        or overtaken by a seek, or ``claim`` is no longer the partition's claim. Told again as
        far as it got already (a processor asked to tell), nothing changes: exactly once, a
        transaction would commit the same offset again."""
        partition = claim.partition
        running = self._inflight.get(partition)
        if (
            running is not None
            and running[0] is claim
            and running[1] is batch
            and running[2] != offset
            and partition not in self._voided
            and self._claims.get(partition) is claim
        ):
            self.commits.completed(claim, offset)
            self._inflight[partition] = (claim, running[1], offset)

    def withhold(self, partitions: Iterable[PartitionKey]) -> None:
        """Hand out no batch of ``partitions`` until `hand_out()`."""
        self._withheld.update(partitions)

    def drain(self, partitions: Iterable[PartitionKey]) -> None:
        """Hand out no more batch of ``partitions`` (they are being handed over); what is
        buffered is dropped."""
        for partition in partitions:
            claim = self._claim(partition)
            self._withheld.add(partition)
            self._feed.drop(claim)

    def hand_out(self, partitions: Iterable[PartitionKey]) -> None:
        """Hand out batches of ``partitions`` again (undoes `withhold()` and `drain()`)."""
        self._withheld.difference_update(partitions)

    def abandoned(self, partitions: Iterable[PartitionKey]) -> dict[PartitionKey, int]:
        """Waiting for the bodies of ``partitions`` was given up: their batches never commit,
        and a claim still held reads again from the batch's first unfinished record (unless a
        seek moved it meanwhile), whatever happens next to the partition.

        Returns:
            Partition -> the offset of its abandoned batch's first unfinished record.
        """
        abandoned = {}
        for partition in partitions:
            running = self._inflight.pop(partition, None)
            if running is None:
                continue
            claim, _, offset = running
            abandoned[partition] = offset
            if partition in self._voided:
                self._voided.discard(partition)
            elif self._claims.get(partition) is claim:
                claim.next_offset = offset
                self._feed.drop(claim)
        return abandoned

    def pause(self, partitions: Iterable[PartitionKey]) -> None:
        """Hand out no batch of ``partitions`` until `resume()`; what is buffered is dropped
        (read again from the next offset then), so that a paused partition holds none of the
        budget.

        Raises:
            NotOwnedError: a partition is not owned.
        """
        partitions = list(partitions)
        for partition in partitions:
            self._claim(partition)
        self._paused.update(partitions)
        self._shed(partitions)

    def hold(self, partitions: Collection[PartitionKey]) -> list[PartitionKey]:
        """The partitions an operator paused are now ``partitions`` (all of them: the others
        are let go). No batch of them is handed out until let go, whoever owns them; what is
        buffered of those newly held is dropped, as for `pause()`. Apart from `pause()`: a
        partition hands out batches only when neither holds it.

        Returns:
            The partitions newly held, sorted.
        """
        held = frozenset(partitions)
        new = sorted(held - self._held)
        self._held = held
        self._shed(new)
        return new

    def resume(self, partitions: Iterable[PartitionKey]) -> None:
        """Hand out batches of ``partitions`` again, from where they stopped."""
        self._paused.difference_update(partitions)

    def sought(self, partition: PartitionKey, offset: int) -> None:
        """The next batch of ``partition`` starts at ``offset``: buffers and the pending offset
        are dropped, and the batch whose body runs will not be committed.

        Raises:
            NotOwnedError: the partition is not owned.
        """
        claim = self._claim(partition)
        claim.next_offset = offset
        claim.pending = None
        claim.ready = None
        if partition in self._inflight:
            self._voided.add(partition)
        self._feed.drop(claim)

    def to_store(self, partition: PartitionKey, offset: int) -> None:
        """``offset`` is to be stored for ``partition``: the application's ``commit()``.

        Raises:
            NotOwnedError: the partition is not owned, or its claim is fenced (gone).
        """
        claim = self._claim(partition)
        if claim.fenced:
            raise NotOwnedError(f"partition {partition}: its claim is gone, nothing is stored")
        self.commits.completed(claim, offset)
