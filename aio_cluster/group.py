"""ConsumerGroup: one member of a self-balancing consumer group of one Kafka topic.

The members of a group share its name; every message of the topic goes to exactly one of them. They
agree on who owns which partition through ZooKeeper (the classic layout, see :mod:`.layout`): each
member registers an ephemeral node, and on every change of the registrations each member learns the
assignment, releases what is no longer its own and claims what is. With the sticky strategy (the
default) the oldest member computes the assignment and publishes it, and the others follow it
(:mod:`.target`); with range and round-robin each member computes the same one
(:mod:`.assignment`). Only the partitions that change owner pause; the others keep delivering.

Handover happens at batch boundaries: a partition whose batch is being processed is released only
after the loop body finished, and after its offset was stored, so graceful joins and leaves neither
lose nor repeat a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import os
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

import anyio

from .assignment import Strategy, assign
from .errors import (
    AioClusterError,
    BrokerError,
    ConfigurationError,
    CoordinationError,
    GroupClosedError,
    NotOwnedError,
    SessionLostError,
    StrategyMismatchError,
)
from .kafka import Fetcher, OffsetsOutOfRange, Record
from .layout import GroupLayout, MemberInfo, decode_member, decode_offset, encode_member
from .sticky import TargetNode
from .zk import Check, Create, NodeExistsError, NoNodeError, SessionState, SetData, ZooKeeper

__all__ = ["Batch", "ConsumerGroup", "GroupState"]

log = logging.getLogger(__name__)

Batch = list[Record]
"""A non-empty list of records of one partition, in offset order."""

_counter = itertools.count(1)
_UNPOSITIONED = -1
"""The next offset of a claim whose start is not known yet."""
_RETRY_DELAY = 1.0
"""Seconds before a rebalance that could not finish (a claim timed out, ZooKeeper failed) is
tried again."""


class GroupState(enum.Enum):
    """The life of a :class:`ConsumerGroup`.

    NEW --register()--> JOINING --first rebalance done--> JOINED --close()--> CLOSING --> CLOSED.
    A failed join goes to CLOSED. close() from NEW goes straight to CLOSED. CLOSED is final:
    registering again raises :class:`~aio_cluster.errors.GroupClosedError`.
    """

    NEW = "new"
    JOINING = "joining"
    JOINED = "joined"
    CLOSING = "closing"
    CLOSED = "closed"


@dataclass(eq=False)
class _Claim:
    """A partition this member owns: one object per claim, so a batch handed out under an earlier
    claim of the same partition (before a session loss) can be told apart."""

    partition: int
    node_version: int
    next_offset: int
    """The offset of the next record to hand out."""
    stored: int | None
    """The offset stored in ZooKeeper, as far as this member knows."""
    pending: int | None = None
    """A completed batch's next offset, not yet stored."""
    buffered: deque[Batch] = field(default_factory=deque)


def _member_id(group: str) -> str:
    return "-".join(
        [group, socket.gethostname(), str(os.getpid()), str(int(time.time())), str(next(_counter))]
    )


class ConsumerGroup:
    """One member of a consumer group reading one topic.

    Use it as ``async with ConsumerGroup(...) as group:`` and iterate ``async for partition, batch
    in group``: each batch is committed when the loop body has finished and the loop asks for the
    next one; a body that raises or breaks leaves its batch uncommitted, and it is delivered again.
    Batches come round-robin from the claimed partitions.

    Offsets of completed batches are stored in ZooKeeper at most ``commit_interval`` seconds later,
    and always before a partition is handed over or the member leaves; a member that crashes may
    so deliver up to ``commit_interval`` seconds of batches again (at least once, never lost).

    See :class:`GroupState` for the lifecycle.
    """

    def __init__(
        self,
        name: str,
        brokers: str | Sequence[str],
        zookeepers: str | Sequence[str],
        topic: str,
        *,
        max_bytes: int = 1_048_576,
        max_wait_ms: int = 100,
        min_bytes: int = 1,
        claim_timeout: float = 30.0,
        loop_delay: float = 1.0,
        trail: bool = False,
        session_timeout: float = 10.0,
        register: bool = True,
        strategy: Strategy | str = Strategy.STICKY,
        commit_interval: float = 1.0,
        metadata_interval: float = 30.0,
        request_timeout: float = 10.0,
        close_timeout: float = 10.0,
    ) -> None:
        """Configure a member; it joins in ``async with`` (or :meth:`register`).

        Args:
            name: the group's name, shared by all its members.
            brokers: Kafka bootstrap servers, ``"host:port"``.
            zookeepers: ZooKeeper servers, ``"host:port"`` (the first may carry a ``/chroot``).
            topic: the topic to consume.
            max_bytes: the most bytes fetched from one partition at a time.
            max_wait_ms: how long the broker may wait for ``min_bytes``.
            min_bytes: the least data a fetch should return.
            claim_timeout: seconds to wait for a partition's previous owner to release it.
            loop_delay: seconds to pause after a fetch that returned nothing.
            trail: where no offset is stored, start at the latest offset instead of the earliest.
            session_timeout: the ZooKeeper session's timeout in seconds.
            register: join on ``async with``; False leaves it to :meth:`register`.
            strategy: the assignment strategy; all members of a group must use the same.
            commit_interval: the most seconds a completed batch's offset waits to be stored.
            metadata_interval: seconds between checks of the topic's partitions.
            request_timeout: the bound on each ZooKeeper request, in seconds.
            close_timeout: the bound on the final commit and release in :meth:`close`.

        Raises:
            ConfigurationError: an argument is not valid; the message names it.
        """
        self._layout = GroupLayout(name, topic)
        for label, value in (
            ("max_bytes", max_bytes),
            ("max_wait_ms", max_wait_ms),
            ("claim_timeout", claim_timeout),
            ("session_timeout", session_timeout),
            ("commit_interval", commit_interval),
            ("metadata_interval", metadata_interval),
            ("request_timeout", request_timeout),
            ("close_timeout", close_timeout),
        ):
            if not value > 0:
                raise ConfigurationError(f"{label} must be positive, not {value!r}")
        for label, value in (("min_bytes", min_bytes), ("loop_delay", loop_delay)):
            if not value >= 0:
                raise ConfigurationError(f"{label} must not be negative, not {value!r}")
        try:
            self._strategy = Strategy(strategy)
        except ValueError:
            known = ", ".join(s.value for s in Strategy)
            raise ConfigurationError(f"unknown strategy {strategy!r}; use one of {known}") from None
        self._id = _member_id(name)
        self._zk = ZooKeeper(
            zookeepers, session_timeout=session_timeout, request_timeout=request_timeout
        )
        self._fetcher = Fetcher(
            brokers,
            topic,
            client_id=self._id,
            max_bytes=max_bytes,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
        )
        self._target = TargetNode(self._zk, self._layout, self._id)
        self._register_on_enter = register
        self._claim_timeout = claim_timeout
        self._loop_delay = loop_delay
        self._max_wait_ms = max_wait_ms
        self._trail = trail
        self._commit_interval = commit_interval
        self._metadata_interval = metadata_interval
        self._close_timeout = close_timeout

        self._state = GroupState.NEW
        self._partitions: list[int] = []
        self._claims: dict[int, _Claim] = {}
        self._revoking: set[int] = set()
        self._inflight: set[int] = set()
        self._seeks: dict[int, int] = {}
        self._cursor = -1
        self._paused = False
        self._epoch = 0
        """Counts session losses: a rebalance that began before one must not record claims."""
        self._registered_session: int | None = None
        self._members: dict[str, tuple[MemberInfo, int]] = {}
        self._in_target = False
        """Whether the assignment followed counts this member (a sticky newcomer's first
        rebalance may still see the target of the members before it): joining ends then."""
        self._failure: AioClusterError | None = None

        self._lock = asyncio.Lock()
        """Held by a rebalance: one at a time (the Ruby mutex)."""
        self._fetch_lock = asyncio.Lock()
        """Serialises fetches with changes of the fetcher's assignment and positions."""
        self._flush_lock = asyncio.Lock()
        """Serialises offset writes, so a later write never overtakes an earlier one."""
        self._rebalance_requested = asyncio.Event()
        self._changed = asyncio.Event()
        """Set whenever batches, claims or the state change: wakes waiting iterators."""
        self._batch_done = asyncio.Event()
        self._closed = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None

    # -- what a user reads -------------------------------------------------------------------

    @property
    def id(self) -> str:
        """This member's id: ``<group>-<hostname>-<pid>-<unix time>-<counter>``."""
        return self._id

    @property
    def name(self) -> str:
        """The group's name."""
        return self._layout.group

    @property
    def topic(self) -> str:
        """The topic this member consumes."""
        return self._layout.topic

    @property
    def strategy(self) -> Strategy:
        """The assignment strategy this member uses."""
        return self._strategy

    @property
    def state(self) -> GroupState:
        """Where this member is in its lifecycle."""
        return self._state

    @property
    def partitions(self) -> list[int]:
        """Every partition id of the topic, sorted (as of the last metadata check)."""
        return list(self._partitions)

    @property
    def claimed(self) -> list[int]:
        """The partition ids this member owns now, sorted."""
        return sorted(self._claims)

    async def offset(self, partition: int) -> int | None:
        """The stored next offset of ``partition``, or None when none is stored.

        A completed batch's offset that is still waiting to be stored is stored first.
        """
        self._check_open()
        if partition in self._claims:
            await self._flush([partition])
        return await self._stored_offset(partition)

    async def commit(self, partition: int, offset: int) -> None:
        """Store ``offset`` as the next offset of ``partition`` now.

        Raises:
            NotOwnedError: this member does not own the partition.
            ConfigurationError: the offset is not a non-negative integer.
            CoordinationError: ZooKeeper did not store it.
        """
        self._check_open()
        value: object = offset
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigurationError(f"offset must be a non-negative integer, not {offset!r}")
        claim = self._claims.get(partition)
        if claim is None:
            raise NotOwnedError(
                f"partition {partition} of {self.topic!r} is not owned by member {self.id}"
            )
        claim.pending = offset
        await self._flush([partition])

    # -- joining and leaving -----------------------------------------------------------------

    async def __aenter__(self) -> ConsumerGroup:
        if self._register_on_enter:
            await self.register()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def register(self) -> None:
        """Join the group; returns once this member's first rebalance has finished.

        Does nothing when already joined.

        Raises:
            GroupClosedError: the member was closed.
            StrategyMismatchError: the group uses another assignment strategy.
            ConfigurationError: the topic does not exist.
            CoordinationError, BrokerError: ZooKeeper or Kafka could not be reached.
        """
        if self._state in (GroupState.JOINING, GroupState.JOINED):
            return
        self._check_open()
        self._state = GroupState.JOINING
        joined: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            await self._zk.start()
            self._zk.on_state_change(self._on_session_state)
            await self._fetcher.start()
            self._partitions = await self._fetcher.partitions()
            for path in (self._layout.ids, self._layout.owners, self._layout.offsets):
                await self._zk.ensure_path(path)
            # Refuse before registering, so that the group never sees this member.
            await self._check_strategy(await self._read_members(watch=False))
            self._runner = asyncio.create_task(self._run(joined), name=f"aio-cluster {self.id}")
            await joined
        except BaseException:
            await self.close()
            raise
        self._state = GroupState.JOINED
        log.info("member %s joined with partitions %s", self.id, self.claimed)

    async def close(self) -> None:
        """Leave the group: store the offsets of completed batches, release every claim, and
        close the connections. Idempotent.

        The final commit and release are shielded from cancellation and bounded by
        ``close_timeout``; whatever is not released by then goes with the ZooKeeper session.
        A batch still being processed is not committed, so it is delivered again.
        """
        if self._state is GroupState.CLOSED:
            return
        if self._state is GroupState.NEW:
            self._state = GroupState.CLOSED
            return
        if self._state is GroupState.CLOSING:
            await self._closed.wait()
            return
        self._state = GroupState.CLOSING
        self._wake()
        with anyio.CancelScope(shield=True):
            if self._runner is not None:
                self._runner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._runner
            try:
                with anyio.move_on_after(self._close_timeout) as scope:
                    await self._leave()
                if scope.cancelled_caught:
                    log.warning("member %s: leaving took over %gs", self.id, self._close_timeout)
            except AioClusterError as exc:
                log.warning("member %s: leaving failed: %s", self.id, exc)
            finally:
                self._claims.clear()
                await self._zk.close()
                async with self._fetch_lock:
                    await self._fetcher.stop()
                self._state = GroupState.CLOSED
                self._closed.set()
                self._wake()
        log.info("member %s left", self.id)

    async def _leave(self) -> None:
        async with self._lock:
            await self._flush(list(self._claims))
            # All at once: with many partitions, one round trip instead of one per claim.
            await asyncio.gather(*(self._release_node(p) for p in list(self._claims)))
            if self._registered_session is not None:
                with contextlib.suppress(NoNodeError):
                    await self._zk.delete(self._layout.member(self.id))

    def _check_open(self) -> None:
        if self._state in (GroupState.CLOSING, GroupState.CLOSED):
            raise GroupClosedError(f"member {self.id} of group {self.name!r} is closed")

    # -- consuming ---------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[tuple[int, Batch]]:
        return self.batches()

    async def batches(self, *, commit: bool = True) -> AsyncIterator[tuple[int, Batch]]:
        """Yield ``(partition, batch)`` pairs until the member closes.

        Args:
            commit: store each batch's offset once the loop body finished (see the class). With
                False the caller stores offsets with :meth:`commit`.

        Raises:
            AioClusterError: the member failed in the background (the cause is kept).
        """
        while True:
            picked = await self._next_batch()
            if picked is None:
                return
            claim, batch = picked
            completed = False
            try:
                yield claim.partition, batch
                completed = True
            finally:
                self._finish(claim, batch, completed=completed, commit=commit)

    async def _next_batch(self) -> tuple[_Claim, Batch] | None:
        """The next batch round-robin, fetching when none is buffered; waits while nothing is
        claimed (or ZooKeeper is suspended) without spinning."""
        while True:
            self._changed.clear()
            if self._failure is not None:
                raise self._failure
            if self._state in (GroupState.CLOSING, GroupState.CLOSED):
                return None
            timeout: float | None = None
            if not self._paused:
                picked = self._pick()
                if picked is not None:
                    return picked
                fetchable = [
                    p
                    for p, claim in self._claims.items()
                    if p not in self._inflight and p not in self._revoking and not claim.buffered
                ]
                if fetchable:
                    if await self._fetch(fetchable):
                        continue
                    timeout = self._loop_delay
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    def _pick(self) -> tuple[_Claim, Batch] | None:
        ready = sorted(
            p
            for p, claim in self._claims.items()
            if claim.buffered and p not in self._inflight and p not in self._revoking
        )
        if not ready:
            return None
        partition = next((p for p in ready if p > self._cursor), ready[0])
        self._cursor = partition
        claim = self._claims[partition]
        batch = claim.buffered.popleft()
        claim.next_offset = batch[-1].offset + 1
        self._inflight.add(partition)
        return claim, batch

    async def _fetch(self, partitions: list[int]) -> bool:
        """Fetch into the claims' buffers; True when anything arrived."""
        async with self._fetch_lock:
            self._apply_seeks()
            try:
                fetched = await self._fetcher.fetch(partitions, self._max_wait_ms)
            except OffsetsOutOfRange as exc:
                await self._reset_out_of_range(exc.partitions)
                return False
            except BrokerError as exc:
                log.warning("member %s: %s", self.id, exc)
                return False
        arrived = False
        for partition, records in fetched.items():
            claim = self._claims.get(partition)
            if claim is None:
                continue
            if partition in self._revoking or partition in self._seeks:
                self._drop(claim)
                continue
            claim.buffered.append(records)
            arrived = True
        return arrived

    async def _reset_out_of_range(self, partitions: dict[int, int]) -> None:
        """Restart partitions whose position the broker no longer holds at their earliest offset."""
        bounds = await self._fetcher.bounds(list(partitions))
        for partition, (earliest, _latest) in bounds.items():
            claim = self._claims.get(partition)
            if claim is None:
                continue
            log.warning(
                "member %s: offset %d of partition %d is out of range; resetting to earliest %d",
                self.id,
                partitions[partition],
                partition,
                earliest,
            )
            claim.next_offset = earliest
            self._drop(claim)
        self._apply_seeks()

    def _drop(self, claim: _Claim) -> None:
        """Forget a claim's buffered records; reading resumes at its next offset."""
        claim.buffered.clear()
        self._seeks[claim.partition] = claim.next_offset

    def _apply_seeks(self) -> None:
        # Only the fetcher's partitions can seek; a claim not yet handed to it starts at its
        # next offset when _reassign hands it over.
        for partition, offset in self._seeks.items():
            if partition in self._fetcher.assigned:
                self._fetcher.seek(partition, offset)
        self._seeks.clear()

    def _finish(self, claim: _Claim, batch: Batch, *, completed: bool, commit: bool) -> None:
        """A batch's body ended: commit it when it completed, else deliver it again."""
        self._inflight.discard(claim.partition)
        if self._claims.get(claim.partition) is claim:
            if not completed:
                claim.next_offset = batch[0].offset
                self._drop(claim)
            elif commit:
                claim.pending = batch[-1].offset + 1
        self._batch_done.set()
        self._changed.set()

    def _wake(self) -> None:
        self._changed.set()
        self._batch_done.set()
        self._rebalance_requested.set()

    # -- the background: rebalancing, storing offsets, watching metadata ----------------------

    async def _run(self, joined: asyncio.Future[None]) -> None:
        """The member's background: every loop lives in this task group until close()."""
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._rebalance_loop, joined)
                tasks.start_soon(self._every, self._commit_interval, self._flush_all)
                tasks.start_soon(self._every, self._metadata_interval, self._check_partitions)
        except Exception as exc:
            # Errors the loops expect are handled there; this is a failure nobody foresaw. It
            # must not pass silently: register() or the next batch raises it.
            error = AioClusterError(f"member {self.id} failed in the background: {exc!r}")
            error.__cause__ = exc
            self._failure = error
            self._wake()
            if not joined.done():
                joined.set_exception(error)

    async def _every(self, interval: float, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await job()
            except (CoordinationError, BrokerError) as exc:
                log.warning("member %s: %s", self.id, exc)

    async def _flush_all(self) -> None:
        await self._flush(list(self._claims))

    async def _check_partitions(self) -> None:
        partitions = await self._fetcher.partitions()
        if partitions != self._partitions:
            log.info("topic %r now has partitions %s", self.topic, partitions)
            self._request_rebalance()

    def _request_rebalance(self) -> None:
        self._rebalance_requested.set()

    def _on_session_state(self, state: SessionState) -> None:
        if state is SessionState.SUSPENDED:
            self._paused = True
        elif state is SessionState.LOST:
            self._lose_claims()
        elif state is SessionState.CONNECTED and self._paused:
            # Back after a suspension or a loss: what happened meanwhile is unknown.
            self._paused = False
            self._request_rebalance()
        self._changed.set()

    def _lose_claims(self) -> None:
        """The session expired: every claim and the registration are gone with it. Offsets not
        yet stored are dropped, never written on the new session (the partitions may have new
        owners by now): their batches are delivered again."""
        if self._claims:
            log.warning(
                "member %s: ZooKeeper session lost; partitions %s no longer owned",
                self.id,
                self.claimed,
            )
        self._epoch += 1
        self._paused = True
        self._claims.clear()
        self._revoking.clear()
        self._seeks.clear()
        self._registered_session = None
        self._batch_done.set()

    async def _rebalance_loop(self, joined: asyncio.Future[None]) -> None:
        retry: float | None = 0.0
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._rebalance_requested.wait(), retry)
            self._rebalance_requested.clear()
            if self._zk.state is not SessionState.CONNECTED:
                retry = None
                continue
            try:
                async with self._lock:
                    complete = await self._rebalance()
            except (StrategyMismatchError, ConfigurationError) as exc:
                if not joined.done():
                    joined.set_exception(exc)
                    return
                log.error("member %s: rebalance refused: %s", self.id, exc)
                complete = False
            except (CoordinationError, BrokerError) as exc:
                log.warning("member %s: rebalance failed, retrying: %s", self.id, exc)
                complete = False
            retry = None if complete else _RETRY_DELAY
            if not joined.done() and self._in_target:
                joined.set_result(None)

    async def _rebalance(self) -> bool:
        """Release what the assignment no longer gives this member, then claim what it does.

        Returns:
            False when a claim could not be made in time, so the rebalance is tried again.
        """
        epoch = self._epoch
        if self._registered_session != self._zk.session_id:
            await self._register_node()
        members = await self._read_members()
        if self.id not in members:
            # Our registration went behind our back (deleted by a tool): register again.
            await self._register_node()
            members = await self._read_members()
        await self._check_strategy(members)
        ours = [
            member
            for member, (info, _czxid) in sorted(members.items(), key=lambda item: item[1][1])
            if self.topic in info.topics and info.strategy == self._strategy
        ]
        try:
            self._partitions = await self._fetcher.partitions()
        except BrokerError as exc:
            if not self._partitions:
                raise
            # Kafka is away: agree on the partitions known, so claims can move meanwhile.
            log.warning("member %s: using the partitions known, %s", self.id, exc)
        target = await self._target_of_mine(ours)
        await self._release_all(sorted(set(self._claims) - target))
        complete = await self._claim_all(sorted(target - set(self._claims)), epoch)
        await self._position()
        if set(self._claims) != self._fetcher.assigned:
            await self._reassign()
            log.info("member %s owns %s of %s", self.id, self.claimed, self._partitions)
        return complete

    async def _target_of_mine(self, members: list[str]) -> set[int]:
        """The partitions this member should own; ``members`` oldest first."""
        if self._strategy is not Strategy.STICKY:
            self._in_target = True
            return set(assign(self._strategy, self._partitions, members).get(self.id, []))
        target = await self._target.follow(members, self._partitions, self._request_rebalance)
        self._in_target = target is not None and self.id in target.members
        return set() if target is None else set(target.partitions_of(self.id))

    async def _register_node(self) -> None:
        path = self._layout.member(self.id)
        data = encode_member(self.topic, self._strategy, int(time.time() * 1000))
        try:
            await self._zk.create(path, data, ephemeral=True)
        except NodeExistsError:
            _data, stat = await self._zk.get(path)
            if stat.ephemeral_owner != self._zk.session_id:
                raise CoordinationError(
                    f"registration {path} still belongs to an expired session"
                ) from None
        self._registered_session = self._zk.session_id

    async def _read_members(self, *, watch: bool = True) -> dict[str, tuple[MemberInfo, int]]:
        """The live members, each with its registration's info and creation zxid; registrations
        seen before are not read again. ``watch`` asks for a rebalance at the next change."""
        ids = await self._zk.get_children(
            self._layout.ids, watch=self._request_rebalance if watch else None
        )
        known = {member: self._members[member] for member in ids if member in self._members}
        for member in ids:
            if member in known:
                continue
            try:
                data, stat = await self._zk.get(self._layout.member(member))
            except NoNodeError:
                continue
            try:
                known[member] = (decode_member(data), stat.czxid)
            except CoordinationError as exc:
                log.warning("ignoring member %s: %s", member, exc)
        self._members = known
        return known

    async def _check_strategy(self, members: dict[str, tuple[MemberInfo, int]]) -> None:
        """The oldest member's strategy is the group's; a member with another may not join."""
        if not members:
            return
        oldest, (info, _czxid) = min(members.items(), key=lambda item: item[1][1])
        if info.strategy != self._strategy and oldest != self.id:
            theirs = getattr(info.strategy, "value", info.strategy)
            raise StrategyMismatchError(
                f"group {self.name!r} assigns partitions with {theirs!r}, this member with "
                f"{self._strategy.value!r}: every member of a group must use the same strategy"
            )

    async def _release_all(self, partitions: list[int]) -> None:
        """Hand partitions over at batch boundaries: wait for their bodies, store their offsets
        (one transaction), then delete the claims. The other partitions keep delivering."""
        if not partitions:
            return
        self._revoking.update(partitions)
        for partition in partitions:
            self._drop(self._claims[partition])
        try:
            while self._inflight.intersection(partitions):
                self._batch_done.clear()
                await self._batch_done.wait()
            await self._flush(partitions)
            await asyncio.gather(*(self._release_node(partition) for partition in partitions))
        finally:
            self._revoking.difference_update(partitions)

    async def _release_node(self, partition: int) -> None:
        claim = self._claims.pop(partition, None)
        if claim is None:
            return
        with contextlib.suppress(NoNodeError):
            await self._zk.delete(self._layout.owner(partition), version=claim.node_version)

    async def _claim_all(self, partitions: list[int], epoch: int) -> bool:
        """Claim partitions concurrently; False when any could not be claimed in time."""
        results = await asyncio.gather(
            *(self._claim(partition, epoch) for partition in partitions), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return all(results)

    async def _claim(self, partition: int, epoch: int) -> bool:
        """Create the partition's claim node, waiting (by watch, bounded by ``claim_timeout``)
        for the previous owner to release it. False on time-out or when a newer rebalance is
        asked for meanwhile; the claim is then left to the next rebalance."""
        path = self._layout.owner(partition)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._claim_timeout
        while True:
            try:
                await self._zk.create(path, self.id.encode(), ephemeral=True)
                version = 0
                break
            except NodeExistsError:
                pass
            try:
                data, stat = await self._zk.get(path)
            except NoNodeError:
                continue
            if data == self.id.encode() and stat.ephemeral_owner == self._zk.session_id:
                version = stat.version
                break
            remaining = deadline - loop.time()
            released = remaining > 0 and await self._wait_released(path, remaining)
            if not released:
                if not self._rebalance_requested.is_set():
                    log.warning(
                        "member %s: partition %d still owned by %s after %gs; retrying later",
                        self.id,
                        partition,
                        data.decode(errors="replace"),
                        self._claim_timeout,
                    )
                return False
        if self._epoch != epoch:
            raise SessionLostError("the ZooKeeper session expired during the rebalance")
        stored = await self._stored_offset(partition)
        self._claims[partition] = _Claim(
            partition=partition,
            node_version=version,
            next_offset=_UNPOSITIONED if stored is None else stored,
            stored=stored,
        )
        return True

    async def _wait_released(self, path: str, bound: float) -> bool:
        """Wait for a claim node to go; False on time-out or when a new rebalance is asked for."""
        deleted = asyncio.ensure_future(self._zk.wait_deleted(path))
        interrupted = asyncio.ensure_future(self._rebalance_requested.wait())
        try:
            await asyncio.wait(
                {deleted, interrupted}, timeout=bound, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiter in (deleted, interrupted):
                waiter.cancel()
            await asyncio.gather(deleted, interrupted, return_exceptions=True)
        return deleted.done() and not deleted.cancelled() and deleted.exception() is None

    async def _stored_offset(self, partition: int) -> int | None:
        path = self._layout.offset(partition)
        try:
            data, _stat = await self._zk.get(path)
        except NoNodeError:
            return None
        return decode_offset(path, data)

    async def _position(self) -> None:
        """Where no offset is stored, start at the earliest offset (the latest with ``trail``).

        A stored offset is taken as it is: one the broker no longer holds is reset to the
        earliest at the first fetch (see :meth:`_reset_out_of_range`).
        """
        fresh = [p for p, claim in self._claims.items() if claim.next_offset == _UNPOSITIONED]
        if not fresh:
            return
        for partition, (earliest, latest) in (await self._fetcher.bounds(fresh)).items():
            claim = self._claims[partition]
            claim.next_offset = latest if self._trail else earliest
            if self._trail:
                # A trailing start is stored at once, so the next owner goes on from here.
                claim.pending = claim.next_offset

    async def _reassign(self) -> None:
        async with self._fetch_lock:
            self._seeks.clear()
            for claim in self._claims.values():
                claim.buffered.clear()
            self._fetcher.assign({p: c.next_offset for p, c in self._claims.items()})
        self._changed.set()

    async def _flush(self, partitions: Iterable[int]) -> None:
        """Store the pending offsets of the given owned partitions in one transaction, fenced
        by their claim nodes: nothing is written for a partition that is no longer ours.

        The write is shielded from cancellation (and bounded by the request timeout), so that
        what this member believes is stored is what ZooKeeper stored.
        """
        async with self._flush_lock:
            claims = [
                claim
                for partition in partitions
                if (claim := self._claims.get(partition)) is not None
                and claim.pending is not None
                and claim.pending != claim.stored
            ]
            if not claims:
                return
            with anyio.CancelScope(shield=True):
                try:
                    written = await self._write_offsets(claims)
                except (NodeExistsError, NoNodeError):
                    # An offset node appeared or vanished behind our back (another tool):
                    # learn what is stored now and write once more.
                    for claim in claims:
                        claim.stored = await self._stored_offset(claim.partition)
                    written = await self._write_offsets(claims)
            for claim, offset in written.items():
                claim.stored = offset
                if claim.pending == offset:
                    claim.pending = None

    async def _write_offsets(self, claims: list[_Claim]) -> dict[_Claim, int]:
        written = {claim: claim.pending for claim in claims if claim.pending is not None}
        ops: list[Check | Create | SetData] = []
        for claim, offset in written.items():
            ops.append(Check(self._layout.owner(claim.partition), claim.node_version))
            data = str(offset).encode()
            path = self._layout.offset(claim.partition)
            ops.append(SetData(path, data) if claim.stored is not None else Create(path, data))
        await self._zk.transaction(ops)
        return written
