"""The handover of partitions at a rebalance and at leaving: the order of the steps the drivers
take while `rebalance` releases and makes claims, and what the rebalance listener hears of it.

A partition leaves at a batch boundary: no new batch of it is handed out, its running body is
awaited (at most ``rebalance_timeout``; then abandoned, and its cancelled handlers awaited), the
listener hears of it, its completed offset is stored, and only then is its claim deleted; a
partition whose handler ignores its cancellation stays, handing out nothing, until it ended. A
new claim is positioned and handed to the fetcher; its first batch waits until the listener
heard of it, and until what the claim before it noted as finished past its offset was read
(see `aio_cluster.member.delivery.finished`). When the member leaves, running bodies are not awaited
(their batches go to the next owner), but the listener hears of every partition it gives up.

The partitions' state is `aio_cluster.member.delivery.partitions.PartitionStates`; this part holds
none.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Protocol

import anyio

from ...kafka.topics import PartitionKey
from ..delivery.delivery import Delivery
from ..delivery.partitions import PartitionStates
from .listener import RebalanceListener
from .mirror import KafkaMirror
from .offsets import Offsets

if TYPE_CHECKING:
    from ...otel.telemetry import Telemetry

__all__ = ["Committer", "Handover"]

log = logging.getLogger(__name__)

_QUIET_MAX = 5.0
"""The most seconds a handover waits for cancelled handlers to end."""


class Committer(Protocol):
    """Exactly once: commits the completed offsets in Kafka transactions before ZooKeeper
    stores them (`aio_cluster.member.exactly_once.Transactions`)."""

    async def commit(self, partitions: Collection[PartitionKey]) -> None: ...


class Handover:
    """The steps of a rebalance, over a member's partition states and its drivers."""

    def __init__(
        self,
        states: PartitionStates,
        delivery: Delivery,
        offsets: Offsets,
        mirror: KafkaMirror,
        *,
        member_id: str,
        listener: RebalanceListener[PartitionKey] | None,
        rebalance_timeout: float,
        label: Callable[[PartitionKey], str] = lambda partition: f"partition {partition}",
        telemetry: Telemetry | None = None,
        committer: Committer | None = None,
    ) -> None:
        """Args:
        states: the member's partition states.
        delivery: the member's fetching and handing out.
        offsets: the member's offsets in ZooKeeper.
        mirror: the member's offsets in Kafka.
        member_id: named in log messages.
        listener: told of partitions that move, if given.
        rebalance_timeout: the bound on a running body and on each listener call.
        label: names a partition key in log messages (its topic too, of many topics).
        telemetry: runs each listener call in a span, if given.
        committer: exactly once: commits the completed offsets in Kafka before each store
            (and records finished past a prefix are never passed over by a new claim: their
            output was not committed).
        """
        self._committer = committer
        self._states = states
        self._delivery = delivery
        self._offsets = offsets
        self._mirror = mirror
        self._id = member_id
        self._listener = listener
        self._timeout = rebalance_timeout
        self._label = label
        self._telemetry = telemetry

    async def revoke(self, partitions: list[PartitionKey]) -> list[PartitionKey]:
        """Before the claims of ``partitions`` are deleted: end their batches, tell the listener,
        store their offsets. A body still running after ``rebalance_timeout`` is abandoned: its
        batch is not committed, and the next owner gets it again from its first unfinished
        record. The cancelled handlers of ``process()`` are awaited too (at most
        ``rebalance_timeout`` more, five seconds at most); a partition whose handler ignores its
        cancellation is kept, handing out nothing, so that no second member runs beside it.

        Returns:
            The partitions kept: their claims must not be deleted yet (a later rebalance tries
            again).
        """
        with anyio.move_on_after(self._timeout):
            await self._delivery.drain(partitions)
        for partition, offset in self._delivery.abandon(partitions).items():
            log.warning(
                "member %s: the batch of %s still runs after %gs; releasing the partition "
                "without committing it (the next owner starts at offset %d)",
                self._id,
                self._label(partition),
                self._timeout,
                offset,
            )
        lingering = await self._delivery.quiet(partitions, min(self._timeout, _QUIET_MAX))
        for partition, records in lingering.items():
            log.warning(
                "member %s: the handler of the record at offset %d of %s ignores its "
                "cancellation; keeping the partition until it ends",
                self._id,
                records[0].offset,
                self._label(partition),
            )
        await self._told_revoked([p for p in partitions if p not in lingering])
        return sorted(lingering)

    async def give_up(self, partitions: list[PartitionKey]) -> None:
        """The member leaves: hand out no more batches of ``partitions``, leave the running
        bodies uncommitted (they may be the caller's own), tell the listener, store the
        offsets."""
        owned = [p for p in partitions if self._states.owned(p)]
        self._states.drain(owned)
        self._delivery.abandon(owned)
        await self._told_revoked(owned)

    async def _told_revoked(self, partitions: list[PartitionKey]) -> None:
        told = self._states.announcements.revoking(partitions)
        if told:
            await self._tell("on_partitions_revoked", told)
        await self.store_and_mirror(partitions)

    def released(self, partitions: list[PartitionKey]) -> None:
        """The claims of ``partitions`` were deleted (or the attempt failed)."""
        gone = [p for p in partitions if not self._states.owned(p)]
        self._delivery.hand_out(partitions)
        self._mirror.forget(gone)

    async def assigned(self) -> bool:
        """After claims were made: position them, hand them to the fetcher, and tell the
        listener of the new ones before any of their batches is handed out.

        Returns:
            True when the fetched partitions changed.
        """
        new = self._states.announcements.unannounced()
        self._states.withhold(new)
        try:
            claims = self._states.claims
            if self._committer is None:
                await self._offsets.read_notes([claims[p] for p in new if p in claims])
            await self._mirror.take_over(self._states.claims, self._states.commits.migrated)
            await self._delivery.position()
            changed = await self._delivery.reassign()
            if new:
                await self._tell("on_partitions_assigned", new)
                self._states.announcements.announced(new)
        finally:
            self._delivery.hand_out(new)
        return changed

    async def report_lost(self) -> None:
        """Tell the listener of the partitions lost since the last report."""
        lost = self._states.announcements.take_lost()
        if lost:
            await self._tell("on_partitions_lost", lost)

    async def store(self, partitions: list[PartitionKey]) -> None:
        """Store the pending offsets of ``partitions``; the mirror copies them to Kafka soon
        after. Exactly once, the completed offsets are committed in Kafka first: only those
        become pending."""
        if self._committer is not None:
            await self._committer.commit(partitions)
        self._mirror.stored(await self._offsets.store(partitions))

    async def store_and_mirror(self, partitions: list[PartitionKey]) -> None:
        """Store the pending offsets of ``partitions`` now, and mirror them to Kafka now (before
        a handover and when leaving)."""
        await self.store(partitions)
        await self._mirror.mirror(self._states.claims, partitions)

    async def _tell(self, method: str, partitions: list[PartitionKey]) -> None:
        """Await the listener's method, bounded by ``rebalance_timeout``; a failure is logged."""
        hook: Callable[[list[PartitionKey]], Awaitable[None]] | None = getattr(
            self._listener, method, None
        )
        if hook is None:
            return
        traced = (
            contextlib.nullcontext()
            if self._telemetry is None
            else self._telemetry.listener(method, partitions)
        )
        try:
            with traced, anyio.move_on_after(self._timeout) as scope:
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
