"""The one module that speaks Kafka: one aiokafka consumer in manual ``assign()`` mode.

No Kafka consumer group is used: ZooKeeper decides who owns which partition, and this module only
fetches from the partitions it is told to, from the offsets it is told to. Topic metadata comes from
Kafka's metadata API (KRaft brokers write nothing into ZooKeeper). aiokafka's errors are translated
into :mod:`aio_cluster.errors` here.

Every client gets the same connection options (:class:`~aio_cluster.kafka_options.KafkaOptions`:
TLS, SASL). When the clients cannot connect, one connection is opened again to tell a refused TLS
handshake or refused credentials (:class:`~aio_cluster.errors.AuthenticationError`, not worth
retrying) from a broker that is merely away.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.conn import create_conn
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    OffsetOutOfRangeError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.protocol.metadata import MetadataRequest

from .addresses import parse_servers
from .errors import AuthenticationError, BrokerError, ConfigurationError
from .kafka_options import KafkaOptions
from .tls import speaks_tls

__all__ = [
    "Fetcher",
    "KafkaGroupOffsets",
    "OffsetReader",
    "OffsetsOutOfRange",
    "Record",
    "connect_failure",
    "parse_bootstrap",
]

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


def _named(exc: BaseException) -> str:
    """An aiokafka error in a few words: its name, and its cause's (its messages run long)."""
    cause = exc.__cause__
    return type(exc).__name__ + ("" if cause is None else f" ({type(cause).__name__})")


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
    ) -> None:
        """Configure the consumer; nothing connects before :meth:`start`.

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
                :class:`~aio_cluster.kafka_options.KafkaOptions`.

        Raises:
            ConfigurationError: malformed servers or options.
        """
        self.topic = topic
        self._servers = servers = parse_bootstrap(bootstrap)
        self._options = connection = KafkaOptions(
            {"request_timeout_ms": request_timeout_ms, **(options or {})}
        )
        self._client_id = client_id
        self._admin = AIOKafkaAdminClient(
            bootstrap_servers=servers, client_id=client_id, **connection
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
            **connection,
        )
        # Offset look-ups go through a consumer of their own: on the fetching one they would
        # queue behind long-polling fetches (the broker answers a connection in order).
        self._lookup = AIOKafkaConsumer(
            bootstrap_servers=servers,
            client_id=f"{client_id}-offsets",
            group_id=None,
            enable_auto_commit=False,
            **connection,
        )
        self._assigned: frozenset[int] = frozenset()

    async def start(self) -> None:
        """Connect to the cluster.

        Raises:
            AuthenticationError: a broker refused the TLS handshake or the SASL credentials.
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
            raise await connect_failure(self._servers, self._options, self._client_id, exc) from exc

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
            described = await self._describe()
        except KafkaError as exc:
            raise BrokerError(f"metadata request failed: {exc}") from exc
        if described["error_code"] == _UNKNOWN_TOPIC or not described["partitions"]:
            raise ConfigurationError(f"topic {self.topic!r} does not exist in Kafka")
        if described["error_code"]:
            raise BrokerError(
                f"metadata of topic {self.topic!r} has error code {described['error_code']}"
            )
        return sorted(int(partition["partition"]) for partition in described["partitions"])

    async def _describe(self) -> dict[str, Any]:
        try:
            (described,) = await self._admin.describe_topics([self.topic])
        except KafkaError as exc:
            if not exc.retriable:
                raise
            # The admin client asks a random broker of its metadata, which keeps a broker that
            # died for minutes (metadata_max_age_ms): refreshed (the brokers asked in turn), it
            # names the live ones only. aiokafka has no public call for this.
            await self._admin._client.force_metadata_update()
            (described,) = await self._admin.describe_topics([self.topic])
        return dict(described)

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


async def connect_failure(
    servers: Sequence[str], options: KafkaOptions, client_id: str, exc: KafkaError
) -> AuthenticationError | BrokerError:
    """The error to raise for an aiokafka client that could not start (``exc``).

    aiokafka logs why each server failed and raises only "unable to bootstrap"; one connection
    more tells a refused TLS handshake or refused credentials from a broker that is away.
    """
    refused = await _diagnose(servers, options, client_id)
    if refused is not None:
        return refused
    return BrokerError(f"could not reach Kafka at {','.join(servers)}: {_scrub(exc, options)}")


def _scrub(exc: BaseException, options: KafkaOptions) -> str:
    """An error's text with the options' secrets masked."""
    text = str(exc)
    for secret in options.secrets():
        text = text.replace(secret, "***")
    return text


async def _diagnose(
    servers: Sequence[str], options: KafkaOptions, client_id: str
) -> AuthenticationError | None:
    """Connect to each server once more, to name a security failure as such.

    Returns:
        The error for the first server that refused the TLS handshake or the credentials, or
        whose listener speaks TLS to a plaintext client; None when no server did (it is away).
    """
    protocol = str(options.get("security_protocol", "PLAINTEXT"))
    timeout_ms = int(options["request_timeout_ms"])
    for server in servers:
        host, _, port = server.rpartition(":")
        try:
            conn = await create_conn(host, int(port), client_id=client_id, **options)
        except ssl.SSLError as exc:
            reason = exc.reason or type(exc).__name__
            return AuthenticationError(
                f"the TLS handshake with Kafka {server} failed ({reason}): the server's "
                f"certificate is not trusted by the ssl_context, or {server} does not speak TLS"
            )
        except (SaslAuthenticationFailed, UnsupportedSaslMechanismError) as exc:
            mechanism = options.get("sasl_mechanism", "PLAIN")
            user = options.get("sasl_plain_username")
            who = f" of user {user!r}" if user is not None else ""
            return AuthenticationError(
                f"Kafka {server} refused the SASL {mechanism} credentials{who}: "
                f"{_scrub(exc, options)}"
            )
        except (OSError, KafkaError, asyncio.TimeoutError):
            if protocol in ("PLAINTEXT", "SASL_PLAINTEXT") and await speaks_tls(
                host, int(port), timeout_ms / 1000
            ):
                return AuthenticationError(
                    f"Kafka {server} expects TLS, but security_protocol is {protocol!r}: use "
                    "'SSL' or 'SASL_SSL' with an ssl_context that trusts the server"
                )
            continue
        try:
            # A listener that wants SASL answers the version look-up, then closes on a request.
            await conn.send(MetadataRequest([]))
        except KafkaConnectionError:
            if not protocol.startswith("SASL_"):
                return AuthenticationError(
                    f"Kafka {server} closed the connection on a request without SASL "
                    f"authentication: security_protocol is {protocol!r}; it probably expects "
                    "'SASL_SSL' (or 'SASL_PLAINTEXT') with credentials"
                )
        except (KafkaError, asyncio.TimeoutError):
            pass
        finally:
            conn.close()
    return None


class OffsetReader:
    """Reads offsets without fetching records: a topic's partitions and log bounds, and the first
    offset at a time. For the command line."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        client_id: str,
        request_timeout_ms: int = 30_000,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Configure the clients; nothing connects before :meth:`start`.

        Args:
            bootstrap: Kafka servers as ``"host:port"``.
            client_id: shown in the broker's logs.
            request_timeout_ms: the bound on each request.
            options: connection options (TLS, SASL), see
                :class:`~aio_cluster.kafka_options.KafkaOptions`.

        Raises:
            ConfigurationError: malformed bootstrap servers or options.
        """
        self._servers = servers = parse_bootstrap(bootstrap)
        self._client_id = client_id
        self._options = connection = KafkaOptions(
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

    async def start(self) -> None:
        """Connect to the cluster.

        Raises:
            BrokerError: no broker answered.
        """
        try:
            await self._consumer.start()
            await self._admin.start()
        except KafkaError as exc:
            await self.stop()
            raise await connect_failure(self._servers, self._options, self._client_id, exc) from exc

    async def stop(self) -> None:
        """Close every connection."""
        await self._consumer.stop()
        await self._admin.close()

    async def partitions(self, topic: str) -> list[int]:
        """Every partition id of ``topic``, sorted.

        Raises:
            ConfigurationError: the topic does not exist.
            BrokerError: the metadata request failed.
        """
        try:
            (described,) = await self._admin.describe_topics([topic])
        except KafkaError as exc:
            raise BrokerError(f"metadata request failed: {exc}") from exc
        if described["error_code"] == _UNKNOWN_TOPIC or not described["partitions"]:
            raise ConfigurationError(f"topic {topic!r} does not exist in Kafka")
        if described["error_code"]:
            raise BrokerError(
                f"metadata of topic {topic!r} has error code {described['error_code']}"
            )
        return sorted(int(partition["partition"]) for partition in described["partitions"])

    async def bounds(self, topic: str, partitions: Collection[int]) -> dict[int, tuple[int, int]]:
        """For each partition, its earliest and its next-to-be-written (log-end) offset.

        Raises:
            BrokerError: the request failed.
        """
        tps = [TopicPartition(topic, partition) for partition in partitions]
        if not tps:
            return {}
        try:
            first = await self._consumer.beginning_offsets(tps)
            last = await self._consumer.end_offsets(tps)
        except KafkaError as exc:
            raise BrokerError(f"offset request failed: {exc}") from exc
        return {tp.partition: (first[tp], last[tp]) for tp in tps}

    async def offsets_at(
        self, topic: str, partitions: Collection[int], timestamp_ms: int
    ) -> dict[int, int | None]:
        """For each partition, the offset of its first record stamped at or after
        ``timestamp_ms``; None where every record is older.

        Raises:
            BrokerError: the request failed.
        """
        wanted = {TopicPartition(topic, partition): timestamp_ms for partition in partitions}
        if not wanted:
            return {}
        try:
            found = await self._consumer.offsets_for_times(wanted)
        except KafkaError as exc:
            raise BrokerError(f"offset request failed: {exc}") from exc
        return {tp.partition: None if at is None else int(at.offset) for tp, at in found.items()}


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
        topic: str,
        *,
        client_id: str,
        request_timeout_ms: int = 30_000,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Configure the consumer; nothing connects before :meth:`start`.

        Args:
            bootstrap: Kafka servers as ``"host:port"``.
            group: the group's name in Kafka.
            topic: the topic whose offsets are committed.
            client_id: shown in the broker's logs.
            request_timeout_ms: the bound on each request.
            options: connection options (TLS, SASL), see
                :class:`~aio_cluster.kafka_options.KafkaOptions`.

        Raises:
            ConfigurationError: malformed bootstrap servers or options.
        """
        self.group = group
        self.topic = topic
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
        self._assigned: set[int] = set()

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

    async def commit(self, offsets: Mapping[int, int], timeout: float) -> None:
        """Commit ``offsets`` (partition -> next offset) for the group.

        Raises:
            BrokerError: Kafka refused them or did not answer within ``timeout`` seconds (aiokafka
                would retry a retriable error for ever).
        """
        if not offsets:
            return
        if not set(offsets) <= self._assigned:
            self._assigned |= set(offsets)
            tps = [TopicPartition(self.topic, partition) for partition in sorted(self._assigned)]
            self._consumer.assign(tps)
            self._consumer.pause(*tps)
        wanted = {TopicPartition(self.topic, p): offset for p, offset in offsets.items()}
        try:
            await asyncio.wait_for(self._consumer.commit(wanted), timeout)
        except asyncio.TimeoutError:
            raise BrokerError(
                f"Kafka took no commit of group {self.group!r} within {timeout:g} s"
            ) from None
        except KafkaError as exc:
            raise BrokerError(
                f"Kafka refused the commit of group {self.group!r}: {_named(exc)}"
            ) from exc

    async def committed(self, partitions: Collection[int], timeout: float) -> dict[int, int]:
        """The offsets the group committed in Kafka; partitions without a commit are left out.

        Raises:
            BrokerError: the request failed or took over ``timeout`` seconds.
        """
        tps = [TopicPartition(self.topic, partition) for partition in sorted(partitions)]
        try:
            found = await asyncio.wait_for(
                asyncio.gather(*(self._consumer.committed(tp) for tp in tps)), timeout
            )
        except asyncio.TimeoutError:
            raise BrokerError(
                f"Kafka did not tell the offsets of group {self.group!r} within {timeout:g} s"
            ) from None
        except KafkaError as exc:
            raise BrokerError(f"offsets of group {self.group!r} unreadable: {_named(exc)}") from exc
        return {
            tp.partition: offset
            for tp, offset in zip(tps, found, strict=True)
            if offset is not None
        }
