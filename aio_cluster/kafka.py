"""The one module that speaks Kafka: one aiokafka consumer in manual ``assign()`` mode.

No Kafka consumer group is used: ZooKeeper decides who owns which partition, and this module only
fetches from the partitions it is told to, from the offsets it is told to. Topic metadata comes from
Kafka's metadata API (KRaft brokers write nothing into ZooKeeper). aiokafka's errors are translated
into :mod:`aio_cluster.errors` here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, OffsetOutOfRangeError

from .addresses import parse_servers
from .errors import BrokerError, ConfigurationError

__all__ = ["Fetcher", "OffsetsOutOfRange", "Record", "parse_bootstrap"]

_UNKNOWN_TOPIC = 3
"""Kafka's error code UNKNOWN_TOPIC_OR_PARTITION."""


class Record(Protocol):
    """One Kafka record as the library hands it out (aiokafka's ``ConsumerRecord``)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


class OffsetsOutOfRange(BrokerError):
    """The positions of some partitions are outside what the broker holds (retention deleted
    them, or the topic was recreated).

    Attributes:
        partitions: the partition ids concerned, with the offset that was asked for.
    """

    retriable = False

    def __init__(self, partitions: Mapping[int, int]) -> None:
        super().__init__(f"offsets out of range: {dict(partitions)}")
        self.partitions = dict(partitions)


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[str]:
    """Validate Kafka bootstrap servers.

    Raises:
        ConfigurationError: empty, or a server without a numeric port in 1..65535.
    """
    return parse_servers(bootstrap, "Kafka")


class Fetcher:
    """Fetches records of one topic from an explicitly given set of partitions."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        topic: str,
        *,
        client_id: str,
        max_bytes: int,
        max_wait_ms: int,
        min_bytes: int,
        request_timeout_ms: int = 30_000,
    ) -> None:
        """Configure the consumer; nothing connects before :meth:`start`.

        Args:
            bootstrap: Kafka servers as ``"host:port"``.
            topic: the one topic to read.
            client_id: shown in the broker's logs and metrics.
            max_bytes: the most bytes fetched from one partition in one request.
            max_wait_ms: how long the broker may wait for ``min_bytes`` to arrive.
            min_bytes: the least data the broker should answer with.
            request_timeout_ms: the bound on each request to the broker.
        """
        self.topic = topic
        servers = parse_bootstrap(bootstrap)
        self._admin = AIOKafkaAdminClient(
            bootstrap_servers=servers, client_id=client_id, request_timeout_ms=request_timeout_ms
        )
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=servers,
            client_id=client_id,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="none",
            fetch_max_bytes=max(max_bytes, 52_428_800),
            max_partition_fetch_bytes=max_bytes,
            fetch_max_wait_ms=max_wait_ms,
            fetch_min_bytes=min_bytes,
            request_timeout_ms=request_timeout_ms,
        )
        # Offset look-ups go through a consumer of their own: on the fetching one they would
        # queue behind long-polling fetches (the broker answers a connection in order).
        self._lookup = AIOKafkaConsumer(
            bootstrap_servers=servers,
            client_id=f"{client_id}-offsets",
            group_id=None,
            enable_auto_commit=False,
            request_timeout_ms=request_timeout_ms,
        )
        self._assigned: frozenset[int] = frozenset()

    async def start(self) -> None:
        """Connect to the cluster.

        Raises:
            BrokerError: no broker answered.
        """
        try:
            await self._consumer.start()
            await self._lookup.start()
            await self._admin.start()
            # Track the topic's metadata from the start: an offset request for a topic the
            # client does not track yet waits a retry back-off (100 ms) for a refresh. aiokafka
            # has no public call for this in assign() mode.
            await self._lookup._client.add_topic(self.topic)
        except KafkaError as exc:
            await self.stop()
            raise BrokerError(f"could not reach Kafka: {exc}") from exc

    async def stop(self) -> None:
        """Close every connection; buffered records are dropped."""
        await self._consumer.stop()
        await self._lookup.stop()
        await self._admin.close()

    async def partitions(self) -> list[int]:
        """Every partition id of the topic, sorted, fresh from the metadata API.

        Raises:
            ConfigurationError: the topic does not exist.
            BrokerError: the metadata request failed.
        """
        try:
            (described,) = await self._admin.describe_topics([self.topic])
        except KafkaError as exc:
            raise BrokerError(f"metadata request failed: {exc}") from exc
        if described["error_code"] == _UNKNOWN_TOPIC or not described["partitions"]:
            raise ConfigurationError(f"topic {self.topic!r} does not exist in Kafka")
        if described["error_code"]:
            raise BrokerError(
                f"metadata of topic {self.topic!r} has error code {described['error_code']}"
            )
        return sorted(int(partition["partition"]) for partition in described["partitions"])

    def _tp(self, partition: int) -> Any:
        return TopicPartition(self.topic, partition)

    @property
    def assigned(self) -> frozenset[int]:
        """The partitions fetched from now."""
        return self._assigned

    def assign(self, positions: Mapping[int, int]) -> None:
        """Fetch from exactly these partitions, each from the given next offset.

        Records fetched earlier but not yet returned are dropped; reading resumes at ``positions``.
        """
        self._assigned = frozenset(positions)
        self._consumer.assign([self._tp(partition) for partition in sorted(positions)])
        for partition, offset in positions.items():
            self._consumer.seek(self._tp(partition), offset)

    def seek(self, partition: int, offset: int) -> None:
        """Read ``partition`` again from ``offset`` (it must be assigned)."""
        self._consumer.seek(self._tp(partition), offset)

    async def bounds(self, partitions: Collection[int]) -> dict[int, tuple[int, int]]:
        """For each partition, its earliest and its next-to-be-written offset.

        Raises:
            BrokerError: the request failed.
        """
        tps = [self._tp(partition) for partition in partitions]
        if not tps:
            return {}
        try:
            first = await self._lookup.beginning_offsets(tps)
            last = await self._lookup.end_offsets(tps)
        except KafkaError as exc:
            raise BrokerError(f"offset request failed: {exc}") from exc
        return {tp.partition: (first[tp], last[tp]) for tp in tps}

    async def ends(self, partitions: Collection[int]) -> dict[int, int]:
        """For each partition, its next-to-be-written offset: one ListOffsets round trip.

        Raises:
            BrokerError: the request failed.
        """
        tps = [self._tp(partition) for partition in partitions]
        if not tps:
            return {}
        try:
            last = await self._lookup.end_offsets(tps)
        except KafkaError as exc:
            raise BrokerError(f"offset request failed: {exc}") from exc
        return {tp.partition: last[tp] for tp in tps}

    async def offsets_for_time(
        self, timestamp_ms: int, partitions: Collection[int]
    ) -> dict[int, int | None]:
        """For each partition, the first offset whose record's timestamp is at or after
        ``timestamp_ms``; None where no record is that late.

        Raises:
            BrokerError: the request failed.
        """
        tps = [self._tp(partition) for partition in partitions]
        if not tps:
            return {}
        try:
            found = await self._lookup.offsets_for_times(dict.fromkeys(tps, timestamp_ms))
        except KafkaError as exc:
            raise BrokerError(f"offset request failed: {exc}") from exc
        return {tp.partition: None if found[tp] is None else found[tp].offset for tp in tps}

    async def fetch(self, partitions: Collection[int], timeout_ms: int) -> dict[int, list[Any]]:
        """Records of the given (assigned) partitions, waiting up to ``timeout_ms`` for some.

        Returns:
            partition id -> non-empty list of records in offset order.

        Raises:
            OffsetsOutOfRange: a position is outside what the broker holds.
            BrokerError: the fetch failed otherwise.
        """
        tps = [self._tp(partition) for partition in partitions if partition in self._assigned]
        if not tps:
            return {}
        try:
            fetched = await self._consumer.getmany(*tps, timeout_ms=timeout_ms)
        except OffsetOutOfRangeError as exc:
            detail = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
            raise OffsetsOutOfRange({tp.partition: off for tp, off in detail.items()}) from exc
        except KafkaError as exc:
            raise BrokerError(f"fetch failed: {exc}") from exc
        return {tp.partition: records for tp, records in fetched.items() if records}
