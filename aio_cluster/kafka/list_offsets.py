"""ListOffsets: partitions' offsets at a time (the first, the log end, the first at a
timestamp), asked of their leaders through an aiokafka client.

One request per leader, at once, on the client's second connection to each broker (aiokafka's
coordination group): on the first one the broker answers the fetches, in order, so a look-up
there would wait behind a fetch long-polling for records. Stale leadership refreshes the metadata
and asks again, within the request timeout. aiokafka's own look-ups go on the fetching
connection, so the [OffsetReader][aio_cluster.kafka.offset_reader.OffsetReader] asks here.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import anyio
from aiokafka import TopicPartition as KafkaPartition
from aiokafka.client import ConnectionGroup
from aiokafka.errors import (
    KafkaError,
    LeaderNotAvailableError,
    StaleMetadata,
    UnsupportedForMessageFormatError,
    for_code,
)
from aiokafka.protocol.offset import OffsetRequest

from ..concurrency import settle
from ..errors import BrokerError

__all__ = ["EARLIEST", "LATEST", "Found", "ListOffsets", "known"]

_OFFSET_NOT_AVAILABLE = 78
"""Kafka's error code OFFSET_NOT_AVAILABLE (a new leader does not know its log end yet): Kafka
calls it retriable; aiokafka does not know the code."""

EARLIEST = -2
LATEST = -1
"""ListOffsets' timestamps for a partition's first offset and its log end."""

Found = tuple[int, int | None]
"""A ListOffsets answer for one partition: its offset (-1: none), and the record's timestamp."""


class ListOffsets:
    """Asks partitions' offsets of their leaders, through a client its owner started."""

    def __init__(
        self,
        client: Any,
        *,
        backoff: float,
        isolation: int,
        timeout: float,
        refresh: Callable[[Collection[str]], Awaitable[None]],
    ) -> None:
        """Args:
        client: the aiokafka client (``AIOKafkaClient``) to ask through.
        backoff: seconds between tries (the client's own retry backoff).
        isolation: ListOffsets' isolation level (1, read_committed: a log end is the last
            stable offset).
        timeout: seconds to go on asking, the retries included.
        refresh: follows the topics given and refreshes the client's metadata (raising
            `BrokerError` when it cannot): called on stale leadership.
        """
        self._client = client
        self._backoff = backoff
        self._isolation = isolation
        self._timeout = timeout
        self._refresh = refresh

    async def ask(self, timestamps: Mapping[KafkaPartition, int]) -> dict[Any, Found]:
        """ListOffsets of ``timestamps`` (partition -> timestamp, or -2 / -1 for the first offset
        and the log end); a partition Kafka has no answer for is left out.

        Stale leadership (a leader unknown or moved, a topic the metadata does not have yet)
        refreshes the metadata and asks again; any retriable error is asked again, within the
        request timeout.

        Raises:
            BrokerError: a partition's error that asking again does not mend, or no answer within
                the request timeout.
        """
        backoff = self._backoff
        last: KafkaError | None = None
        try:
            with anyio.fail_after(self._timeout):
                while True:
                    try:
                        return await self._offsets_once(timestamps)
                    except KafkaError as exc:
                        if not exc.retriable:
                            raise BrokerError(f"offset request failed: {exc}") from exc
                        last = exc
                        if exc.invalid_metadata:
                            try:
                                await self._refresh({tp.topic for tp in timestamps})
                            except BrokerError as failed:
                                last = KafkaError(str(failed))
                    await anyio.sleep(backoff)
        except TimeoutError:
            raise BrokerError(
                f"offset request failed: no answer within {self._timeout:g} s"
                + ("" if last is None else f" (last: {last})")
            ) from last

    async def _offsets_once(self, timestamps: Mapping[KafkaPartition, int]) -> dict[Any, Found]:
        """One ListOffsets request per leader, at once.

        Raises:
            KafkaError: the first failure, a stale leadership before any other.
        """
        cluster = self._client.cluster
        by_leader: dict[int, dict[str, list[tuple[int, int]]]] = collections.defaultdict(
            lambda: collections.defaultdict(list)
        )
        for tp, timestamp in timestamps.items():
            leader = cluster.leader_for_partition(tp)
            if leader is None:
                raise StaleMetadata(_name(tp.topic, tp.partition) + " is not in the metadata")
            if leader == -1:
                raise LeaderNotAvailableError(_name(tp.topic, tp.partition) + " has no leader")
            by_leader[leader][tp.topic].append((tp.partition, timestamp))
        # In a task group (see aio_cluster.concurrency): cut short by `ask`'s bound, asyncio's
        # gather raised a CancelledError that the bound let through.
        answers = await settle(
            functools.partial(self._offsets_from, node, asked) for node, asked in by_leader.items()
        )
        failures = [answer for answer in answers if isinstance(answer, Exception)]
        if failures:
            stale = [f for f in failures if getattr(f, "invalid_metadata", False)]
            raise (stale or failures)[0]
        found: dict[Any, Found] = {}
        for answer in answers:
            assert not isinstance(answer, Exception)
            found.update(answer)
        return found

    async def _offsets_from(
        self, node: int, asked: Mapping[str, list[tuple[int, int]]]
    ) -> dict[Any, Found]:
        """One ListOffsets request to ``node``, on its second connection (not behind a fetch).

        Raises:
            KafkaError: the request failed, or a partition's error (the first one).
        """
        request = OffsetRequest(-1, self._isolation, list(asked.items()))
        answer = await self._client.send(node, request, group=ConnectionGroup.COORDINATION)
        found: dict[Any, Found] = {}
        for topic, partitions in answer.topics:
            for partition, code, *rest in partitions:
                if code == _OFFSET_NOT_AVAILABLE:
                    raise StaleMetadata(_name(topic, partition) + ": OFFSET_NOT_AVAILABLE")
                error = for_code(code)
                if error is UnsupportedForMessageFormatError:
                    continue  # no timestamps in this log: no offset found (as aiokafka does)
                if code:
                    raise error(_name(topic, partition))
                if answer.API_VERSION == 0:
                    offsets = rest[0]
                    found[KafkaPartition(topic, partition)] = (
                        int(offsets[0]) if offsets else -1,
                        None,
                    )
                else:
                    timestamp, offset = rest[:2]
                    found[KafkaPartition(topic, partition)] = (int(offset), int(timestamp))
        return found


def _name(topic: str, partition: int) -> str:
    return f"partition {partition} of topic {topic!r}"


def known(found: Mapping[Any, Found], tp: KafkaPartition) -> int:
    """The offset Kafka answered for ``tp``.

    Raises:
        BrokerError: it gave none.
    """
    offset = found.get(tp, (-1, None))[0]
    if offset < 0:
        raise BrokerError(f"offset request failed: no offset of {_name(tp.topic, tp.partition)}")
    return offset
