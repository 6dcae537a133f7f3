"""Feed: the fetcher's side of every partition, without I/O.

The fetcher (`aio_cluster.kafka.fetcher`) knows nothing of claims: it keeps a position per
partition it was given, and goes on from there. This part of `PartitionStates` remembers which
claim each position was set for, the seeks the fetcher owes before its next fetch, where it
stands after each fetch, and which of its jumps past offsets it is trusted with. It is apart from
the partitions' other states because it answers one question of its own, whether what the
fetcher returned belongs to the claim held now and starts where it should, and keeps the only
state that asks it (the gaps met, the positions vouched for).

Rules kept (checked by ``tests/test_partition_states.py`` through `PartitionStates`):

- a fetch whose records start beyond the fetcher's position before it is refused (records were
  taken out of the fetcher and lost: a commit would pass them), and the partition is read again
  from its next offset; only the same gap met again, from the same position, is taken (the broker
  holds no record there: compaction, transaction markers or aborted records); so is a move to a
  position no fetch of records vouched for (one the fetcher reached while it returned nothing);
- a position says something about the records of the claim it was set for only: a partition
  claimed again is given to the fetcher afresh, from its claim's offset.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping

from ...kafka.records import Record
from ...kafka.topics import PartitionKey
from .claims import Claim

__all__ = ["Feed", "unbuffer"]


def unbuffer(claim: Claim) -> None:
    """Forget the claim's buffered records (and their sizes)."""
    claim.buffered.clear()
    claim.sizes.clear()


def _record_bytes(records: list[Record]) -> int:
    """The bytes of the records' keys and values as the broker holds them (aiokafka's
    serialized sizes: a missing key or value counts -1, a byte off the bound at most)."""
    total: int = sum(map(_KEY_SIZE, records)) + sum(map(_VALUE_SIZE, records))
    return total


_KEY_SIZE = operator.attrgetter("serialized_key_size")
_VALUE_SIZE = operator.attrgetter("serialized_value_size")


class Feed:
    """What the fetcher was given of each partition, where it stands, and the gaps it met."""

    def __init__(self) -> None:
        self._fed: dict[PartitionKey, Claim] = {}
        """The fetcher's partitions, each with the claim whose position it was given (assigned
        or sought): its position says something about that claim's records only."""
        self._seeks: dict[PartitionKey, int] = {}
        """Partition -> the offset the fetcher must read from next (its buffers were dropped)."""
        self._positions: dict[PartitionKey, int] = {}
        """The fed partitions' positions in the fetcher, as given it (assigned or sought) or as
        it said after its last fetch (see `reached`): where its next records start."""
        self._gaps: dict[PartitionKey, set[tuple[int, int]]] = {}
        """Partition -> the gaps its claim met: a position and the first record fetched from it
        (see `take`)."""
        self._refused: dict[PartitionKey, tuple[int, int]] = {}
        """Partition -> the gap its last refused fetch left, until a fetch reads past it."""
        self._vouched: dict[PartitionKey, int] = {}
        """Partition -> the furthest position set here, or said by the fetcher right after it
        returned records from where it was: the claim moves there without reading again."""
        self._fresh: set[PartitionKey] = set()
        """The partitions whose records the fetch being taken in returned (and were taken)."""

    @property
    def partitions(self) -> frozenset[PartitionKey]:
        """The partitions the fetcher was given."""
        return frozenset(self._fed)

    def serves(self, claim: Claim) -> bool:
        """Whether the fetcher's position in the claim's partition was set for ``claim``."""
        return self._fed.get(claim.partition) is claim

    def seeking(self, partition: PartitionKey) -> bool:
        """Whether the fetcher owes a seek in ``partition`` before its next fetch."""
        return partition in self._seeks

    def forget(self, partition: PartitionKey) -> None:
        """The claim of ``partition`` ends (or starts): its seek and the gaps it met go."""
        self._seeks.pop(partition, None)
        self._gaps.pop(partition, None)
        self._refused.pop(partition, None)
        self._fresh.discard(partition)

    def drop(self, claim: Claim) -> None:
        """Forget a claim's buffered records; reading resumes at its next offset."""
        unbuffer(claim)
        self._seeks[claim.partition] = claim.next_offset

    def assign(self, wanted: Mapping[PartitionKey, Claim]) -> dict[PartitionKey, int] | None:
        """The fetcher must read the ``wanted`` claims' partitions (see
        `PartitionStates.assignment`).

        Returns:
            Partition -> the offset to read from (a staying partition's after what is buffered
            of it), or None when the fetcher has them already.
        """
        if wanted.keys() == self._fed.keys() and all(
            self._fed[p] is claim for p, claim in wanted.items()
        ):
            return None
        positions: dict[PartitionKey, int] = {}
        for partition, claim in wanted.items():
            if self._fed.get(partition) is claim and claim.buffered:
                # Staying: keep what is buffered and fetch on after it, so a rebalance does not
                # pause the partitions it leaves in place.
                positions[partition] = claim.buffered[-1][-1].offset + 1
            else:
                unbuffer(claim)
                positions[partition] = claim.next_offset
        self._seeks.clear()
        self._fed = dict(wanted)
        self._positions = dict(positions)
        self._vouched = dict(positions)
        self._fresh.clear()
        return positions

    def seeks(self, claims: Mapping[PartitionKey, Claim]) -> dict[PartitionKey, int]:
        """The fetcher's partitions that must be read from another offset before the next fetch
        (partition -> offset), each returned once; those of ``claims`` are now fed from them."""
        seeks = {p: offset for p, offset in self._seeks.items() if p in self._fed}
        for partition, offset in seeks.items():
            claim = claims.get(partition)
            if claim is not None:
                # The fetcher's position is now set from this claim.
                self._fed[partition] = claim
            self._positions[partition] = self._vouched[partition] = offset
        self._seeks.clear()
        return seeks

    def take(self, claim: Claim, records: list[Record]) -> tuple[int, int] | None:
        """Buffer ``records``, fetched for ``claim`` (which the fetcher serves), unless they
        leave a gap.

        Records that start beyond the fetcher's position before this fetch leave a gap: records
        taken out of the fetcher and lost on the way (a fetch cancelled half-way), which the
        next commit would pass although nobody received them. They are refused: what is
        buffered is dropped, and the partition read again from its next offset. A gap met again,
        from the same position to the same record, is what the broker holds (compaction gaps,
        transaction markers or aborted records at the position, which the fetcher's position
        does not pass before it read them): it is taken.

        Returns:
            The offsets a refused fetch skipped (from, up to), when these records show that the
            broker holds records there after all: the fetcher lost them (the driver warns).
            None otherwise.
        """
        partition = claim.partition
        position = self._positions.get(partition)
        if (
            position is not None
            and records[0].offset > position
            and self._refuse(claim, position, records[0].offset)
        ):
            return None
        self._fresh.add(partition)
        claim.buffered.append(records)
        claim.sizes.append(_record_bytes(records))
        refused = self._refused.get(partition)
        if refused is None or records[-1].offset < refused[0]:
            return None
        del self._refused[partition]
        return refused if records[0].offset < refused[1] else None

    def reached(self, partition: PartitionKey, claim: Claim | None, position: int | None) -> None:
        """The fetcher reads ``partition`` from ``position`` next (it said so after a fetch):
        that is where the next fetch's records must start, and, right after records it returned
        from where it was, a position the claim may move on to (see `moves`)."""
        if claim is not None and position is not None and self._fed.get(partition) is claim:
            self._positions[partition] = position
            if partition in self._fresh:
                self._vouched[partition] = position
        self._fresh.discard(partition)

    def moves(self, claim: Claim, position: int) -> bool:
        """Whether the claim may move on to the fetcher's ``position`` without reading again:
        the position was set for it, no seek is owed, and the jump from its next offset was
        vouched for by a fetch of records, or met before (the first time it is refused).
        """
        partition = claim.partition
        if self._fed.get(partition) is not claim or partition in self._seeks:
            return False
        return not (
            position > self._vouched.get(partition, position)
            and self._refuse(claim, claim.next_offset, position)
        )

    def _refuse(self, claim: Claim, start: int, end: int) -> bool:
        """The fetcher went from ``start`` to ``end`` of the claim's partition without a record:
        the first time, refuse it (what is buffered is dropped, and the partition read again
        from its next offset) and remember it; met again, it is what the broker holds.

        Returns:
            True when refused.
        """
        partition = claim.partition
        met = self._gaps.setdefault(partition, set())
        if (start, end) in met:
            self._vouched[partition] = max(self._vouched.get(partition, end), end)
            return False
        # Those behind the next offset are not read again (but after a seek back).
        met.difference_update([gap for gap in met if gap[1] <= claim.next_offset])
        met.add((start, end))
        self._refused[partition] = (start, end)
        self.drop(claim)
        return True
