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

`ConsumerGroup` is the facade; the work is done by its parts in `aio_cluster.member`. One part
owns the state of every partition (`partitions`: claims, positions, buffers, batches in flight,
pauses, seeks, pending and stored offsets) and decides which transitions are legal; the others are
drivers that ask it and tell it: `membership` (registration, the rebalance, owner nodes, with
`claiming`), `delivery` (the fetcher), `offsets` (the fenced offset writes), `mirror` (Kafka's
copy of the offsets) and `handover` (the order of a rebalance's steps, and the listener).

A member on many topics (a list, or a pattern) is the same machinery: its parts know each
partition by an ``int`` key (`aio_cluster.kafka.topics.TopicKeys`; for one topic, the partition
id itself), and only this facade turns keys into the `TopicPartition` its user sees and back.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, TypedDict, cast, overload

import anyio

from .assign.strategies import Strategy
from .assign.subscription import Subscription
from .errors import (
    AccessDeniedError,
    AioClusterError,
    AuthenticationError,
    BrokerError,
    ConfigurationError,
    CoordinationError,
    GroupClosedError,
    NotOwnedError,
)
from .kafka.dead_letters import DeadLetters
from .kafka.fetcher import ISOLATION_LEVELS, Deserializer, Fetcher, IsolationLevel
from .kafka.group_offsets import KafkaGroupOffsets
from .kafka.options import KafkaOptions, parse_bootstrap
from .kafka.records import Record
from .kafka.topics import PartitionT, TopicKeys, TopicPartition
from .member.claims import Batch
from .member.delivery import Delivery
from .member.handover import Handover
from .member.lifecycle import GroupState
from .member.listener import RebalanceListener
from .member.liveness import Liveness
from .member.membership import Membership
from .member.mirror import KafkaMirror
from .member.offsets import Offsets
from .member.partitions import PartitionStates
from .member.processing import Policy, Processor, check_handler
from .member.statistics import GroupStatistics, partition_statistics
from .member.topics import KeyedLayout
from .zookeeper.client import SessionState, ZooKeeper
from .zookeeper.layout import check_member_name, check_name
from .zookeeper.security import Acl, ZooKeeperTLS

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Batch", "ConsumerGroup", "GroupState", "TopicPartition"]

log = logging.getLogger(__name__)

_counter = itertools.count(1)

DEFAULT_BUFFERED_BYTES = 32 * 1024 * 1024
"""The default budget of buffered record bytes per member (``max_buffered_bytes``)."""

_KAFKA_OFFSETS = ("off", "mirror", "migrate")


def _refusal(exc: BaseException) -> AccessDeniedError | AuthenticationError | None:
    """The refused credentials in ``exc`` (or in the exception group it is), if any: trying
    again does not mend them, so the member stops with this error instead of retrying."""
    if isinstance(exc, (AccessDeniedError, AuthenticationError)):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _refusal(inner)
        if found is not None:
            return found
    return None


def _member_id(group: str) -> str:
    return "-".join(
        [group, socket.gethostname(), str(os.getpid()), str(int(time.time())), str(next(_counter))]
    )


def _check_offset(value: object, label: str = "offset") -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigurationError(f"{label} must be a non-negative integer, not {value!r}")


class _Options(TypedDict, total=False):
    """The keyword arguments of `ConsumerGroup` (for its typed overloads)."""

    max_bytes: int
    max_buffered_bytes: int | None
    max_wait_ms: int
    min_bytes: int
    claim_timeout: float
    loop_delay: float
    trail: bool
    session_timeout: float
    register: bool
    strategy: Strategy | str
    commit_interval: float
    metadata_interval: float
    request_timeout: float
    close_timeout: float
    rebalance_timeout: float
    wait_for_topic: bool
    kafka_options: Mapping[str, Any] | None
    zookeeper_auth: Sequence[tuple[str, str]]
    zookeeper_acl: Acl
    zookeeper_tls: ZooKeeperTLS | bool
    kafka_offsets: Literal["off", "mirror", "migrate"]
    isolation_level: IsolationLevel
    key_deserializer: Deserializer | None
    value_deserializer: Deserializer | None
    member_name: str | None
    rejoin_grace: float | None


class _NamingListener:
    """Passes a many-topic member's partition keys to the user's listener as TopicPartitions."""

    def __init__(self, listener: RebalanceListener[Any], name: Callable[[int], Any]) -> None:
        self._listener = listener
        self._name = name

    async def _tell(self, method: str, partitions: list[int]) -> None:
        hook = getattr(self._listener, method, None)
        if hook is not None:
            await hook(sorted(self._name(key) for key in partitions))

    async def on_partitions_revoked(self, partitions: list[int]) -> None:
        await self._tell("on_partitions_revoked", partitions)

    async def on_partitions_assigned(self, partitions: list[int]) -> None:
        await self._tell("on_partitions_assigned", partitions)

    async def on_partitions_lost(self, partitions: list[int]) -> None:
        await self._tell("on_partitions_lost", partitions)


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
        **options: Unpack[_Options],
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
        **options: Unpack[_Options],
    ) -> None: ...

    def __init__(
        self,
        name: str,
        brokers: str | Sequence[str],
        zookeepers: str | Sequence[str],
        topic: str | list[str] | tuple[str, ...] | re.Pattern[str],
        *,
        exclude: re.Pattern[str] | None = None,
        max_bytes: int = 1_048_576,
        max_buffered_bytes: int | None = DEFAULT_BUFFERED_BYTES,
        max_wait_ms: int = 100,
        min_bytes: int = 1,
        claim_timeout: float = 30.0,
        loop_delay: float = 1.0,
        trail: bool = False,
        session_timeout: float = 10.0,
        register: bool = True,
        strategy: Strategy | str = Strategy.STICKY,
        commit_interval: float = 1.0,
        metadata_interval: float = 5.0,
        request_timeout: float = 10.0,
        close_timeout: float = 10.0,
        rebalance_timeout: float = 60.0,
        wait_for_topic: bool = True,
        listener: RebalanceListener[Any] | None = None,
        kafka_options: Mapping[str, Any] | None = None,
        zookeeper_auth: Sequence[tuple[str, str]] = (),
        zookeeper_acl: Acl = "open",
        zookeeper_tls: ZooKeeperTLS | bool = False,
        kafka_offsets: Literal["off", "mirror", "migrate"] = "off",
        isolation_level: IsolationLevel = "read_uncommitted",
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        member_name: str | None = None,
        rejoin_grace: float | None = None,
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
            max_bytes: the most bytes fetched from one partition at a time.
            max_buffered_bytes: the budget of record bytes this member buffers, shared over its
                partitions (librdkafka's ``queued.max.messages.kbytes``), so that its memory
                does not grow with the partitions it owns; 32 MiB by default. Each partition's
                fetch is bounded to its share (at most ``max_bytes``); the broker still returns
                at least one whole record batch. None: only ``max_bytes`` per partition.
            max_wait_ms: how long the broker may wait for ``min_bytes``.
            min_bytes: the least data a fetch should return.
            claim_timeout: seconds to wait for a partition's previous owner to release it.
            loop_delay: seconds to pause after a fetch that returned nothing.
            trail: where no offset is stored, start at the latest offset instead of the earliest.
            session_timeout: the ZooKeeper session's timeout in seconds.
            register: join on ``async with``; False leaves it to `register()`.
            strategy: the assignment strategy; all members of a group must use the same.
            commit_interval: the most seconds a completed batch's offset waits to be stored.
            metadata_interval: seconds between checks of the topic's partitions (and, while
                the topic does not exist, of whether it does now; with a pattern, of which
                topics match).
            request_timeout: the bound on each ZooKeeper request, in seconds.
            close_timeout: the bound on the final commit and release in `close()`.
            rebalance_timeout: at a handover, the most seconds to wait for a running batch body
                (then the partition is released without committing that batch) and for each
                listener call; with the sticky strategy also how long the published target may
                lag behind the registrations before another member publishes it in the place
                of a stuck leader (see `aio_cluster.assign.target`).
            wait_for_topic: a topic that does not exist yet is waited for (logged once);
                False makes `register()` fail instead.
            listener: told of the partitions that are assigned, revoked or lost (see
                [RebalanceListener][aio_cluster.RebalanceListener]), named as the batches name
                them.
            kafka_options: connection options for every Kafka client of the member, with
                aiokafka's names (TLS, SASL; see [KafkaOptions][aio_cluster.KafkaOptions]).
            zookeeper_auth: credentials of the ZooKeeper session, ``[("digest", "user:pw")]``.
            zookeeper_acl: ``"open"`` (the default): the group's nodes are open to all;
                ``"creator"``: the nodes this member creates (``ids``, ``owners``, ``offsets``
                and their parents) may be changed only by the identity of ``zookeeper_auth``,
                and read by anyone. Nodes that exist already keep their ACL.
            zookeeper_tls: speak TLS to ZooKeeper (True: trust the system's CAs).
            kafka_offsets: ``"mirror"`` also commits every offset stored in ZooKeeper to Kafka
                under the group's name, so Kafka's own tools see the group and its lag;
                ZooKeeper stays the truth, and a commit Kafka refuses is logged and sent again
                with the next, never holding up consumption. ``"migrate"`` mirrors too, and
                starts a partition without a stored offset at the offset a Kafka consumer group
                of the same name committed (see `aio_cluster.member.mirror`).
            isolation_level: ``"read_uncommitted"`` (the default, as Kafka's own consumer) hands
                out every record, those of aborted transactions too; ``"read_committed"`` hands
                out only records of committed transactions (and those written without one), each
                once its transaction committed.
            key_deserializer: called on each record's key (not on a None one); the batches
                hand out what it returns. One that raises makes the iteration raise
                [DeserializationError][aio_cluster.DeserializationError] for that record.
            value_deserializer: the same for each value (not for a None one, a tombstone).
            member_name: a name for this member, stable across its restarts (a StatefulSet
                pod's name, say), used as its member id. A member started under a name that a
                live member holds takes that member's registration and partitions over at once
                (a restart that came back before its old session expired); the older member
                stops with [MemberReplacedError][aio_cluster.MemberReplacedError]. Run one
                member per name. None (the default): a unique id is made.
            rejoin_grace: with ``member_name`` and the sticky strategy, how many seconds a
                member's partitions wait for it once it left or died: back under the same name
                within it, it gets exactly its partitions back and no other member's move.
                They are not consumed meanwhile (Kafka's static membership makes the same
                trade). Past it, they are spread as at any leave. None or 0: no grace.

        Raises:
            ConfigurationError: an argument is not valid (the message names it), or no event
                loop is running (make the member inside a coroutine).
        """
        self._subscription = subscription = Subscription.of(topic, exclude)
        check_name("group", name)
        self._keys = keys = TopicKeys(subscription.topics)
        self._layout = KeyedLayout(name, keys, many=subscription.many)
        for each in subscription.topics:
            self._layout.of(each)  # checks the name
        for label, value in (
            ("max_bytes", max_bytes),
            ("max_wait_ms", max_wait_ms),
            ("claim_timeout", claim_timeout),
            ("session_timeout", session_timeout),
            ("commit_interval", commit_interval),
            ("metadata_interval", metadata_interval),
            ("request_timeout", request_timeout),
            ("close_timeout", close_timeout),
            ("rebalance_timeout", rebalance_timeout),
        ):
            if not value > 0:
                raise ConfigurationError(f"{label} must be positive, not {value!r}")
        for label, value in (("min_bytes", min_bytes), ("loop_delay", loop_delay)):
            if not value >= 0:
                raise ConfigurationError(f"{label} must not be negative, not {value!r}")
        budget: object = max_buffered_bytes  # a caller's value of any type
        if budget is not None and (
            not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0
        ):
            raise ConfigurationError(
                f"max_buffered_bytes must be a positive integer (bytes) or None, "
                f"not {max_buffered_bytes!r}"
            )
        try:
            self._strategy = Strategy(strategy)
        except ValueError:
            known = ", ".join(s.value for s in Strategy)
            raise ConfigurationError(f"unknown strategy {strategy!r}; use one of {known}") from None
        if kafka_offsets not in _KAFKA_OFFSETS:
            raise ConfigurationError(
                f"kafka_offsets {kafka_offsets!r} is not one of {', '.join(_KAFKA_OFFSETS)}"
            )
        if isolation_level not in ISOLATION_LEVELS:
            raise ConfigurationError(
                f"isolation_level {isolation_level!r} is not one of {', '.join(ISOLATION_LEVELS)}"
            )
        for label, deserializer in (
            ("key_deserializer", key_deserializer),
            ("value_deserializer", value_deserializer),
        ):
            if deserializer is not None and not callable(deserializer):
                raise ConfigurationError(f"{label} must be callable, not {deserializer!r}")
        self._check_name(member_name, rejoin_grace)
        self._id = member_name if member_name is not None else _member_id(name)
        self._zk = ZooKeeper(
            zookeepers,
            session_timeout=session_timeout,
            request_timeout=request_timeout,
            auth=zookeeper_auth,
            acl=zookeeper_acl,
            tls=zookeeper_tls,
        )
        options = KafkaOptions(kafka_options or {})
        parse_bootstrap(brokers)
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            # aiokafka binds each client to the loop it is made in: checked before making them.
            raise ConfigurationError(
                "ConsumerGroup must be made inside a running event loop (in a coroutine, "
                "e.g. under asyncio.run()): its Kafka clients belong to the loop they are made in"
            ) from None
        first = subscription.topics[0] if subscription.topics else ""
        self._fetcher = Fetcher(
            brokers,
            keys=keys,
            client_id=self._id,
            max_bytes=max_bytes,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            options=options,
            isolation_level=isolation_level,
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
            max_buffered_bytes=max_buffered_bytes,
        )
        self._register_on_enter = register
        self._brokers = brokers
        self._kafka_options = options
        self._rebalance_timeout = rebalance_timeout
        self._commit_interval = commit_interval
        self._metadata_interval = metadata_interval
        self._close_timeout = close_timeout

        self._mirror = KafkaMirror(
            None
            if kafka_offsets == "off"
            else KafkaGroupOffsets(
                brokers, name, first, client_id=self._id, options=options, keys=keys
            ),
            member_id=self._id,
            migrate=kafka_offsets == "migrate",
            # At most half the close bound, so that an absent Kafka leaves time to release.
            timeout=min(request_timeout, close_timeout / 2),
        )
        self._states = PartitionStates()
        # A claim found gone at a write is dropped by the rebalance this asks for.
        self._offsets = Offsets(self._zk, self._layout, self._states, on_fenced=self._fenced)
        self._membership = Membership(
            self._zk,
            self._layout,
            self._fetcher,
            self._offsets,
            self._states,
            member_id=self._id,
            strategy=self._strategy,
            claim_timeout=claim_timeout,
            wait_for_topic=wait_for_topic,
            rebalance_timeout=rebalance_timeout,
            named=member_name is not None,
            rejoin_grace=rejoin_grace or None,
            subscription=subscription,
        )
        self._delivery = Delivery(
            self._fetcher,
            self._states,
            member_id=self._id,
            loop_delay=loop_delay,
            max_wait_ms=max_wait_ms,
            trail=trail,
            label=self._layout.label,
        )
        self._liveness = Liveness(
            self._zk,
            self._delivery,
            member_id=self._id,
            on_back=self._membership.request_rebalance,
        )
        self._handover = Handover(
            self._states,
            self._delivery,
            self._offsets,
            self._mirror,
            member_id=self._id,
            listener=(
                listener
                if listener is None or not subscription.many
                else cast(RebalanceListener[int], _NamingListener(listener, self._name))
            ),
            rebalance_timeout=rebalance_timeout,
            label=self._layout.label,
        )
        self._state = GroupState.NEW
        self._failure: AioClusterError | None = None
        self._runner: asyncio.Task[None] | None = None
        self._processor: Processor | None = None
        """The processor of the running (or the last) `process()` call."""
        self._iterating = 0
        """Batch iterations running now (see `batches()`)."""
        self._joined: asyncio.Future[None] | None = None
        self._closer: asyncio.Task[None] | None = None
        """The one closing of this member, awaited by every close()."""

    def _check_name(self, member_name: object, rejoin_grace: object) -> None:
        """A member name is one ZooKeeper node name; a grace needs a name and the sticky target
        (which keeps the partitions of a member in its grace)."""
        if member_name is not None:
            check_member_name(member_name)
        if rejoin_grace is None:
            return
        if (
            isinstance(rejoin_grace, bool)
            or not isinstance(rejoin_grace, (int, float))
            or not rejoin_grace >= 0
        ):
            raise ConfigurationError(
                f"rejoin_grace must be a non-negative number of seconds, not {rejoin_grace!r}"
            )
        if rejoin_grace and member_name is None:
            raise ConfigurationError(
                "rejoin_grace needs a member_name: a member comes back to its partitions under "
                "the same name"
            )
        if rejoin_grace and self._strategy is not Strategy.STICKY:
            raise ConfigurationError(
                f"rejoin_grace needs the sticky strategy, not {self._strategy.value!r}: its "
                "published target is what keeps a member's partitions for it"
            )

    # -- what a user reads -------------------------------------------------------------------

    def __repr__(self) -> str:
        return (
            f"<ConsumerGroup {self.name!r} topic={self.topic!r} member={self.id!r} "
            f"state={self._state.value}>"
        )

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
        return self._membership.topics

    def _name(self, key: int) -> PartitionT:
        """How the user knows the partition of ``key``."""
        return cast(PartitionT, self._layout.name(key))

    def _names(self, keys: list[int] | tuple[int, ...]) -> list[PartitionT]:
        """The user's names of ``keys``, sorted."""
        return cast("list[PartitionT]", sorted(self._layout.name(key) for key in keys))

    def _key(self, partition: PartitionT) -> int:
        """The key of a partition the user names; a partition of a topic this member never met
        gets a key no claim holds.

        Raises:
            ConfigurationError: the name has the wrong form for this member.
        """
        given: object = partition
        if not self._subscription.many:
            if isinstance(given, int) and not isinstance(given, bool):
                return given
            raise ConfigurationError(
                f"partition {given!r}: a member on one topic names a partition by its id (int)"
            )
        if (
            isinstance(given, tuple)
            and len(given) == 2
            and isinstance(given[0], str)
            and isinstance(given[1], int)
            and not isinstance(given[1], bool)
        ):
            topic, number = given
            found = self._keys.lookup(topic, number)
            if found is None and self._subscription.matches(topic):
                self._layout.of(topic)  # a name the layout takes (else ConfigurationError)
                found = self._keys.key(topic, number)  # a topic read, not met yet
            return -1 if found is None or number < 0 else found
        raise ConfigurationError(
            f"partition {given!r}: a member on many topics names a partition by "
            "TopicPartition(topic, partition)"
        )

    @property
    def strategy(self) -> Strategy:
        """The assignment strategy this member uses."""
        return self._strategy

    @property
    def state(self) -> GroupState:
        """Where this member is in its lifecycle."""
        return self._state

    @property
    def partitions(self) -> list[PartitionT]:
        """Every partition of the topics read, sorted (as of the last metadata check)."""
        return self._names(self._membership.partitions)

    @property
    def claimed(self) -> list[PartitionT]:
        """The partitions this member owns now, sorted."""
        return self._names(list(self._states.claims))

    async def offset(self, partition: PartitionT) -> int | None:
        """The stored next offset of ``partition``, or None when none is stored.

        A completed batch's offset that is still waiting to be stored is stored first.
        """
        self._check_not_closed()
        key = self._key(partition)
        if key < 0:
            return None  # a topic this member never read
        if self._states.owned(key):
            await self._handover.flush([key])
        return await self._offsets.stored(key)

    async def commit(self, partition: PartitionT, offset: int) -> None:
        """Store ``offset`` as the next offset of ``partition`` now.

        Raises:
            NotOwnedError: this member does not own the partition, or its claim turned out to be
                gone (its owner node was replaced, or an offset reset fenced it off): nothing
                was stored.
            ConfigurationError: the offset is not a non-negative integer.
            CoordinationError: ZooKeeper did not store it.
        """
        self._check_not_closed()
        _check_offset(offset)
        key = self._key(partition)
        claim = self._states.claims.get(key)
        if claim is not None and not claim.fenced:
            self._states.committed(key, offset)
            await self._handover.flush([key])
        if claim is None or claim.fenced:
            raise NotOwnedError(
                f"{self._describe(partition)} is not owned by member {self.id}"
                + ("" if claim is None else ": its claim is gone, nothing was stored")
            )

    def _describe(self, partition: PartitionT) -> str:
        """A partition in an error message."""
        if self._subscription.many:
            return f"partition {partition!r}"
        return f"partition {partition} of {self.topic!r}"

    # -- steering ----------------------------------------------------------------------------

    def _owned(self, partitions: tuple[PartitionT, ...]) -> list[int]:
        """The keys of the given partitions (all claimed ones when none is given), each checked
        to be ours."""
        self._check_open()
        if not partitions:
            return sorted(self._states.claims)
        keys = []
        for partition in partitions:
            key = self._key(partition)
            if not self._states.owned(key):
                raise NotOwnedError(f"{self._describe(partition)} is not owned by member {self.id}")
            keys.append(key)
        return sorted(set(keys))

    def pause(self, *partitions: PartitionT) -> None:
        """Hand out no batch of these partitions until `resume()`; they stay claimed.

        A pause lasts across rebalances that leave the partition to this member, and across a
        lost ZooKeeper session after which the member claims the partition again.

        Raises:
            NotOwnedError: a partition is not owned by this member.
        """
        if not partitions:
            return
        self._states.pause(self._owned(partitions))

    def resume(self, *partitions: PartitionT) -> None:
        """Hand out batches of these partitions again, from where they stopped; partitions not
        paused (or no longer owned) are ignored."""
        self._states.resume([self._key(partition) for partition in partitions])
        self._delivery.wake()

    def paused(self) -> list[PartitionT]:
        """The paused partitions, sorted."""
        return self._names(self._states.paused)

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
        (owned,) = self._owned((partition,))
        self._states.sought(owned, offset)
        self._delivery.wake()

    async def seek_to_beginning(self, *partitions: PartitionT) -> None:
        """Seek to the earliest offset the broker holds (all claimed partitions when none given).

        Raises:
            NotOwnedError: a partition is not owned by this member.
            BrokerError: Kafka did not answer.
        """
        bounds = await self._fetcher.bounds(self._owned(partitions))
        self._seek_all({p: earliest for p, (earliest, _end) in bounds.items()})

    async def seek_to_end(self, *partitions: PartitionT) -> None:
        """Seek to the log end: only records written from now on are handed out.

        Raises:
            NotOwnedError: a partition is not owned by this member.
            BrokerError: Kafka did not answer.
        """
        self._seek_all(await self._fetcher.ends(self._owned(partitions)))

    async def seek_to_timestamp(self, timestamp_ms: int, *partitions: PartitionT) -> None:
        """Seek to the first record whose timestamp is at or after ``timestamp_ms`` (milliseconds
        since the epoch); where there is none, to the log end.

        Raises:
            NotOwnedError: a partition is not owned by this member.
            ConfigurationError: the timestamp is not a non-negative integer.
            BrokerError: Kafka did not answer.
        """
        _check_offset(timestamp_ms, "timestamp_ms")
        owned = self._owned(partitions)
        found = await self._fetcher.offsets_for_time(owned, timestamp_ms)
        missing = [p for p, offset in found.items() if offset is None]
        ends = await self._fetcher.ends(missing)
        self._seek_all({p: ends[p] if offset is None else offset for p, offset in found.items()})

    def _seek_all(self, offsets: dict[int, int]) -> None:
        for partition, offset in offsets.items():
            if self._states.owned(partition):
                self._states.sought(partition, offset)
        self._delivery.wake()

    async def statistics(self) -> GroupStatistics[PartitionT]:
        """A snapshot of where this member stands; one ListOffsets round trip to Kafka.

        Raises:
            BrokerError: Kafka did not answer.
        """
        claims = self._states.claims
        paused = self._states.paused
        ends = await self._fetcher.ends(sorted(claims))
        processor = self._processor
        figures = partition_statistics(claims, ends, paused, self._name)
        if self._subscription.many:
            figures = tuple(sorted(figures, key=lambda entry: cast(Any, entry.partition)))
        return GroupStatistics(
            member_id=self.id,
            state=self._state,
            session=self._zk.state.value,
            claimed=tuple(self.claimed),
            paused=tuple(self._names(paused)),
            partitions=figures,
            rebalances=self._membership.rebalances,
            claim_timeouts=self._membership.claim_timeouts,
            unowned_nodes=self._membership.unowned_nodes,
            batches=self._states.batches,
            records=self._states.records,
            last_rebalance=self._membership.last_rebalance,
            recent_rebalances=tuple(self._membership.recent_rebalances),
            in_flight=0 if processor is None else processor.in_flight,
            retried=0 if processor is None else processor.retried,
            dead_lettered=0 if processor is None else processor.dead_lettered,
            oldest_in_flight=None if processor is None else processor.oldest_in_flight(),
            stopped=()
            if processor is None
            else tuple(self._names([p for p in processor.stopped if p in claims and p in paused])),
        )

    # -- joining and leaving -----------------------------------------------------------------

    async def __aenter__(self) -> ConsumerGroup[PartitionT]:
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
            ConfigurationError: the topic does not exist, or this is another event loop than
                the one the member was made in.
            CoordinationError, BrokerError: ZooKeeper or Kafka could not be reached.
            AuthenticationError: Kafka or ZooKeeper refused the TLS handshake or the credentials.
            AccessDeniedError: the group's nodes belong to another ZooKeeper identity.
        """
        if self._state in (GroupState.JOINING, GroupState.JOINED):
            return
        self._check_open()
        if asyncio.get_running_loop() is not self._loop:
            raise ConfigurationError(
                "ConsumerGroup must register in the event loop it was made in: its Kafka "
                "clients belong to that loop"
            )
        self._state = GroupState.JOINING
        self._joined = joined = asyncio.get_running_loop().create_future()
        try:
            await self._start()
            if self._state is not GroupState.JOINING:
                raise GroupClosedError(f"member {self.id} was closed while it joined")
            self._runner = asyncio.create_task(self._run(joined), name=f"aio-cluster {self.id}")
            await joined
        except BaseException:
            await self.close()
            if joined.done() and not joined.cancelled():
                joined.exception()  # retrieved: the error raised here says it all
            raise
        if self._state is GroupState.JOINING:
            self._state = GroupState.JOINED
        log.info("member %s joined with partitions %s", self.id, self.claimed)

    async def _start(self) -> None:
        """Start the member's clients at once: the ZooKeeper session (then the group's paths),
        the Kafka clients (then, if the member may not wait, the topic check) and the mirror.

        Each start runs to its end even when another fails, so that no client is left half
        started; the first failure (in that order) is raised, and `register()` closes them all.
        """
        failures: list[BaseException | None] = [None, None, None]

        async def attempt(index: int, start: Callable[[], Awaitable[None]]) -> None:
            try:
                await start()
            except Exception as exc:
                failures[index] = exc

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(attempt, 0, self._start_zookeeper)
            tasks.start_soon(attempt, 1, self._start_kafka)
            tasks.start_soon(attempt, 2, self._mirror.start)
        for failure in failures:
            if failure is not None:
                raise failure

    async def _start_zookeeper(self) -> None:
        await self._zk.start()
        self._zk.on_state_change(self._on_session_state)
        await self._membership.prepare()

    async def _start_kafka(self) -> None:
        await self._fetcher.start()
        await self._membership.check_topic()

    async def close(self) -> None:
        """Leave the group: tell the listener which partitions are revoked, store the offsets of
        completed batches, release every claim, and close the connections. Idempotent.

        Everything, the final client closes included, is bounded by ``close_timeout``; whatever
        is not released by then goes with the ZooKeeper session. A batch still being processed
        is not committed, so it is delivered again. The closing is not interrupted by
        cancellation: a cancelled ``close()`` waits until it is done and then raises
        `asyncio.CancelledError`. A listener may await ``close()`` too; called from the closing's
        own ``on_partitions_revoked`` it returns at once.
        """
        if self._state is GroupState.CLOSED:
            return
        if self._state is GroupState.NEW:
            self._state = GroupState.CLOSED
            # Never registered: the Kafka clients exist (aiokafka makes them at once) but never
            # started; closed all the same, or each warns of being left unclosed.
            await self._fetcher.stop()
            await self._mirror.stop()
            return
        if self._closer is None:
            self._state = GroupState.CLOSING
            self._wake()
            self._closer = asyncio.create_task(self._leave(), name=f"aio-cluster close {self.id}")
        closer = self._closer
        current = asyncio.current_task()
        if current is closer:
            return
        if self._processor is not None and self._processor.handles(current):
            # close() inside a process() handler: the handlers stop, this one with them (its
            # record is delivered again), while the closing goes on in its own task.
            await self._processor.shutdown(0.0)
            await asyncio.shield(closer)
            return
        if current is not None and current is self._runner:
            # A listener called from a rebalance: the closing cancels this very task first.
            await asyncio.shield(closer)
            return
        cancelled = False
        while True:
            try:
                await asyncio.shield(closer)
                break
            except asyncio.CancelledError:
                if closer.done():
                    raise
                # The closing is bounded: finish it, then let the cancellation through.
                cancelled = True
        if cancelled:
            raise asyncio.CancelledError

    async def _leave(self) -> None:
        """The closing itself, in its own task: ends the background, gives up the claims, closes
        the clients; all within ``close_timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._close_timeout
        # A share of the bound is kept for the client closes, so they happen even when leaving
        # took all the rest.
        reserve = self._close_timeout / 4
        if self._joined is not None and not self._joined.done():
            # register() (or a listener it awaits) closed the member before it joined.
            self._joined.set_exception(
                GroupClosedError(f"member {self.id} was closed while it joined")
            )
        try:
            with anyio.move_on_after(deadline - reserve - loop.time()) as scope:
                if self._processor is not None and self._processor.running:
                    # Handlers in flight finish first (bounded), so their offsets are stored.
                    await self._processor.shutdown(self._rebalance_timeout)
                if self._runner is not None:
                    self._runner.cancel()
                    await asyncio.wait({self._runner})
                try:
                    await self._membership.leave(self._handover)
                except AioClusterError as exc:
                    log.warning("member %s: leaving failed: %s", self.id, exc)
            if scope.cancelled_caught:
                log.warning("member %s: leaving took over %gs", self.id, self._close_timeout)
        finally:
            await self._processor_ended(deadline)
            self._membership.forget()
            with anyio.move_on_after(max(deadline - loop.time(), 0.0)) as scope:
                results = await asyncio.gather(
                    self._zk.close(),
                    self._delivery.stop(),
                    self._mirror.stop(),
                    return_exceptions=True,
                )
                for result in results:
                    if isinstance(result, Exception):
                        log.warning("member %s: closing a client failed: %r", self.id, result)
            if scope.cancelled_caught:
                log.warning("member %s: closing the clients took too long", self.id)
            self._state = GroupState.CLOSED
            self._wake()
            log.info("member %s left", self.id)

    async def _processor_ended(self, deadline: float) -> None:
        """However the leaving went (the deadline may have cut the processor's shutdown short),
        `process()` has returned before the session ends: else a handler would still run while
        the next owner handles its partition. A handler that ignores its cancellation is waited
        for until the deadline (a second at least), then named."""
        processor = self._processor
        if processor is None or not processor.running:
            return
        processor.cancel()
        if processor.handles(asyncio.current_task()):
            return
        loop = asyncio.get_running_loop()
        with anyio.CancelScope(shield=True), anyio.move_on_after(max(deadline - loop.time(), 1.0)):
            await processor.ended()
        for partition, records in processor.handling().items():
            log.warning(
                "member %s: on closing, the handler of the record at offset %d of partition %d "
                "ignores its cancellation; its claim ends with the session",
                self.id,
                records[0].offset,
                partition,
            )

    def _check_open(self) -> None:
        if self._state in (GroupState.CLOSING, GroupState.CLOSED):
            raise GroupClosedError(f"member {self.id} of group {self.name!r} is closed")

    def _check_not_closed(self) -> None:
        """Offsets may still be read and stored while closing (the listener's
        ``on_partitions_revoked`` commits what the application finished)."""
        if self._state is GroupState.CLOSED:
            raise GroupClosedError(f"member {self.id} of group {self.name!r} is closed")

    # -- consuming ---------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[tuple[PartitionT, Batch]]:
        return self.batches()

    async def batches(self, *, commit: bool = True) -> AsyncIterator[tuple[PartitionT, Batch]]:
        """Yield ``(partition, batch)`` pairs until the member closes.

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
            AioClusterError: the member failed in the background (the cause is kept).
        """
        if self._processor is not None and self._processor.running:
            raise ConfigurationError("batches cannot be iterated while process() runs")
        self._iterating += 1
        try:
            while True:
                picked = await self._delivery.next_batch(self._stopped)
                if picked is None:
                    return
                claim, batch = picked
                completed = False
                try:
                    yield self._name(claim.partition), batch
                    completed = True
                finally:
                    self._delivery.finish(claim, batch, completed=completed, commit=commit)
        finally:
            self._iterating -= 1

    async def process(
        self,
        handler: Callable[[Record], Awaitable[object]],
        *,
        concurrency: int = 100,
        ordering: Literal["key", "partition", "none"] = "key",
        attempts: int = 3,
        retry_initial: float = 0.1,
        retry_max: float = 10.0,
        retry_jitter: float = 0.1,
        on_failure: Literal["dead_letter", "stop", "raise"] = "stop",
        dead_letter_topic: str | None = None,
        max_records: int = 10_000,
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
            concurrency: the most handlers running at once, over all partitions.
            ordering: ``"key"``: a key's records (within a partition) run one after another
                in offset order, other keys' side by side; records without a key count as one
                key. ``"partition"``: one record at a time per partition. ``"none"``: any.
            attempts: how often the handler runs for a record before it failed for good.
            retry_initial: seconds before the first retry; each next retry waits twice as long.
            retry_max: the most seconds of a wait before its jitter.
            retry_jitter: up to this many random seconds added to each wait.
            on_failure: for a record that failed ``attempts`` times: ``"stop"`` (the default)
                pauses its partition (logged, and named in `statistics()`), to be resumed once
                mended; ``"dead_letter"`` writes it to ``dead_letter_topic`` and goes on;
                ``"raise"`` ends the call with the handler's error.
            dead_letter_topic: the (existing) topic for ``on_failure="dead_letter"``.
            max_records: records taken and not finished beyond which no batch is taken (the
                fetch waits): with ``max_bytes`` per claimed partition, the memory bound.

        Raises:
            ConfigurationError: a bad argument, the dead-letter topic does not exist, or
                `process()` or a batch iteration runs already; raised before any record is
                taken.
            GroupClosedError: the member is closed.
            AioClusterError: the member failed in the background.
            Exception: the handler's error, with ``on_failure="raise"``.
        """
        check_handler(handler)
        policy = Policy(
            concurrency=concurrency,
            ordering=ordering,
            attempts=attempts,
            retry_initial=retry_initial,
            retry_max=retry_max,
            retry_jitter=retry_jitter,
            on_failure=on_failure,
            dead_letter_topic=dead_letter_topic,
            max_records=max_records,
        )
        if dead_letter_topic is not None and self._subscription.matches(dead_letter_topic):
            raise ConfigurationError(
                f"dead_letter_topic {dead_letter_topic!r} is the topic consumed: failed records "
                "would come back"
            )
        self._check_open()
        if self._processor is not None and self._processor.running:
            raise ConfigurationError(f"process() runs already on member {self.id}")
        if self._iterating:
            raise ConfigurationError(
                f"process() cannot run beside a running batch iteration on member {self.id}"
            )
        dead_letters = None
        if policy.on_failure == "dead_letter" and policy.dead_letter_topic is not None:
            dead_letters = DeadLetters(
                self._brokers,
                policy.dead_letter_topic,
                client_id=self._id,
                options=self._kafka_options,
            )
        self._processor = processor = Processor(
            self._delivery,
            handler,
            policy,
            stopped=self._stopped,
            member_id=self.id,
            dead_letters=dead_letters,
        )
        await processor.run()

    def _stopped(self) -> bool:
        if self._failure is not None:
            raise self._failure
        return self._state in (GroupState.CLOSING, GroupState.CLOSED)

    def _wake(self) -> None:
        self._delivery.wake()
        self._membership.request_rebalance()

    def _fenced(self, partitions: list[int]) -> None:
        """Writes found the claims of ``partitions`` gone: their offsets are never mirrored, and
        the rebalance this asks for drops them (and claims them again where the target says)."""
        self._mirror.forget(partitions)
        self._wake()

    # -- the background: rebalancing, storing offsets, watching metadata ----------------------

    async def _run(self, joined: asyncio.Future[None]) -> None:
        """The member's background: every loop lives in this task group until close()."""
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._membership.run, joined, self._handover, self._fail)
                tasks.start_soon(self._every, self._commit_interval, self._flush_all)
                tasks.start_soon(
                    self._every, self._metadata_interval, self._membership.check_partitions
                )
                tasks.start_soon(self._mirror.run, self._states.claims)
                tasks.start_soon(self._liveness.run)
        except Exception as exc:
            # Errors the loops expect are handled there; this is a failure nobody foresaw, or
            # credentials the servers refused. It must not pass silently: register() or the
            # next batch raises it.
            error: AioClusterError | None = _refusal(exc)
            if error is not None:
                log.error("member %s stops: %s", self.id, error)
            else:
                error = AioClusterError(f"member {self.id} failed in the background: {exc!r}")
                error.__cause__ = exc
            self._fail(error)
            if not joined.done():
                joined.set_exception(error)

    def _fail(self, error: AioClusterError) -> None:
        """The member cannot go on: the next batch (or register()) raises ``error``."""
        self._failure = error
        self._wake()

    async def _every(self, interval: float, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await job()
            except (CoordinationError, BrokerError) as exc:
                log.warning("member %s: %s", self.id, exc)

    async def _flush_all(self) -> None:
        await self._handover.flush(list(self._states.claims))

    def _on_session_state(self, state: SessionState) -> None:
        # Suspended: nothing starts; lost: nothing in flight goes on either; connected again:
        # it all goes on once ZooKeeper answers, after a rebalance (see member/liveness.py).
        self._liveness.on_state(state)
        if state is SessionState.LOST:
            self._membership.lose()
            self._membership.request_rebalance()
            self._mirror.forget()
        self._delivery.wake()
