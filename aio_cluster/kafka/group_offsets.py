"""KafkaGroupOffsets: a group's offsets in Kafka's own ``__consumer_offsets``."""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import anyio
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from ..concurrency import gather
from ..errors import BrokerError
from .diagnosis import connect_failure, named
from .options import KafkaOptions, parse_bootstrap
from .topics import PartitionKey, TopicKeys

__all__ = ["KafkaGroupOffsets"]


class KafkaGroupOffsets:
    """A group's offsets in Kafka's ``__consumer_offsets``, under the group's name: what Kafka's
    own tools (``kafka-consumer-groups.sh``, Burrow, kafka-ui) read, and what a Kafka consumer
    group of that name committed.

    The commits carry no generation and no member id, as Kafka accepts from a group without
    broker-side members: the consumer behind them never joins a Kafka group, and the partitions
    it is assigned stay paused, so it never fetches a record.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group: str,
        keys: TopicKeys,
        *,
        client_id: str,
        request_timeout_ms: int = 30_000,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Configure the consumer; nothing connects before `start()`.

        Args:
            bootstrap: Kafka servers as ``"host:port"``.
            group: the group's name in Kafka.
            keys: the topics' numbers: partitions are given by key
                (`aio_cluster.kafka.topics.TopicKeys`; a one-topic group's keys are its
                partition ids).
            client_id: shown in the broker's logs.
            request_timeout_ms: the bound on each request.
            options: connection options (TLS, SASL), see
                [KafkaOptions][aio_cluster.KafkaOptions].

        Raises:
            ConfigurationError: malformed bootstrap servers or options.
        """
        self.group = group
        self._keys = keys
        self._servers = parse_bootstrap(bootstrap)
        self._client_id = f"{client_id}-kafka-offsets"
        self._options = KafkaOptions({"request_timeout_ms": request_timeout_ms, **(options or {})})
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self._servers,
            client_id=self._client_id,
            group_id=group,
            enable_auto_commit=False,
            **self._options,
        )
        self._assigned: set[PartitionKey] = set()

    async def start(self) -> None:
        """Connect to the cluster.

        Raises:
            BrokerError: no broker answered.
        """
        try:
            await self._consumer.start()
        except KafkaError as exc:
            await self.stop()
            raise await connect_failure(self._servers, self._options, self._client_id, exc) from exc

    async def stop(self) -> None:
        """Close every connection."""
        await self._consumer.stop()

    async def commit(self, offsets: Mapping[PartitionKey, int], timeout: float) -> None:
        """Commit ``offsets`` (partition key -> next offset) for the group.

        Raises:
            BrokerError: Kafka refused them or did not answer within ``timeout`` seconds (aiokafka
                would retry a retriable error for ever).
        """
        if not offsets:
            return
        if not set(offsets) <= self._assigned:
            self._assigned |= set(offsets)
            tps = [self._tp(key) for key in sorted(self._assigned)]
            self._consumer.assign(tps)
            self._consumer.pause(*tps)
        wanted = {self._tp(key): offset for key, offset in offsets.items()}
        try:
            with anyio.fail_after(timeout):
                await self._consumer.commit(wanted)
        except TimeoutError:
            raise BrokerError(
                f"Kafka took no commit of group {self.group!r} within {timeout:g} s"
            ) from None
        except KafkaError as exc:
            raise BrokerError(
                f"Kafka refused the commit of group {self.group!r}: {named(exc)}"
            ) from exc

    async def committed(
        self, partitions: Collection[PartitionKey], timeout: float
    ) -> dict[PartitionKey, int]:
        """The offsets the group committed in Kafka; partitions without a commit are left out.

        Raises:
            BrokerError: the request failed or took over ``timeout`` seconds.
        """
        asked = sorted(partitions)
        tps = [self._tp(key) for key in asked]
        try:
            # In a task group (see aio_cluster.concurrency): cut short by the bound, asyncio's
            # gather raised a CancelledError that the bound let through.
            with anyio.fail_after(timeout):
                found = await gather(functools.partial(self._consumer.committed, tp) for tp in tps)
        except TimeoutError:
            raise BrokerError(
                f"Kafka did not tell the offsets of group {self.group!r} within {timeout:g} s"
            ) from None
        except KafkaError as exc:
            raise BrokerError(f"offsets of group {self.group!r} unreadable: {named(exc)}") from exc
        return {key: offset for key, offset in zip(asked, found, strict=True) if offset is not None}

    def _tp(self, key: PartitionKey) -> Any:
        return TopicPartition(*self._keys.split(key))
