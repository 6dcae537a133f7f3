"""The rebalance listener: how an application hears which partitions come and go.

Subclass [RebalanceListener][aio_cluster.RebalanceListener] and override what you need; every
method is awaited by the member's rebalance, bounded by its ``rebalance_timeout``. A method that
raises is logged, and the group goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic

from ...errors import UnreadableError
from ...kafka.topics import PartitionKey, PartitionT

__all__ = ["NamingListener", "RebalanceListener"]


class RebalanceListener(Generic[PartitionT]):
    """Hooks around a rebalance; the defaults do nothing.

    A group on one topic passes partition ids (``RebalanceListener`` is
    ``RebalanceListener[int]``); a group on a list of topics or a pattern passes
    [TopicPartition][aio_cluster.TopicPartition]s (subclass ``RebalanceListener[TopicPartition]``).

    Only partitions that actually move are passed: a partition that stays this member's is
    neither revoked nor assigned again. Leaving the group with ``close()`` awaits
    `on_partitions_revoked` for every partition it gives up (running batch bodies are not awaited
    then). A method may ``await group.close()`` itself without deadlocking the member.
    """

    async def on_partitions_revoked(self, partitions: list[PartitionT]) -> None:
        """The partitions are about to be released.

        Awaited after their running batch bodies ended and before their offsets are stored, so
        it may flush the application's own work and still ``await group.commit(...)`` for them.
        """

    async def on_partitions_assigned(self, partitions: list[PartitionT]) -> None:
        """The partitions were claimed and positioned; none of their batches was handed out yet."""

    async def on_partitions_lost(self, partitions: list[PartitionT]) -> None:
        """The ZooKeeper session expired: the partitions are gone already.

        Nothing can be committed for them any more (``commit`` raises ``NotOwnedError``); their
        uncommitted batches go to whoever owns them next.
        """

    async def on_partitions_unreadable(
        self, partitions: list[PartitionT], error: UnreadableError
    ) -> None:
        """This member could not read the partitions for half ``fetch_timeout`` (their
        leader, ``error.broker``, does not answer or refuses, ``error.error``) and marked them
        unreadable: the group gives them to members that can read them, and
        `on_partitions_revoked` follows as they go. Told once per change of state, not per
        retry; awaited in the member's background, bounded by ``fetch_timeout``.
        """


class NamingListener(RebalanceListener[PartitionKey]):
    """Passes a many-topic member's partition keys to its user's listener by the names the user
    knows them by (TopicPartitions), sorted."""

    def __init__(
        self, listener: RebalanceListener[Any], name: Callable[[PartitionKey], Any]
    ) -> None:
        self._listener = listener
        self._name = name

    async def on_partitions_revoked(self, partitions: list[PartitionKey]) -> None:
        await self._tell("on_partitions_revoked", partitions)

    async def on_partitions_assigned(self, partitions: list[PartitionKey]) -> None:
        await self._tell("on_partitions_assigned", partitions)

    async def on_partitions_lost(self, partitions: list[PartitionKey]) -> None:
        await self._tell("on_partitions_lost", partitions)

    async def on_partitions_unreadable(
        self, partitions: list[PartitionKey], error: UnreadableError
    ) -> None:
        await self._tell("on_partitions_unreadable", partitions, error)

    async def _tell(self, method: str, partitions: list[PartitionKey], *more: object) -> None:
        hook = getattr(self._listener, method, None)  # a listener may lack a hook
        if hook is not None:
            await hook(sorted(self._name(key) for key in partitions), *more)
