"""Member: one member of a group, its parts and its life; the facade's one door.

The facade ([ConsumerGroup][aio_cluster.ConsumerGroup]) knows partitions by the names its user
gives them; a `Member` knows them by key and owns everything else. Its parts are built from the
`aio_cluster.config.Settings` (`aio_cluster.member.assembly.Parts`); its ways to consume stand
beneath it: the batch iterations (`aio_cluster.member.iterations`) and the ``process()`` calls
(`aio_cluster.member.processes`). The facade calls the member's own methods only.

Its life runs in one task, made when it joins::

    register()   the clients start (in the caller's task); then the member's task runs the
                 background, one task group: the rebalances, the offset stores, the metadata
                 checks, the mirror and the liveness, until close() asks for the closing.
    closing      within close_timeout from close(): the handlers of process() finish (bounded
                 by rebalance_timeout) while the background goes on; the offsets completed are
                 stored; the background's scope is left (cancelled); the member leaves (the
                 listener hears of every partition given up, their offsets are stored, the
                 claims released); process() has ended; the clients close; the state is CLOSED.

``close()`` waits for the closing, shielded: a cancelled ``close()`` waits until it is done and
then raises the cancellation. Called from the member's own work, it cannot wait for the closing,
which ends that work: the work says what ``close()`` does there (see `_Work`). A listener
called from a rebalance waits until the closing cancels the background; a handler of
``process()`` stops the handlers at once, itself with them (its record is delivered again); the
closing's own listener call returns at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

import anyio

from ..assign.strategies import Strategy
from ..concurrency import background, cancel_asked, outlasting
from ..config import Processing
from ..errors import (
    AccessDeniedError,
    AioClusterError,
    AuthenticationError,
    BackgroundEndedError,
    BrokerError,
    ConfigurationError,
    CoordinationError,
    GroupClosedError,
    TransactionDeniedError,
)
from ..kafka.topics import PartitionKey
from .assembly import Blueprint, Hooks, Parts
from .delivery.claims import Batch, Claim
from .exactly_once import Output, TransactionalHandler
from .iterations import Iterations
from .lifecycle import GroupState
from .processes import Processes
from .processing.bulk import BulkHandler
from .processing.processor import Handler, Processor
from .statistics import GroupStatistics, snapshot

__all__ = ["Member"]

log = logging.getLogger(__name__)

P = TypeVar("P")
"""How the facade names a partition for its user."""


def _refusal(exc: BaseException) -> AioClusterError | None:
    """The refused credentials in ``exc`` (or in the exception groups it is in: a periodic
    offset store of an exactly-once member commits its partitions' transactions in a task
    group), or a background loop that ended, if any: trying again does not mend either, so the
    member stops with this error itself, as documented, instead of retrying or wrapping it."""
    if isinstance(
        exc,
        (AccessDeniedError, AuthenticationError, TransactionDeniedError, BackgroundEndedError),
    ):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _refusal(inner)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class _Work:
    """The work of a member that runs in the current task (and in the tasks it starts), and
    what ``close()`` does when called from it instead of waiting for the closing."""

    member: Member
    close: Callable[[], Awaitable[object]]


_WORK: ContextVar[_Work | None] = ContextVar("aio_cluster_member_work", default=None)


async def _already_closing() -> None:
    """``close()`` from the closing itself (its listener's ``on_partitions_revoked``)."""


class Member:
    """One member of a group: its parts, its ways to consume, and the one task its background
    and its closing run in (see the module). Partitions are keys
    (`aio_cluster.kafka.topics.TopicKeys`)."""

    def __init__(self, blueprint: Blueprint) -> None:
        """Build the parts; nothing connects before `register()`.

        Args:
            blueprint: what the member is built from.

        Raises:
            ConfigurationError: malformed servers, or no event loop runs.
        """
        self.parts = parts = Parts(
            blueprint, Hooks(give_up=self._give_up, processor=self._processor)
        )
        self.id = parts.id
        self.strategy: Strategy = parts.strategy
        self.processes = Processes(parts, self)
        """Its ``process()``, ``process_bulk()`` and ``process_transactional()`` calls."""
        self.iterations = Iterations(parts, self.processes, is_closing=self.is_closing)
        """The batch iterations: ``async for``, ``transactions()``."""
        self.state = GroupState.NEW
        self._failure: AioClusterError | None = None
        self._joined: asyncio.Future[None] | None = None
        """Settled by the first rebalance (or the closing) while `register()` waits."""
        self._life: asyncio.Task[None] | None = None
        """The member's one task: its background, then its closing."""
        self._closing = asyncio.Event()
        """Set by the first close() (after `register()` began)."""
        self._closed = asyncio.Event()
        """Set once the closing is done."""
        self._deadline = 0.0
        """When the closing must be done (the event loop's clock)."""

    # -- where it is in its life ---------------------------------------------------------------

    def check_open(self, *, while_closing: bool = False) -> None:
        """Raise GroupClosedError once the member began to close, or with ``while_closing``
        only once it closed: offsets may still be read and stored while closing (the
        listener's ``on_partitions_revoked`` commits what the application finished)."""
        closed = (GroupState.CLOSED,) if while_closing else (GroupState.CLOSING, GroupState.CLOSED)
        if self.state in closed:
            raise GroupClosedError(
                f"member {self.id} of group {self.parts.layout.group!r} is closed"
            )

    def is_closing(self) -> bool:
        """Whether the member closes (what the delivery asks before each batch).

        Raises:
            AioClusterError: the member failed in the background.
        """
        if self._failure is not None:
            raise self._failure
        return self.state in (GroupState.CLOSING, GroupState.CLOSED)

    def failure(self) -> AioClusterError | None:
        """What the member failed with, if it did."""
        return self._failure

    @contextlib.contextmanager
    def handling(self) -> Iterator[None]:
        """The span in which the handlers of ``process()`` run: a ``close()`` from them stops
        the handlers at once, itself with them, while the closing goes on in the member's
        task."""
        token = _WORK.set(_Work(self, self._close_from_handler))
        try:
            yield
        finally:
            _WORK.reset(token)

    async def _close_from_handler(self) -> None:
        await self.processes.shutdown(0.0)
        await self._closed.wait()

    def _fail(self, error: AioClusterError) -> None:
        """The member cannot go on: the next batch (or register()) raises ``error``."""
        self._failure = error
        self.parts.wake()

    def _give_up(self, error: AioClusterError) -> None:
        """The member cannot consume: it fails with ``error`` and leaves, so that its partitions
        go to members that can read them instead of waiting for its close()."""
        self._fail(error)
        if self.state in (GroupState.JOINING, GroupState.JOINED):
            self._begin_closing()

    def _processor(self) -> Processor | None:
        """The processor of the running (or the last) ``process()`` call, if any."""
        return self.processes.processor

    # -- what the facade reads, by key ------------------------------------------------------

    @property
    def registers(self) -> bool:
        """Whether ``async with`` registers the member (``register=True``)."""
        return self.parts.settings.membership.register

    @property
    def exactly_once(self) -> bool:
        """Whether the member commits its output and offsets in Kafka transactions."""
        return self.parts.transactions is not None

    def topics(self) -> list[str]:
        """The topics read now, sorted (a pattern's as of the last metadata check)."""
        return self.parts.membership.topics

    def partitions(self) -> list[PartitionKey]:
        """Every partition of the topics read (as of the last metadata check)."""
        return self.parts.membership.partitions

    def claimed(self) -> list[PartitionKey]:
        """The partitions this member owns now, sorted."""
        return sorted(self.parts.states.claims)

    def owns(self, key: PartitionKey) -> bool:
        """Whether this member owns ``key`` now."""
        return self.parts.states.owned(key)

    def paused(self) -> list[PartitionKey]:
        """The paused partitions."""
        return self.parts.states.paused

    async def stored(self, key: PartitionKey) -> int | None:
        """The stored next offset of ``key``, a completed batch's pending one stored first."""
        parts = self.parts
        if parts.states.owned(key):
            await parts.handover.store([key])
        return await parts.offsets.stored(key)

    async def statistics(self, name: Callable[[PartitionKey], P]) -> GroupStatistics[P]:
        """A snapshot of this member, its partitions named by ``name``; one ListOffsets round
        trip to Kafka."""
        return await snapshot(self.parts, self.state, self.processes.processor, name)

    # -- steering, by key ---------------------------------------------------------------------

    async def store(self, key: PartitionKey, offset: int) -> Claim | None:
        """Store ``offset`` as the next offset of ``key`` now, if this member owns it.

        Returns:
            The claim (``fenced`` once a write found it gone: nothing was stored), or None when
            this member does not own ``key``.
        """
        states = self.parts.states
        claim = states.claims.get(key)
        if claim is not None and not claim.fenced:
            states.to_store(key, offset)
            await self.parts.handover.store([key])
        return claim

    def pause(self, keys: list[PartitionKey]) -> None:
        """Hand out no batch of these partitions until `resume()`."""
        self.parts.states.pause(keys)

    def resume(self, keys: list[PartitionKey]) -> None:
        """Hand out batches of these partitions again (those not paused are ignored)."""
        self.parts.states.resume(keys)
        self.parts.delivery.wake()

    def seek(self, offsets: Mapping[PartitionKey, int]) -> None:
        """Start the next batches of these partitions (those still owned) at these offsets."""
        states = self.parts.states
        for key, offset in offsets.items():
            if states.owned(key):
                states.sought(key, offset)
        self.parts.delivery.wake()

    async def seek_to_beginning(self, keys: list[PartitionKey]) -> None:
        bounds = await self.parts.fetcher.bounds(keys)
        self.seek({key: earliest for key, (earliest, _end) in bounds.items()})

    async def seek_to_end(self, keys: list[PartitionKey]) -> None:
        self.seek(await self.parts.fetcher.ends(keys))

    async def seek_to_timestamp(self, keys: list[PartitionKey], timestamp_ms: int) -> None:
        fetcher = self.parts.fetcher
        found = await fetcher.offsets_for_time(keys, timestamp_ms)
        ends = await fetcher.ends([key for key, offset in found.items() if offset is None])
        self.seek({key: ends[key] if offset is None else offset for key, offset in found.items()})

    # -- consuming (see the ways beneath: iterations.py, processes.py) -----------------------

    def batches(
        self, name: Callable[[PartitionKey], P], *, commit: bool
    ) -> AsyncIterator[tuple[P, Batch]]:
        """``(partition, batch)`` until the member closes (see `Iterations.batches()`)."""
        return self.iterations.batches(name, commit=commit)

    def transactions(
        self, name: Callable[[PartitionKey], P]
    ) -> AsyncIterator[tuple[P, Batch, Output]]:
        """Exactly once: ``(partition, batch, output)`` (see `Iterations.transactions()`)."""
        return self.iterations.transactions(name)

    async def process(self, handler: Handler, policy: Processing) -> None:
        """Run ``handler`` on every record (see `Processes.process()`)."""
        await self.processes.process(handler, policy)

    async def process_bulk(
        self, handler: BulkHandler, size: int, linger: float, policy: Processing
    ) -> None:
        """Run ``handler`` on lists of records (see `Processes.process_bulk()`)."""
        await self.processes.process_bulk(handler, size, linger, policy)

    async def process_transactional(
        self, handler: TransactionalHandler, commit_interval: float, policy: Processing
    ) -> None:
        """Exactly once: run ``handler(record, output)`` on every record (see
        `Processes.process_transactional()`)."""
        await self.processes.process_transactional(handler, commit_interval, policy)

    # -- joining -----------------------------------------------------------------------------

    async def register(self) -> None:
        """Join the group; returns once this member's first rebalance has finished. Does
        nothing when already joined. A join that fails closes the member again.

        Raises:
            GroupClosedError: the member was closed.
            ConfigurationError: another event loop than the one the member was made in, or
                what the first rebalance refused.
            AioClusterError: what starting the clients or the first rebalance raised.
        """
        if self.state in (GroupState.JOINING, GroupState.JOINED):
            return
        self.check_open()
        if asyncio.get_running_loop() is not self.parts.loop:
            raise ConfigurationError(
                "ConsumerGroup must register in the event loop it was made in: its Kafka "
                "clients belong to that loop"
            )
        self.state = GroupState.JOINING
        self._joined = joined = self.parts.loop.create_future()
        try:
            await self.parts.start()
            if self.state is not GroupState.JOINING:
                raise GroupClosedError(f"member {self.id} was closed while it joined")
            self._life = background(self._live(), name=f"aio-cluster {self.id}")
            await joined
        except BaseException:
            await self.close()
            if joined.done() and not joined.cancelled():
                joined.exception()  # retrieved: the error raised here says it all
            raise
        if self.state is GroupState.JOINING:
            self.state = GroupState.JOINED
        log.info(
            "member %s joined with partitions %s",
            self.id,
            self.parts.layout.labels(sorted(self.parts.states.claims)),
        )

    # -- the member's task: the background, then the closing ---------------------------------

    async def _live(self) -> None:
        """The member's one task (see the module): its background until `close()`, then the
        closing, bounded by ``close_timeout`` from the moment it was asked for. A share of the
        bound is kept for closing the clients, so that they close even when leaving took all
        the rest; a background whose cancellation overran the whole bound (a shielded step of
        it) makes the closing that share longer, not the session endless."""
        # A listener called from the background waits for the closing's cancellation.
        _WORK.set(_Work(self, self._closed.wait))
        timeout = self.parts.settings.timing.close_timeout
        try:
            with anyio.CancelScope() as leaving:
                async with anyio.create_task_group() as background:
                    if not self._closing.is_set():  # else closed while the clients started
                        background.start_soon(self._background)
                    await self._closing.wait()
                    leaving.deadline = self._deadline - timeout / 4
                    if self.processes.running:
                        # Handlers in flight finish first (bounded), so their offsets are stored.
                        await self.processes.shutdown(self.parts.settings.timing.rebalance_timeout)
                    await self._store_completed()
                    background.cancel_scope.cancel()
                _WORK.set(_Work(self, _already_closing))
                try:
                    await self.parts.membership.leave(self.parts.handover)
                except AioClusterError as exc:
                    log.warning("member %s: leaving failed: %s", self.id, exc)
            if leaving.cancelled_caught:
                log.warning("member %s: leaving took over %gs", self.id, timeout)
        finally:
            await self._end()

    async def _store_completed(self) -> None:
        """Store the offsets completed since the last periodic store, before the background is
        cancelled: its cancellation may take most of ``close_timeout`` (a shielded offset store
        on a slow ZooKeeper), and the deadline then cuts the leave short; these offsets must not
        be what it skips, or their records are delivered again. The leave stores what completes
        after."""
        try:
            await self.parts.handover.store(list(self.parts.states.claims))
        except AioClusterError as exc:
            log.warning("member %s: storing the completed offsets failed: %s", self.id, exc)

    async def _background(self) -> None:
        """Every loop of the member, until the closing cancels them. A failure nobody foresaw,
        credentials the servers refused, or a loop that ended unasked must not pass silently: it
        fails the member, and register() or the next batch raises it; a joined member leaves at
        once, so that its partitions go to the others."""
        joined = self._joined
        assert joined is not None
        timing = self.parts.settings.timing
        try:
            async with anyio.create_task_group() as loops:
                scope = loops.cancel_scope
                loops.start_soon(
                    self._kept,
                    scope,
                    "rebalances",
                    functools.partial(
                        self.parts.membership.run, joined, self.parts.handover, self._fail
                    ),
                )
                loops.start_soon(
                    self._kept,
                    scope,
                    "offset stores",
                    functools.partial(self._every, timing.commit_interval, self._store_all),
                )
                loops.start_soon(
                    self._kept,
                    scope,
                    "metadata checks",
                    functools.partial(
                        self._every,
                        timing.metadata_interval,
                        self.parts.membership.check_partitions,
                    ),
                )
                if self.parts.mirror.enabled:
                    loops.start_soon(
                        self._kept,
                        scope,
                        "Kafka mirror",
                        functools.partial(self.parts.mirror.run, self.parts.states.claims),
                    )
                loops.start_soon(self._kept, scope, "liveness", self.parts.liveness.run)
                loops.start_soon(self._kept, scope, "controls", self.parts.controls.run)
                loops.start_soon(self._kept, scope, "stuck watch", self.parts.stuck.run)
                loops.start_soon(self._kept, scope, "marks", self.parts.marker.run)
        except Exception as exc:
            error: AioClusterError | None = _refusal(exc)
            if error is not None:
                log.error("member %s stops: %s", self.id, error)
            else:
                error = AioClusterError(f"member {self.id} failed in the background: {exc!r}")
                error.__cause__ = exc
            self._fail(error)
            if not joined.done():
                joined.set_exception(error)
            else:
                # It holds claims it can no longer rebalance: they go to the others now.
                self._give_up(error)

    async def _kept(
        self, loops: anyio.CancelScope, name: str, run: Callable[[], Awaitable[None]]
    ) -> None:
        """Run one loop of the background, whose end is never taken for a normal one: a loop
        that returns, or that a cancellation nobody asked for ends (one escaping a library's
        ``gather()``, whose task group would otherwise end quietly), raises
        [BackgroundEndedError][aio_cluster.BackgroundEndedError] naming it, which fails the
        member (see `_background()`). A cancellation is asked for by the closing, by the loops'
        scope (another loop failed), or by a cancel of the member's task (which anyio passes on
        to the loops by cancelling its task group's scope), each of which cancels a scope
        around the loop: that is what tells them (`cancel_asked()`), not ``Task.cancelling()``,
        which Python 3.10 lacks (there every cancellation would count as asked for, and a
        stray one end every loop silently). A loop that returns after failing the member itself
        (the rebalances on an error no retry mends) or while it closes ends as it is.

        Raises:
            BackgroundEndedError: the loop ended unasked.
        """
        try:
            await run()
        except asyncio.CancelledError as exc:
            if self._closing.is_set() or loops.cancel_called or cancel_asked():
                raise
            log.error("member %s: its %s loop was cancelled, unasked", self.id, name)
            raise BackgroundEndedError(
                f"member {self.id}: its {name} loop was cancelled, and no one asked for it",
                name,
            ) from exc
        if self._closing.is_set() or self._has_failed():
            return
        log.error("member %s: its %s loop ended", self.id, name)
        raise BackgroundEndedError(f"member {self.id}: its {name} loop ended", name)

    def _has_failed(self) -> bool:
        """Whether the member failed already: its failure set, or its join refused."""
        joined = self._joined
        refused = (
            joined is not None
            and joined.done()
            and not joined.cancelled()
            and joined.exception() is not None
        )
        return self._failure is not None or refused

    async def _every(self, interval: float, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await job()
            except (CoordinationError, BrokerError) as exc:
                log.warning("member %s: %s", self.id, exc)

    async def _store_all(self) -> None:
        await self.parts.handover.store(list(self.parts.states.claims))

    async def _end(self) -> None:
        """However the leaving went: `process()` has ended, what was not released goes with
        the session, the clients close (within what is left of the bound, and at least their
        share of it), the member is CLOSED."""
        self._begin_closing()  # the task may also end by a cancellation of its own
        # However the leaving went (the deadline may have cut the handlers' shutdown short),
        # process() has returned before the session ends: else a handler would still run
        # while the next owner handles its partition (a second at least).
        await self.processes.end(max(self._deadline - self.parts.loop.time(), 1.0))
        self.parts.membership.forget()
        # Their share even when the background's cancellation overran it (a shielded store on
        # a slow ZooKeeper): a closing cancelled before it began leaves the session open for
        # the process's life (kazoo keeps it alive), and the claims with it.
        share = self.parts.settings.timing.close_timeout / 4
        closes: list[Callable[[], Awaitable[None]]] = [
            self.parts.zk.close,
            self.parts.delivery.stop,
            self.parts.mirror.stop,
            *([] if self.parts.transactions is None else [self.parts.transactions.stop]),
        ]
        # A task group, not asyncio's gather(): cut short by the bound, a gather whose client
        # finished its shielded closing anyway raises a CancelledError that is not the bound's,
        # which the bound's scope lets through (Python < 3.13), ending the member's task with
        # the clients half closed and close() raising CancelledError to a caller nobody
        # cancelled.
        with anyio.move_on_after(max(self._deadline - self.parts.loop.time(), share)) as scope:
            async with anyio.create_task_group() as closing:
                for close in closes:
                    closing.start_soon(self._close_client, close)
        if scope.cancelled_caught:
            log.warning("member %s: closing the clients took too long", self.id)
        self.state = GroupState.CLOSED
        self.parts.wake()
        self._closed.set()
        log.info("member %s left", self.id)

    async def _close_client(self, close: Callable[[], Awaitable[None]]) -> None:
        """Close one client; its failure is logged, the others close all the same."""
        try:
            await close()
        except Exception as exc:
            log.warning("member %s: closing a client failed: %r", self.id, exc)

    # -- closing -----------------------------------------------------------------------------

    def _begin_closing(self) -> None:
        """Ask for the closing (once): nothing more is handed out, register() stops waiting,
        and the member's task goes on to the closing (made here if close() came while the
        clients started)."""
        if self._closing.is_set():
            return
        self.state = GroupState.CLOSING
        self._deadline = self.parts.loop.time() + self.parts.settings.timing.close_timeout
        self._closing.set()
        self.parts.wake()
        if self._joined is not None and not self._joined.done():
            # register() (or a listener it awaits) closed the member before it joined.
            self._joined.set_exception(
                GroupClosedError(f"member {self.id} was closed while it joined")
            )
        if self._life is None:
            self._life = background(self._live(), name=f"aio-cluster {self.id}")

    async def close(self) -> None:
        """Leave the group (see the module); idempotent.

        Raises:
            asyncio.CancelledError: the caller was cancelled meanwhile (raised once the closing
                is done).
        """
        if self.state is GroupState.CLOSED:
            return
        if self.state is GroupState.NEW:
            self.state = GroupState.CLOSED
            # Never registered: the Kafka clients exist (aiokafka makes them at once) but never
            # started; closed all the same, or each warns of being left unclosed.
            await self.parts.fetcher.stop()
            await self.parts.mirror.stop()
            if self.parts.transactions is not None:
                await self.parts.transactions.stop()
            return
        self._begin_closing()
        work = _WORK.get()
        if work is not None and work.member is self:
            await work.close()
            return
        assert self._life is not None
        await outlasting(self._life)
