"""OffsetReader: topics' partitions, log bounds and offsets at a time, without reading records.

The one place that asks Kafka's metadata and ListOffsets APIs: the member's fetcher reads through
one (so its look-ups never queue behind its long-polling fetches on the same connection), and the
command reads through another. Both therefore refresh stale metadata alike after a broker died.
Each offset question takes the partitions of any number of topics (topic -> partition ids) and
answers by `TopicPartition`, in the same round trips as for one topic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from ..errors import BrokerError, ConfigurationError
from .diagnosis import connect_failure
from .options import KafkaOptions, parse_bootstrap
from .topics import TopicPartition

__all__ = ["OffsetReader"]

_UNKNOWN_TOPIC = 3
"""Kafka's error code UNKNOWN_TOPIC_OR_PARTITION."""


class OffsetReader:
    """Reads offsets without fetching records: topics' partitions and log bounds, and the first
    offset at a time."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        client_id: str,
        request_timeout_ms: int = 30_000,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Configure the clients; nothing connects before `start()`.

        Args:
            bootstrap: Kafka servers as ``"host:port"``.
            client_id: shown in the broker's logs.
            request_timeout_ms: the bound on each request (an option ``request_timeout_ms``
                overrides it).
            options: connection options (TLS, SASL), see [KafkaOptions][aio_cluster.KafkaOptions].

        Raises:
            ConfigurationError: malformed bootstrap servers or options.
        """
        self.servers = servers = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.options = connection = KafkaOptions(
            {"request_timeout_ms": request_timeout_ms, **(options or {})}
        )
        self._admin = AIOKafkaAdminClient(
            bootstrap_servers=servers, client_id=client_id, **connection
        )
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=servers,
            client_id=client_id,
            group_id=None,
            enable_auto_commit=False,
            **connection,
        )

    async def start(self, track: str | None = None) -> None:
        """Connect to the cluster.

        Args:
            track: a topic whose metadata to follow from the start: an offset request for a
                topic the client does not track yet waits a retry back-off (100 ms) for a refresh.

        Raises:
            AuthenticationError: a broker refused the TLS handshake or the SASL credentials.
            BrokerError: no broker answered.
        """
        try:
            # Both at once: each bootstraps on a connection of its own.
            started = await asyncio.gather(
                self._start_consumer(track), self._admin.start(), return_exceptions=True
            )
            for result in started:
                if isinstance(result, BaseException):
                    raise result
        except KafkaError as exc:
            await self.stop()
            raise await connect_failure(self.servers, self.options, self.client_id, exc) from exc
        except BaseException:
            await self.stop()
            raise

    async def _start_consumer(self, track: str | None) -> None:
        await self._consumer.start()
        if track is not None:
            # aiokafka has no public call for this in assign() mode.
            await self._consumer._client.add_topic(track)

    async def stop(self) -> None:
        """Close every connection."""
        await self._consumer.stop()
        await self._admin.close()

    async def partitions(self, topic: str) -> list[int]:
        """Every partition id of ``topic``, sorted, fresh from the metadata API.

        Raises:
            ConfigurationError: the topic does not exist.
            BrokerError: the metadata request failed.
        """
        try:
            described = await self._describe(topic)
        except KafkaError as exc:
            raise BrokerError(f"metadata request failed: {exc}") from exc
        # Only "unknown topic" says it does not exist: with another code (its leader moving,
        # say) it exists, and its partitions may be missing from the answer for that moment.
        if described["error_code"] == _UNKNOWN_TOPIC:
            raise ConfigurationError(f"topic {topic!r} does not exist in Kafka")
        if described["error_code"]:
            raise BrokerError(
                f"metadata of topic {topic!r} has error code {described['error_code']}"
            )
        if not described["partitions"]:
            raise ConfigurationError(f"topic {topic!r} does not exist in Kafka")
        return sorted(int(partition["partition"]) for partition in described["partitions"])

    async def topics(self, names: Sequence[str] | None = None) -> dict[str, list[int]]:
        """Topic -> its sorted partition ids, in one metadata request: of ``names`` (those that
        exist), or of every topic of the cluster but Kafka's internal ones (None). A topic the
        answer names with an error code is left out: ask `partitions()` whether it is gone.

        Raises:
            BrokerError: the metadata request failed.
        """
        asked = None if names is None else sorted(set(names))
        if asked == []:
            return {}
        try:
            try:
                described = await self._admin.describe_topics(asked)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                await self._admin._client.force_metadata_update()  # see _describe()
                described = await self._admin.describe_topics(asked)
        except KafkaError as exc:
            raise BrokerError(f"metadata request failed: {exc}") from exc
        found: dict[str, list[int]] = {}
        for topic in described:
            if topic.get("error_code") or topic.get("is_internal") or not topic["partitions"]:
                continue
            found[str(topic["topic"])] = sorted(int(p["partition"]) for p in topic["partitions"])
        return found

    async def _describe(self, topic: str) -> dict[str, Any]:
        try:
            (described,) = await self._admin.describe_topics([topic])
        except KafkaError as exc:
            if not exc.retriable:
                raise
            # The admin client asks a random broker of its metadata, which keeps a broker that
            # died for minutes (metadata_max_age_ms): refreshed (the brokers asked in turn), it
            # names the live ones only. aiokafka has no public call for this.
            await self._admin._client.force_metadata_update()
            (described,) = await self._admin.describe_topics([topic])
        return dict(described)

    async def bounds(
        self, wanted: Mapping[str, Collection[int]]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """For each partition of ``wanted`` (topic -> partition ids), its earliest and its
        next-to-be-written (log-end) offset: two round trips however many topics there are.

        Raises:
            BrokerError: the request failed.
        """
        tps = await self._tracked(wanted)
        if not tps:
            return {}
        try:
            first, last = await asyncio.gather(
                self._consumer.beginning_offsets(tps), self._consumer.end_offsets(tps)
            )
        except KafkaError as exc:
            raise BrokerError(f"offset request failed: {exc}") from exc
        return {TopicPartition(*tp): (first[tp], last[tp]) for tp in tps}

    async def ends(self, wanted: Mapping[str, Collection[int]]) -> dict[TopicPartition, int]:
        """For each partition of ``wanted`` (topic -> partition ids), its next-to-be-written
        offset: one ListOffsets round trip however many topics there are.

        Raises:
            BrokerError: the request failed.
        """
        tps = await self._tracked(wanted)
        if not tps:
            return {}
        try:
            last = await self._consumer.end_offsets(tps)
        except KafkaError as exc:
            raise BrokerError(f"offset request failed: {exc}") from exc
        return {TopicPartition(*tp): last[tp] for tp in tps}

    async def _tracked(self, wanted: Mapping[str, Collection[int]]) -> list[KafkaPartition]:
        """The partitions of ``wanted``, their topics' metadata followed first: in one refresh
        for the topics not followed yet (an offset request for an unknown topic waits a retry
        back-off, 100 ms, per topic)."""
        topics = {topic for topic, partitions in wanted.items() if partitions}
        client = self._consumer._client  # aiokafka has no public call for this in assign() mode
        if not topics <= set(client._topics):
            try:
                await client.set_topics(set(client._topics) | topics)
            except KafkaError as exc:
                raise BrokerError(f"metadata request failed: {exc}") from exc
        return [KafkaPartition(t, p) for t, partitions in wanted.items() for p in partitions]

    async def offsets_for_time(
        self, wanted: Mapping[str, Collection[int]], timestamp_ms: int
    ) -> dict[TopicPartition, int | None]:
        """For each partition of ``wanted`` (topic -> partition ids), the offset of its first
        record stamped at or after ``timestamp_ms``; None where every record is older. One round
        trip however many topics there are.

        Raises:
            BrokerError: the request failed.
        """
        tps = await self._tracked(wanted)
        if not tps:
            return {}
        try:
            found = await self._consumer.offsets_for_times(dict.fromkeys(tps, timestamp_ms))
        except KafkaError as exc:
            raise BrokerError(f"offset request failed: {exc}") from exc
        return {
            TopicPartition(*tp): None if at is None else int(at.offset) for tp, at in found.items()
        }
