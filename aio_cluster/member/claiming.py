"""Claim nodes: taking a partition's ephemeral owner node in ZooKeeper, and giving it back.

A partition is this member's while its owner node holds this member's id and belongs to this
member's session. Taking waits, by watch, for the previous owner to let go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ..zookeeper.client import NodeExistsError, NoNodeError, ZooKeeper
from ..zookeeper.layout import GroupLayout

__all__ = ["ClaimNodes"]

log = logging.getLogger(__name__)


class ClaimNodes:
    """One member's owner nodes of one group's topic."""

    def __init__(self, zk: ZooKeeper, layout: GroupLayout, member_id: str) -> None:
        """Args:
        zk: the member's ZooKeeper client.
        layout: the group's paths.
        member_id: written into each owner node.
        """
        self._zk = zk
        self._layout = layout
        self._id = member_id
        self.timeouts = 0
        """Claims not made within their bound (and not given up for a newer rebalance)."""

    async def take(self, partition: int, bound: float, newer: asyncio.Event) -> int | None:
        """Create the partition's owner node, waiting up to ``bound`` seconds for the previous
        owner to release it.

        Args:
            partition: the partition to claim.
            bound: the most seconds to wait.
            newer: set when a newer rebalance is asked for: waiting is given up.

        Returns:
            The node's version, or None when it was not released in time (or ``newer`` was set).
        """
        path = self._layout.owner(partition)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound
        while True:
            try:
                await self._zk.create(path, self._id.encode(), ephemeral=True)
                return 0
            except NodeExistsError:
                pass
            try:
                data, stat = await self._zk.get(path)
            except NoNodeError:
                continue
            if data == self._id.encode() and stat.ephemeral_owner == self._zk.session_id:
                return stat.version
            remaining = deadline - loop.time()
            if remaining > 0 and await self._wait_released(path, remaining, newer):
                continue
            if not newer.is_set():
                self.timeouts += 1
                log.warning(
                    "member %s: partition %d still owned by %s after %gs; retrying later",
                    self._id,
                    partition,
                    data.decode(errors="replace"),
                    bound,
                )
            return None

    async def release(self, partition: int, version: int) -> None:
        """Delete the partition's owner node, if it is still the one of that version."""
        with contextlib.suppress(NoNodeError):
            await self._zk.delete(self._layout.owner(partition), version=version)

    async def _wait_released(self, path: str, bound: float, newer: asyncio.Event) -> bool:
        """Wait for an owner node to go; False on time-out or when ``newer`` is set."""
        deleted = asyncio.ensure_future(self._zk.wait_deleted(path))
        interrupted = asyncio.ensure_future(newer.wait())
        try:
            await asyncio.wait(
                {deleted, interrupted}, timeout=bound, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiter in (deleted, interrupted):
                waiter.cancel()
            await asyncio.gather(deleted, interrupted, return_exceptions=True)
        return deleted.done() and not deleted.cancelled() and deleted.exception() is None
