"""Fetcher: records of one topic from an explicitly given set of partitions.

One aiokafka consumer in manual ``assign()`` mode fetches; the offset look-ups go through an
[OffsetReader][aio_cluster.kafka.offset_reader.OffsetReader] of their own: on the fetching
connection they would queue behind long-polling fetches (the broker answers a connection in order).

Memory: with a budget (``max_buffered_bytes``) the records buffered for the member, in aiokafka
and after it, stay within the budget however many partitions are assigned, as librdkafka's
``queued.max.messages.kbytes`` keeps them. Each partition holds at most one fetched chunk in
aiokafka (it fetches a partition again only once its records were taken) and one taken and not
yet handed out; so each partition's chunk is bounded to the budget shared over twice the
partitions, and one fetch response to half the budget. The bound is soft as Kafka's own: a
broker returns at least one whole record batch per partition, however small the bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError, OffsetOutOfRangeError

from ..errors import BrokerError
from .diagnosis import connect_failure
from .offset_reader import OffsetReader
from .options import KafkaOptions, parse_bootstrap

__all__ = ["Fetcher", "OffsetsOutOfRange"]


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
        options: Mapping[str, Any] | None = None,
        max_buffered_bytes: int | None = None,
    ) -> None:
        """Configure the consumer; nothing connects before `start()`.

        Args:
            bootstrap: Kafka servers as ``"host:port"``.
            topic: the one topic to read.
            client_id: shown in the broker's logs and metrics.
            max_bytes: the most bytes fetched from one partition in one request.
            max_wait_ms: how long the broker may wait for ``min_bytes`` to arrive.
            min_bytes: the least data the broker should answer with.
            request_timeout_ms: the bound on each request to the broker (an option
                ``request_timeout_ms`` overrides it).
            options: connection options for every client (TLS, SASL), see
                [KafkaOptions][aio_cluster.KafkaOptions].
            max_buffered_bytes: the budget of record bytes buffered over all partitions
                (None: only ``max_bytes`` per partition bounds them).

        Raises:
            ConfigurationError: malformed servers or options.
        """
        self.topic = topic
        self._servers = servers = parse_bootstrap(bootstrap)
        self._options = connection = KafkaOptions(
            {"request_timeout_ms": request_timeout_ms, **(options or {})}
        )
        self._client_id = client_id
        self._max_bytes = max_bytes
        self._budget = max_buffered_bytes
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=servers,
            client_id=client_id,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="none",
            fetch_max_bytes=(
                max(max_bytes, 52_428_800)
                if max_buffered_bytes is None
                else max(1, max_buffered_bytes // 2)
            ),
            max_partition_fetch_bytes=max_bytes,
            fetch_max_wait_ms=max_wait_ms,
            fetch_min_bytes=min_bytes,
            **connection,
        )
        self._reader = OffsetReader(servers, client_id=f"{client_id}-offsets", options=connection)
        self._assigned: frozenset[int] = frozenset()

    async def start(self) -> None:
        """Connect to the cluster: the fetching consumer and the offset reader at once.

        Whatever fails, both are closed again before the error is raised.

        Raises:
            AuthenticationError: a broker refused the TLS handshake or the SASL credentials.
            BrokerError: no broker answered.
        """
        fetching, reading = await asyncio.gather(
            self._start_consumer(), self._reader.start(track=self.topic), return_exceptions=True
        )
        failure = fetching if isinstance(fetching, BaseException) else reading
        if isinstance(failure, BaseException):
            await self.stop()
            raise failure

    async def _start_consumer(self) -> None:
        try:
            await self._consumer.start()
        except KafkaError as exc:
            await self._consumer.stop()
            raise await connect_failure(self._servers, self._options, self._client_id, exc) from exc

    async def stop(self) -> None:
        """Close every connection; buffered records are dropped."""
        await self._consumer.stop()
        await self._reader.stop()

    async def partitions(self) -> list[int]:
        """Every partition id of the topic, sorted, fresh from the metadata API.

        Raises:
            ConfigurationError: the topic does not exist.
            BrokerError: the metadata request failed.
        """
        return await self._reader.partitions(self.topic)

    def _tp(self, partition: int) -> Any:
        return TopicPartition(self.topic, partition)

    @property
    def assigned(self) -> frozenset[int]:
        """The partitions fetched from now."""
        return self._assigned

    @property
    def partition_fetch_bytes(self) -> int:
        """The most bytes one fetch asks of one partition now: ``max_bytes``, or with a budget
        its share over the assigned partitions (see the module)."""
        if self._budget is None or not self._assigned:
            return self._max_bytes
        return max(1, min(self._max_bytes, self._budget // (2 * len(self._assigned))))

    def assign(self, positions: Mapping[int, int]) -> None:
        """Fetch from exactly these partitions, each from the given next offset.

        Records fetched earlier but not yet returned are dropped; reading resumes at ``positions``.
        """
        self._assigned = frozenset(positions)
        # The share of the budget changes with the partitions; aiokafka reads it for every fetch
        # request it builds, and has no public call to change it.
        inner = getattr(self._consumer, "_fetcher", None)
        if inner is not None and hasattr(inner, "_max_partition_fetch_bytes"):
            inner._max_partition_fetch_bytes = self.partition_fetch_bytes
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
        return await self._reader.bounds(self.topic, partitions)

    async def ends(self, partitions: Collection[int]) -> dict[int, int]:
        """For each partition, its next-to-be-written offset: one ListOffsets round trip.

        Raises:
            BrokerError: the request failed.
        """
        return await self._reader.ends(self.topic, partitions)

    async def offsets_for_time(
        self, partitions: Collection[int], timestamp_ms: int
    ) -> dict[int, int | None]:
        """For each partition, the first offset whose record's timestamp is at or after
        ``timestamp_ms``; None where no record is that late.

        Raises:
            BrokerError: the request failed.
        """
        return await self._reader.offsets_for_time(self.topic, partitions, timestamp_ms)

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
