"""A client's topic metadata: read in one pass, and kept out of the garbage collector's way.

aiokafka keeps, for every partition of every topic its client follows, a `PartitionMetadata` with
two lists (replicas and in-sync replicas) and a `TopicPartition` in its broker's set: four objects
the collector tracks, whichever partitions the member fetches. A member of a topic of 10,000
partitions holds some 40,000 of them, more than everything else it keeps: each full collection of
the process goes over all of them, and the metadata read by a newcomer makes the next one come
sooner (the collector runs a full pass once a quarter more objects than it holds have
survived). At 10 members a process, a full pass took about 100 ms, and one came with most joins
of a group of a hundred.

Here each partition is one plain tuple of numbers, which the collector stops tracking at its
first pass: a `PartitionMetadata` is made only when asked for, and the broker's partitions only
when asked (nothing in a consumer asks).

Reading: aiokafka decodes a response through its general schema machinery, a call and a list
for every field, then makes its four objects of each partition: some 55 ms for one topic of
10,000 partitions, which a member pays as it starts. `CompactMetadataRequest` asks the same, and
its answer (`MetadataAnswer`) is read in one pass of `struct` calls, each partition one tuple,
its replica lists tuples too; aiokafka updates the brokers and the topics from it, and the
partitions' tuples become the tables as they are: about 13 ms. The look-ups of a member's Kafka
client refresh its metadata with it (`aio_cluster.kafka.offset_reader`). aiokafka's own
refreshes (every five minutes) are read its way, and compacted right after.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import Any, ClassVar

from aiokafka.cluster import ClusterMetadata
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import PartitionMetadata, TopicPartition

from . import seams
from .seams import Seam, misfit

__all__ = [
    "READ_VERSIONS",
    "CompactMetadata",
    "CompactMetadataRequest",
    "MetadataAnswer",
    "PartitionTable",
    "decode_metadata",
]

_Row = tuple[Any, ...]
"""A partition's metadata as a Metadata answer has it: error code, partition, leader, replicas,
in-sync replicas (and, from version 5, the offline replicas), the replica lists as tuples, so
that nothing in it is tracked."""


class PartitionTable(Mapping[int, Any]):
    """One topic's partitions, read-only: partition id -> `PartitionMetadata`, made on access."""

    __slots__ = ("_rows", "_topic")

    def __init__(self, topic: str, rows: dict[int, _Row]) -> None:
        """Args:
        topic: the topic's name.
        rows: partition id -> its row (see `_Row`).
        """
        self._topic = topic
        self._rows = rows

    @classmethod
    def of(cls, topic: str, partitions: Mapping[int, Any]) -> PartitionTable:
        """The table of aiokafka's ``partitions`` (partition id -> `PartitionMetadata`)."""
        return cls(
            topic,
            {
                p: (m.error, m.partition, m.leader, tuple(m.replicas), tuple(m.isr))
                for p, m in partitions.items()
            },
        )

    @classmethod
    def read(cls, topic: str, entries: list[_Row]) -> PartitionTable:
        """The table of a `MetadataAnswer`'s partitions of ``topic``, its rows kept as read."""
        return cls(topic, {entry[1]: entry for entry in entries})

    def __getitem__(self, partition: int) -> Any:
        error, _partition, leader, replicas, isr, *_offline = self._rows[partition]
        return PartitionMetadata(self._topic, partition, leader, replicas, isr, error)

    def __iter__(self) -> Iterator[int]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, partition: object) -> bool:
        return partition in self._rows

    def leader(self, partition: int) -> int | None:
        """The partition's leader (-1: none now), or None for a partition not known."""
        row = self._rows.get(partition)
        return None if row is None else int(row[2])


class CompactMetadata(ClusterMetadata):  # type: ignore[misc]  # aiokafka is untyped here
    """aiokafka's cluster metadata, its partitions kept compact (see the module).

    Given to an aiokafka client before it starts (``client.cluster``): a consumer's client, which
    never copies its metadata (`with_partitions()` is the producer's) and subscribes to no
    pattern (its listeners read no partition).

    Its partitions (topic -> partition table) are aiokafka's dicts right after aiokafka's
    update, `PartitionTable`s after ours (an update that aiokafka ignored, of no broker, left the
    tables as they were); read and replaced through `aio_cluster.kafka.seams`, which checks
    that aiokafka keeps them where this class expects before a fetcher installs it.
    """

    def update_metadata(self, metadata: Any) -> None:
        """Update as aiokafka does, then keep the partitions compact. A `MetadataAnswer`'s
        partitions are not given to aiokafka at all (it would make four objects of each, which
        would only be compacted): it reads the rest, and the tables keep the answer's rows."""
        table: Callable[[str, Any], PartitionTable]
        if isinstance(metadata, MetadataAnswer):
            read = {entry[1]: entry[-1] for entry in metadata.topics}
            metadata = dataclasses.replace(
                metadata, topics=[(*entry[:-1], []) for entry in metadata.topics]
            )

            def as_read(topic: str, _emptied: Any) -> PartitionTable:
                return PartitionTable.read(topic, read[topic])

            table = as_read
        else:
            table = PartitionTable.of
        super().update_metadata(metadata)
        seams.replace_tables(
            self,
            {
                topic: partitions
                if isinstance(partitions, PartitionTable)
                else table(topic, partitions)
                for topic, partitions in seams.tables(self).items()
            },
        )

    def leader_for_partition(self, partition: Any) -> int | None:
        table = seams.tables(self).get(partition.topic)
        return None if table is None else table.leader(partition.partition)

    def partitions_for_broker(self, broker_id: int) -> set[Any] | None:
        found = {
            TopicPartition(topic, partition)
            for topic, table in seams.tables(self).items()
            for partition in table
            if table.leader(partition) == broker_id
        }
        return found or None


# -- reading ------------------------------------------------------------------------------------

_BOOLEAN = struct.Struct(">?").unpack_from
_INT16 = struct.Struct(">h").unpack_from
_INT32 = struct.Struct(">i").unpack_from
_PARTITION = struct.Struct(">hiii").unpack_from
"""A partition's error code, id, leader and replicas' count."""


@dataclass
class MetadataAnswer:
    """A Metadata response (versions 0 to 5), with the fields aiokafka's cluster metadata reads
    (``API_VERSION``, ``brokers``, ``controller_id``, ``topics``) shaped as aiokafka's decoding
    shapes them, but for the replica lists, which are tuples."""

    API_VERSION: int
    brokers: list[tuple[Any, ...]]
    """(node id, host, port), and the rack from version 1."""
    cluster_id: str | None
    controller_id: int
    """-1 before version 1, which has none."""
    topics: list[tuple[Any, ...]]
    """(error code, topic, partitions) before version 1, (error code, topic, is internal,
    partitions) from it; partitions as (error code, id, leader, replicas, in-sync replicas),
    and the offline replicas from version 5."""


class _Reader:
    """Reads Kafka's primitive types from a buffer, in order."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def int16(self) -> int:
        (value,) = _INT16(self.data, self.at)
        self.at += 2
        return int(value)

    def int32(self) -> int:
        (value,) = _INT32(self.data, self.at)
        self.at += 4
        return int(value)

    def boolean(self) -> bool:
        (value,) = _BOOLEAN(self.data, self.at)
        self.at += 1
        return bool(value)

    def string(self) -> str | None:
        length = self.int16()
        if length < 0:
            return None
        end = self.at + length
        if end > len(self.data):
            raise ValueError("Buffer underrun decoding string")
        value = self.data[self.at : end].decode()
        self.at = end
        return value

    def int32s(self, count: int) -> tuple[int, ...]:
        if count <= 0:
            return ()
        values: tuple[int, ...] = struct.unpack_from(f">{count}i", self.data, self.at)
        self.at += 4 * count
        return values

    def partition(self, offline: bool) -> tuple[Any, ...]:
        error, partition, leader, count = _PARTITION(self.data, self.at)
        self.at += 14
        replicas = self.int32s(count)
        isr = self.int32s(self.int32())
        if not offline:
            return (error, partition, leader, replicas, isr)
        return (error, partition, leader, replicas, isr, self.int32s(self.int32()))


def decode_metadata(version: int, data: bytes) -> MetadataAnswer:
    """A Metadata response body of ``version`` (0 to 5), read in one pass.

    Raises:
        ValueError: ``version`` is not one of those.
        struct.error, ValueError: the body ends early.
    """
    if not 0 <= version <= 5:
        raise ValueError(f"no reader for Metadata version {version}")
    read = _Reader(data)
    if version >= 3:
        read.int32()  # throttle time
    brokers = []
    for _ in range(read.int32()):
        node, host, port = read.int32(), read.string(), read.int32()
        brokers.append((node, host, port) if version == 0 else (node, host, port, read.string()))
    cluster_id = read.string() if version >= 2 else None
    controller = read.int32() if version >= 1 else -1
    topics = []
    for _ in range(read.int32()):
        error, name = read.int16(), read.string()
        internal = read.boolean() if version >= 1 else None
        partitions = [read.partition(version >= 5) for _ in range(max(read.int32(), 0))]
        topics.append(
            (error, name, partitions) if version == 0 else (error, name, internal, partitions)
        )
    return MetadataAnswer(version, brokers, cluster_id, controller, topics)


class _Answer:
    """What aiokafka's connection decodes a response with: a ``decode(BytesIO)``."""

    version: ClassVar[int]

    @classmethod
    def decode(cls, data: BytesIO) -> MetadataAnswer:
        return decode_metadata(cls.version, data.read())


_ANSWERS = {v: type(f"MetadataAnswerV{v}", (_Answer,), {"version": v}) for v in range(6)}
READ_VERSIONS = frozenset(_ANSWERS)
"""The Metadata versions `decode_metadata` reads."""


class CompactMetadataRequest(MetadataRequest):  # type: ignore[misc]  # aiokafka is untyped here
    """aiokafka's Metadata request, answered as a `MetadataAnswer` (read in one pass): aiokafka's
    connection decodes a response with the type its request names."""

    def build(self, request_struct_class: Any) -> Any:
        built = super().build(request_struct_class)
        answer = _ANSWERS.get(request_struct_class.API_VERSION)
        if answer is None:
            # A version newer than this reader (an aiokafka that learned it): aiokafka's own
            # decoding reads the answer, and `CompactMetadata` compacts what it made.
            misfit(
                Seam.METADATA_READER,
                f"Metadata v{request_struct_class.API_VERSION} was chosen, which it does not read",
            )
        else:
            built.RESPONSE_TYPE = answer
        return built
