"""TopicPartition, and the keys a member's parts use for the partitions of many topics. Pure.

A member's parts (its partition states, delivery, offsets, handover) know a partition by one
key, a `PartitionKey`. A group on one topic uses the partition id itself, so nothing changes for
it; a group on many topics gives every topic a number when it first meets it, and the key packs
both: ``number * 2**31 + partition`` (Kafka's partition ids are 31-bit). Only the edges translate:
the paths in ZooKeeper, the Kafka clients, and the facade, which hands out `TopicPartition`.
"""

from __future__ import annotations

from typing import NamedTuple, NewType

from typing_extensions import TypeVar

__all__ = ["PARTITION_SPAN", "PartitionKey", "PartitionT", "TopicKeys", "TopicPartition"]

PartitionT = TypeVar("PartitionT", default=int)
"""How a member's user names a partition: its id (``int``, a one-topic group, the default) or a
`TopicPartition` (a group on a list of topics or a pattern)."""

PartitionKey = NewType("PartitionKey", int)
"""How a member's parts know a partition (of any topic it reads), made by `TopicKeys` (or by the
facade from a one-topic user's partition id). A type checker refuses a Kafka partition id, a
plain ``int``, where a key is meant, although the two are equal for a one-topic group (a key is
still an ``int`` to it: the paths in ZooKeeper and the Kafka clients split keys explicitly)."""

PARTITION_SPAN = 2**31
"""More than any partition id: the key of partition ``p`` of the ``n``-th topic is
``n * PARTITION_SPAN + p``."""


class TopicPartition(NamedTuple):
    """One partition of one topic: the key a many-topic group hands out batches under."""

    topic: str
    partition: int


class TopicKeys:
    """The numbers of the topics one member met, and the keys of their partitions.

    A number is never given to another topic during the member's life, so a key never names
    two partitions (a topic deleted and made again keeps its number).
    """

    def __init__(self, topics: tuple[str, ...] = ()) -> None:
        """Args:
        topics: the topics numbered first, in this order (the first one is number 0, so the
            keys of a one-topic group are its partition ids).
        """
        self._numbers: dict[str, int] = {}
        self._names: list[str] = []
        for topic in topics:
            self.number(topic)

    @property
    def names(self) -> tuple[str, ...]:
        """The topics met so far, in the order of their numbers."""
        return tuple(self._names)

    def number(self, topic: str) -> int:
        """The topic's number (a new one when met first)."""
        found = self._numbers.get(topic)
        if found is None:
            found = self._numbers[topic] = len(self._names)
            self._names.append(topic)
        return found

    def key(self, topic: str, partition: int) -> PartitionKey:
        """The key of ``partition`` of ``topic``."""
        return PartitionKey(self.number(topic) * PARTITION_SPAN + partition)

    def of(self, tp: TopicPartition) -> PartitionKey:
        """The key of ``tp``."""
        return self.key(tp.topic, tp.partition)

    def lookup(self, topic: str, partition: int) -> PartitionKey | None:
        """The key of ``partition`` of ``topic``, or None when the topic was never met."""
        number = self._numbers.get(topic)
        return None if number is None else PartitionKey(number * PARTITION_SPAN + partition)

    def split(self, key: PartitionKey) -> TopicPartition:
        """The topic and partition of ``key``.

        Raises:
            KeyError: no topic has the key's number.
        """
        number, partition = divmod(key, PARTITION_SPAN)
        if not 0 <= number < len(self._names):
            raise KeyError(key)
        return TopicPartition(self._names[number], partition)

    def topic(self, key: PartitionKey) -> str:
        """The topic of ``key``."""
        return self.split(key).topic

    def keys(self, topic: str, partitions: list[int] | tuple[int, ...]) -> list[PartitionKey]:
        """The keys of ``partitions`` of ``topic``, in their order."""
        base = self.number(topic) * PARTITION_SPAN
        return [PartitionKey(base + partition) for partition in partitions]

    def by_topic(
        self, keys: list[PartitionKey] | set[PartitionKey] | frozenset[PartitionKey]
    ) -> dict[str, list[int]]:
        """Topic -> its sorted partition ids, of ``keys``."""
        grouped: dict[str, list[int]] = {}
        for key in sorted(keys):
            topic, partition = self.split(key)
            grouped.setdefault(topic, []).append(partition)
        return grouped
