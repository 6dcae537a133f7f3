"""CompactMetadata: an aiokafka client's topic metadata, kept out of the garbage collector's way.

aiokafka keeps, for every partition of every topic its client follows, a `PartitionMetadata` with
two lists (replicas and in-sync replicas) and a `TopicPartition` in its broker's set: four objects
the collector tracks, whichever partitions the member fetches. A member of a topic of 10,000
partitions holds some 40,000 of them, more than everything else it keeps: each full collection of
the process goes over all of them, and the metadata read by a newcomer makes the next one come
sooner (the collector runs a full pass once a quarter more objects than it holds have
survived). At 10 members a process, a full pass took about 100 ms, and one came with most joins
of a group of a hundred.

Here each partition is one plain tuple of numbers and the topic's name, which the collector stops
tracking at its first pass: a `PartitionMetadata` is made only when asked for, and the broker's
partitions only when asked (nothing in a consumer asks). aiokafka still reads and updates the
metadata as ever; what it wrote is compacted right after each update.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from aiokafka.cluster import ClusterMetadata
from aiokafka.structs import PartitionMetadata, TopicPartition

__all__ = ["CompactMetadata", "PartitionTable"]

_Row = tuple[str, int, int, tuple[int, ...], tuple[int, ...], int]
"""A partition's metadata as PartitionMetadata's fields: topic, partition, leader, replicas,
in-sync replicas, error code; its lists made tuples, so that nothing in it is tracked."""


class PartitionTable(Mapping[int, Any]):
    """One topic's partitions, read-only: partition id -> `PartitionMetadata`, made on access."""

    __slots__ = ("_rows",)

    def __init__(self, partitions: Mapping[int, Any]) -> None:
        """Args:
        partitions: partition id -> aiokafka's `PartitionMetadata`.
        """
        self._rows: dict[int, _Row] = {
            partition: (m.topic, m.partition, m.leader, tuple(m.replicas), tuple(m.isr), m.error)
            for partition, m in partitions.items()
        }

    def __getitem__(self, partition: int) -> Any:
        return PartitionMetadata._make(self._rows[partition])

    def __iter__(self) -> Iterator[int]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, partition: object) -> bool:
        return partition in self._rows

    def leader(self, partition: int) -> int | None:
        """The partition's leader (-1: none now), or None for a partition not known."""
        row = self._rows.get(partition)
        return None if row is None else row[2]


class CompactMetadata(ClusterMetadata):  # type: ignore[misc]  # aiokafka is untyped here
    """aiokafka's cluster metadata, its partitions compacted after each update (see the module).

    Given to an aiokafka client before it starts (``client.cluster``): a consumer's client, which
    never copies its metadata (`with_partitions()` is the producer's).
    """

    _partitions: dict[str, Any]
    """topic -> its partitions: aiokafka's dicts right after its update, `PartitionTable`s
    after ours (an update that aiokafka ignored, of no broker, left the tables as they were)."""

    def update_metadata(self, metadata: Any) -> None:
        super().update_metadata(metadata)
        self._partitions = {
            topic: partitions
            if isinstance(partitions, PartitionTable)
            else PartitionTable(partitions)
            for topic, partitions in self._partitions.items()
        }
        self._broker_partitions.clear()  # made when asked: `partitions_for_broker`

    def leader_for_partition(self, partition: Any) -> int | None:
        table = self._partitions.get(partition.topic)
        return None if table is None else table.leader(partition.partition)

    def partitions_for_broker(self, broker_id: int) -> set[Any] | None:
        found = {
            TopicPartition(topic, partition)
            for topic, table in self._partitions.items()
            for partition in table
            if table.leader(partition) == broker_id
        }
        return found or None
