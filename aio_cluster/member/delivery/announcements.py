"""Announcements: what the application's rebalance listener was told of this member's partitions.

The listener hears a partition assigned once its claim is made and announced (by
`aio_cluster.member.protocol.handover`), revoked only if it heard it assigned, and lost when a
session loss took it. That bookkeeping is apart from `PartitionStates`' transitions because it
follows the listener, not the fetcher or ZooKeeper: `PartitionStates` tells it when a claim ends
(`released`, `lost`), and the handover asks it what to say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ...kafka.topics import PartitionKey
from .claims import Claim

__all__ = ["Announcements"]


class Announcements:
    """The claimed partitions the listener heard were assigned, and those it must hear lost."""

    def __init__(self, claims: Mapping[PartitionKey, Claim]) -> None:
        """Args:
        claims: the member's claims now (`PartitionStates.claims`, a live view).
        """
        self._claims = claims
        self._announced: set[PartitionKey] = set()
        """The partitions the listener was told were assigned."""
        self._lost: set[PartitionKey] = set()
        """Partitions lost with the session, not yet reported to the listener."""

    def unannounced(self) -> list[PartitionKey]:
        """The claimed partitions the listener has not been told of, sorted."""
        return sorted(set(self._claims) - self._announced)

    def announced(self, partitions: Iterable[PartitionKey]) -> None:
        """The listener was told ``partitions`` (still claimed) are assigned."""
        self._announced.update(p for p in partitions if p in self._claims)

    def revoking(self, partitions: Iterable[PartitionKey]) -> list[PartitionKey]:
        """Of ``partitions``, those the listener must hear are revoked (it heard they were
        assigned), sorted."""
        return sorted(p for p in set(partitions) if p in self._announced)

    def take_lost(self) -> list[PartitionKey]:
        """The partitions lost since the last call, to report to the listener, sorted."""
        lost = sorted(self._lost)
        self._lost.clear()
        return lost

    def released(self, partition: PartitionKey) -> None:
        """The partition went to another member: its announcement ends with it."""
        self._announced.discard(partition)

    def lost(self) -> None:
        """The session expired: every partition announced is to be reported lost."""
        self._lost.update(self._announced)
        self._announced.clear()
