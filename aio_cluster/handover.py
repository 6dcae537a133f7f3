"""The handover of partitions at a rebalance: what happens to their batches and offsets while
:mod:`.membership` releases and makes claims.

A partition leaves at a batch boundary: no new batch of it is handed out, its running body is
awaited, its completed offset is stored, and only then is its claim deleted. A new claim is
positioned (where no offset is stored) and handed to the fetcher before its first batch.
"""

from __future__ import annotations

from collections.abc import Mapping

from .claims import Claim
from .delivery import Delivery
from .offsets import Offsets

__all__ = ["Handover"]


class Handover:
    """Composes a member's delivery and offsets into the steps a rebalance takes."""

    def __init__(self, delivery: Delivery, offsets: Offsets, claims: Mapping[int, Claim]) -> None:
        """Args:
        delivery: the member's delivery.
        offsets: the member's offsets.
        claims: the member's claims now.
        """
        self._delivery = delivery
        self._offsets = offsets
        self._claims = claims

    async def revoke(self, partitions: list[int]) -> None:
        """Before the claims of ``partitions`` are deleted: end their batches, store offsets."""
        await self._delivery.drain(partitions)
        await self._offsets.flush(self._claims, partitions)

    def released(self, partitions: list[int]) -> None:
        """The claims of ``partitions`` were deleted (or the attempt failed)."""
        self._delivery.undrain(partitions)

    async def assigned(self) -> bool:
        """After claims were made: position them and hand them to the fetcher.

        Returns:
            True when the fetched partitions changed.
        """
        await self._delivery.position()
        return await self._delivery.reassign()

    async def store(self, partitions: list[int]) -> None:
        """Store the pending offsets of ``partitions`` (when leaving)."""
        await self._offsets.flush(self._claims, partitions)
