"""KeyedLayout: the ZooKeeper paths of a member's partition keys, over every topic it reads.

A member's parts know a partition by its key (`aio_cluster.kafka.topics.TopicKeys`); the owner,
offset and fence nodes stay per topic, as the classic layout has them, so this turns a key into
the paths of its topic's `GroupLayout`. Every path comes from `aio_cluster.zookeeper.layout`.
"""

from __future__ import annotations

from ...kafka.topics import PartitionKey, TopicKeys, TopicPartition
from ...zookeeper.layout import (
    ROOT,
    GroupLayout,
    ids_path,
    mark_path,
    marks_path,
    member_path,
    roster_path,
)

__all__ = ["KeyedLayout"]


class KeyedLayout:
    """The paths of one group's nodes, for partitions given by key."""

    def __init__(self, group: str, keys: TopicKeys, *, many: bool) -> None:
        """Args:
        group: the group's name (checked by `GroupLayout`).
        keys: the member's topic numbers.
        many: whether the member reads many topics (its logs name the topic of a partition).
        """
        self.group = group
        self.keys = keys
        self.many = many
        self._layouts: dict[str, GroupLayout] = {}

    def of(self, topic: str) -> GroupLayout:
        """The classic layout of ``topic`` in this group."""
        found = self._layouts.get(topic)
        if found is None:
            found = self._layouts[topic] = GroupLayout(self.group, topic)
        return found

    def _split(self, key: PartitionKey) -> tuple[GroupLayout, int]:
        tp = self.keys.split(key)
        return self.of(tp.topic), tp.partition

    @property
    def root(self) -> str:
        """The parent of every group's nodes."""
        return ROOT

    @property
    def ids(self) -> str:
        """The parent of the members' registrations."""
        return ids_path(self.group)

    def member(self, member_id: str) -> str:
        """A member's registration node."""
        return member_path(self.group, member_id)

    @property
    def marks(self) -> str:
        """The parent of the marks of the members that cannot read."""
        return marks_path(self.group)

    def mark(self, member_id: str) -> str:
        """A member's mark node."""
        return mark_path(self.group, member_id)

    @property
    def roster(self) -> str:
        """The registrations the group's sticky leader last read (a newcomer starts there)."""
        return roster_path(self.group)

    def owner(self, key: PartitionKey) -> str:
        """The claim node of the partition of ``key``."""
        layout, partition = self._split(key)
        return layout.owner(partition)

    def offset(self, key: PartitionKey) -> str:
        """The stored offset node of the partition of ``key``."""
        layout, partition = self._split(key)
        return layout.offset(partition)

    def fence(self, key: PartitionKey) -> str:
        """The claim fence of the partition of ``key``."""
        layout, partition = self._split(key)
        return layout.fence(partition)

    def fences(self, key: PartitionKey) -> str:
        """The parent of the fences of the topic of ``key``."""
        return self._split(key)[0].fences

    def note(self, key: PartitionKey) -> str:
        """The note of the records finished past the stored offset of the partition of ``key``."""
        layout, partition = self._split(key)
        return layout.note(partition)

    def finished(self, key: PartitionKey) -> str:
        """The parent of the notes of the topic of ``key``."""
        return self._split(key)[0].finished

    def name(self, key: PartitionKey) -> TopicPartition | int:
        """How the user knows the partition of ``key``: its id in a one-topic group, else its
        TopicPartition."""
        tp = self.keys.split(key)
        return tp if self.many else tp.partition

    def label(self, key: PartitionKey) -> str:
        """The partition of ``key`` in a log line: ``partition 3`` or ``partition 3 of 't'``."""
        tp = self.keys.split(key)
        return f"partition {tp.partition}" + (f" of {tp.topic!r}" if self.many else "")

    def labels(self, keys: list[PartitionKey]) -> str:
        """Partitions in a log line."""
        if not self.many:
            return str(list(keys))  # a one-topic group's keys are its partition ids
        return str([tuple(self.keys.split(key)) for key in keys])
