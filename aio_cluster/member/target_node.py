"""The sticky strategy's I/O: reading the published target, and publishing the next one.

The design (why one member publishes and everyone follows, and why no partition can be owned
twice) is in docs/concepts.md ("The published sticky target"); this module only moves targets
in and out of their node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence

from ..assign.target import StickyTarget, leader, next_target
from ..errors import CoordinationError
from ..zookeeper.client import BadVersionError, NodeExistsError, NoNodeError, ZooKeeper
from ..zookeeper.layout import GroupLayout, decode_target, encode_target

__all__ = ["TargetNode"]

log = logging.getLogger(__name__)


class TargetNode:
    """One group's and topic's target node, as seen by one member."""

    def __init__(self, zk: ZooKeeper, layout: GroupLayout, member: str) -> None:
        self._zk = zk
        self._path = layout.assignment
        self._member = member

    async def follow(
        self,
        members: Sequence[str],
        partitions: Collection[int],
        on_change: Callable[[], None],
    ) -> StickyTarget | None:
        """The target to follow now; ``on_change`` runs once when the node changes.

        The leader (the oldest of ``members``) first publishes the next target when the
        published one no longer fits the members or the partitions. Its write is conditional on
        the version it read, so a second member that believes it leads (for a moment, after a
        session expiry) cannot overwrite it: the loser reads again and goes on from there.

        Args:
            members: the live members of this topic and strategy, oldest first.
            partitions: the topic's partitions.
            on_change: asks for a rebalance.

        Returns:
            The target, or None when none is published yet and this member does not lead.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        while True:
            leading = leader(members) == self._member
            # The leader watches only after its own write, so that write wakes nobody but the
            # followers.
            published, read_version = await self._read(None if leading else on_change)
            if not leading:
                return published
            target = next_target(published, partitions, members)
            version = read_version
            if target is not None:
                try:
                    version = await self._write(target, read_version)
                except (BadVersionError, NodeExistsError):
                    log.info("member %s: target changed while publishing", self._member)
                    continue
                log.info(
                    "member %s published target version %d for %d members",
                    self._member,
                    target.version,
                    len(target.members),
                )
                published = target
            stat = await self._zk.exists(self._path, watch=on_change)
            if (None if stat is None else stat.version) == version:
                return published
            # Someone else wrote since: read again (the watch is set either way).

    async def _read(
        self, watch: Callable[[], None] | None
    ) -> tuple[StickyTarget | None, int | None]:
        try:
            data, stat = await self._zk.get(self._path, watch=watch)
        except NoNodeError:
            if watch is None:
                return None, None
            # Watch for its creation instead; if it appeared meanwhile, read it.
            if await self._zk.exists(self._path, watch=watch) is None:
                return None, None
            return await self._read(watch)
        try:
            return decode_target(data), stat.version
        except CoordinationError as exc:
            # Written by something else: the leader replaces it, from no history.
            log.warning("member %s: %s", self._member, exc)
            return None, stat.version

    async def _write(self, target: StickyTarget, node_version: int | None) -> int:
        """Publish ``target`` over the node at ``node_version`` (None: create it); returns the
        node's new version."""
        data = encode_target(target)
        if node_version is None:
            await self._zk.create(self._path, data, makepath=True)
            return 0
        return (await self._zk.set(self._path, data, version=node_version)).version
