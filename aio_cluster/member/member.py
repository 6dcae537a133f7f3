"""Member: one member's parts, built from its configuration, and its life.

The facade ([ConsumerGroup][aio_cluster.ConsumerGroup]) knows partitions by the names its user
gives them; a `Member` knows them by key and owns everything else. It builds its parts from the
`aio_cluster.config.Settings`: the ZooKeeper client, the fetcher, the Kafka mirror, the
partition states, the offsets, the membership, the delivery, the liveness and the handover.

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
import itertools
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio

from ..assign.strategies import Strategy
from ..assign.subscription import Subscription
from ..concurrency import background, cancel_asked, outlasting
from ..config import Processing, Settings
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
from ..kafka.dead_letters import DeadLetters
from ..kafka.fetcher import Fetcher
from ..kafka.group_offsets import KafkaGroupOffsets
from ..kafka.options import parse_bootstrap
from ..kafka.topics import PartitionKey
from ..otel.loading import telemetry_for
from ..zookeeper.client import ZooKeeper
from ..zookeeper.values import SessionState
from .controls import MemberControls
from .delivery.claims import Batch, Claim
from .delivery.delivery import Delivery
from .delivery.partitions import PartitionStates
from .exactly_once import Transactions
from .lifecycle import GroupState
from .processing.processor import Handler, Processor, check_handler
from .protocol.handover import Handover
from .protocol.keyed_layout import KeyedLayout
from .protocol.listener import RebalanceListener
from .protocol.liveness import Liveness
from .protocol.marks import Marker
from .protocol.membership import GroupPlace
from .protocol.mirror import KafkaMirror
from .protocol.offsets import Offsets
from .statistics import GroupStatistics, partition_statistics
from .stuck import StuckWatch

if TYPE_CHECKING:
    from ..otel.telemetry import Telemetry

__all__ = ["Member", "milliseconds"]

log = logging.getLogger(__name__)

_counter = itertools.count(1)

P = TypeVar("P")
"""How the facade names a partition for its user."""


def _member_id(group: str) -> str:
    return "-".join(
        [group, socket.gethostname(), str(os.getpid()), str(int(time.time())), str(next(_counter))]
    )


def milliseconds(seconds: float) -> int:
    """Seconds in whole milliseconds (at least 1), as Kafka's fetch request takes a wait."""
    return max(1, round(seconds * 1000))


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
    """One member of a group: its parts, and the one task its background and its closing run
    in (see the module). Partitions are keys (`aio_cluster.kafka.topics.TopicKeys`)."""

    def __init__(
        self,
        brokers: str | Sequence[str],
        zookeepers: str | Sequence[str],
        layout: KeyedLayout,
        subscription: Subscription,
        settings: Settings,
        *,
        listener: RebalanceListener[PartitionKey] | None,
    ) -> None:
        """Build the parts; nothing connects before `register()`.

        Args:
            brokers: Kafka's bootstrap servers.
            zookeepers: ZooKeeper's servers (the last may carry a chroot).
            layout: the group's paths, by partition key (its names checked).
            subscription: the topics read.
            settings: the configuration.
            listener: told of partitions that move, by key.

        Raises:
            ConfigurationError: malformed servers, or no event loop runs.
        """
        timing, fetching, joining = settings.timing, settings.fetching, settings.membership
        self.settings = settings
        self.subscription = subscription
        self.layout = layout
        self.strategy = Strategy(joining.strategy)
        self.id = (
            joining.member_name if joining.member_name is not None else _member_id(layout.group)
        )
        security = settings.zookeeper
        self.zk = ZooKeeper(
            zookeepers,
            session_timeout=timing.session_timeout,
            request_timeout=timing.request_timeout,
            auth=security.auth,
            acl=security.acl,
            tls=security.tls,
        )
        parse_bootstrap(brokers)
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            # aiokafka binds each client to the loop it is made in: checked before making them.
            raise ConfigurationError(
                "ConsumerGroup must be made inside a running event loop (in a coroutine, "
                "e.g. under asyncio.run()): its Kafka clients belong to the loop they are made in"
            ) from None
        self.brokers = brokers
        wait_ms = milliseconds(fetching.max_wait)
        self.fetcher = Fetcher(
            brokers,
            keys=layout.keys,
            client_id=self.id,
            max_bytes=fetching.max_bytes,
            max_wait_ms=wait_ms,
            min_bytes=fetching.min_bytes,
            options=settings.kafka,
            isolation_level=fetching.isolation_level,
            key_deserializer=fetching.key_deserializer,
            value_deserializer=fetching.value_deserializer,
            max_buffered_bytes=fetching.max_buffered_bytes,
            # Named unreadable (and marked) after half fetch_timeout without progress; the mark
            # settles after the other half (`Marker`), so the partitions move at fetch_timeout.
            fetch_timeout=timing.fetch_timeout / 2,
            # A member that keeps asking for a partition asks again within one fetch's wait,
            # or one loop_delay after a failed fetch.
            fetch_gap=max(fetching.max_wait, timing.loop_delay) + 1.0,
        )
        self.mirror = KafkaMirror(
            None
            if joining.kafka_offsets == "off"
            else KafkaGroupOffsets(
                brokers,
                layout.group,
                layout.keys,
                client_id=self.id,
                options=settings.kafka,
            ),
            member_id=self.id,
            migrate=joining.kafka_offsets == "migrate",
            # At most half the close bound, so that an absent Kafka leaves time to release.
            timeout=min(timing.request_timeout, timing.close_timeout / 2),
        )
        self.states = PartitionStates(transactional=joining.exactly_once)
        self.transactions: Transactions | None = (
            Transactions(
                brokers,
                layout,
                self.states,
                member_id=self.id,
                timeout=timing.request_timeout,
                options=settings.kafka,
                on_fenced=self._fenced,
            )
            if joining.exactly_once
            else None
        )
        """Exactly once: the partitions' producers and their commits; None otherwise."""
        self.telemetry: Telemetry | None = telemetry_for(
            layout.group, self.id, layout.keys.split, self._lag
        )
        """Spans and metrics through OpenTelemetry; None without the ``otel`` extra or when
        turned off (see `aio_cluster.otel.loading`)."""
        if self.telemetry is not None:
            self.telemetry.meters.paused = self._paused_reading
        # A claim found gone at a write is dropped by the rebalance this asks for.
        self.offsets = Offsets(self.zk, layout, self.states, on_fenced=self._fenced)
        self.membership = GroupPlace(
            self.zk,
            layout,
            self.fetcher,
            self.offsets,
            self.states,
            member_id=self.id,
            strategy=self.strategy,
            claim_timeout=timing.claim_timeout,
            wait_for_topic=joining.wait_for_topic,
            rebalance_timeout=timing.rebalance_timeout,
            named=joining.member_name is not None,
            rejoin_grace=joining.rejoin_grace or None,
            subscription=subscription,
            telemetry=self.telemetry,
            starter=self.transactions,
        )
        self.delivery = Delivery(
            self.fetcher,
            self.states,
            member_id=self.id,
            loop_delay=timing.loop_delay,
            max_wait_ms=wait_ms,
            trail=fetching.trail,
            label=layout.label,
        )
        if self.telemetry is not None:
            self.delivery.handed_out = self.telemetry.consumed
        self.delivery.stalled = self._give_up
        self.liveness = Liveness(
            self.zk, self.delivery, member_id=self.id, on_back=self.membership.request_rebalance
        )
        self.marker = Marker(
            self.zk,
            layout.mark(self.id),
            self.fetcher,
            lambda: self.states.claims,
            layout.keys,
            member_id=self.id,
            fetch_timeout=timing.fetch_timeout,
            label=layout.label,
            listener=listener,
        )
        self.handover = Handover(
            self.states,
            self.delivery,
            self.offsets,
            self.mirror,
            member_id=self.id,
            listener=listener,
            rebalance_timeout=timing.rebalance_timeout,
            label=layout.label,
            telemetry=self.telemetry,
            committer=self.transactions,
        )
        self.controls = MemberControls(
            self.zk,
            layout,
            self.states,
            self.delivery,
            self.handover,
            member_id=self.id,
            topics=lambda: self.membership.topics,
            processor=lambda: self.processor,
        )
        self.stuck = StuckWatch(
            self.zk,
            layout,
            member_id=self.id,
            stuck_after=timing.stuck_after,
            handlers=self._handlers_running,
        )
        """What runs now, and which partitions are stuck (see `aio_cluster.member.stuck`)."""
        self.state = GroupState.NEW
        self.processor: Processor | None = None
        """The processor of the running (or the last) `process()` call."""
        self._failure: AioClusterError | None = None
        self._iterating = 0
        """Batch iterations running now (see `iterating()`)."""
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

    def check_open(self, *, while_closing: bool = False) -> None:
        """Raise GroupClosedError once the member began to close, or with ``while_closing``
        only once it closed: offsets may still be read and stored while closing (the
        listener's ``on_partitions_revoked`` commits what the application finished)."""
        closed = (GroupState.CLOSED,) if while_closing else (GroupState.CLOSING, GroupState.CLOSED)
        if self.state in closed:
            raise GroupClosedError(f"member {self.id} of group {self.layout.group!r} is closed")

    def is_closing(self) -> bool:
        """Whether the member closes (what the delivery asks before each batch).

        Raises:
            AioClusterError: the member failed in the background.
        """
        if self._failure is not None:
            raise self._failure
        return self.state in (GroupState.CLOSING, GroupState.CLOSED)

    def wake(self) -> None:
        """Something changed: waiting iterators look again, and a rebalance follows."""
        self.delivery.wake()
        self.membership.request_rebalance()

    def _fenced(self, partitions: list[PartitionKey]) -> None:
        """Writes found the claims of ``partitions`` gone: their offsets are never mirrored, and
        the rebalance this asks for drops them (and claims them again where the target says)."""
        self.mirror.forget(partitions)
        self.wake()

    def _fail(self, error: AioClusterError) -> None:
        """The member cannot go on: the next batch (or register()) raises ``error``."""
        self._failure = error
        self.wake()

    def _give_up(self, error: AioClusterError) -> None:
        """The member cannot consume: it fails with ``error`` and leaves, so that its partitions
        go to members that can read them instead of waiting for its close()."""
        self._fail(error)
        if self.state in (GroupState.JOINING, GroupState.JOINED):
            self._begin_closing()

    def _lag(self) -> list[tuple[Mapping[str, str | int], int]]:
        """Each claimed partition's lag for the OpenTelemetry gauge: the log end the last fetch
        saw minus the stored offset (partitions with neither yet are left out). Read from the
        meter provider's thread, so it copies the claims first and asks no server."""
        telemetry = self.telemetry
        if telemetry is None:
            return []
        found = []
        for key, claim in list(self.states.claims.items()):
            end, stored = self.fetcher.highwater(key), claim.stored
            if end is not None and stored is not None:
                topic, partition = self.layout.keys.split(key)
                found.append((telemetry.metric_attributes(topic, partition), max(end - stored, 0)))
        return found

    def _paused_reading(self) -> list[tuple[Mapping[str, str | int], str]]:
        """Each paused claimed partition for the OpenTelemetry gauge, with who holds it paused
        (``operator``, ``member``). Read from the meter provider's thread: copies first."""
        telemetry = self.telemetry
        if telemetry is None:
            return []
        claims = set(self.states.claims)
        holds = [(key, "operator") for key in self.states.held if key in claims]
        holds += [(key, "member") for key in self.states.paused if key in claims]
        found: list[tuple[Mapping[str, str | int], str]] = []
        for key, holder in holds:
            topic, partition = self.layout.keys.split(key)
            found.append((telemetry.metric_attributes(topic, partition), holder))
        return found

    def _handlers_running(self) -> list[tuple[PartitionKey, int, float]]:
        """The records in flight in ``process()`` now, for the stuck watch."""
        processor = self.processor
        return [] if processor is None or not processor.running else processor.running_since()

    # -- consuming ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def iterating(self) -> Iterator[None]:
        """The span of one batch iteration, which `process()` may not run beside.

        Raises:
            ConfigurationError: `process()` runs.
        """
        if self.processor is not None and self.processor.running:
            raise ConfigurationError("batches cannot be iterated while process() runs")
        self._iterating += 1
        try:
            yield
        finally:
            self._iterating -= 1

    async def next_batch(self) -> tuple[Claim, Batch] | None:
        """The next batch to hand out, or None once the member closes."""
        return await self.delivery.next_batch(self.is_closing)

    async def process(self, handler: Handler, policy: Processing) -> None:
        """Run ``handler`` for every record of the claimed partitions (see
        `aio_cluster.member.processing.processor`), until the member closes or the call is
        cancelled.

        Raises:
            ConfigurationError: a bad handler, the consumed topic as dead-letter topic, or
                `process()` or a batch iteration runs already.
            GroupClosedError: the member is closed.
            AioClusterError: the member failed (in the background, or its fetching stalled),
                also when that ended the call through the closing it started.
        """
        check_handler(handler)
        topic = policy.dead_letter_topic
        if topic is not None and self.subscription.matches(topic):
            raise ConfigurationError(
                f"dead_letter_topic {topic!r} is the topic consumed: failed records would come back"
            )
        self.check_open()
        if self.processor is not None and self.processor.running:
            raise ConfigurationError(f"process() runs already on member {self.id}")
        if self._iterating:
            raise ConfigurationError(
                f"process() cannot run beside a running batch iteration on member {self.id}"
            )
        dead_letters = None
        # With "stop", the dead-letter topic gets the records an operator skips.
        if policy.on_failure in ("dead_letter", "stop") and topic is not None:
            dead_letters = DeadLetters(
                self.brokers, topic, client_id=self.id, options=self.settings.kafka
            )
        self.processor = processor = Processor(
            self.delivery,
            handler,
            policy,
            is_closing=self.is_closing,
            member_id=self.id,
            dead_letters=dead_letters,
            telemetry=self.telemetry,
        )
        processor.on_stopped = self.controls.poke
        token = _WORK.set(_Work(self, self._close_from_handler))
        try:
            await processor.run()
        finally:
            _WORK.reset(token)
        if self._failure is not None:
            # The member failed while the handlers ran: its closing ended them (the processor
            # saw a close, not the failure), and the call must not end as if closed.
            raise self._failure

    async def _close_from_handler(self) -> None:
        """``close()`` inside a handler: the handlers stop now, this one with them (its record
        is delivered again), while the closing goes on in the member's task."""
        if self.processor is not None:
            await self.processor.shutdown(0.0)
        await self._closed.wait()

    # -- reading and steering, by key -------------------------------------------------------

    async def stored(self, key: PartitionKey) -> int | None:
        """The stored next offset of ``key``, a completed batch's pending one stored first."""
        if self.states.owned(key):
            await self.handover.store([key])
        return await self.offsets.stored(key)

    async def store(self, key: PartitionKey, offset: int) -> Claim | None:
        """Store ``offset`` as the next offset of ``key`` now, if this member owns it.

        Returns:
            The claim (``fenced`` once a write found it gone: nothing was stored), or None when
            this member does not own ``key``.
        """
        claim = self.states.claims.get(key)
        if claim is not None and not claim.fenced:
            self.states.to_store(key, offset)
            await self.handover.store([key])
        return claim

    def seek(self, offsets: Mapping[PartitionKey, int]) -> None:
        """Start the next batches of these partitions (those still owned) at these offsets."""
        for key, offset in offsets.items():
            if self.states.owned(key):
                self.states.sought(key, offset)
        self.delivery.wake()

    async def seek_to_beginning(self, keys: list[PartitionKey]) -> None:
        bounds = await self.fetcher.bounds(keys)
        self.seek({key: earliest for key, (earliest, _end) in bounds.items()})

    async def seek_to_end(self, keys: list[PartitionKey]) -> None:
        self.seek(await self.fetcher.ends(keys))

    async def seek_to_timestamp(self, keys: list[PartitionKey], timestamp_ms: int) -> None:
        found = await self.fetcher.offsets_for_time(keys, timestamp_ms)
        ends = await self.fetcher.ends([key for key, offset in found.items() if offset is None])
        self.seek({key: ends[key] if offset is None else offset for key, offset in found.items()})

    async def statistics(self, name: Callable[[PartitionKey], P]) -> GroupStatistics[P]:
        """A snapshot of this member, its partitions named by ``name``; one ListOffsets round
        trip to Kafka."""

        def names(keys: Iterable[PartitionKey]) -> tuple[P, ...]:
            named: list[Any] = [name(key) for key in keys]
            return tuple(sorted(named))

        claims, paused, processor = self.states.claims, self.states.paused, self.processor
        held = [key for key in self.states.held if key in claims]
        marked = self.marker.marked
        # The leaders of the partitions marked unreadable may not answer: their log ends are the
        # last a fetch saw, so that the snapshot says what the member cannot read instead of
        # waiting out a request timeout.
        ends = await self.fetcher.ends(sorted(claims.keys() - marked.keys()))
        for key in claims.keys() & marked.keys():
            if (seen := self.fetcher.highwater(key)) is not None:
                ends[key] = seen
        figures = partition_statistics(claims, ends, paused, name, held)
        membership = self.membership
        stuck, oldest = self.stuck.stuck(), self.stuck.oldest()
        return GroupStatistics(
            member_id=self.id,
            state=self.state,
            session=self.zk.state.value,
            claimed=names(claims),
            paused=names(paused),
            partitions=tuple(sorted(figures, key=lambda entry: cast(Any, entry.partition))),
            rebalances=membership.rebalances,
            claim_timeouts=membership.claim_timeouts,
            unowned_nodes=membership.unowned_nodes,
            batches=self.states.batches,
            records=self.states.records,
            last_rebalance=membership.last_rebalance,
            recent_rebalances=tuple(membership.recent_rebalances),
            in_flight=0 if processor is None else processor.in_flight,
            retried=0 if processor is None else processor.retried,
            dead_lettered=0 if processor is None else processor.dead_lettered,
            oldest_in_flight=None if processor is None else processor.oldest_in_flight(),
            stopped=()
            if processor is None
            else names(p for p in processor.failed_at if p in claims and p in paused),
            operator_paused=names(held),
            skips_applied=self.controls.applied,
            oldest_running=oldest,
            stuck=names(stuck),
            stuck_for=oldest if stuck else None,
            unreadable=names(marked),
            unreadable_since=min((why.since for why in marked.values()), default=None),
            unreadable_error=max(marked.values(), key=lambda why: why.since).error
            if marked
            else None,
        )

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
        if asyncio.get_running_loop() is not self._loop:
            raise ConfigurationError(
                "ConsumerGroup must register in the event loop it was made in: its Kafka "
                "clients belong to that loop"
            )
        self.state = GroupState.JOINING
        self._joined = joined = self._loop.create_future()
        try:
            await self._start()
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
            self.layout.labels(sorted(self.states.claims)),
        )

    async def _start(self) -> None:
        """Start the member's clients at once: the ZooKeeper session (then the group's paths),
        the Kafka clients (then, if the member may not wait, the topic check), the mirror and,
        exactly once, the reader of the group's committed Kafka offsets.

        Each start runs to its end even when another fails, so that no client is left half
        started; the first failure (in that order) is raised, and `register()` closes them all.
        """
        failures: list[BaseException | None] = [None, None, None, None]

        async def attempt(index: int, start: Callable[[], Awaitable[None]]) -> None:
            try:
                await start()
            except Exception as exc:
                failures[index] = exc

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(attempt, 0, self._start_zookeeper)
            tasks.start_soon(attempt, 1, self._start_kafka)
            tasks.start_soon(attempt, 2, self.mirror.start)
            if self.transactions is not None:
                tasks.start_soon(attempt, 3, self.transactions.start)
        for failure in failures:
            if failure is not None:
                raise failure

    async def _start_zookeeper(self) -> None:
        await self.zk.start()
        self.zk.on_state_change(self._on_session_state)
        await self.membership.prepare()

    async def _start_kafka(self) -> None:
        await self.fetcher.start()
        await self.membership.check_topic()

    def _on_session_state(self, state: SessionState) -> None:
        # Suspended: nothing starts; lost: nothing in flight goes on either; connected again:
        # it all goes on once ZooKeeper answers, after a rebalance (see protocol/liveness.py).
        self.liveness.on_state(state)
        if state is SessionState.LOST:
            self.membership.lose()
            self.membership.request_rebalance()
            self.mirror.forget()
        self.delivery.wake()

    # -- the member's task: the background, then the closing ---------------------------------

    async def _live(self) -> None:
        """The member's one task (see the module): its background until `close()`, then the
        closing, bounded by ``close_timeout`` from the moment it was asked for. A share of the
        bound is kept for closing the clients, so that they close even when leaving took all
        the rest; a background whose cancellation overran the whole bound (a shielded step of
        it) makes the closing that share longer, not the session endless."""
        # A listener called from the background waits for the closing's cancellation.
        _WORK.set(_Work(self, self._closed.wait))
        timeout = self.settings.timing.close_timeout
        try:
            with anyio.CancelScope() as leaving:
                async with anyio.create_task_group() as background:
                    if not self._closing.is_set():  # else closed while the clients started
                        background.start_soon(self._background)
                    await self._closing.wait()
                    leaving.deadline = self._deadline - timeout / 4
                    if self.processor is not None and self.processor.running:
                        # Handlers in flight finish first (bounded), so their offsets are stored.
                        await self.processor.shutdown(self.settings.timing.rebalance_timeout)
                    await self._store_completed()
                    background.cancel_scope.cancel()
                _WORK.set(_Work(self, _already_closing))
                try:
                    await self.membership.leave(self.handover)
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
            await self.handover.store(list(self.states.claims))
        except AioClusterError as exc:
            log.warning("member %s: storing the completed offsets failed: %s", self.id, exc)

    async def _background(self) -> None:
        """Every loop of the member, until the closing cancels them. A failure nobody foresaw,
        credentials the servers refused, or a loop that ended unasked must not pass silently: it
        fails the member, and register() or the next batch raises it; a joined member leaves at
        once, so that its partitions go to the others."""
        joined = self._joined
        assert joined is not None
        timing = self.settings.timing
        try:
            async with anyio.create_task_group() as loops:
                scope = loops.cancel_scope
                loops.start_soon(
                    self._kept,
                    scope,
                    "rebalances",
                    functools.partial(self.membership.run, joined, self.handover, self._fail),
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
                        self._every, timing.metadata_interval, self.membership.check_partitions
                    ),
                )
                if self.mirror.enabled:
                    loops.start_soon(
                        self._kept,
                        scope,
                        "Kafka mirror",
                        functools.partial(self.mirror.run, self.states.claims),
                    )
                loops.start_soon(self._kept, scope, "liveness", self.liveness.run)
                loops.start_soon(self._kept, scope, "controls", self.controls.run)
                loops.start_soon(self._kept, scope, "stuck watch", self.stuck.run)
                loops.start_soon(self._kept, scope, "marks", self.marker.run)
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
        await self.handover.store(list(self.states.claims))

    async def _end(self) -> None:
        """However the leaving went: `process()` has ended, what was not released goes with
        the session, the clients close (within what is left of the bound, and at least their
        share of it), the member is CLOSED."""
        self._begin_closing()  # the task may also end by a cancellation of its own
        await self._processor_ended()
        self.membership.forget()
        # Their share even when the background's cancellation overran it (a shielded store on
        # a slow ZooKeeper): a closing cancelled before it began leaves the session open for
        # the process's life (kazoo keeps it alive), and the claims with it.
        share = self.settings.timing.close_timeout / 4
        closes: list[Callable[[], Awaitable[None]]] = [
            self.zk.close,
            self.delivery.stop,
            self.mirror.stop,
            *([] if self.transactions is None else [self.transactions.stop]),
        ]
        # A task group, not asyncio's gather(): cut short by the bound, a gather whose client
        # finished its shielded closing anyway raises a CancelledError that is not the bound's,
        # which the bound's scope lets through (Python < 3.13), ending the member's task with
        # the clients half closed and close() raising CancelledError to a caller nobody
        # cancelled.
        with anyio.move_on_after(max(self._deadline - self._loop.time(), share)) as scope:
            async with anyio.create_task_group() as closing:
                for close in closes:
                    closing.start_soon(self._close_client, close)
        if scope.cancelled_caught:
            log.warning("member %s: closing the clients took too long", self.id)
        self.state = GroupState.CLOSED
        self.wake()
        self._closed.set()
        log.info("member %s left", self.id)

    async def _close_client(self, close: Callable[[], Awaitable[None]]) -> None:
        """Close one client; its failure is logged, the others close all the same."""
        try:
            await close()
        except Exception as exc:
            log.warning("member %s: closing a client failed: %r", self.id, exc)

    async def _processor_ended(self) -> None:
        """However the leaving went (the deadline may have cut the processor's shutdown short),
        `process()` has returned before the session ends: else a handler would still run while
        the next owner handles its partition. A handler that ignores its cancellation is waited
        for until the deadline (a second at least), then named."""
        processor = self.processor
        if processor is None or not processor.running:
            return
        processor.cancel()
        bound = max(self._deadline - self._loop.time(), 1.0)
        with anyio.CancelScope(shield=True), anyio.move_on_after(bound):
            await processor.ended()
        for partition, records in processor.handling().items():
            log.warning(
                "member %s: on closing, the handler of the record at offset %d of partition %d "
                "ignores its cancellation; its claim ends with the session",
                self.id,
                records[0].offset,
                partition,
            )

    # -- closing -----------------------------------------------------------------------------

    def _begin_closing(self) -> None:
        """Ask for the closing (once): nothing more is handed out, register() stops waiting,
        and the member's task goes on to the closing (made here if close() came while the
        clients started)."""
        if self._closing.is_set():
            return
        self.state = GroupState.CLOSING
        self._deadline = self._loop.time() + self.settings.timing.close_timeout
        self._closing.set()
        self.wake()
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
            await self.fetcher.stop()
            await self.mirror.stop()
            if self.transactions is not None:
                await self.transactions.stop()
            return
        self._begin_closing()
        work = _WORK.get()
        if work is not None and work.member is self:
            await work.close()
            return
        assert self._life is not None
        await outlasting(self._life)
