"""The handover of partitions at a rebalance: what happens to their batches and offsets while
`membership` releases and makes claims, and what the rebalance listener hears of it.

A partition leaves at a batch boundary: no new batch of it is handed out, its running body is
awaited (at most ``rebalance_timeout``), the listener hears of it, its completed offset is stored,
and only then is its claim deleted. A new claim is positioned and handed to the fetcher; its first
batch waits until the listener heard of it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

import anyio

from .claims import Claim
from .delivery import Delivery
from .listener import RebalanceListener
from .mirror import KafkaMirror
from .offsets import Offsets

__all__ = ["Handover"]

log = logging.getLogger(__name__)


class Handover:
    """Composes a member's delivery, offsets and listener into the steps a rebalance takes."""

    def __init__(
        self,
        delivery: Delivery,
        offsets: Offsets,
        claims: Mapping[int, Claim],
        mirror: KafkaMirror,
        *,
        member_id: str,
        listener: RebalanceListener | None,
        rebalance_timeout: float,
    ) -> None:
        """Args:
        delivery: the member's delivery.
        offsets: the member's offsets.
        claims: the member's claims now.
        mirror: the member's offsets in Kafka.
        member_id: named in log messages.
        listener: told of partitions that move, if given.
        rebalance_timeout: the bound on a running body and on each listener call.
        """
        self._delivery = delivery
        self._offsets = offsets
        self._claims = claims
        self._id = member_id
        self._listener = listener
        self._timeout = rebalance_timeout
        self._mirror = mirror
        self._announced: set[int] = set()
        """The partitions the listener was told were assigned."""
        self._lost: list[int] = []
        """Partitions lost with the session, not yet reported to the listener."""

    async def revoke(self, partitions: list[int]) -> None:
        """Before the claims of ``partitions`` are deleted: end their batches, tell the listener,
        store their offsets. A body still running after ``rebalance_timeout`` is abandoned: its
        batch is not committed, and the next owner gets it again."""
        with anyio.move_on_after(self._timeout):
            await self._delivery.drain(partitions)
        for partition, offset in self._delivery.abandon(partitions).items():
            log.warning(
                "member %s: the batch at offset %d of partition %d still runs after %gs; "
                "releasing the partition without committing it",
                self._id,
                offset,
                partition,
                self._timeout,
            )
        told = [p for p in partitions if p in self._announced]
        if told:
            await self._tell("on_partitions_revoked", told)
        await self._offsets.flush(self._claims, partitions)
        await self._mirror.push(self._claims, partitions)

    def released(self, partitions: list[int]) -> None:
        """The claims of ``partitions`` were deleted (or the attempt failed)."""
        gone = [p for p in partitions if p not in self._claims]
        self._announced.difference_update(gone)
        self._delivery.hand_out(partitions)
        self._delivery.forget_paused(gone)
        self._mirror.forget(gone)

    async def assigned(self, claimed: list[int]) -> bool:
        """After claims were made: position them, hand them to the fetcher, and tell the
        listener of the new ones before any of their batches is handed out.

        Returns:
            True when the fetched partitions changed.
        """
        new = [p for p in claimed if p not in self._announced]
        self._delivery.withhold(new)
        try:
            await self._mirror.take_over(self._claims)
            await self._delivery.position()
            changed = await self._delivery.reassign()
            if new:
                await self._tell("on_partitions_assigned", new)
                self._announced.update(new)
        finally:
            self._delivery.hand_out(new)
        return changed

    def lose(self) -> None:
        """The session expired: what the listener was told is ours is lost."""
        self._lost.extend(sorted(self._announced))
        self._announced.clear()

    async def report_lost(self) -> None:
        """Tell the listener of the partitions lost since the last report."""
        lost, self._lost = self._lost, []
        if lost:
            await self._tell("on_partitions_lost", sorted(set(lost)))

    async def store(self, partitions: list[int]) -> None:
        """Store the pending offsets of ``partitions`` (when leaving), in Kafka too when
        mirrored."""
        await self._offsets.flush(self._claims, partitions)
        await self._mirror.push(self._claims, partitions)

    async def _tell(self, method: str, partitions: list[int]) -> None:
        """Await the listener's method, bounded by ``rebalance_timeout``; a failure is logged."""
        hook: Callable[[list[int]], Awaitable[None]] | None = getattr(self._listener, method, None)
        if hook is None:
            return
        try:
            with anyio.move_on_after(self._timeout) as scope:
                await hook(list(partitions))
        except Exception:
            log.exception(
                "member %s: rebalance listener %s(%s) failed", self._id, method, partitions
            )
            return
        if scope.cancelled_caught:
            log.warning(
                "member %s: rebalance listener %s(%s) still ran after %gs; going on",
                self._id,
                method,
                partitions,
                self._timeout,
            )
