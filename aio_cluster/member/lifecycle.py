"""GroupState: the stages of a member's life, shared by the facade and its statistics."""

from __future__ import annotations

import enum

__all__ = ["GroupState"]


class GroupState(enum.Enum):
    """The life of a [ConsumerGroup][aio_cluster.ConsumerGroup].

    NEW --register()--> JOINING --first rebalance done--> JOINED --close()--> CLOSING --> CLOSED.
    A failed join goes to CLOSED. close() from NEW goes straight to CLOSED. CLOSED is final:
    registering again raises [GroupClosedError][aio_cluster.GroupClosedError].
    """

    NEW = "new"
    JOINING = "joining"
    JOINED = "joined"
    CLOSING = "closing"
    CLOSED = "closed"
