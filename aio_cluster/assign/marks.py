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

A mark bars only once it has settled (``settle`` after it was written): a Kafka down for every
member makes each mark at about the same moment, one ``fetch_timeout`` after the outage began,
and a publisher that acted on the first mark it saw would move that member's partitions to
members about to mark theirs too. Until then the mark still counts against its member's
reading of others' partitions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["Mark", "barred", "settles_at"]


@dataclass(frozen=True)
class Mark:
    """What one member says it cannot read.

    Attributes:
        partitions: topic -> partition -> the node id of its leader as the member knew it
            (None: no leader known).
        since: the earliest last progress of those partitions (Unix milliseconds).
        error: the last error the member saw, or a timeout's description.
        reads: whether the member still reads some partition it owns (a partial cut).
        at: when it was written (Unix milliseconds).
        settle: how long after ``at`` it bars its member (milliseconds; see the module).
    """

    partitions: Mapping[str, Mapping[int, int | None]]
    since: int
    error: str
    reads: bool = False
    at: int = 0
    settle: int = 0
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


def barred(
    topic: str, marks: Mapping[str, Mark], members: Sequence[str], now_ms: int
) -> dict[str, set[int]]:
    """member -> the partitions of ``topic`` the assignment must not give it at ``now_ms``
    (Unix milliseconds): those it marked, with a mark settled, that another of ``members``
    (the topic's readers) counts as able to read (see the module). Members without a bar are
    left out."""
    bars: dict[str, set[int]] = {}
    for member in members:
        mark = marks.get(member)
        if mark is None or mark.at + mark.settle > now_ms:
            continue
        for partition, broker in mark.partitions.get(topic, {}).items():
            if any(
                other != member
                and (other not in marks or not marks[other].cannot_read(topic, partition, broker))
                for other in members
            ):
                bars.setdefault(member, set()).add(partition)
    return bars


def settles_at(marks: Mapping[str, Mark], now_ms: int) -> int | None:
    """The earliest moment (Unix milliseconds) after ``now_ms`` at which one of ``marks``
    settles, or None: when whoever assigns looks again."""
    return min((m.at + m.settle for m in marks.values() if m.at + m.settle > now_ms), default=None)
