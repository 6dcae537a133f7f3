"""ConsumerGroup: one member of a self-balancing consumer group of one Kafka topic, or many.

The members of a group share its name; every message of the topic goes to exactly one of them.
They agree on who owns which partition through ZooKeeper (the classic layout, see
`aio_cluster.zookeeper.layout`): each member registers an ephemeral node, and on every change of
the registrations each member learns the assignment, releases what is no longer its own and claims
what is. With the sticky strategy (the default) the oldest member computes the assignment and
publishes it, and the others follow it (`aio_cluster.assign.target`); with range and round-robin
each member computes the same one (`aio_cluster.assign.strategies`). Only the partitions that
change owner pause; the others keep delivering.

Handover happens at batch boundaries: a partition whose batch is being processed is released only
after the loop body finished, and after its offset was stored, so graceful joins and leaves neither
lose nor repeat a message (a body that outlasts ``rebalance_timeout`` is abandoned, uncommitted).

`ConsumerGroup` is the facade: its options become the configuration objects of
`aio_cluster.config`, it checks its user's arguments and names, and it hands every call on to a
`aio_cluster.member.member.Member`, whose own methods do the work: the member builds its parts
from the configuration, runs each way to consume beneath it, and owns the task its background
and its closing run in.

A member on many topics (a list, or a pattern) is the same machinery: its parts know each
partition by a key (`aio_cluster.kafka.topics.PartitionKey`, made by
`aio_cluster.kafka.topics.TopicKeys`; for one topic, the partition id itself), and the facade
turns the ``int`` or `TopicPartition` its user names into keys and back through one
`aio_cluster.member.naming.PartitionNames`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, overload

from .assign.strategies import Strategy
from .assign.subscription import Subscription
from .config import (
    Fetching,
    Membership,
    Options,
    Processing,
    ProcessOptions,
    Settings,
    Timing,
    ZooKeeperSecurity,
)
from .errors import ConfigurationError
from .kafka.records import Record
from .kafka.topics import PartitionKey, PartitionT, TopicKeys, TopicPartition
from .member.assembly import Blueprint
from .member.delivery.claims import Batch
from .member.exactly_once import Output, TransactionalHandler
from .member.lifecycle import GroupState
from .member.member import Member
from .member.naming import UNKNOWN, PartitionNames
from .member.processing.workers import check_handler
from .member.protocol.keyed_layout import KeyedLayout
from .member.protocol.listener import NamingListener, RebalanceListener
from .member.statistics import GroupStatistics
from .zookeeper.layout import check_name

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Batch", "ConsumerGroup", "GroupState", "Output", "TopicPartition"]


def _check_offset(value: object, label: str = "offset") -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigurationError(f"{label} must be a non-negative integer, not {value!r}")


class ConsumerGroup(Generic[PartitionT]):
    """One member of a consumer group reading one topic, a list of topics, or the topics a
    pattern matches.

    Use it as ``async with ConsumerGroup(...) as group:`` and iterate ``async for partition, batch
    in group``: each batch is committed when the loop body has finished and the loop asks for the
    next one; a body that raises or breaks leaves its batch uncommitted, and it is delivered again.
    Batches come round-robin from the claimed partitions.

    A member of one topic names a partition by its id (``ConsumerGroup[int]``); a member of a
    list of topics or a pattern by a [TopicPartition][aio_cluster.TopicPartition]
    (``ConsumerGroup[TopicPartition]``), in its batches and in every call that takes or returns
    partitions. Type checkers tell the two apart by the form of ``topic``.

    Offsets of completed batches are stored in ZooKeeper at most ``commit_interval`` seconds later,
    and always before a partition is handed over or the member leaves; a member that crashes may
    so deliver up to ``commit_interval`` seconds of batches again (at least once, never lost).

    See [GroupState][aio_cluster.GroupState] for the lifecycle.
    """

    @overload
    def __init__(
        self: ConsumerGroup[int],
        name: str,
        brokers: str | Sequence[str],
        zookeepers: str | Sequence[str],
        topic: str,
        *,
        listener: RebalanceListener[int] | None = None,
        kafka_options: Mapping[str, Any] | None = None,
        timing: Timing | None = None,
        fetching: Fetching | None = None,
        membership: Membership | None = None,
        zookeeper_security: ZooKeeperSecurity | None = None,
        **options: Unpack[Options],
    ) -> None: ...

    @overload
    def __init__(
        self: ConsumerGroup[TopicPartition],
        name: str,
        brokers: str | Sequence[str],
        zookeepers: str | Sequence[str],
        topic: list[str] | tuple[str, ...] | re.Pattern[str],
        *,
        exclude: re.Pattern[str] | None = None,
        listener: RebalanceListener[TopicPartition] | None = None,
        kafka_options: Mapping[str, Any] | None = None,
        timing: Timing | None = None,
        fetching: Fetching | None = None,
        membership: Membership | None = None,
        zookeeper_security: ZooKeeperSecurity | None = None,
        **options: Unpack[Options],
    ) -> None: ...

    def __init__(
        self,
        name: str,
        brokers: str | Sequence[str],
        zookeepers: str | Sequence[str],
        topic: str | list[str] | tuple[str, ...] | re.Pattern[str],
        *,
        exclude: re.Pattern[str] | None = None,
        listener: RebalanceListener[Any] | None = None,
        kafka_options: Mapping[str, Any] | None = None,
        timing: Timing | None = None,
        fetching: Fetching | None = None,
        membership: Membership | None = None,
        zookeeper_security: ZooKeeperSecurity | None = None,
        **options: Unpack[Options],
    ) -> None:
        """Configure a member; it joins in ``async with`` (or `register()`).

        Args:
            name: the group's name, shared by all its members.
            brokers: Kafka bootstrap servers, ``"host:port"``.
            zookeepers: ZooKeeper servers, ``"host:port"`` (the last may carry a ``/chroot``).
            topic: the topic to consume; or a list of topics; or a compiled `re.Pattern`: every
                topic of the cluster whose whole name it matches, as topics come and go (see
                the subscriptions guide). With a list or a pattern partitions are named by
                [TopicPartition][aio_cluster.TopicPartition] (even for a list of one topic).
            exclude: with a pattern, a compiled pattern of the topics not to read.
            listener: told of the partitions that are assigned, revoked or lost (see
                [RebalanceListener][aio_cluster.RebalanceListener]), named as the batches name
                them.
            kafka_options: connection options for every Kafka client of the member, with
                aiokafka's names (TLS, SASL; see [KafkaOptions][aio_cluster.KafkaOptions]).
            timing: the times and intervals (see [Timing][aio_cluster.Timing]).
            fetching: the fetches and the records (see [Fetching][aio_cluster.Fetching]).
            membership: the member's part in the group (see
                [Membership][aio_cluster.Membership]).
            zookeeper_security: the ZooKeeper session's credentials, ACL and TLS (see
                [ZooKeeperSecurity][aio_cluster.ZooKeeperSecurity]).
            **options: any field of those four objects instead, by its name (those of
                `ZooKeeperSecurity` as ``zookeeper_auth``, ``zookeeper_acl``,
                ``zookeeper_tls``): ``ConsumerGroup(..., session_timeout=30.0)`` is
                ``ConsumerGroup(..., timing=Timing(session_timeout=30.0))``. An object and
                fields of it both are refused. ``max_wait_ms`` (milliseconds) is deprecated:
                pass ``max_wait``, in seconds.

        Raises:
            ConfigurationError: an argument is not valid (the message names it), or no event
                loop is running (make the member inside a coroutine).
            TypeError: an unknown keyword argument.
        """
        self._subscription = subscription = Subscription.of(topic, exclude)
        check_name("group", name)
        keys = TopicKeys(subscription.topics)
        self._layout = layout = KeyedLayout(name, keys, many=subscription.many)
        self._names: PartitionNames[PartitionT] = PartitionNames(layout, subscription)
        for each in subscription.topics:
            layout.of(each)  # checks the name
        settings = Settings.of(
            options,
            timing=timing,
            fetching=fetching,
            membership=membership,
            zookeeper_security=zookeeper_security,
            kafka_options=kafka_options,
        )
        self._member = Member(
            Blueprint(
                brokers,
                zookeepers,
                layout,
                subscription,
                settings,
                listener=(
                    listener
                    if listener is None or not subscription.many
                    else NamingListener(listener, self._names.name)
                ),
            )
        )

    # -- what a user reads -------------------------------------------------------------------

    def __repr__(self) -> str:
        return (
            f"<ConsumerGroup {self.name!r} topic={self.topic!r} member={self.id!r} "
            f"state={self.state.value}>"
        )

    @property
    def id(self) -> str:
        """This member's id: its ``member_name``, or ``<group>-<hostname>-<pid>-<unix
        time>-<counter>``."""
        return self._member.id

    @property
    def name(self) -> str:
        """The group's name."""
        return self._layout.group

    @property
    def topic(self) -> str:
        """The topic this member consumes; of a member on many topics, its topics joined by
        commas, or its pattern's regex (see `topics`)."""
        if self._subscription.regex is not None:
            return self._subscription.regex
        return ",".join(self._subscription.topics)

    @property
    def topics(self) -> list[str]:
        """The topics this member reads now, sorted (a pattern's as of the last metadata check)."""
        if not self._subscription.is_pattern:
            return sorted(self._subscription.topics)
        return self._member.topics()

    @property
    def strategy(self) -> Strategy:
        """The assignment strategy this member uses."""
        return self._member.strategy

    @property
    def state(self) -> GroupState:
        """Where this member is in its lifecycle."""
        return self._member.state

    @property
    def partitions(self) -> list[PartitionT]:
        """Every partition of the topics read, sorted (as of the last metadata check)."""
        return self._names.names(self._member.partitions())

    @property
    def claimed(self) -> list[PartitionT]:
        """The partitions this member owns now, sorted."""
        return self._names.names(self._member.claimed())

    async def offset(self, partition: PartitionT) -> int | None:
        """The stored next offset of ``partition``, or None when none is stored.

        A completed batch's offset that is still waiting to be stored is stored first.
        """
        self._member.check_open(while_closing=True)
        key = self._names.key(partition)
        return None if key == UNKNOWN else await self._member.stored(key)

    async def commit(self, partition: PartitionT, offset: int) -> None:
        """Store ``offset`` as the next offset of ``partition`` now.

        Raises:
            NotOwnedError: this member does not own the partition, or its claim turned out to be
                gone (its owner node was replaced, or an offset reset fenced it off): nothing
                was stored.
            ConfigurationError: the offset is not a non-negative integer.
            CoordinationError: ZooKeeper did not store it.
        """
        self._member.check_open(while_closing=True)
        _check_offset(offset)
        claim = await self._member.store(self._names.key(partition), offset)
        if claim is None or claim.fenced:
            raise self._names.not_owned(
                partition,
                self.id,
                "" if claim is None else ": its claim is gone, nothing was stored",
            )

    # -- steering ----------------------------------------------------------------------------

    def _owned(self, partitions: tuple[PartitionT, ...]) -> list[PartitionKey]:
        """The keys of the given partitions (all claimed ones when none is given), each checked
        to be ours."""
        member = self._member
        member.check_open()
        if not partitions:
            return member.claimed()
        keys = []
        for partition in partitions:
            key = self._names.key(partition)
            if not member.owns(key):
                raise self._names.not_owned(partition, self.id)
            keys.append(key)
        return sorted(set(keys))

    def pause(self, *partitions: PartitionT) -> None:
        """Hand out no batch of these partitions until `resume()`; they stay claimed.

        A pause lasts across rebalances that leave the partition to this member, and across a
        lost ZooKeeper session after which the member claims the partition again.

        Raises:
            NotOwnedError: a partition is not owned by this member.
        """
        if partitions:
            self._member.pause(self._owned(partitions))

    def resume(self, *partitions: PartitionT) -> None:
        """Hand out batches of these partitions again, from where they stopped; partitions not
        paused (or no longer owned) are ignored."""
        self._member.resume([self._names.key(partition) for partition in partitions])

    def paused(self) -> list[PartitionT]:
        """The paused partitions, sorted."""
        return self._names.names(self._member.paused())

    async def seek(self, partition: PartitionT, offset: int) -> None:
        """Start the next batch of ``partition`` at ``offset``.

        Buffered records are dropped, and a batch whose body runs now is not committed. The
        stored offset moves only when a batch from the new position completes (or on
        `commit()`).

        Raises:
            NotOwnedError: this member does not own the partition.
            ConfigurationError: the offset is not a non-negative integer.
        """
        _check_offset(offset)
        (key,) = self._owned((partition,))
        self._member.seek({key: offset})

    async def seek_to_beginning(self, *partitions: PartitionT) -> None:
        """Seek to the earliest offset the broker holds (all claimed partitions when none given).

        Raises:
            NotOwnedError: a partition is not owned by this member.
            BrokerError: Kafka did not answer.
        """
        await self._member.seek_to_beginning(self._owned(partitions))

    async def seek_to_end(self, *partitions: PartitionT) -> None:
        """Seek to the log end: only records written from now on are handed out.

        Raises:
            NotOwnedError: a partition is not owned by this member.
            BrokerError: Kafka did not answer.
        """
        await self._member.seek_to_end(self._owned(partitions))

    async def seek_to_timestamp(self, timestamp_ms: int, *partitions: PartitionT) -> None:
        """Seek to the first record whose timestamp is at or after ``timestamp_ms`` (milliseconds
        since the epoch); where there is none, to the log end.

        Raises:
            NotOwnedError: a partition is not owned by this member.
            ConfigurationError: the timestamp is not a non-negative integer.
            BrokerError: Kafka did not answer.
        """
        _check_offset(timestamp_ms, "timestamp_ms")
        await self._member.seek_to_timestamp(self._owned(partitions), timestamp_ms)

    async def statistics(self) -> GroupStatistics[PartitionT]:
        """A snapshot of where this member stands; one ListOffsets round trip to Kafka.

        Raises:
            BrokerError: Kafka did not answer.
        """
        return await self._member.statistics(self._names.name)

    # -- joining and leaving -----------------------------------------------------------------

    async def __aenter__(self) -> ConsumerGroup[PartitionT]:
        if self._member.registers:
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

        Does nothing when already joined. A join that fails closes the member again, so that
        it leaves no registration and no claim behind.

        Raises:
            GroupClosedError: the member was closed.
            StrategyMismatchError: the group uses another assignment strategy.
            ConfigurationError: the topic does not exist, or this is another event loop than
                the one the member was made in.
            CoordinationError, BrokerError: ZooKeeper or Kafka could not be reached.
            AuthenticationError: Kafka or ZooKeeper refused the TLS handshake or the credentials.
            AccessDeniedError: the group's nodes belong to another ZooKeeper identity.
        """
        await self._member.register()

    async def close(self) -> None:
        """Leave the group: tell the listener which partitions are revoked, store the offsets of
        completed batches, release every claim, and close the connections. Idempotent.

        Everything, the final client closes included, is bounded by ``close_timeout``; whatever
        is not released by then goes with the ZooKeeper session. A batch still being processed
        is not committed, so it is delivered again. The closing is not interrupted by
        cancellation: a cancelled ``close()`` waits until it is done and then raises
        `asyncio.CancelledError`. A listener or a `process()` handler may await ``close()``
        too: a listener called from a rebalance is cancelled by the closing, a handler stops at
        once (its record is delivered again), and from the closing's own
        ``on_partitions_revoked`` it returns at once.
        """
        await self._member.close()

    # -- consuming ---------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[tuple[PartitionT, Batch]]:
        return self.batches()

    def batches(self, *, commit: bool = True) -> AsyncIterator[tuple[PartitionT, Batch]]:
        """Yield ``(partition, batch)`` pairs until the member closes.

        With OpenTelemetry's API installed (the ``otel`` extra) each body runs in a
        ``process <topic>`` span, current while it runs (see the tracing guide).

        Args:
            commit: store each batch's offset once the loop body finished (see the class). With
                False the caller stores offsets with `commit()`.

        Raises:
            FetchError: a claimed partition's next records cannot be read and fetching again
                will not mend it (a codec this machine lacks, a corrupt batch, a topic not
                authorized); the records before were handed out. Seek past it, or mend the
                cause, and iterate again.
            DeserializationError: a deserializer raised on the partition's next record; the
                records before it were handed out. Seek past it and iterate again.
            ConfigurationError: `process()` runs, or the group is ``exactly_once`` (use
                `transactions()`).
            AioClusterError: the member failed in the background (the cause is kept).
        """
        self._not_exactly_once("async for / batches()", "transactions()")
        return self._member.batches(self._names.name, commit=commit)

    async def process(
        self,
        handler: Callable[[Record], Awaitable[object]],
        *,
        processing: Processing | None = None,
        **options: Unpack[ProcessOptions],
    ) -> None:
        """Run ``await handler(record)`` for every record of the claimed partitions, up to
        ``concurrency`` at once, until the member closes or the call is cancelled.

        The offset stored for a partition is its first record not yet finished, never past it.
        A partition that moves stops starting records and waits for its handlers in flight (at
        most ``rebalance_timeout``; then they are cancelled and their records go to the next
        owner). Closing the member waits likewise, at most ``min(rebalance_timeout,
        close_timeout)``; cancelling the call cancels the handlers in flight at once. Records
        that did not finish are delivered again. See the processing guide in the docs.

        Args:
            handler: ``async def handler(record)``; it finishes a record by returning.
            processing: how the handler runs: concurrency, ordering, retries, the failure
                policy (see [Processing][aio_cluster.Processing]).
            **options: any field of `Processing` instead, by its name
                (``process(handler, concurrency=10)``); not together with ``processing``.

        Raises:
            ConfigurationError: a bad argument, the dead-letter topic does not exist, or
                `process()` or a batch iteration runs already; raised before any record is
                taken.
            TypeError: an unknown keyword argument.
            GroupClosedError: the member is closed.
            AioClusterError: the member failed in the background.
            Exception: the handler's error, with ``on_failure="raise"``.
        """
        self._not_exactly_once("process()", "process_transactional()")
        await self._member.process(handler, Processing.of(processing, options))

    async def process_bulk(
        self,
        handler: Callable[[list[Record]], Awaitable[object]],
        *,
        size: int = 100,
        linger: float = 0.05,
        processing: Processing | None = None,
        **options: Unpack[ProcessOptions],
    ) -> None:
        """Run ``await handler(records)`` on lists of the claimed partitions' records, until
        the member closes or the call is cancelled: `process()` with a handler that takes
        records in bulk, and its guarantees record by record.

        A call gathers up to ``size`` records, from any partition of the member, for at most
        ``linger`` seconds after its first. Under ``ordering="key"`` a key is in at most one
        call at a time, one record of it per call, in offset order across calls. A record
        finishes when its call returned: the offset stored is still each partition's first
        record not yet finished. A call that raises runs again as a whole (``attempts``, with
        the back-off); once it failed for good it is split in halves, each run once,
        recursively, and only a record that fails alone meets ``on_failure``; the others
        finish. Every record in a call holds one of the ``concurrency`` handler slots, so
        about ``concurrency // size`` calls run at once. See the processing guide in the docs.

        Args:
            handler: ``async def handler(records)``; it finishes the records by returning.
            size: the most records of one call.
            linger: the most seconds a call waits for more records after its first (0: it
                takes what came in the same turn of the event loop).
            processing: as for `process()`; ``concurrency`` must be at least ``size``.
            **options: any field of `Processing` instead, by its name.

        Raises:
            ConfigurationError: a bad argument (``size`` below 1, ``linger`` below 0,
                ``concurrency`` below ``size``, a handler that is not async) or one `process()`
                refuses; raised before any record is taken.
            TypeError: an unknown keyword argument.
            GroupClosedError: the member is closed.
            AioClusterError: the member failed in the background.
            Exception: a record's error alone, with ``on_failure="raise"``.
        """
        self._not_exactly_once("process_bulk()", "process_transactional()")
        await self._member.process_bulk(handler, size, linger, Processing.of(processing, options))

    # -- exactly once ------------------------------------------------------------------------

    def _not_exactly_once(self, call: str, instead: str) -> None:
        """Refuse a way of consuming that writes outside the transactions.

        Raises:
            ConfigurationError: the group is ``exactly_once``.
        """
        if self._member.exactly_once:
            raise ConfigurationError(
                f"{call} cannot run on an exactly_once group: what it wrote would not be in "
                f"the partition's transaction; use {instead}"
            )

    def _exactly_once(self, call: str) -> None:
        """Refuse a way of consuming that needs the transactions of an exactly-once group.

        Raises:
            ConfigurationError: the group is not ``exactly_once``.
        """
        if not self._member.exactly_once:
            raise ConfigurationError(
                f"{call} needs ConsumerGroup(..., exactly_once=True): the output and the "
                "offsets commit in one transaction only in that mode"
            )

    def transactions(self) -> AsyncIterator[tuple[PartitionT, Batch, Output]]:
        """Exactly once: yield ``(partition, batch, output)`` until the member closes. What
        the body sends through ``output`` and the batch's offset commit in one Kafka
        transaction when the body completed (when the loop asks for the next batch); a body
        that raises or breaks sends nothing, and its batch is delivered again. See the
        exactly-once guide. With OpenTelemetry's API installed each body runs in a
        ``process <topic>`` span, as in `batches()`.

        Raises:
            ConfigurationError: the group is not ``exactly_once``, or `process()` runs.
            ProducerFencedError: a newer owner fenced this member's producer of the partition
                whose batch was to commit (its ZooKeeper session expired meanwhile, say): the
                batch's output is dropped, the partition given up. Iterate again to go on with
                the other partitions.
            OutputRefusedError: Kafka refused an output of the batch for good: nothing of it is
                committed, the partition is given up and its batch comes again.
            TransactionDeniedError: Kafka's ACLs refuse this member's principal the
                partitions' transactional ids or the group (also raised when the member
                registers).
            FetchError, DeserializationError: as for `batches()`.
            AioClusterError: the member failed in the background (the cause is kept).
        """
        self._exactly_once("transactions()")
        return self._member.transactions(self._names.name)

    async def process_transactional(
        self,
        handler: TransactionalHandler,
        *,
        commit_interval: float = 0.1,
        processing: Processing | None = None,
        **options: Unpack[ProcessOptions],
    ) -> None:
        """Exactly once: `process()` with a handler that writes through an `Output`:
        ``await handler(record, output)``. What an attempt sends is kept until it finished (a
        failed attempt's sends are dropped, so retries never write twice); every
        ``commit_interval`` seconds each partition's completed prefix commits in one Kafka
        transaction with the sends of the records below it, in offset order. Records that
        finished beyond the prefix keep their sends for a later transaction (at most
        ``max_records`` records are kept). Dead letters stay at least once. See the
        exactly-once guide.

        Args:
            handler: ``async def handler(record, output)``.
            commit_interval: seconds between two commits of a partition's transaction: shorter
                is less latency for ``read_committed`` readers, longer fewer transactions.
            processing: as for `process()`.
            **options: any field of `Processing` instead, by its name.

        Raises:
            ConfigurationError: the group is not ``exactly_once``, a bad argument, or one
                `process()` refuses.
            TypeError: an unknown keyword argument.
            GroupClosedError: the member is closed.
            TransactionDeniedError: Kafka's ACLs refuse this member's principal the
                partitions' transactional ids or the group (also raised when the member
                registers).
            AioClusterError: the member failed in the background.
            Exception: the handler's error, with ``on_failure="raise"`` (an
                `OutputRefusedError` when Kafka refused the record's output).
        """
        self._exactly_once("process_transactional()")
        check_handler(handler)
        interval: object = commit_interval
        if not isinstance(interval, (int, float)) or isinstance(interval, bool) or interval <= 0:
            raise ConfigurationError(
                f"commit_interval must be a positive number of seconds, not {commit_interval!r}"
            )
        await self._member.process_transactional(
            handler, commit_interval, Processing.of(processing, options)
        )
