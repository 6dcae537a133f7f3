"""Claim nodes: taking a partition's ephemeral owner node in ZooKeeper under a new epoch, giving
it back, and deleting the nodes of this member's session that no claim accounts for.

A partition is this member's while its owner node holds this member's id and belongs to this
member's session, and the partition's fence is at the claim's epoch. Taking waits, by watch, for
the previous owner to let go (a node in the way is read and watched in one request).

**Epochs that fence.** A claim is one transaction: create the owner node, set it once (so the
owner node of a claim is at version 1; a node made by hand or by another tool is at version 0),
and bump the version of the partition's persistent fence node (created by the partition's first
claim). The fence's new version is the claim's *epoch*: no earlier claim of the partition had it.
Every offset write (`aio_cluster.member.protocol.offsets`) and every release checks the owner node's
version and the fence's in the same transaction as the write, so a member whose claim is gone (its
session expired, its node was replaced, its request was queued across a reconnect, an offset reset
bumped the fence) can never store an offset or delete a node of that partition again. A node of
this member's own session met when claiming is adopted: the fence is bumped over it, which gives
the adoption an epoch of its own. A named member (``member_name``) also replaces at once a node
that names it but belongs to another session: its own older run, restarted before that run's
session expired; the fence bumped in the same transaction fences the older run off.

**Nodes nobody owns.** A create that timed out on the client may still happen on the server,
and a delete may fail: either leaves an owner node of this member's session that it does not know
it holds, which would block the partition's next owner for as long as the session lives. Kazoo
sends a request queued while it reconnects on the session it reconnects to, even when that is a
new session after an expiry: such a node belongs to the member's *next* session. Each partition
touched by a request whose outcome is unknown is remembered, whatever the session, and
`reconcile()` (after each rebalance) deletes those of its nodes that belong to the session of the
moment and that no claim accounts for, under the partition's fence as read first (a claim made
meanwhile moves it). Kazoo sends one client's requests in order, and ZooKeeper answers one
session's in order, so once the reconciling read returns, no earlier request is still on its
way (and a partition claimed since has its node accounted for). A claim that waits on a node of no
registered member's session (a stranger's, or one left by a member that is not registered any
more) gives up within ``claim_timeout``, with a warning and a count in ``unowned``.

A fence node must outlive the group's members: deleted and created again, it starts at version 0
once more, and an old claim of the same epoch would pass its check.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Collection
from dataclasses import dataclass

import anyio

from ...concurrency import settle
from ...errors import CoordinationError
from ...kafka.topics import PartitionKey
from ...zookeeper.client import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    WatchedNode,
    ZooKeeper,
)
from ...zookeeper.values import Check, Create, Delete, Op, SetData, Stat
from .keyed_layout import KeyedLayout

__all__ = ["ClaimNodes", "Taken"]

log = logging.getLogger(__name__)

CLAIMED_VERSION = 1
"""The version of an owner node a claim created: created and set once in one transaction."""

_DEFINITE = (NodeExistsError, NoNodeError, BadVersionError)
"""Errors after which a request certainly changed nothing."""


@dataclass(frozen=True)
class Taken:
    """A claim made: the owner node's version and the claim's epoch (its fence's version)."""

    node_version: int
    epoch: int


class ClaimNodes:
    """One member's owner nodes, over every topic it reads (partitions given by key)."""

    def __init__(
        self, zk: ZooKeeper, layout: KeyedLayout, member_id: str, *, takes_over: bool = False
    ) -> None:
        """Args:
        zk: the member's ZooKeeper client.
        layout: the group's paths, by partition key.
        member_id: written into each owner node.
        takes_over: the id is a member name, and an owner node naming it but held by another
            session is an older run's of this member: it is replaced at once, not waited for.
        """
        self._zk = zk
        self._layout = layout
        self._id = member_id
        self._takes_over = takes_over
        self.timeouts = 0
        """Claims not made within their bound (and not given up for a newer rebalance)."""
        self.unowned = 0
        """Of those, the claims given up on a node that no registered member's session holds."""
        self._doubtful: set[PartitionKey] = set()
        """Partitions touched by a request on their owner node whose outcome is unknown (in
        whichever session: a queued request may be sent on the next one)."""

    async def take(
        self, partition: PartitionKey, bound: float, newer: asyncio.Event
    ) -> Taken | None:
        """Create the partition's owner node under a new epoch, waiting up to ``bound`` seconds
        for the previous owner to release it; a node of this member's session is adopted.

        Args:
            partition: the partition to claim.
            bound: the most seconds to wait.
            newer: set when a newer rebalance is asked for: waiting is given up.

        Returns:
            The claim, or None when the node was not released in time (or ``newer`` was set).
        """
        path = self._layout.owner(partition)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound
        while True:
            try:
                return await self._create(partition)
            except NodeExistsError:
                pass
            try:
                # Read and watched at once: at a join most first tries meet a node its owner
                # has not released yet, and a read, then a watch, cost a call more each.
                node = await self._zk.watched(path)
            except NoNodeError:
                continue
            with node:
                stat = node.stat
                if stat.ephemeral_owner == self._zk.session_id:
                    try:
                        epoch = await self._bump(partition, [Check(path, stat.version)])
                    except (BadVersionError, NoNodeError):
                        continue
                    return Taken(stat.version, epoch)
                if self._takes_over and node.data == self._id.encode():
                    try:
                        return await self._replace(partition, stat.version)
                    except (BadVersionError, NoNodeError, NodeExistsError):
                        continue
                remaining = deadline - loop.time()
                if remaining > 0 and await self._wait_changed(node, remaining, newer):
                    continue
            if not newer.is_set():
                self.timeouts += 1
                await self._give_up(partition, node.data, stat, bound)
            return None

    async def release(self, partition: PartitionKey, node_version: int, epoch: int) -> None:
        """Delete the partition's owner node if the claim of ``node_version`` and ``epoch`` still
        holds it. When the fence has moved, a node of this session is deleted all the same (an
        offset reset bumped the fence), and a node of another session is left alone. One that
        fails (unless certainly without effect) or is cancelled leaves the partition to
        `reconcile()`."""
        ops: list[Op] = [
            Check(self._layout.fence(partition), epoch),
            Delete(self._layout.owner(partition), node_version),
        ]
        try:
            await self._zk.transaction(ops)
            return
        except (BadVersionError, NoNodeError):
            pass
        except CoordinationError as exc:
            self._doubt(partition, exc)
            raise
        except asyncio.CancelledError:
            # Sent or not, its outcome is unknown: `reconcile()` deletes a node left behind.
            self._doubtful.add(partition)
            raise
        await self._delete_stray(partition)

    async def unrecorded(self, partition: PartitionKey, node_version: int, epoch: int) -> None:
        """A node just taken is recorded by no claim (what followed the take failed): release
        it, shielded from the caller's cancellation and never raising; a release that fails
        leaves the node to `reconcile()`."""
        with anyio.CancelScope(shield=True):
            try:
                await self.release(partition, node_version, epoch)
            except CoordinationError as exc:
                self._doubtful.add(partition)
                log.warning(
                    "member %s: the owner node of %s, taken without a claim, was not deleted "
                    "(%s); the next rebalance deletes it",
                    self._id,
                    self._layout.label(partition),
                    exc,
                )

    async def reconcile(self, claimed: Collection[PartitionKey]) -> None:
        """Delete the owner nodes of this session that no claim in ``claimed`` accounts for,
        among the partitions a request of unknown outcome touched (see the module).

        Raises:
            CoordinationError: ZooKeeper failed; the partitions stay to be reconciled.
        """
        # A partition claimed has its node accounted for (made or adopted since); a failure
        # below marks the others again.
        stray = sorted(self._doubtful.difference(claimed))
        self._doubtful.clear()
        results = await settle(functools.partial(self._delete_stray, p) for p in stray)
        failed = [
            (partition, result)
            for partition, result in zip(stray, results, strict=True)
            if isinstance(result, Exception)
        ]
        self._doubtful.update(partition for partition, _result in failed)
        if failed:
            raise failed[0][1]

    async def _create(self, partition: PartitionKey) -> Taken:
        """The claim transaction: the owner node, at `CLAIMED_VERSION`, and the fence bumped."""
        owner = self._layout.owner(partition)
        data = self._id.encode()
        epoch = await self._bump(
            partition, [Create(owner, data, ephemeral=True), SetData(owner, data)]
        )
        return Taken(CLAIMED_VERSION, epoch)

    async def _replace(self, partition: PartitionKey, node_version: int) -> Taken:
        """Take over the owner node of an older run of this named member (its session may
        live on for ``session_timeout`` after a SIGKILL): delete it and claim, in one
        transaction that bumps the fence, so that the older run, if it is alive, can store no
        offset and delete no node of the partition again."""
        owner = self._layout.owner(partition)
        data = self._id.encode()
        epoch = await self._bump(
            partition,
            [
                Delete(owner, node_version),
                Create(owner, data, ephemeral=True),
                SetData(owner, data),
            ],
        )
        log.info("member %s: took partition %d over from its older run", self._id, partition)
        return Taken(CLAIMED_VERSION, epoch)

    async def _bump(self, partition: PartitionKey, ops: list[Op]) -> int:
        """Apply ``ops`` with the partition's fence bumped (created, at the partition's first
        claim); returns the fence's new version."""
        fence = self._layout.fence(partition)
        data = self._id.encode()
        try:
            try:
                results = await self._zk.transaction([*ops, SetData(fence, data)])
            except NoNodeError:
                if await self._zk.exists(fence) is not None:
                    raise  # not the fence: a node of ``ops`` is missing
                await self._zk.ensure_path(self._layout.fences(partition))
                await self._zk.transaction([*ops, Create(fence, data)])
                return 0
        except CoordinationError as exc:
            self._doubt(partition, exc)
            raise
        stat = results[-1]
        assert stat is not None, "a SetData step returns a stat"
        return stat.version

    async def _delete_stray(self, partition: PartitionKey) -> bool:
        """Delete the partition's owner node if this session holds it, under the fence as it is
        now: a claim made meanwhile moves the fence, and the delete fails. True when deleted."""
        fence = self._layout.fence(partition)
        owner = self._layout.owner(partition)
        # The fence first: any claim after this read moves it, so the delete cannot hit one.
        fence_stat = await self._zk.exists(fence)
        try:
            _data, stat = await self._zk.get(owner)
        except NoNodeError:
            return False
        if stat.ephemeral_owner != self._zk.session_id:
            return False
        guard: Op = Create(fence, b"") if fence_stat is None else Check(fence, fence_stat.version)
        try:
            await self._zk.transaction([guard, Delete(owner, stat.version)])
        except _DEFINITE:
            # The fence or the node moved meanwhile: look again at the next reconciliation.
            self._doubtful.add(partition)
            return False
        except CoordinationError as exc:
            self._doubt(partition, exc)
            raise
        log.info(
            "member %s: deleted the owner node of %s that its session held without a claim",
            self._id,
            self._layout.label(partition),
        )
        return True

    def _doubt(self, partition: PartitionKey, exc: CoordinationError) -> None:
        """A request on the partition's owner node failed: unless it certainly changed nothing,
        it may have happened, or happen still."""
        if not isinstance(exc, _DEFINITE):
            self._doubtful.add(partition)

    async def _give_up(
        self, partition: PartitionKey, data: bytes, stat: Stat, bound: float
    ) -> None:
        """Log why a claim is given up, and count a node that no registered member holds."""
        holder = data.decode(errors="replace")
        if await self._unowned(holder, stat):
            self.unowned += 1
            log.warning(
                "member %s: %s still owned by %s after %gs, by session %#x of no "
                "registered member: nobody releases it; retrying later (delete %s if no "
                "consumer holds it)",
                self._id,
                self._layout.label(partition),
                holder,
                bound,
                stat.ephemeral_owner,
                self._layout.owner(partition),
            )
            return
        log.warning(
            "member %s: %s still owned by %s after %gs; retrying later",
            self._id,
            self._layout.label(partition),
            holder,
            bound,
        )

    async def _unowned(self, holder: str, stat: Stat) -> bool:
        """Whether no registered member holds an owner node: no registration of the member it
        names, or one of another session than the node's."""
        if not holder or "/" in holder or holder in {".", ".."}:
            return True  # not a path segment, so no member's id
        try:
            _data, registration = await self._zk.get(self._layout.member(holder))
        except NoNodeError:
            return True
        except CoordinationError:
            return False  # unknown: say nothing more than that the claim timed out
        return registration.ephemeral_owner != stat.ephemeral_owner

    async def _wait_changed(self, node: WatchedNode, bound: float, newer: asyncio.Event) -> bool:
        """Wait for an owner node to change or go (or the session's state to change: look
        again); False on time-out or when ``newer`` is set."""
        changed = False
        with anyio.move_on_after(bound):
            async with anyio.create_task_group() as waiting:

                async def on_change() -> None:
                    nonlocal changed
                    await node.changed()
                    changed = True
                    waiting.cancel_scope.cancel()

                async def on_newer() -> None:
                    await newer.wait()
                    waiting.cancel_scope.cancel()

                waiting.start_soon(on_change)
                waiting.start_soon(on_newer)
        return changed
