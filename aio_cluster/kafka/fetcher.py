"""Fetcher: records of one or many topics from an explicitly given set of partitions.

The partitions are given by key (`aio_cluster.kafka.topics.TopicKeys`): for one topic the
partition ids themselves.

One aiokafka consumer in manual ``assign()`` mode fetches, and its client serves the whole member:
the metadata and the offset look-ups go through an
[OffsetReader][aio_cluster.kafka.offset_reader.OffsetReader] over that same client. So a member
bootstraps once, holds one client's connections, and reads a topic's metadata once: the reader's
first look-up follows the topic, and the partitions assigned afterwards find it followed. The
look-ups ride the client's second connection to each broker: on the fetching one they would queue
behind long-polling fetches (the broker answers a connection in order). The fetches go in
incremental fetch sessions (`aio_cluster.kafka.fetch_sessions`): a request and its response name
only what changed, not every partition the member owns. The client keeps its metadata compact
(`aio_cluster.kafka.metadata`): a member of a large topic would otherwise hold four objects for
the collector to go over for each of its partitions.

A fetch error that retrying cannot mend becomes a [FetchError][aio_cluster.FetchError] naming the
partition and the first offset that cannot be read (`aio_cluster.kafka.unreadable`); the records
before it are still returned first. Every other fetch error is a retriable `BrokerError`. Keys
and values go through the deserializers (`aio_cluster.kafka.decoding`).

aiokafka fetches in one background task, and its client refreshes the metadata in another; any
error ends either for good, and the consumer then returns nothing while the member would keep its
claims. Both are looked at before each fetch: one that ended is noticed within one ``max_wait``
of the fetch under way, and a new consumer fetches on from the positions held (nothing skipped,
nothing read twice), as often as `aio_cluster.kafka.restarts` allows. What this module reaches
under aiokafka for goes through `aio_cluster.kafka.seams`, each use checked first.

Memory: with a budget (``max_buffered_bytes``), the bytes buffered for the member stay within it
(`aio_cluster.kafka.budget`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

import anyio
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError, OffsetOutOfRangeError

from ..errors import BrokerError, OffsetsOutOfRange
from . import seams
from .budget import FetchBudget
from .decoding import Decoder, Deserializer
from .diagnosis import connect_failure
from .fetch_sessions import FetchSessions
from .look_ups import LookUps
from .metadata import CompactMetadata
from .offset_reader import OffsetReader
from .options import KafkaOptions, parse_bootstrap
from .placement import Replicas
from .progress import NoProgress, ReadProgress
from .read_probe import ReadAnswer
from .restarts import Restarts
from .seams import Seams
from .topics import PartitionKey, TopicKeys
from .topics import TopicPartition as Named
from .unreadable import UNREADABLE, isolate, reason

__all__ = ["Fetcher", "IsolationLevel"]

log = logging.getLogger(__name__)

IsolationLevel = Literal["read_uncommitted", "read_committed"]
ISOLATION_LEVELS: tuple[IsolationLevel, ...] = ("read_uncommitted", "read_committed")

_IDLE_LOOK_MS = 2_000
"""How often aiokafka's background fetch looks at every partition when nothing woke it
(aiokafka's ``consumer_timeout_ms``, 200 by default). Whatever lets it send a request wakes it at
once (a response, records taken or dropped, a seek, a resume, a new assignment), so the look
five times a second only cost CPU: two thirds of its turns in an idle member, each going over
every partition it owns."""

_KEPT_GONE = 2
"""Partitions given up stay paused in aiokafka's assignment (see `Fetcher.assign`) while they
number at most 1/_KEPT_GONE of those assigned. aiokafka's background fetch goes over every
partition of its assignment at each turn, paused or not, and waits on each paused one's resume:
a member that gave up partitions one by one as a group of a hundred grew from one member kept
each of its 10,000 partitions there, and spent most of its CPU at rest on them."""


class Fetcher:
    """Fetches records of one or many topics from an explicitly given set of partitions."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        keys: TopicKeys,
        client_id: str,
        max_bytes: int,
        max_wait_ms: int,
        min_bytes: int,
        request_timeout_ms: int = 30_000,
        options: Mapping[str, Any] | None = None,
        isolation_level: IsolationLevel = "read_uncommitted",
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        max_buffered_bytes: int | None = None,
        fetch_timeout: float = 30.0,
        fetch_gap: float = 2.0,
        rack: str | None = None,
    ) -> None:
        """Configure the consumer; nothing connects before `start()`.

        Args:
            bootstrap: Kafka servers as ``"host:port"``.
            keys: the numbers of the topics read (`aio_cluster.kafka.topics.TopicKeys`):
                partitions are given by key, which for a one-topic member is the partition id.
            client_id: shown in the broker's logs and metrics.
            max_bytes: the most bytes fetched from one partition in one request.
            max_wait_ms: how long the broker may wait for ``min_bytes`` to arrive.
            min_bytes: the least data the broker should answer with.
            request_timeout_ms: the bound on each request to the broker (an option
                ``request_timeout_ms`` overrides it).
            options: connection options for every client (TLS, SASL), see
                [KafkaOptions][aio_cluster.KafkaOptions].
            isolation_level: ``"read_committed"`` hands out no record of an aborted or open
                transaction; ``"read_uncommitted"`` hands out every record.
            key_deserializer: applied to each key that is not None.
            value_deserializer: applied to each value that is not None.
            max_buffered_bytes: the budget of record bytes buffered over all partitions
                (None: only ``max_bytes`` per partition bounds them).
            fetch_timeout: how long a partition asked for may go without progress before
                `unreadable()` names it (see `aio_cluster.kafka.progress`).
            fetch_gap: the longest pause between two fetches of a partition the caller keeps
                asking for; a longer one starts its progress clock again.
            rack: the member's rack, sent with every fetch (KIP-392): a broker with a
                rack-aware replica selector names a replica in it to fetch from instead.

        Raises:
            ConfigurationError: malformed servers or options.
        """
        self.keys = keys
        self._servers = parse_bootstrap(bootstrap)
        self._options = KafkaOptions({"request_timeout_ms": request_timeout_ms, **(options or {})})
        self._client_id = client_id
        self._max_bytes = max_bytes
        self.budget = FetchBudget(max_buffered_bytes, max_bytes)
        """The budget of the bytes buffered (`aio_cluster.kafka.budget`): aiokafka holds at
        most one response per broker."""
        self._isolation_level = isolation_level
        self._fetch_options = {
            "max_partition_fetch_bytes": max_bytes,
            "fetch_max_wait_ms": max_wait_ms,
            "fetch_min_bytes": min_bytes,
            "client_rack": rack,
        }
        self._max_wait = max_wait_ms / 1000
        self._seams = Seams()
        self._consumer, self._reader = self._build()
        self._tasks: tuple[asyncio.Future[Any], ...] = ()
        """aiokafka's background fetch and metadata refresh, watched (see `_watch`); none
        where they cannot be."""
        self._restarts = Restarts()
        self._counted: asyncio.Future[Any] | None = None
        """The last ended task counted in `_restarts`."""
        self._drops = False
        """Whether `Seam.DROP_PAUSED` serves (set at start)."""
        self._look_ups = LookUps()
        """The look-ups running (a renewed fetcher closes the old reader once they ended)."""
        self._empty_since: float | None = None
        """Without the task to watch: since when fetches of fetchable partitions came back
        empty (see `_stalled`)."""
        self._assigned: frozenset[PartitionKey] = frozenset()
        self._held: frozenset[PartitionKey] = frozenset()
        """The assigned partitions paused in aiokafka by `hold()`."""
        self._tps: dict[PartitionKey, Any] = {}
        self._keys_of: dict[Any, PartitionKey] = {}
        """Keys and aiokafka's names of the partitions met, both ways (see `_tp`)."""
        self._positions: dict[PartitionKey, int] = {}
        """Partition -> the next offset to read: past every record returned, and past the
        transaction markers, aborted records and compaction gaps the last fetch stepped over."""
        self._decoder = Decoder(key_deserializer, value_deserializer)
        self._sessions: FetchSessions | None = None
        """The fetches' incremental sessions, one per broker (see the module), once started."""
        self._fetched: collections.Counter[int] = collections.Counter()
        """Broker node id -> the record bytes fetched from it (see `fetched`)."""
        self.progress: ReadProgress[PartitionKey] = ReadProgress(fetch_timeout, fetch_gap)
        """Whether each partition asked for makes progress (see `unreadable()`)."""

    def _build(self) -> tuple[AIOKafkaConsumer, OffsetReader]:
        """A new aiokafka consumer and the reader of its look-ups: through the consumer's
        client where `Seams.client` allows, else through a client of the reader's own."""
        connection = self._options
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self._servers,
            client_id=self._client_id,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="none",
            fetch_max_bytes=self.budget.response_bytes,  # with a budget, set again over the brokers
            consumer_timeout_ms=_IDLE_LOOK_MS,
            isolation_level=self._isolation_level,
            **self._fetch_options,
            **connection,
        )
        timeout_ms = int(connection["request_timeout_ms"])
        client = self._seams.client(consumer)
        if client is None:
            return consumer, OffsetReader(
                self._servers,
                client_id=self._client_id,
                options=connection,
                isolation_level=self._isolation_level,
                seams=self._seams,
            )
        self._seams.compact(client, CompactMetadata)  # before anything reads it
        reader = OffsetReader(
            client=client,
            client_id=self._client_id,
            request_timeout_ms=timeout_ms,
            isolation_level=self._isolation_level,
            seams=self._seams,
        )
        if self._seams.follows(client):
            # aiokafka's assign() makes the client follow exactly the topics of the partitions
            # assigned (set_topics()), which drops those the look-ups follow (a refresh for them
            # again at the next look-up) and, when nothing is assigned, follows no topic at all:
            # the client then asks every topic of the cluster at once and at each refresh. The
            # reader keeps the assigned topics followed besides its own instead, and refreshes
            # only for a topic new to the client. aiokafka has no public call for this.
            client.set_topics = reader.hold
        return consumer, reader

    async def start(self) -> None:
        """Connect to the cluster: the fetching consumer, whose client the look-ups share. No
        topic's metadata is read yet: the first look-up (`partitions()`, `topics()`) or
        assignment reads it.

        Raises:
            AuthenticationError: a broker refused the TLS handshake or the SASL credentials.
            BrokerError: no broker answered.
        """
        await self._start(self._consumer, self._reader)

    async def _start(self, consumer: AIOKafkaConsumer, reader: OffsetReader) -> None:
        """Start ``consumer`` (and ``reader``, if it has a client of its own), then reach under
        aiokafka where the seams fit: fetch sessions, the bound on responses, the watch."""
        try:
            await consumer.start()
            await reader.start()
        except KafkaError as exc:
            await self._close(consumer, reader)
            raise await connect_failure(self._servers, self._options, self._client_id, exc) from exc
        except BaseException:
            await self._close(consumer, reader)
            raise
        self._sessions = None
        client = self._seams.client(consumer)
        inner = self._seams.sessions(consumer, client) if client is not None else None
        if inner is not None:
            self._sessions = FetchSessions(self._fetched)
            self._sessions.answered = self._answered
            self._sessions.install(inner, client)
        if self.budget.budgeted and client is not None:
            # Make aiokafka hold at most one response per broker, of at most
            # `response_bytes` (see the budget): its fetcher reads both for every request.
            self.budget.brokers = max(1, len(client.cluster.brokers()))
            if not self._seams.bound(consumer, self.budget.response_bytes):
                self.budget.brokers = 1
        self._drops = self._seams.drops(consumer)
        self._tasks = self._seams.background(consumer)

    async def stop(self) -> None:
        """Close the fetch sessions, then every connection; buffered records are dropped."""
        await self._close(self._consumer, self._reader, self._sessions)

    async def _close(
        self,
        consumer: AIOKafkaConsumer,
        reader: OffsetReader,
        sessions: FetchSessions | None = None,
    ) -> None:
        """Stop ``consumer`` and ``reader``, ``sessions`` (the consumer's) closed first while its
        client is connected: the broker's session cache is shared by all its clients. A consumer
        whose background tasks ended (see `_watch`) is stopped all the same.

        Only the sessions' closing may be cut short by the caller (a member's close past its
        ``close_timeout``): what is not closed then, the brokers evict. The rest runs whatever
        cancels the caller meanwhile, since a stop cut short would leave the fetches out, the
        connections open and a task reading each."""
        try:
            if sessions is not None:
                # Bounded apart from max_wait, which may be minutes: what is not closed within
                # it, the brokers evict.
                await sessions.close(min(self._max_wait, 1.0) + 1.0)
        finally:
            with anyio.CancelScope(shield=True):
                await self._stop(consumer, reader, sessions)

    async def _stop(
        self, consumer: AIOKafkaConsumer, reader: OffsetReader, sessions: FetchSessions | None
    ) -> None:
        """Cancel the fetches still out (see `abandon`), then stop ``reader`` and ``consumer``,
        closing every connection; the caller shields it."""
        if sessions is not None:
            await sessions.abandon()
        await reader.stop()
        self._seams.settle(consumer)
        try:
            await consumer.stop()
        except Exception as exc:  # a consumer that cannot stop cleanly must not stop the member
            log.warning("the Kafka consumer did not stop cleanly: %r", exc)
            # Its stop ended at the ended task, before its client's connections closed
            # (where `settle` could not replace that task): close them here.
            if (client := self._seams.client(consumer)) is not None:
                with contextlib.suppress(Exception):
                    await client.close()

    def forget(self, topic: str) -> None:
        """The member reads ``topic`` no more: its metadata is no longer followed (see
        `OffsetReader.forget`)."""
        self._reader.forget(topic)

    async def partitions(self, topic: str) -> list[int]:
        """Every partition id of ``topic``, sorted, fresh from the metadata API: the first time
        one refresh of the client's metadata, which follows the topic from now (so assigning its
        partitions asks nothing more); afterwards the topic asked on its own.

        Raises:
            ConfigurationError: the topic does not exist.
            BrokerError: the metadata request failed.
        """
        return await self._look_ups.run(self._reader, lambda reader: reader.partitions(topic))

    @property
    def fetched(self) -> Mapping[int, int]:
        """Broker node id -> the record bytes fetched from it since the fetcher started, over
        its renewed consumers too (see `FetchSessions.fetched`); none where the sessions do
        not serve (see `aio_cluster.kafka.seams`)."""
        return self._fetched

    def placement(self, topic: str) -> Replicas:
        """partition -> the racks of its replicas, as the last look-up found them."""
        return self._reader.placement(topic)

    async def topics(self, names: Sequence[str] | None = None) -> dict[str, list[int]]:
        """Topic -> its sorted partition ids, of ``names`` that exist (followed from now; None:
        every topic of the cluster but Kafka's internal ones), in one metadata request.

        Raises:
            BrokerError: the metadata request failed.
        """
        return await self._look_ups.run(self._reader, lambda reader: reader.topics(names))

    def _tp(self, key: PartitionKey) -> Any:
        """aiokafka's name of the partition of ``key``, made once: every assignment names each
        partition owned (a rebalance of a member owning 100 partitions made 200), and every
        fetch each partition fetched."""
        tp = self._tps.get(key)
        if tp is None:
            tp = self._tps[key] = TopicPartition(*self.keys.split(key))
            self._keys_of[tp] = key
        return tp

    def _key(self, tp: Any) -> PartitionKey:
        key = self._keys_of.get(tp)
        return self.keys.key(tp.topic, tp.partition) if key is None else key

    @property
    def assigned(self) -> frozenset[PartitionKey]:
        """The partitions fetched from now."""
        return self._assigned

    def hold(self, partitions: Collection[PartitionKey]) -> None:
        """Have aiokafka fetch none of ``partitions`` (assigned ones) from now, and every other
        assigned partition again; it sends no request while it holds them all. What aiokafka
        fetched of them already is dropped by the next `fetch()`."""
        held = frozenset(partitions) & self._assigned
        self.progress.forget(held - self._held)  # not fetched: not measured
        if released := self._held - held:
            self._consumer.resume(*(self._tp(partition) for partition in released))
        if newly := held - self._held:
            self._consumer.pause(*(self._tp(partition) for partition in newly))
            if not self._drops:
                # What aiokafka fetched of them is dropped by a seek to where they are.
                for partition in newly:
                    self._consumer.seek(self._tp(partition), self._positions[partition])
        self._held = held

    def assign(self, positions: Mapping[PartitionKey, int]) -> None:
        """Fetch from exactly these partitions, each from the given next offset.

        Reading resumes at ``positions``: what was fetched ahead from another offset, or of a
        partition no longer assigned, is dropped; a partition whose position is unchanged keeps
        what aiokafka fetched ahead of it.
        """
        before = self._positions
        self.progress.forget(self._assigned - positions.keys())
        wanted = {partition: self._tp(partition) for partition in sorted(positions)}
        self._assigned = frozenset(positions)
        self._positions = dict(positions)
        # The partitions held are resumed below (a staying one is paused, a new assignment
        # pauses none), and sought to their positions, which drops what aiokafka held of them.
        self._held = frozenset()
        tps = set(wanted.values())
        held: set[Any] = self._consumer.assignment()
        topics = {tp.topic for tp in tps}
        if (
            not tps <= held
            or any(tp.topic not in topics for tp in held)
            or len(held - tps) * _KEPT_GONE > len(tps)
        ):
            # A partition new to aiokafka comes only with a whole new assignment, which makes
            # every partition's state again: each is sought, and fetched again.
            self._consumer.assign(list(wanted.values()))
            for partition, offset in positions.items():
                self._consumer.seek(wanted[partition], offset)
            return
        # Only partitions gone: a new assignment would drop what every other partition fetched
        # ahead, and make each one's state again (at a join, each of a hundred members gives up
        # one partition of a hundred). The partitions gone stay in aiokafka's assignment,
        # paused, their records dropped, until the next new assignment names the exact set:
        # while their topics are still read (aiokafka asks the metadata again and again for a
        # paused partition whose topic is gone), and while they are few (`_KEPT_GONE`).
        paused: set[Any] = self._consumer.paused()
        gone = [tp for tp in held - tps if tp not in paused]
        for tp in gone:
            at = before.get(self._key(tp))
            if at is not None:
                self._consumer.seek(tp, at)  # drops what it fetched ahead
        self._consumer.pause(*gone)
        back = [tp for tp in tps if tp in paused]
        self._consumer.resume(*back)
        for partition, offset in positions.items():
            tp = wanted[partition]
            if before.get(partition) != offset or tp in paused:
                self._consumer.seek(tp, offset)

    def seek(self, partition: PartitionKey, offset: int) -> None:
        """Read ``partition`` again from ``offset`` (it must be assigned)."""
        self._positions[partition] = offset
        self._consumer.seek(self._tp(partition), offset)

    def position(self, partition: PartitionKey) -> int | None:
        """The next offset the fetcher reads of an assigned ``partition``: one past the last
        record returned, or further when the last fetch stepped over transaction markers,
        aborted records or compaction gaps after it; None when not assigned."""
        return self._positions.get(partition) if partition in self._assigned else None

    def highwater(self, partition: PartitionKey) -> int | None:
        """The log end the last fetch of ``partition`` saw; None before one, or when it is not
        assigned (the assignment may have changed meanwhile: it is read from the meter
        provider's thread). Asks no server."""
        tp = self._tp(partition)
        try:
            return self._consumer.highwater(tp) if partition in self._assigned else None
        except (AssertionError, AttributeError, KeyError):
            return None  # unassigned between the check and the read

    async def bounds(
        self, partitions: Collection[PartitionKey]
    ) -> dict[PartitionKey, tuple[int, int]]:
        """For each partition, its earliest and its next-to-be-written offset.

        Raises:
            BrokerError: the request failed.
        """
        wanted = self.keys.by_topic(set(partitions))
        found = await self._look_ups.run(self._reader, lambda reader: reader.bounds(wanted))
        return {self.keys.key(topic, p): bounds for (topic, p), bounds in found.items()}

    async def ends(self, partitions: Collection[PartitionKey]) -> dict[PartitionKey, int]:
        """For each partition, its next-to-be-written offset (with read_committed, its last
        stable offset): one ListOffsets round trip.

        Raises:
            BrokerError: the request failed.
        """
        wanted = self.keys.by_topic(set(partitions))
        found = await self._look_ups.run(self._reader, lambda reader: reader.ends(wanted))
        return {self.keys.key(topic, p): end for (topic, p), end in found.items()}

    async def readable(self, offsets: Mapping[PartitionKey, int]) -> dict[PartitionKey, ReadAnswer]:
        """Whether the partitions' leaders let this member read them now: one Fetch of each
        partition of ``offsets`` (partition -> the offset to fetch at), ``max_wait`` 0, a few
        bytes, the request consuming sends and authorized as it is (a ListOffsets answered
        says nothing of the Read ACL). A partition whose leader gave no answer on the read is
        left out. Nothing is handed out, no position moves.

        Raises:
            BrokerError: the metadata request failed.
        """
        wanted = {Named(*self.keys.split(key)): at for key, at in offsets.items()}
        found = await self._look_ups.run(self._reader, lambda reader: reader.readable(wanted))
        return {self.keys.of(tp): answer for tp, answer in found.items()}

    async def offsets_for_time(
        self, partitions: Collection[PartitionKey], timestamp_ms: int
    ) -> dict[PartitionKey, int | None]:
        """For each partition, the first offset whose record's timestamp is at or after
        ``timestamp_ms``; None where no record is that late.

        Raises:
            BrokerError: the request failed.
        """
        wanted = self.keys.by_topic(set(partitions))
        found = await self._look_ups.run(
            self._reader, lambda reader: reader.offsets_for_time(wanted, timestamp_ms)
        )
        return {self.keys.key(topic, p): offset for (topic, p), offset in found.items()}

    async def fetch(
        self, partitions: Collection[PartitionKey], timeout_ms: int
    ) -> dict[PartitionKey, list[Any]]:
        """Records of the given (assigned) partitions, waiting up to ``timeout_ms`` for some:
        it returns nothing only after that wait, so a caller may fetch again at once. What
        aiokafka fetched of held partitions (`hold()`) is dropped first.

        Returns:
            partition id -> non-empty list of records in offset order.

        Raises:
            OffsetsOutOfRange: a position is outside what the broker holds.
            FetchError: a partition's next records cannot be read, and fetching again will not
                mend it; nothing was returned or skipped, so the same fetch raises it again.
            DeserializationError: the next record of a partition failed to deserialize.
            BrokerError: the fetch failed otherwise (retriable).
        """
        await self._watch()
        self._drop_paused()
        tps = [
            self._tp(partition)
            for partition in partitions
            if partition in self._assigned and partition not in self._held
        ]
        if not tps:
            await asyncio.sleep(timeout_ms / 1000)
            return {}
        before = {self._key(tp): self._positions[self._key(tp)] for tp in tps}
        self.progress.asked(before, time.time())
        try:
            try:
                fetched = await self._consumer.getmany(*tps, timeout_ms=timeout_ms)
            except OffsetOutOfRangeError as exc:
                detail = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
                raise OffsetsOutOfRange({self._key(tp): off for tp, off in detail.items()}) from exc
            except UNREADABLE as exc:
                self.progress.failed(reason(exc), time.time())
                fetched = await isolate(self._consumer, tps, before, self._key, self._leader)
            except KafkaError as exc:
                self.progress.failed(reason(exc), time.time())
                raise BrokerError(f"fetch failed: {exc}") from exc
            moved = {self._key(tp): await self._consumer.position(tp) for tp in tps}
        except BaseException:
            # Cancelled, or failed, after aiokafka may have handed out records that are now
            # not returned: it reads them again from where it was.
            for tp in tps:
                self._consumer.seek(tp, before[self._key(tp)])
            raise
        self._positions.update(moved)
        self._note_progress(tps, fetched)
        if not self._tasks:
            await self._check_progress(fetched, before)
        found = {self._key(tp): records for tp, records in fetched.items() if records}
        if self._decoder.changes_nothing:
            return found
        return self._decoder.decode(found, before, self.seek)

    def _note_progress(self, tps: Sequence[Any], fetched: Mapping[Any, list[Any]]) -> None:
        """Tell `progress` of the partitions whose leader answered without an error (aiokafka's
        ``last_poll_timestamp``, moved by an empty answer too) or whose records came."""
        now = time.time()
        for tp in tps:
            key = self._key(tp)
            if fetched.get(tp):
                self.progress.progressed(key, now)
                continue
            with contextlib.suppress(AssertionError):  # no longer in aiokafka's assignment
                polled = self._consumer.last_poll_timestamp(tp)
                if polled is not None:
                    self.progress.progressed(key, polled / 1000)

    def _answered(self, answered: list[tuple[str, int]], errors: list[str]) -> None:
        """A fetch session's answer (see `FetchSessions.answered`), told to `progress`."""
        now = time.time()
        for error in errors:
            self.progress.failed(error, now)
        for topic, partition in answered:
            if (key := self.keys.lookup(topic, partition)) is not None:
                self.progress.progressed(key, now)

    def unreadable(self) -> dict[PartitionKey, NoProgress]:
        """The partitions asked for that made no progress for longer than ``fetch_timeout``
        (see `aio_cluster.kafka.progress`), each with its leader and the last error."""
        return self.progress.unreadable(time.time(), self._leader)

    def _leader(self, key: PartitionKey) -> int | None:
        """The node id of the partition's leader in the client's metadata (None: unknown)."""
        client = self._seams.client(self._consumer)
        if client is None:
            return None
        found = client.cluster.leader_for_partition(self._tp(key))
        return None if found is None or found < 0 else int(found)

    def _drop_paused(self) -> None:
        """Drop what aiokafka fetched of the partitions paused in it (held, or no longer
        assigned): it returns no record of a paused partition, and with a budget it sends no
        request to a broker while it holds records of one (see the module). aiokafka's position
        moves only as records are taken, so they are read again from the same offset once the
        partition is fetched again. Without `Seam.DROP_PAUSED`, `hold()` seeks instead."""
        if self._drops and (paused := self._consumer.paused()):
            seams.drop_paused(self._consumer, paused)

    # -- watching aiokafka's background fetch ---------------------------------------------------

    async def _watch(self) -> None:
        """Fetch on with a new consumer if aiokafka's background fetch or its client's metadata
        refresh ended: any error ends either for good, and the consumer then returns no record,
        ever (or none of a partition whose leader moved). Looked at before each fetch, so an end
        is noticed within one ``max_wait`` of the fetch under way.

        Raises:
            FetchStalledError: they ended more than `_RESTARTS` times within `_RESTART_WINDOW`.
            BrokerError: a consumer made anew could not start (tried again at the next fetch).
        """
        ended = next((task for task in self._tasks if task.done()), None)
        if ended is None:
            return
        if ended is not self._counted:
            self._counted = ended
            cause = None if ended.cancelled() else ended.exception()
            await self._restart(cause, "a background task of aiokafka's consumer ended")
        else:
            await self._renew()

    async def _check_progress(
        self, fetched: Mapping[Any, list[Any]], before: Mapping[PartitionKey, int]
    ) -> None:
        """Without aiokafka's fetch task to watch: when fetches have come back empty for over
        ``max_wait`` and a second while a partition's log end is past where it reads, the
        background fetch has stopped, and is started again (see `_watch`)."""
        now = time.monotonic()
        if any(fetched.values()) or self._empty_since is None:
            self._empty_since = now
            return
        if now - self._empty_since < self._max_wait + 1:
            return
        self._empty_since = now
        ends = await self.ends(list(before))
        behind = [key for key, at in before.items() if ends.get(key, at) > self._positions[key]]
        if behind:
            await self._restart(
                None,
                f"no record came for {self._max_wait + 1:g} s while {len(behind)} partition(s) "
                "had more",
            )

    async def _restart(self, cause: BaseException | None, what: str) -> None:
        """Count a death of the background fetch (see `aio_cluster.kafka.restarts`), and fetch
        on with a consumer made anew.

        Raises:
            FetchStalledError: too many deaths of late.
        """
        self._seams.off |= self._restarts.died(cause, what)
        await self._renew()

    async def _renew(self) -> None:
        """Replace the consumer (and the reader of its client) with new ones, started, assigned
        the same partitions from the positions held, the same ones held; the old ones closed.

        Raises:
            BrokerError: the new consumer could not start (the old one stays, its death known).
        """
        consumer, reader = self._build()
        sessions = self._sessions
        await self._start(consumer, reader)
        old = self._consumer, self._reader, sessions
        self._consumer, self._reader = consumer, reader
        positions = {partition: self._positions[partition] for partition in self._assigned}
        held = self._held
        self._assigned = frozenset()
        self._held = frozenset()
        self.assign(positions)
        self.hold(held)
        self._empty_since = None
        # Shielded: the old consumer is closed even when the fetch is cancelled meanwhile. Its
        # look-ups end first (within a bound); then its close bounds itself.
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(2 * (self._max_wait + 1)):
                await self._look_ups.ended(old[1])
            await self._close(*old)
