"""Stored offsets: reading them, and writing the pending ones in a transaction fenced by the claims.

An offset is written only while this member's claim node of the partition is the one it created
(a ``Check`` of the node's version in the same transaction), so a member that lost a partition
never overwrites the offset its next owner stores.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import anyio

from ..zookeeper.client import Check, Create, NodeExistsError, NoNodeError, SetData, ZooKeeper
from ..zookeeper.layout import GroupLayout, decode_offset
from .claims import Claim
from .partitions import PartitionStates

__all__ = ["Offsets"]


class Offsets:
    """The offsets of one group's topic in ZooKeeper: the driver that stores what the partition
    states hold pending."""

    def __init__(self, zk: ZooKeeper, layout: GroupLayout, states: PartitionStates) -> None:
        """Args:
        zk: the member's ZooKeeper client.
        layout: the group's paths.
        states: the member's partition states: asked what is due, told what was stored.
        """
        self._zk = zk
        self._layout = layout
        self._states = states
        self._flush_lock = asyncio.Lock()
        """Serialises offset writes, so a later write never overtakes an earlier one."""

    async def stored(self, partition: int) -> int | None:
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

    async def flush(self, partitions: Iterable[int]) -> dict[int, int]:
        """Store the pending offsets of the given owned partitions in one transaction, fenced
        by their claim nodes: nothing is written for a partition that is no longer ours.

        Args:
            partitions: the partitions whose pending offsets to store; one not owned is skipped.

        Returns:
            Partition -> offset stored, of the partitions still owned (for the mirror).

        The write is shielded from cancellation (and bounded by the request timeout), so that
        what this member believes is stored is what ZooKeeper stored.
        """
        async with self._flush_lock:
            due = self._states.due(partitions)
            if not due:
                return {}
            with anyio.CancelScope(shield=True):
                try:
                    written = await self._write(due)
                except (NodeExistsError, NoNodeError):
                    # An offset node appeared or vanished behind our back (another tool):
                    # learn what is stored now and write once more.
                    for claim in due:
                        self._states.learned(claim, await self.stored(claim.partition))
                    written = await self._write(due)
            return self._states.stored(written)

    async def _write(self, claims: list[Claim]) -> dict[Claim, int]:
        written = {claim: claim.pending for claim in claims if claim.pending is not None}
        ops: list[Check | Create | SetData] = []
        for claim, offset in written.items():
            ops.append(Check(self._layout.owner(claim.partition), claim.node_version))
            data = str(offset).encode()
            path = self._layout.offset(claim.partition)
            ops.append(SetData(path, data) if claim.stored is not None else Create(path, data))
        await self._zk.transaction(ops)
        return written
