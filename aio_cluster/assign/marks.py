"""Marks: the partitions a member cannot read, and which members the assignment bars from
which partitions for it. Pure.

A member that makes no progress reading a partition it owns for longer than its
``fetch_timeout`` writes a mark (see `aio_cluster.zookeeper.layout`): the partitions, the
leader of each as it knows it, since when and the last error. The assignment then leaves
a (member, partition) pair out when that member marked the partition and another member of the
topic can read it, so that the partition goes to one that can. When nobody can, nothing moves:
a Kafka down for every member must not shuffle the group.

Another member counts as able to read a partition when it marked nothing, or when it still
reads some of its partitions (a partial cut: it reaches some brokers) and marked neither the
partition nor any partition of the same leader. A member that only knows it cannot read
counts as able to read nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["Mark", "barred"]


@dataclass(frozen=True)
class Mark:
    """What one member says it cannot read.

    Attributes:
        partitions: topic -> partition -> the node id of its leader as the member knew it
            (None: no leader known).
        since: the earliest last progress of those partitions (Unix milliseconds).
        error: the last error the member saw, or a timeout's description.
        reads: whether the member still reads some partition it owns (a partial cut).
    """

    partitions: Mapping[str, Mapping[int, int | None]]
    since: int
    error: str
    reads: bool = False
    brokers: frozenset[int] = field(init=False)
    """The leaders named, where known."""

    def __post_init__(self) -> None:
        named = {b for ps in self.partitions.values() for b in ps.values() if b is not None}
        object.__setattr__(self, "brokers", frozenset(named))

    def cannot_read(self, topic: str, partition: int, broker: int | None) -> bool:
        """Whether this member counts as unable to read ``partition`` (led by ``broker``)."""
        if not self.reads or partition in self.partitions.get(topic, {}):
            return True
        return broker is None or broker in self.brokers


def barred(topic: str, marks: Mapping[str, Mark], members: Sequence[str]) -> dict[str, set[int]]:
    """member -> the partitions of ``topic`` the assignment must not give it: those it marked
    that another of ``members`` (the topic's readers) counts as able to read (see the
    module). Members without a bar are left out."""
    bars: dict[str, set[int]] = {}
    for member in members:
        mark = marks.get(member)
        if mark is None:
            continue
        for partition, broker in mark.partitions.get(topic, {}).items():
            if any(
                other != member
                and (other not in marks or not marks[other].cannot_read(topic, partition, broker))
                for other in members
            ):
                bars.setdefault(member, set()).add(partition)
    return bars
