"""A claim: one partition this member owns, and what the member knows about it.

Plain data, changed only by `aio_cluster.member.delivery.partitions.PartitionStates` (the owner of
every partition's state) and its parts (`feed`, `commits`); the drivers (`rebalance`, `delivery`,
`offsets`) read it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ...kafka.records import Record
from ...kafka.topics import PartitionKey

__all__ = ["UNPOSITIONED", "Batch", "Claim"]

Batch = list[Record]
"""A non-empty list of records of one partition, in offset order."""

UNPOSITIONED = -1
"""The next offset of a claim whose start is not known yet."""


@dataclass(eq=False)
class Claim:
    """A partition this member owns: one object per claim, so a batch handed out under an earlier
    claim of the same partition (before a session loss) can be told apart."""

    partition: PartitionKey
    node_version: int
    """The version of the owner node this claim made (or adopted)."""
    next_offset: int
    """The offset of the next record to hand out."""
    stored: int | None
    """The offset stored in ZooKeeper, as far as this member knows."""
    pending: int | None = None
    """A completed batch's next offset, not yet stored."""
    ready: int | None = None
    """Exactly once: a completed batch's next offset, not yet committed in the partition's
    transaction (once committed, it becomes ``pending``)."""
    buffered: deque[Batch] = field(default_factory=deque)
    sizes: deque[int] = field(default_factory=deque)
    """The record bytes of each buffered batch, in step with ``buffered`` (the budget's
    measure, see `aio_cluster.member.delivery.partitions.PartitionStates.buffered_bytes`)."""
    earliest: int | None = None
    """The partition's earliest offset when it was positioned (only where none was stored)."""
    epoch: int = 0
    """The version of the partition's fence node this claim set (see
    `aio_cluster.member.protocol.claiming`): every offset write checks it, so a write under a claim
    that is gone fails."""
    fenced: bool = False
    """A write found the fence moved: the claim is no longer ours, nothing is stored for it any
    more, and the next rebalance drops it."""
