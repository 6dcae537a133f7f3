"""Stored offsets: reading them, and writing the pending ones in a transaction fenced by the claims.

An offset is written only while this member's claim of the partition holds: the same transaction
checks the owner node's version and the partition's fence at the claim's epoch (see
`aio_cluster.member.claiming`), so a member whose claim is gone (its session expired, its node was
replaced, an offset reset bumped the fence) never overwrites what the next owner, or the reset,
stored. A claim such a write finds gone is marked ``fenced``: nothing is stored for it again, its
offsets are not mirrored, and ``on_fenced`` asks for the rebalance that drops it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

import anyio

from ..kafka.topics import PartitionKey
from ..zookeeper.client import (
    BadVersionError,
    Check,
    Create,
    NodeExistsError,
    NoNodeError,
    Op,
    SetData,
    ZooKeeper,
)
from ..zookeeper.layout import decode_offset
from .claims import Claim
from .keyed_layout import KeyedLayout
from .partitions import PartitionStates

__all__ = ["Offsets"]

log = logging.getLogger(__name__)


class Offsets:
    """The offsets of one member's partitions in ZooKeeper, over every topic it reads: the driver
    that stores what the partition states hold pending."""

    def __init__(
        self,
        zk: ZooKeeper,
        layout: KeyedLayout,
        states: PartitionStates,
        *,
        on_fenced: Callable[[list[PartitionKey]], None] = lambda partitions: None,
    ) -> None:
        """Args:
        zk: the member's ZooKeeper client.
        layout: the group's paths.
        states: the member's partition states: asked what is due, told what was stored and
            which claims a write found gone.
        on_fenced: called with the partitions whose claims a write found gone (the states mark
            them ``fenced``): their offsets must not be mirrored, and a rebalance drops them.
        """
        self._zk = zk
        self._layout = layout
        self._states = states
        self._on_fenced = on_fenced
        self._store_lock = asyncio.Lock()
        """Serialises offset writes, so a later write never overtakes an earlier one."""

    async def stored(self, partition: PartitionKey) -> int | None:
        """The offset stored for ``partition``, or None when none is.

        Raises:
            CoordinationError: ZooKeeper failed, or the node holds no offset.
        """
        path = self._layout.offset(partition)
        try:
            data, _stat = await self._zk.get(path)
        except NoNodeError:
            return None
        return decode_offset(path, data)

    async def store(self, partitions: Iterable[PartitionKey]) -> dict[PartitionKey, int]:
        """Store the pending offsets of the given owned partitions in one transaction, fenced
        by their claims: nothing is written for a partition that is no longer ours.

        Args:
            partitions: the partitions whose pending offsets to store; one not owned, or whose
                claim is ``fenced``, is skipped.

        Returns:
            Partition -> offset stored, of the partitions still owned (for the mirror).

        A claim the write finds gone is marked ``fenced`` (its offset is not stored; the caller
        can tell); the others are stored. The write is shielded from cancellation (and bounded by
        the request timeout), so that what this member believes is stored is what ZooKeeper
        stored.
        """
        async with self._store_lock:
            due = self._states.unstored(partitions)
            if not due:
                return {}
            with anyio.CancelScope(shield=True):
                try:
                    written = await self._write(due)
                except (NodeExistsError, NoNodeError, BadVersionError):
                    # A claim is gone, or an offset node appeared or vanished behind our back
                    # (another tool): drop the claims that are gone, learn what is stored now,
                    # and write the others once more.
                    due = await self._still_ours(due)
                    for claim in due:
                        self._states.learned(claim, await self.stored(claim.partition))
                    written = await self._write(due)
            return self._states.stored(written)

    async def _still_ours(self, claims: list[Claim]) -> list[Claim]:
        """The claims that still hold: their owner node of this session at its version, their
        fence at their epoch. The others are marked ``fenced``, and are never written again."""
        held = await asyncio.gather(*(self._holds(claim) for claim in claims))
        gone = [claim for claim, holds in zip(claims, held, strict=True) if not holds]
        if gone:
            partitions = self._states.fenced_off(gone)
            log.warning(
                "partitions %s: the claims are gone (their owner node was replaced, or a "
                "newer claim or an offset reset moved their fence); their offsets are not stored",
                self._layout.labels(partitions),
            )
            self._on_fenced(partitions)
        return [claim for claim, holds in zip(claims, held, strict=True) if holds]

    async def _holds(self, claim: Claim) -> bool:
        try:
            _data, owner = await self._zk.get(self._layout.owner(claim.partition))
        except NoNodeError:
            return False
        fence = await self._zk.exists(self._layout.fence(claim.partition))
        return (
            owner.ephemeral_owner == self._zk.session_id
            and owner.version == claim.node_version
            and fence is not None
            and fence.version == claim.epoch
        )

    async def _write(self, claims: list[Claim]) -> dict[Claim, int]:
        written = {claim: claim.pending for claim in claims if claim.pending is not None}
        ops: list[Op] = []
        for claim, offset in written.items():
            ops.append(Check(self._layout.owner(claim.partition), claim.node_version))
            ops.append(Check(self._layout.fence(claim.partition), claim.epoch))
            data = str(offset).encode()
            path = self._layout.offset(claim.partition)
            ops.append(SetData(path, data) if claim.stored is not None else Create(path, data))
        await self._zk.transaction(ops)
        return written
