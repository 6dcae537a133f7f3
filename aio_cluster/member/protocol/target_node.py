"""The sticky strategy's I/O: reading the published target, publishing the next one with its
members' shares, and reading one member's share.

The design (why one member publishes and everyone follows, why most members read only their
share, and why no partition can be owned twice) is in docs/concepts.md ("The published sticky
target"); this module only moves targets and shares in and out of their nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

from ...assign.marks import Mark
from ...assign.racks import Placement
from ...assign.shares import Share, share_changes, shares_of
from ...assign.target import (
    StickyTarget,
    follows,
    grace_ends,
    leader,
    misplaced,
    next_target,
    publishes,
)
from ...concurrency import gather, settle
from ...errors import CoordinationError
from ...zookeeper.client import BadVersionError, NodeExistsError, NoNodeError, ZooKeeper
from ...zookeeper.layout import (
    GroupLayout,
    decode_share,
    decode_target_node,
    encode_share,
    encode_target,
)
from ...zookeeper.values import Create, Delete, Op, SetData

__all__ = ["Balance", "TargetNode"]

log = logging.getLogger(__name__)


class Balance(Protocol):
    """What the other topics of a many-topic member hold: asked just before a target is
    computed, told once it is decided (see `sticky()`'s loads)."""

    async def loads(self) -> Mapping[str, int]:
        """member -> the partitions it holds of the group's other topics."""
        ...

    def decided(self, target: StickyTarget | None) -> None:
        """The target this topic follows now (None: none)."""
        ...


class TargetNode:
    """One group's and topic's target node, as seen by one member."""

    def __init__(
        self, zk: ZooKeeper, layout: GroupLayout, member: str, *, takeover_after: float = 60.0
    ) -> None:
        """Args:
        zk: the member's ZooKeeper client.
        layout: the group's paths.
        member: this member's id.
        takeover_after: the group's ``rebalance_timeout``: the k-th oldest member publishes
            when the target has not followed the registrations for k times this long.
        """
        self._zk = zk
        self._layout = layout
        self._path = layout.assignment
        self._member = member
        self._takeover_after = takeover_after
        self._last_version = -1
        """The highest target version seen: a target republished after a loss goes on from it."""
        self._node_version: int | None = None
        """The version of the node as this member last followed it (None: no node then)."""
        self._unfit: float | None = None
        """Since when (loop time) the published target has not fit the registrations: reset
        only once it fits again, so members that keep coming and going cannot put off a
        takeover for ever."""
        self._timer: asyncio.TimerHandle | None = None
        self._grace_timer: asyncio.TimerHandle | None = None
        """The publisher's wake-up at the end of the earliest grace of its target."""
        self._parents_made = False
        """Whether the parents of the target and share nodes were made sure of (on a write)."""
        self._doubted: int | None = None
        """The version of the target node whose share nodes a failed write found out of step
        (a tool deleted one): the next write lists them instead of trusting the target."""
        self._known: tuple[tuple[int, int], StickyTarget, bool] | None = None
        """The node's content last decoded or written here, by its (czxid, version): a read
        that finds the node as it was then does not decode it again. The leader reads back its
        own write and its deputy the target it read at the last change, some 50 KB at 10,000
        partitions each."""

    async def follow(
        self,
        members: Sequence[str],
        partitions: Collection[int],
        on_change: Callable[[], None],
        graces: Mapping[str, float] | None = None,
        balance: Balance | None = None,
        roster: Callable[[], bytes | None] | None = None,
        marks: Mapping[str, Mark] | None = None,
        racks: Placement | None = None,
    ) -> StickyTarget | None:
        """The target to follow now; ``on_change`` runs once when the node changes.

        The leader (the oldest of ``members``) first publishes the next target when the
        published one no longer fits the members or the partitions. Its write is conditional on
        the version it read, so a second member that believes it leads (for a moment, after a
        session expiry) cannot overwrite it: the loser reads again and goes on from there.
        Another member publishes in the leader's place when the target has not followed the
        registrations for long (`publishes()`); it sets a timer to look again then.

        Args:
            members: the live members of this topic and strategy, oldest first.
            partitions: the topic's partitions (as the leader asked Kafka; another member
                passes those it knows).
            on_change: asks for a rebalance.
            graces: member -> its ``rejoin_grace``, for the named members that have one (those
                not among ``members`` are ignored).
                The member that publishes a target keeping a member in its grace looks again
                when the grace ends (``on_change``).
            balance: the other topics' holdings: a target computed here balances the members'
                totals too, and is told to it before it is written.
            roster: the group's roster as this member read the registrations (see
                `aio_cluster.zookeeper.roster`), written with each target it publishes; None
                (or None returned): none written.
            marks: member -> what it marked unreadable: the target leaves it out of those
                partitions another member can read (see `aio_cluster.assign.marks`).
            racks: the members' racks and the partitions' replicas' racks: a target computed
                here gives partitions, where the balance allows, to members in their racks
                (see `aio_cluster.assign.racks`).

        Returns:
            The target, or None when none is published yet (or none is readable) and this
            member does not publish.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        while True:
            leading = leader(members) == self._member
            # The leader watches only after its own write, so that write wakes nobody but the
            # followers.
            published, read_version, shared = await self._read(None if leading else on_change)
            if published is not None:
                self._last_version = max(self._last_version, published.version)
            if not leading:
                if not self._takes_over(published, members, on_change):
                    return published
                # The leader has not followed the registrations for too long: publish for it,
                # over the partitions of the published target (only the leader asks Kafka).
                log.warning(
                    "member %s: the target has not followed the members for %gs; publishing "
                    "it in the leader's place",
                    self._member,
                    self._takeover_after,
                )
                if published is not None:
                    partitions = list(published.owners)
            owned = None if published is not None else await self._owners(partitions)
            loads = None if balance is None else await balance.loads()
            now_ms = int(time.time() * 1000)
            target = next_target(
                published,
                partitions,
                members,
                owned,
                graces=graces,
                now_ms=now_ms,
                loads=loads,
                marks=marks,
                topic=self._layout.topic,
                racks=racks,
            )
            if target is not None and published is None:
                target = dataclasses.replace(target, version=self._last_version + 1)
            if balance is not None:
                balance.decided(published if target is None else target)
            version = read_version
            if target is not None:
                try:
                    version = await self._write(
                        target,
                        read_version,
                        published if shared else None,
                        None if roster is None else roster(),
                    )
                except (BadVersionError, NodeExistsError, NoNodeError):
                    # Another publisher wrote first, or a share node (or a parent) is not where
                    # this member believed: read again, and list the shares (and make sure of
                    # the parents) should the target be the same.
                    log.info("member %s: target changed while publishing", self._member)
                    self._doubted = read_version
                    self._parents_made = False
                    continue
                log.info(
                    "member %s published target version %d for %d members",
                    self._member,
                    target.version,
                    len(target.members),
                )
                published = target
                self._last_version = max(self._last_version, target.version)
            stat = await self._zk.exists(self._path, watch=on_change)
            if (None if stat is None else stat.version) == version:
                self._node_version = version
                self._settle()
                self._wake_at_grace_end(
                    published if leading or target is not None else None, on_change
                )
                return published
            # Someone else wrote since: read again (the watch is set either way).

    def _takes_over(
        self,
        published: StickyTarget | None,
        members: Sequence[str],
        on_change: Callable[[], None],
    ) -> bool:
        """Whether this member (not the leader) publishes now; otherwise, while the target does
        not fit the registrations, a timer asks for a rebalance when its turn would come."""
        ordered = tuple(dict.fromkeys(members))
        if follows(published, ordered) or self._member not in ordered:
            self._settle()
            return False
        loop = asyncio.get_running_loop()
        if self._unfit is None:
            self._unfit = loop.time()
        waited = loop.time() - self._unfit
        if publishes(self._member, ordered, waited, self._takeover_after):
            return True
        due = ordered.index(self._member) * self._takeover_after - waited
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_later(due, on_change)
        return False

    def _settle(self) -> None:
        """The target fits: no takeover is due."""
        self._unfit = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _wake_at_grace_end(
        self, published: StickyTarget | None, on_change: Callable[[], None]
    ) -> None:
        """Ask for a rebalance when the earliest grace of ``published`` ends (Unix time, so a
        grace keeps its end across leaders); no grace, no timer."""
        self._cancel_grace_timer()
        until = None if published is None else grace_ends(published)
        if until is not None:
            delay = max(0.0, until / 1000 - time.time()) + 0.05
            self._grace_timer = asyncio.get_running_loop().call_later(delay, on_change)

    def _cancel_grace_timer(self) -> None:
        if self._grace_timer is not None:
            self._grace_timer.cancel()
            self._grace_timer = None

    def misplaces(self, racks: Placement) -> bool:
        """Whether the target last read or written here would move partitions to members in
        their replicas' racks under ``racks`` (see `misplaced()`); True when none was."""
        return self._known is None or misplaced(self._known[1], racks)

    async def follow_share(self, on_change: Callable[[], None]) -> Share | None:
        """This member's share of the published target; ``on_change`` runs once when it
        changes (or appears). None while the target does not count this member (or the node
        holds no readable share).

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        self.close()  # a member that follows its share publishes nothing, so waits for nothing
        path = self._layout.share(self._member)
        while True:
            try:
                data, _stat = await self._zk.get(path, watch=on_change)
            except NoNodeError:
                if await self._zk.exists(path, watch=on_change) is None:
                    return None
                continue  # made meanwhile: read it
            try:
                return decode_share(data)[1]
            except CoordinationError as exc:
                log.warning("member %s: %s", self._member, exc)
                return None

    async def delete(self) -> bool:
        """Delete the node of a topic gone from Kafka, with its shares, only at the version
        this member last followed; True when it was deleted.

        Another leader may have written a target since (the topic was made again): that one
        stays.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        if self._node_version is None:
            return False
        shares = await self._listed_shares()
        ops: list[Op] = [Delete(self._path, self._node_version)]
        ops += [Delete(self._layout.share(member)) for member in shares]
        try:
            await self._zk.transaction(ops)
        except (NoNodeError, BadVersionError):
            return False
        with contextlib.suppress(CoordinationError):  # a share made meanwhile keeps it
            await self._zk.delete(self._layout.shares)
        return True

    def close(self) -> None:
        """Cancel the timers (the member leaves)."""
        self._settle()
        self._cancel_grace_timer()

    async def _owners(self, partitions: Collection[int]) -> dict[int, str]:
        """partition -> the member its claim node names, for the claimed ones: with no target
        to go on from, the next one starts from who owns what now, so nothing moves."""
        asked = sorted(partitions)
        found = await settle(functools.partial(self._zk.get, self._layout.owner(p)) for p in asked)
        owners = {}
        for partition, result in zip(asked, found, strict=True):
            if isinstance(result, NoNodeError):
                continue
            if isinstance(result, Exception):
                raise result
            owners[partition] = result[0].decode(errors="replace")
        return owners

    async def _read(
        self, watch: Callable[[], None] | None
    ) -> tuple[StickyTarget | None, int | None, bool]:
        """The published target, its node's version, and whether its shares were written with
        it (see `decode_target_node`)."""
        try:
            data, stat = await self._zk.get(self._path, watch=watch)
        except NoNodeError:
            if watch is None:
                return None, None, False
            # Watch for its creation instead; if it appeared meanwhile, read it.
            if await self._zk.exists(self._path, watch=watch) is None:
                return None, None, False
            return await self._read(watch)
        seen = (stat.czxid, stat.version)  # a node made again starts at version 0 again
        if self._known is not None and self._known[0] == seen:
            _seen, target, shared = self._known
            return target, stat.version, shared
        try:
            target, shared = decode_target_node(data)
        except CoordinationError as exc:
            # Written by something else: the leader replaces it, from no history.
            log.warning("member %s: %s", self._member, exc)
            return None, stat.version, False
        self._known = (seen, target, shared)
        return target, stat.version, shared

    async def _write(
        self,
        target: StickyTarget,
        node_version: int | None,
        shared: StickyTarget | None,
        roster: bytes | None,
    ) -> int:
        """Publish ``target`` over the node at ``node_version`` (None: create it), its members'
        shares and the ``roster`` (None: left as it is), in one transaction; returns the node's
        new version.

        ``shared`` is the published target when its shares were written with it: then only the
        shares that differ are written (a join or a leave rewrites those of the members whose
        partitions move, and so wakes only them). Otherwise (an older publisher's target, none,
        or shares found out of step) the share nodes are listed and all of them written.
        """
        if not self._parents_made:
            parent = self._path.rsplit("/", 1)[0]
            paths = (parent, self._layout.shares, self._layout.roster)
            await gather(functools.partial(self._zk.ensure_path, path) for path in paths)
            self._parents_made = True
        before: dict[str, Share | None]
        if shared is not None and self._doubted != node_version:
            before = dict(shares_of(shared))
        else:
            before = dict.fromkeys(await self._listed_shares())
        changes = share_changes(before, shares_of(target))
        data = encode_target(target, shares=True)
        ops: list[Op] = [
            Create(self._path, data)
            if node_version is None
            else SetData(self._path, data, node_version)
        ]
        share = self._layout.share
        ops += [
            Create(share(m), encode_share(target.version, s)) for m, s in changes.created.items()
        ]
        ops += [
            SetData(share(m), encode_share(target.version, s)) for m, s in changes.changed.items()
        ]
        ops += [Delete(share(m)) for m in changes.deleted]
        if roster is not None:
            # Whatever its version: any roster is a consistent snapshot (a newcomer checks it
            # against the registrations), so the leaders of several topics may each write it.
            ops.append(SetData(self._layout.roster, roster))
        stats = await self._zk.transaction(ops)
        self._doubted = None
        first = stats[0]
        if first is None:
            return 0  # created: its czxid is not known until it is read
        self._known = ((first.czxid, first.version), target, True)
        return first.version

    async def _listed_shares(self) -> list[str]:
        """The members that have a share node now (none where the parent is missing)."""
        try:
            return await self._zk.get_children(self._layout.shares)
        except NoNodeError:
            return []
