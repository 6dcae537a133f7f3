"""Registrar: this member's node under ``ids``, the name it holds, and the members it sees.

A member joins by creating its ephemeral registration; the rebalance reads everyone's to know
who shares each topic, oldest (by creation zxid) first. This part owns those nodes as one member
sees them: creating its own (and, for a named member, taking its name over from an older run),
watching that nobody takes the name from it, the cache of the members' registrations, and the
check that they all assign with the same strategy. It makes no claim and reads no topic: the
assignment (`aio_cluster.member.protocol.assignment`) asks it who the members are.

A newcomer starts its cache from the group's roster (`aio_cluster.zookeeper.roster`), which
the sticky leader writes from its own cache: it then reads only the registrations the roster
lacks, not one per member.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Collection
from typing import TypeVar

from ...assign.strategies import Strategy
from ...assign.subscription import Subscription
from ...concurrency import gather, settle
from ...errors import (
    AioClusterError,
    CoordinationError,
    MemberReplacedError,
    SessionLostError,
    StrategyMismatchError,
)
from ...zookeeper.client import BadVersionError, NodeExistsError, NoNodeError, ZooKeeper
from ...zookeeper.layout import Registration, decode_registration, encode_registration
from ...zookeeper.roster import Roster, decode_roster, encode_roster
from ...zookeeper.values import SessionState
from ..delivery.partitions import PartitionStates
from .keyed_layout import KeyedLayout

__all__ = ["RETRY_DELAY", "Members", "Registrar"]

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_DELAY = 1.0
"""Seconds before ZooKeeper is asked again after a failure (a rebalance that could not finish,
a join, the watch on a name)."""

Members = dict[str, tuple[Registration, int]]
"""The live members: id -> its registration's info and creation zxid."""


class Registrar:
    """This member's registration, and the registrations of the group's members."""

    def __init__(
        self,
        zk: ZooKeeper,
        layout: KeyedLayout,
        states: PartitionStates,
        *,
        member_id: str,
        strategy: Strategy,
        subscription: Subscription,
        named: bool,
        rejoin_grace: float | None,
        rack: str | None = None,
    ) -> None:
        """Args:
        zk: the member's ZooKeeper client.
        layout: the group's paths.
        states: the member's partition states: all lost once another member took the name.
        member_id: this member's id.
        strategy: the assignment strategy it registers with.
        subscription: the topics it registers as reading.
        named: ``member_id`` is the user's ``member_name`` (see `register()`).
        rejoin_grace: for a named member, how long its partitions wait for it once it is gone.
        rack: the member's rack, published in its registration (None: none).
        """
        self._zk = zk
        self._layout = layout
        self._states = states
        self._id = member_id
        self._strategy = strategy
        self._subscription = subscription
        self._named = named
        self._rejoin_grace = rejoin_grace
        self._rack = rack
        self._session: int | None = None
        """The session that holds this member's registration (None: none does)."""
        self._czxid: int | None = None
        """The creation zxid of this member's registration: another one under the same name
        (a named member's newer self) has a later one."""
        self._touched = asyncio.Event()
        """Set when this member registered, or its registration changed (a watch)."""
        self._members: Members = {}
        self._ids_read: tuple[frozenset[str], int] | None = None
        """The registration names last listed, and the ``ids`` node's child version then."""
        self._stale = True
        """Whether the members known may miss a change no watch told of: a member that does
        not watch the registrations reads them again at its next `check_in()` then."""
        self._watched: set[str] = set()
        """The members whose registration this member watches (its predecessors)."""
        self._on_predecessor: Callable[[], None] | None = None

    async def prepare(self, also: Callable[[], Awaitable[object]]) -> None:
        """Before registering: the group's paths exist (and ``also``'s, made meanwhile: the
        topics'), and the strategy agrees. Needs only the ZooKeeper session, so that it runs
        while the Kafka clients start.

        Raises:
            StrategyMismatchError: the group uses another assignment strategy.
        """

        async def nodes() -> Members:
            await self._zk.ensure_path(self._layout.root, shared=True)
            ids = functools.partial(self._zk.ensure_path, self._layout.ids)
            steps: list[Callable[[], Awaitable[object]]] = [ids, also, self._start]
            await gather(steps)
            return await self.read_members(watch=None)

        # Refuse before registering, so that the group never sees this member.
        self.check_strategy(await self._while_session_lives(nodes))

    async def _start(self) -> None:
        """A newcomer's cache starts from the roster, when there is a readable one: the next
        `read_members()` then reads only the registrations it lacks (or all of them, should
        the roster not hold any more; see `aio_cluster.zookeeper.roster`)."""
        if self._ids_read is not None:
            return
        try:
            data, _stat = await self._zk.get(self._layout.roster)
        except NoNodeError:
            return  # no sticky leader of this release wrote one: read every registration
        if not data:
            return  # made with its parents, not written yet
        try:
            roster = decode_roster(data)
        except CoordinationError as exc:
            log.info("member %s: reading every registration: %s", self._id, exc)
            return
        self._ids_read = (roster.names, roster.ids_version)
        self._members = dict(roster.members)

    def roster(self) -> bytes | None:
        """The registrations last read, as the roster the sticky leader writes with its
        target; None before any were read (or over `ROSTER_LIMIT`)."""
        if self._ids_read is None:
            return None
        names, version = self._ids_read
        return encode_roster(Roster(version, names, self._members))

    async def _while_session_lives(self, step: Callable[[], Awaitable[T]]) -> T:
        """Run ``step`` again after a retriable ZooKeeper error, while the session may still
        live: a ZooKeeper restart shorter than the session must not fail a join.

        Raises:
            CoordinationError: the error is not retriable, the session was lost, or
                ``session_timeout`` passed since the first failure (the session is gone by then,
                even when this client cannot learn it).
        """
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        while True:
            try:
                return await step()
            except CoordinationError as exc:
                if deadline is None:
                    deadline = loop.time() + self._zk.session_timeout
                if (
                    not exc.retriable
                    or isinstance(exc, SessionLostError)
                    or self._zk.state in (SessionState.LOST, SessionState.CLOSED)
                    or loop.time() + RETRY_DELAY > deadline
                ):
                    raise
                log.warning("member %s: joining: %s; trying again", self._id, exc)
            await asyncio.sleep(RETRY_DELAY)

    async def check_in(self, watch: Callable[[], None] | None) -> Members:
        """The live members, this one among them: registers it (again) where this session has
        no registration; ``watch`` is called at the next change of the members.

        With no ``watch`` (a member that follows its share), the members known are returned
        without a request unless they may be stale (`stale()`, a predecessor gone, a new
        session): such a member learns of changes from its share and its predecessor.

        Raises:
            MemberReplacedError: another member holds this member's name now.
            StrategyMismatchError: the group assigns with another strategy.
        """
        if self._session != self._zk.session_id:
            await self.register()
        if watch is None and not self._stale:
            return self._members
        members = await self.read_members(watch)
        self._stale = False
        mine = members.get(self._id)
        if self._named and mine is not None and mine[1] != self._czxid:
            # Another member took the name: its registration replaced ours. (One that is only
            # gone went with an expired session, or a tool deleted it: register again.)
            self._replaced()
        if mine is None:
            # Our registration went behind our back (deleted by a tool): register again.
            await self.register()
            members = await self.read_members(watch)
        self.check_strategy(members)
        return members

    async def register(self) -> None:
        """Create this member's registration. A named member's first registration takes the
        name over from an older registration (its own previous run, whose session may live
        on after a SIGKILL); once registered, a named member that finds the name taken was
        replaced, and stops."""
        path = self._layout.member(self._id)
        data = encode_registration(
            self._subscription,
            self._strategy,
            int(time.time() * 1000),
            name=self._id if self._named else None,
            rejoin_grace=self._rejoin_grace,
            host=socket.gethostname(),
            rack=self._rack,
        )
        session = self._zk.session_id
        while True:
            with contextlib.suppress(NodeExistsError):
                await self._zk.create(path, data, ephemeral=True)
            stat = await self._zk.exists(path)
            if stat is None:
                continue  # deleted at once (by a member taking the name over): look again
            if stat.ephemeral_owner == session:
                break
            if not self._named:
                raise CoordinationError(f"registration {path} still belongs to an expired session")
            if self._czxid is not None:
                self._replaced()
            log.warning(
                "member %s: taking the name over from session %#x", self._id, stat.ephemeral_owner
            )
            with contextlib.suppress(NoNodeError, BadVersionError):
                await self._zk.delete(path, version=stat.version)
        self._czxid = stat.czxid
        self._session = session
        self._touched.set()

    async def guard_name(self, fail: Callable[[AioClusterError], None]) -> None:
        """Watch a named member's registration: once another session holds the name, stop
        handing out batches at once and fail the member. The rebalance finds the takeover too,
        but it may be busy for up to ``rebalance_timeout`` (in a listener) while the newcomer
        already handles this member's partitions."""
        path = self._layout.member(self._id)
        touched = self._touched
        while True:
            touched.clear()
            czxid, session = self._czxid, self._session
            if czxid is not None and session is not None and session == self._zk.session_id:
                try:
                    stat = await self._zk.exists(path, watch=touched.set)
                except CoordinationError:
                    # The rebalance and liveness deal with ZooKeeper's troubles; look again.
                    await asyncio.sleep(RETRY_DELAY)
                    continue
                if stat is not None and stat.czxid != czxid and stat.ephemeral_owner != session:
                    with contextlib.suppress(MemberReplacedError):
                        self._replaced()
                    log.error("member %s: another member took its name over", self._id)
                    fail(MemberReplacedError(self._layout.group, self._id))
                    return
            await touched.wait()

    def _replaced(self) -> None:
        """A newer member holds this member's name: stop, and leave its nodes alone."""
        self._session = None
        self._states.lost()
        raise MemberReplacedError(self._layout.group, self._id)

    def lost(self) -> None:
        """The session expired, and this member's registration with it."""
        self._session = None
        self.stale()

    def stale(self) -> None:
        """The members known may be out of date: the next `check_in()` reads them."""
        self._stale = True
        self._watched.clear()

    async def watch_predecessors(
        self, members: Collection[str], changed: Callable[[], None]
    ) -> None:
        """Watch the registrations of ``members`` (each once, until one changes): when one
        goes, the members known are stale and ``changed`` runs. One already gone runs it at
        once. As in ZooKeeper's leader-election recipe, a member's departure wakes the member
        after it, not the group."""
        self._on_predecessor = changed
        for member in sorted(set(members) - self._watched):
            self._watched.add(member)  # before the watch is set: it may fire at once
            path = self._layout.member(member)
            try:
                stat = await self._zk.exists(path, watch=self._predecessor_changed)
            except CoordinationError:
                self._watched.discard(member)  # set again at the next rebalance
                raise
            if stat is None:
                self._predecessor_changed()
                return

    def _predecessor_changed(self) -> None:
        self.stale()
        if self._on_predecessor is not None:
            self._on_predecessor()

    async def delete(self) -> None:
        """Delete this member's registration, unless it is not this session's any more (a named
        member's newer self holds the name) or there is none."""
        if self._session is None:
            return
        path = self._layout.member(self._id)
        with contextlib.suppress(NoNodeError, BadVersionError):
            _data, stat = await self._zk.get(path)
            if stat.ephemeral_owner == self._zk.session_id:
                await self._zk.delete(path, version=stat.version)

    async def read_members(self, watch: Callable[[], None] | None) -> Members:
        """The live members, each with its registration's info and creation zxid. ``watch`` is
        called at the next change (None: no watch).

        Registrations seen before are not read again, unless the ``ids`` node's child version
        shows more changes than the names that came and went: then one was deleted and made
        again under the same id (a member, this one too, back from an expiry) and has a new
        creation zxid, so every registration is read afresh.
        """
        ids, version = await self._zk.get_children_version(self._layout.ids, watch=watch)
        names = frozenset(ids)
        fresh = self._ids_read is not None and version - self._ids_read[1] == len(
            names ^ self._ids_read[0]
        )
        self._ids_read = (names, version)
        cached = self._members if fresh else {}
        known = {member: cached[member] for member in ids if member in cached}
        new = [member for member in ids if member not in known]
        # Concurrently: a member joining a large group reads every registration once.
        read = await settle(
            functools.partial(self._zk.get, self._layout.member(member)) for member in new
        )
        for member, result in zip(new, read, strict=True):
            if isinstance(result, NoNodeError):
                continue
            if isinstance(result, Exception):
                raise result
            data, stat = result
            try:
                known[member] = (decode_registration(data), stat.czxid)
            except CoordinationError as exc:
                log.warning("ignoring member %s: %s", member, exc)
        self._members = known
        return known

    def check_strategy(self, members: Members) -> None:
        """The oldest member's strategy is the group's; a member with another may not join.

        Raises:
            StrategyMismatchError: this member's strategy is not the group's.
        """
        if not members:
            return
        oldest, (info, _czxid) = min(members.items(), key=lambda item: item[1][1])
        if info.strategy != self._strategy and oldest != self._id:
            theirs = getattr(info.strategy, "value", info.strategy)
            raise StrategyMismatchError(
                f"group {self._layout.group!r} assigns partitions with {theirs!r}, this member "
                f"with {self._strategy.value!r}: every member of a group must use the same strategy"
            )

    def racks(self, topic: str) -> dict[str, str]:
        """member -> its rack, for the members reading ``topic`` with this strategy that have
        one, among the members last read (see `aio_cluster.assign.racks`)."""
        return {
            member: info.rack
            for member, (info, _czxid) in self._members.items()
            if info.rack and info.subscribes(topic) and info.strategy == self._strategy
        }

    def leads(self, topic: str) -> bool:
        """Whether this member was the sticky leader of ``topic`` (the oldest member reading it
        with this strategy) among the members last read."""
        ours = [
            (czxid, member)
            for member, (info, czxid) in self._members.items()
            if info.subscribes(topic) and info.strategy == self._strategy
        ]
        return bool(ours) and min(ours)[1] == self._id
