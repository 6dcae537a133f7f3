"""OffsetReader: topics' partitions, log bounds and offsets at a time, without reading records.

The one place that asks Kafka's metadata and ListOffsets APIs, through one aiokafka client: a
member's [Fetcher][aio_cluster.kafka.fetcher.Fetcher] lends it the client it fetches with, so that
a member bootstraps once, holds one client's connections and reads a topic's metadata once for its
fetches and its look-ups alike; the command and the dead-letter check give it a client of its own.

Metadata: the client follows the topics asked about (besides those its fetcher reads). The first
`partitions()` of a topic, and `topics(names)`, follow it and read the client's metadata after one
refresh, so that a fetcher assigned the topic afterwards finds it followed and asks nothing more.
A topic followed already is asked on its own: a refresh asks every topic followed, so a member of
many topics checking each in turn would parse them all each time. The client's metadata leaves
out a topic answered with an error code, so such a topic is asked on its own too (a small answer:
no partitions to parse) to tell "it does not exist" from a passing error. A topic that does not
exist is no longer followed (aiokafka logs an error for it at each refresh) and is asked on its
own until it exists. `topics()` of the whole cluster reads a metadata of its own, which the
client's does not replace. The look-ups refresh the client's metadata with a request of their own
(`aio_cluster.kafka.metadata.CompactMetadataRequest`), whose answer is read in one pass, four
times faster than aiokafka's own refresh reads it; look-ups asked at the same moment share one.

Offsets: asked through [ListOffsets][aio_cluster.kafka.list_offsets.ListOffsets] over the same
client, on its second connection to each broker, so never behind a fetch long-polling for
records.

Each offset question takes the partitions of any number of topics (topic -> partition ids) and
answers by `TopicPartition`, in the same round trips as for one topic.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

import anyio
from aiokafka import TopicPartition as KafkaPartition
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.errors import (
    KafkaError,
    NoBrokersAvailable,
)
from aiokafka.protocol.metadata import MetadataRequest

from ..concurrency import gather
from ..errors import BrokerError, ConfigurationError
from .diagnosis import connect_failure
from .list_offsets import EARLIEST, LATEST, ListOffsets, known
from .metadata import READ_VERSIONS, CompactMetadata, CompactMetadataRequest
from .options import KafkaOptions, parse_bootstrap
from .placement import Replicas, broker_racks, replica_racks
from .read_probe import ReadAnswer, ReadProbe
from .seams import Seams, follow, followed, tables
from .topics import TopicPartition

__all__ = ["OffsetReader"]

_UNKNOWN_TOPIC = 3
"""Kafka's error code UNKNOWN_TOPIC_OR_PARTITION."""

_ISOLATION = {"read_uncommitted": 0, "read_committed": 1}
"""ListOffsets' isolation levels: read_committed's log end is the last stable offset."""


class OffsetReader:
    """Reads offsets without fetching records: topics' partitions and log bounds, and the first
    offset at a time."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] | None = None,
        *,
        client_id: str,
        request_timeout_ms: int = 30_000,
        options: Mapping[str, Any] | None = None,
        client: Any = None,
        isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted",
        seams: Seams | None = None,
    ) -> None:
        """Configure the reader; nothing connects before `start()`.

        Args:
            bootstrap: Kafka servers as ``"host:port"``, for a client of the reader's own.
            client_id: shown in the broker's logs (a client of the reader's own).
            request_timeout_ms: the bound on each request, and on the retries of a look-up (an
                option ``request_timeout_ms`` overrides it).
            options: connection options (TLS, SASL) of a client of its own, see
                [KafkaOptions][aio_cluster.KafkaOptions].
            client: instead of ``bootstrap``, the aiokafka client (``AIOKafkaClient``) to read
                through, started and stopped by its owner (a fetching consumer's).
            isolation_level: ``"read_committed"`` makes a partition's log end its last stable
                offset (the end of what a read_committed consumer reads).
            seams: what may be used of aiokafka's private names (`aio_cluster.kafka.seams`),
                shared with the fetcher that lends its client; a view of its own if None.

        Raises:
            ConfigurationError: malformed bootstrap servers or options, or neither (or both)
                ``bootstrap`` and ``client``.
        """
        if (bootstrap is None) == (client is None):
            raise ConfigurationError("an OffsetReader reads through bootstrap servers or a client")
        self.client_id = client_id
        self.options = connection = KafkaOptions(
            {"request_timeout_ms": request_timeout_ms, **(options or {})}
        )
        self._timeout = int(connection["request_timeout_ms"]) / 1000
        self.servers: list[str] = []
        self._owned = client is None
        if bootstrap is not None:
            self.servers = servers = parse_bootstrap(bootstrap)
            client = AIOKafkaClient(bootstrap_servers=servers, client_id=client_id, **connection)
        self._client = client
        seams = Seams() if seams is None else seams
        self._direct = seams.follows(client)
        """Whether the client's followed topics are read and set directly (see `_follow`)."""
        self._compact = isinstance(client.cluster, CompactMetadata) and seams.reads_metadata(
            READ_VERSIONS
        )
        """Whether Metadata answers are read in one pass (`CompactMetadataRequest`)."""
        self._held: frozenset[str] = frozenset()
        """The topics the client's fetcher reads now: followed whatever the look-ups learn."""
        self._absent: set[str] = set()
        """The topics Kafka said last that it does not have: asked on their own, not followed."""
        self._refreshing = asyncio.Lock()
        """One refresh at a time: those asked meanwhile take its answer (see `_refresh`)."""
        self._refreshes = 0
        """The refreshes ended so far."""
        self._last: tuple[frozenset[str], bool] = (frozenset(), False)
        """The topics the last refresh asked, and whether it was answered."""
        self._described_last: dict[str, tuple[dict[int, str], list[Any]]] = {}
        """topic -> the brokers' racks and its partitions' rows, as the last answer asking it
        alone gave them (newer than the client's metadata, which that answer leaves alone)."""
        self._list = ListOffsets(
            client,
            backoff=seams.retry_backoff(client),
            isolation=_ISOLATION[isolation_level],
            timeout=self._timeout,
            refresh=self._refreshed,
        )
        self._probe = ReadProbe(
            client, isolation=_ISOLATION[isolation_level], refresh=self._refreshed
        )

    async def start(self) -> None:
        """Connect to the cluster (a client of the reader's own; a lent one its owner starts).
        No topic is followed yet: the first look-up of a topic follows it.

        Raises:
            AuthenticationError: a broker refused the TLS handshake or the SASL credentials.
            BrokerError: no broker answered.
        """
        if self._owned:
            try:
                await self._client.bootstrap()
            except KafkaError as exc:
                await self.stop()
                raise await connect_failure(
                    self.servers, self.options, self.client_id, exc
                ) from exc
            except BaseException:
                await self.stop()
                raise

    async def stop(self) -> None:
        """Close every connection of a client of the reader's own (a lent one stays open)."""
        if self._owned:
            await self._client.close()

    # -- metadata ------------------------------------------------------------------------------

    def hold(self, topics: Collection[str]) -> asyncio.Future[bool]:
        """Keep ``topics`` followed (those the client's fetcher reads now, instead of those held
        before), besides the topics the look-ups follow; a topic new to the client makes it
        refresh at once. Made to stand in for aiokafka's ``AIOKafkaClient.set_topics()``.

        Returns:
            Resolved when the client's metadata knows the topics: at once when none was new.
        """
        self._held = frozenset(topics)
        if self._follow(self._held):
            return self._client.force_metadata_update()  # type: ignore[no-any-return]
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        done.set_result(True)
        return done

    def forget(self, topic: str) -> None:
        """The member reads ``topic`` no more (a pattern's topic deleted): the client stops
        following it, unless its fetcher still reads it, so that its refreshes no longer ask it
        (aiokafka logs an error at each refresh for a topic that is gone)."""
        self._absent.discard(topic)
        self._unfollow(topic)

    def _follow(self, topics: Collection[str]) -> bool:
        """Make the client follow ``topics`` too; True when one of them is new to it (then its
        next refresh asks it)."""
        # aiokafka has no public call that adds topics without replacing those followed.
        followed = self._followed()
        new = set(topics) - followed
        if new:
            follow(self._client, followed | new, self._direct)
        return bool(new)

    def _followed(self) -> frozenset[str]:
        return followed(self._client, self._direct)

    def _unfollow(self, topic: str) -> None:
        """Stop following ``topic``, unless the fetcher reads it or the client would follow no
        topic at all: aiokafka then asks the metadata of every topic at each refresh."""
        followed = self._followed()
        if topic in followed and topic not in self._held and len(followed) > 1:
            follow(self._client, followed - {topic}, self._direct)

    async def _refreshed(self, topics: Collection[str]) -> None:
        """Follow ``topics`` too, and refresh the client's metadata: one request for every topic
        followed (a refresh already under way serves, or goes on to ask a topic new to it).

        A failed refresh is tried once more: the client asks its brokers in turn, a dead one's
        connection dropped for the next.

        Raises:
            BrokerError: no broker answered, twice.
        """
        self._follow(topics)
        for attempt in (1, 2):
            try:
                with anyio.fail_after(self._timeout):
                    if await self._refresh():
                        return
                reason = "no broker answered"
            except TimeoutError:
                reason = f"no answer within {self._timeout:g} s"
            if attempt == 2:
                raise BrokerError(f"metadata request failed: {reason}")

    async def _refresh(self) -> bool:
        """Refresh the client's metadata: every topic it follows, in one request to a broker it
        knows (the next on a failure), read in one pass (`CompactMetadataRequest`; aiokafka's
        own refresh decodes the answer four times slower). A refresh under way when this is
        asked serves, if it asked every topic followed now. False when no broker answered with
        its brokers."""
        wanted = self._followed()
        before = self._refreshes
        async with self._refreshing:
            asked, answered = self._last
            if self._refreshes > before and wanted <= asked:
                # One under way when this was asked served it (the many topics of a member,
                # asked together, share one request, as aiokafka's own refreshes do).
                return answered
            # A turn of the loop first: look-ups asked at the same moment (a member's topics,
            # asked together) follow their topics meanwhile, and one request asks them all.
            await asyncio.sleep(0)
            asked = self._followed()
            answered = await self._ask(sorted(asked))
            self._last = (asked, answered)
            self._refreshes += 1
            return answered

    def _metadata_request(self, topics: list[str]) -> Any:
        """A Metadata request of ``topics``: answered in one pass where the client's metadata
        is compact and the reader knows the versions aiokafka may send, else aiokafka's own."""
        return CompactMetadataRequest(topics) if self._compact else MetadataRequest(topics)

    async def _ask(self, topics: list[str]) -> bool:
        """Ask ``topics``' metadata of the brokers in turn; update the client's with the first
        answer. False when none answered with its brokers."""
        request = self._metadata_request(topics)
        nodes = [broker.nodeId for broker in self._client.cluster.brokers()]
        random.shuffle(nodes)
        for node in nodes:
            try:
                answer = await self._client.send(node, request, group=ConnectionGroup.COORDINATION)
            except KafkaError:
                continue
            if not answer.brokers:
                return False  # a broker knows no broker while it starts: none to go on with
            self._client.cluster.update_metadata(answer)
            return True
        return False

    async def _described(self, topic: str) -> tuple[int, list[int]]:
        """``topic``'s error code and sorted partition ids, asked on its own: one topic to parse
        (none for a topic answered with an error code, which the client's metadata leaves out),
        on the client's second connection to the broker, so not behind a fetch, and read in one
        pass (a sticky leader asks every ``metadata_interval``).

        Raises:
            BrokerError: the request failed (after one retry on fresh metadata).
        """
        request = self._metadata_request([topic])
        for attempt in (1, 2):
            try:
                node = self._client.get_random_node()
                if node is None:
                    raise NoBrokersAvailable()
                answer = await self._client.send(node, request, group=ConnectionGroup.COORDINATION)
                break
            except KafkaError as exc:
                if attempt == 2 or not exc.retriable:
                    raise BrokerError(f"metadata request failed: {exc}") from exc
                # The broker asked may have died: the refreshed metadata names the live ones.
                await self._refreshed(())
        for entry in answer.topics:
            if answer.API_VERSION == 0:
                code, name, partitions = entry
            else:
                code, name, _internal, partitions = entry
            if name == topic:
                self._described_last[topic] = (broker_racks(answer.brokers), partitions)
                return int(code), sorted(int(partition[1]) for partition in partitions)
        return _UNKNOWN_TOPIC, []

    async def partitions(self, topic: str) -> list[int]:
        """Every partition id of ``topic``, sorted, fresh from the metadata API: the first time,
        the client follows the topic and one refresh of its metadata answers; afterwards (and
        while the topic does not exist) the topic is asked on its own, one topic to parse
        however many the client follows, and not behind a fetch.

        Raises:
            ConfigurationError: the topic does not exist.
            BrokerError: the metadata request failed, or Kafka answered the topic with an error
                code (its leader moving, say).
        """
        if topic in self._absent or topic in self._followed():
            code, partitions = await self._described(topic)
            if code == _UNKNOWN_TOPIC or topic not in self._absent:
                return self._found(topic, code, partitions)
            self._absent.discard(topic)  # made since: followed from now
        await self._refreshed({topic})
        self._described_last.pop(topic, None)  # the client's metadata is the newer now
        found = self._client.cluster.partitions_for_topic(topic)
        if found:
            return sorted(found)
        return self._found(topic, *await self._described(topic))

    def placement(self, topic: str) -> Replicas:
        """partition -> the racks of its replicas, as the last look-up of ``topic`` found them
        (see `aio_cluster.kafka.placement`): empty where no broker has a rack."""
        if topic in self._described_last:
            racks, rows = self._described_last[topic]
            return replica_racks(racks, ((row[1], row[3]) for row in rows))
        cluster = self._client.cluster
        racks = {b.nodeId: b.rack for b in cluster.brokers() if b.rack}
        table = tables(cluster).get(topic, {})
        return replica_racks(racks, ((p, table[p].replicas) for p in table))

    def _found(self, topic: str, code: int, partitions: list[int]) -> list[int]:
        """``partitions``, unless Kafka answered ``topic`` with error ``code``.

        Raises:
            ConfigurationError: the topic does not exist (then it is no longer followed).
            BrokerError: another error code.
        """
        # Only "unknown topic" says it does not exist: with another code (its leader moving,
        # say) it exists, and its partitions may be missing from the answer for that moment.
        if code == _UNKNOWN_TOPIC:
            self._unfollow(topic)
            self._absent.add(topic)
            raise ConfigurationError(f"topic {topic!r} does not exist in Kafka")
        if code:
            raise BrokerError(f"metadata of topic {topic!r} has error code {code}")
        if not partitions:
            raise ConfigurationError(f"topic {topic!r} does not exist in Kafka")
        return partitions

    async def topics(self, names: Sequence[str] | None = None) -> dict[str, list[int]]:
        """Topic -> its sorted partition ids, in one metadata request: of ``names`` (those that
        exist; the client follows them from now), or of every topic of the cluster but Kafka's
        internal ones (None). A topic the answer names with an error code is left out: ask
        `partitions()` whether it is gone.

        Raises:
            BrokerError: the metadata request failed.
        """
        if names is None:
            return await self._listed()
        asked = set(names)
        if not asked:
            return {}
        new = asked - self._followed()
        await self._refreshed(asked)
        cluster = self._client.cluster
        found: dict[str, list[int]] = {}
        for topic in sorted(asked):
            partitions = cluster.partitions_for_topic(topic)
            if partitions and topic not in cluster.internal_topics:
                found[topic] = sorted(partitions)
            elif topic in new or topic in self._absent:
                self._unfollow(topic)
        return found

    async def _listed(self) -> dict[str, list[int]]:
        """Every topic of the cluster but Kafka's internal ones, in a metadata of its own (the
        client's follows its topics only)."""
        try:
            try:
                listing = await self._client.fetch_all_metadata()
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                # No broker known answered: the refreshed metadata names the live ones.
                await self._refreshed(())
                listing = await self._client.fetch_all_metadata()
        except KafkaError as exc:
            raise BrokerError(f"metadata request failed: {exc}") from exc
        found: dict[str, list[int]] = {}
        for topic in sorted(listing.topics(exclude_internal_topics=True)):
            partitions = listing.partitions_for_topic(topic)
            if partitions:
                found[str(topic)] = sorted(partitions)
        return found

    # -- offsets -------------------------------------------------------------------------------

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
        first, last = await gather(
            functools.partial(self._list.ask, dict.fromkeys(tps, timestamp))
            for timestamp in (EARLIEST, LATEST)
        )
        return {TopicPartition(*tp): (known(first, tp), known(last, tp)) for tp in tps}

    async def ends(self, wanted: Mapping[str, Collection[int]]) -> dict[TopicPartition, int]:
        """For each partition of ``wanted`` (topic -> partition ids), its next-to-be-written
        offset (with read_committed, its last stable offset): one ListOffsets round trip however
        many topics there are.

        Raises:
            BrokerError: the request failed.
        """
        tps = await self._tracked(wanted)
        if not tps:
            return {}
        last = await self._list.ask(dict.fromkeys(tps, LATEST))
        return {TopicPartition(*tp): known(last, tp) for tp in tps}

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
        found = await self._list.ask(dict.fromkeys(tps, timestamp_ms))
        answers = {tp: found.get(tp, (-1, None))[0] for tp in tps}
        return {TopicPartition(*tp): None if at < 0 else at for tp, at in answers.items()}

    async def readable(
        self, offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, ReadAnswer]:
        """Whether the leaders let this client read each partition of ``offsets`` (partition ->
        the offset to fetch at), asked with a Fetch, the request consuming sends (see
        `aio_cluster.kafka.read_probe`); a partition whose leader gave no answer on the read is
        left out.

        Raises:
            BrokerError: the metadata request failed.
        """
        wanted: dict[str, list[int]] = {}
        for topic, partition in offsets:
            wanted.setdefault(topic, []).append(partition)
        tps = await self._tracked(wanted)
        found = await self._probe.ask({tp: offsets[TopicPartition(*tp)] for tp in tps})
        return {TopicPartition(*tp): answer for tp, answer in found.items()}

    async def _tracked(self, wanted: Mapping[str, Collection[int]]) -> list[KafkaPartition]:
        """The partitions of ``wanted``, their topics' metadata followed first: in one refresh
        for the topics not followed yet (their leaders are needed).

        Raises:
            BrokerError: the metadata request failed.
        """
        topics = {topic for topic, partitions in wanted.items() if partitions}
        if not topics <= self._followed():
            await self._refreshed(topics)
        return [KafkaPartition(t, p) for t, partitions in wanted.items() for p in partitions]
