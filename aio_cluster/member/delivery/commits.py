"""Commits: where each claim starts, and how far its records are committed, without I/O.

A claim's offsets climb one ladder: its start (the stored offset, or one found for it), then
what its batches completed, ``ready`` for the partition's next transaction (exactly once only),
``pending`` for ZooKeeper, and ``stored`` once ZooKeeper holds it. This part of
`PartitionStates` keeps that ladder: it is apart from the partitions' other states because it
answers to other drivers (`aio_cluster.member.protocol.offsets` writes the pending offsets,
`aio_cluster.member.exactly_once` commits the ready ones, the mirror offers Kafka's) and changes
only a claim's offsets, never what is buffered or handed out.

Rules kept (checked by ``tests/test_partition_states.py``):

- only owned partitions have anything to store;
- a fenced claim (a write found it gone) stores nothing more, until a rebalance drops it;
- exactly once (``transactional``): what a batch or a processor's prefix completes becomes
  ``ready``, not pending; only a transaction that committed it in Kafka makes it pending
  (`committed`), so ZooKeeper never holds an offset ahead of Kafka's;
- a claim moves on past what is no record (`step`) as stored only when everything before was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ...kafka.topics import PartitionKey
from .claims import UNPOSITIONED, Claim
from .feed import unbuffer

__all__ = ["Commits"]


class Commits:
    """Each claim's start, and its offsets ready, pending and stored."""

    def __init__(self, claims: Mapping[PartitionKey, Claim], *, transactional: bool) -> None:
        """Args:
        claims: the member's claims now (`PartitionStates.claims`, a live view).
        transactional: the exactly-once mode: completed offsets become ``ready`` for the
            partition's transaction, and pending only once it committed (`committed`).
        """
        self._claims = claims
        self.transactional = transactional

    # -- starting ----------------------------------------------------------------------------

    def unpositioned(self) -> list[PartitionKey]:
        """The claimed partitions whose start is not known yet (nothing is stored), sorted."""
        return sorted(p for p, claim in self._claims.items() if claim.next_offset == UNPOSITIONED)

    def positioned(
        self,
        partition: PartitionKey,
        offset: int,
        *,
        earliest: int | None = None,
        store: bool = False,
    ) -> bool:
        """An unpositioned claim starts at ``offset``.

        Args:
            partition: the claimed partition.
            offset: its first offset to hand out.
            earliest: the partition's earliest offset now (for the lag while nothing is stored).
            store: store ``offset`` at once (a trailing start, or one taken over from Kafka), so
                the next owner goes on from here.

        Returns:
            False when the partition is not claimed or was positioned already: nothing changed.
        """
        claim = self._claims.get(partition)
        if claim is None or claim.next_offset != UNPOSITIONED or offset < 0:
            return False
        claim.next_offset = offset
        if earliest is not None:
            claim.earliest = earliest
        if store:
            claim.pending = offset
        return True

    def migrated(self, partition: PartitionKey, offset: int) -> bool:
        """A new claim is offered the offset a Kafka consumer group committed (``"migrate"``): it
        starts there, stored at once, when that is further than its stored offset (or none is
        stored) and it has not moved from its start yet (a seek came first).

        Returns:
            True when the claim starts at ``offset``.
        """
        claim = self._claims.get(partition)
        if claim is None or offset < 0:
            return False
        start = UNPOSITIONED if claim.stored is None else claim.stored
        if claim.next_offset != start or (claim.stored is not None and offset <= claim.stored):
            return False
        claim.next_offset = claim.pending = offset
        return True

    # -- completing --------------------------------------------------------------------------

    def completed(self, claim: Claim, offset: int) -> None:
        """The records of ``claim`` before ``offset`` completed: pending, or, exactly once,
        ready for the partition's next transaction."""
        if self.transactional:
            claim.ready = offset
        else:
            claim.pending = offset

    def step(self, claim: Claim, position: int) -> None:
        """The claim moves on to ``position`` past what is no record (see
        `PartitionStates.stepped_over`): that is pending when everything before was committed
        (exactly once: ready when everything before completed, so that ZooKeeper follows Kafka
        there)."""
        committed = claim.pending if claim.pending is not None else claim.stored
        if self.transactional and claim.ready is not None:
            committed = claim.ready  # completed, its transaction to come
        if committed is None:
            committed = claim.earliest  # nothing stored: the start needs no commit
        if committed == claim.next_offset and not claim.fenced:
            self.completed(claim, position)
        claim.next_offset = position

    def committed(self, claim: Claim, offset: int) -> bool:
        """Exactly once: a transaction committed ``offset`` for ``claim`` in Kafka: it becomes
        pending (ZooKeeper follows), unless the claim ended or a seek came meanwhile.

        Returns:
            False when nothing changed.
        """
        if self._claims.get(claim.partition) is not claim or claim.fenced:
            return False
        if claim.ready == offset:
            claim.ready = None
        claim.pending = offset
        return True

    # -- storing -----------------------------------------------------------------------------

    def unstored(self, partitions: Iterable[PartitionKey]) -> list[Claim]:
        """The owned claims among ``partitions`` whose pending offset is not stored yet."""
        return [
            claim
            for partition in dict.fromkeys(partitions)
            if (claim := self._claims.get(partition)) is not None
            and not claim.fenced
            and claim.pending is not None
            and claim.pending != claim.stored
        ]

    def fenced_off(self, claims: Iterable[Claim]) -> list[PartitionKey]:
        """A write found these claims gone (their owner node replaced, or their fence moved):
        nothing is stored for them again, no batch of them is handed out, and the next
        rebalance drops them.

        Returns:
            Their partitions, sorted.
        """
        partitions = set()
        for claim in claims:
            claim.fenced = True
            partitions.add(claim.partition)
            unbuffer(claim)  # never handed out now: it holds none of the budget
        return sorted(partitions)

    def learned(self, claim: Claim, stored: int | None) -> None:
        """ZooKeeper holds ``stored`` for the claim's partition (read after a write failed)."""
        claim.stored = stored

    def stored(self, written: Mapping[Claim, int]) -> dict[PartitionKey, int]:
        """ZooKeeper stored these offsets.

        Returns:
            Partition -> offset of those whose claim is still held (for the mirror).
        """
        held = {}
        for claim, offset in written.items():
            claim.stored = offset
            if claim.pending == offset:
                claim.pending = None
            if self._claims.get(claim.partition) is claim:
                held[claim.partition] = offset
        return held
