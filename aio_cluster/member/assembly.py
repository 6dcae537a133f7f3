"""Parts: one member's parts, built from its configuration, each given its hooks as it is made.

A member (`aio_cluster.member.member.Member`) is its parts and its life. The parts are built
here, in the order their hooks need: the ZooKeeper client, the fetcher, the Kafka mirror, the
partition states, exactly once the transactions, the telemetry, the offsets, the membership,
the delivery, the liveness, the marks, the handover, the operator's controls and the stuck
watch. What a part tells the member's life, or asks of it, comes in as `Hooks`; what the
parts tell each other (a fenced claim, a session back, the session's state) is wired here.
Nothing connects before the member registers, which starts the clients (`Parts.start()`).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from ..assign.strategies import Strategy
from ..assign.subscription import Subscription
from ..config import Settings
from ..errors import AioClusterError, ConfigurationError
from ..kafka.fetcher import Fetcher
from ..kafka.group_offsets import KafkaGroupOffsets
from ..kafka.options import parse_bootstrap
from ..kafka.topics import PartitionKey
from ..otel.loading import telemetry_for
from ..zookeeper.client import ZooKeeper
from ..zookeeper.values import SessionState
from .controls import MemberControls
from .delivery.delivery import Delivery
from .delivery.partitions import PartitionStates
from .exactly_once import Transactions
from .processing.processor import Processor
from .protocol.handover import Handover
from .protocol.keyed_layout import KeyedLayout
from .protocol.listener import RebalanceListener
from .protocol.liveness import Liveness
from .protocol.marks import Marker
from .protocol.membership import GroupPlace
from .protocol.mirror import KafkaMirror
from .protocol.offsets import Offsets
from .stuck import StuckWatch

if TYPE_CHECKING:
    from ..otel.telemetry import Telemetry

__all__ = ["Blueprint", "Hooks", "Parts", "milliseconds"]

_counter = itertools.count(1)


def _member_id(group: str) -> str:
    return "-".join(
        [group, socket.gethostname(), str(os.getpid()), str(int(time.time())), str(next(_counter))]
    )


def milliseconds(seconds: float) -> int:
    """Seconds in whole milliseconds (at least 1), as Kafka's fetch request takes a wait."""
    return max(1, round(seconds * 1000))


@dataclass(frozen=True)
class Blueprint:
    """What a member is built from (the facade's arguments, made into configuration)."""

    brokers: str | Sequence[str]
    """Kafka's bootstrap servers."""
    zookeepers: str | Sequence[str]
    """ZooKeeper's servers (the last may carry a chroot)."""
    layout: KeyedLayout
    """The group's paths, by partition key (its names checked)."""
    subscription: Subscription
    """The topics read."""
    settings: Settings
    """The configuration."""
    listener: RebalanceListener[PartitionKey] | None
    """Told of partitions that move, by key."""


@dataclass(frozen=True)
class Hooks:
    """What the parts tell the member's life, and ask of its consuming."""

    give_up: Callable[[AioClusterError], None]
    """The delivery cannot fetch any more: the member fails with the error and leaves."""
    processor: Callable[[], Processor | None]
    """The processor of the running (or the last) ``process()`` call, if any."""


class Parts:
    """Every part of one member (see the module). Partitions are keys
    (`aio_cluster.kafka.topics.TopicKeys`)."""

    def __init__(self, blueprint: Blueprint, hooks: Hooks) -> None:
        """Build the parts.

        Args:
            blueprint: what the member is built from.
            hooks: what the parts tell the member's life, and ask of it.

        Raises:
            ConfigurationError: malformed servers, or no event loop runs.
        """
        brokers, layout, settings = blueprint.brokers, blueprint.layout, blueprint.settings
        subscription, listener = blueprint.subscription, blueprint.listener
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
            blueprint.zookeepers,
            session_timeout=timing.session_timeout,
            request_timeout=timing.request_timeout,
            auth=security.auth,
            acl=security.acl,
            tls=security.tls,
        )
        parse_bootstrap(brokers)
        try:
            self.loop = asyncio.get_running_loop()
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
            rack=joining.rack,
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
                on_fenced=self.fenced,
            )
            if joining.exactly_once
            else None
        )
        """Exactly once: the partitions' producers and their commits; None otherwise."""
        self.telemetry: Telemetry | None = telemetry_for(
            layout.group, self.id, layout.keys.split, self._lag, self._paused_reading
        )
        """Spans and metrics through OpenTelemetry; None without the ``otel`` extra or when
        turned off (see `aio_cluster.otel.loading`)."""
        # A claim found gone at a write is dropped by the rebalance this asks for.
        self.offsets = Offsets(self.zk, layout, self.states, on_fenced=self.fenced)
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
            rack=joining.rack,
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
            handed_out=None if self.telemetry is None else self.telemetry.consumed,
            stalled=hooks.give_up,
        )
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
            processor=hooks.processor,
        )
        self._processor = hooks.processor
        self.stuck = StuckWatch(
            self.zk,
            layout,
            member_id=self.id,
            stuck_after=timing.stuck_after,
            handlers=self._handlers_running,
        )
        """What runs now, and which partitions are stuck (see `aio_cluster.member.stuck`)."""

    async def start(self) -> None:
        """Start the member's clients at once: the ZooKeeper session (then the group's paths),
        the Kafka clients (then, if the member may not wait, the topic check), the mirror and,
        exactly once, the reader of the group's committed Kafka offsets.

        Each start runs to its end even when another fails, so that no client is left half
        started; the first failure (in that order) is raised, and the member closes them all
        (see `aio_cluster.member.member.Member.register`).
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

    def wake(self) -> None:
        """Something changed: waiting iterators look again, and a rebalance follows."""
        self.delivery.wake()
        self.membership.request_rebalance()

    def fenced(self, partitions: list[PartitionKey]) -> None:
        """Writes found the claims of ``partitions`` gone: their offsets are never mirrored, and
        the rebalance this asks for drops them (and claims them again where the target says)."""
        self.mirror.forget(partitions)
        self.wake()

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
        processor = self._processor()
        return [] if processor is None or not processor.running else processor.running_since()
