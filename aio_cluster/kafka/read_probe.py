"""ReadProbe: whether partitions' leaders let this client read them now, asked with a Fetch.

A member that marked partitions unreadable probes them to learn when it may take them back
(`aio_cluster.member.protocol.marks`). The probe must need what consuming needs: a ListOffsets
request needs only the topic's Describe ACL, so a principal whose Read ACL was revoked would
have it answered, take its partitions back and be refused again, over and over. So the probe is
a Fetch of each partition, the request consuming sends, authorized as it is: one request per
leader, at once, ``max_wait`` 0 (answered at once), a few bytes at most, on the client's second
connection to each broker (not behind a fetch long-polling for records). No records are read
from the answer and no position moves: only the partitions' error codes count.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition as KafkaPartition
from aiokafka.client import ConnectionGroup
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    OffsetOutOfRangeError,
    TopicAuthorizationFailedError,
    for_code,
)
from aiokafka.protocol.fetch import FetchRequest

from ..concurrency import settle

__all__ = ["ReadAnswer", "ReadProbe"]

_MAX_BYTES = 1
"""The bytes the probe asks for: the broker sends at most one record batch past it (KIP-74)."""

_REFUSALS = (TopicAuthorizationFailedError, ClusterAuthorizationFailedError)
"""The errors by which a leader refuses the read itself."""

_READ = (OffsetOutOfRangeError,)
"""Errors a leader answers only once it let the read in: the authorization is checked first."""


@dataclass(frozen=True)
class ReadAnswer:
    """A leader's answer to the probe of one partition.

    Attributes:
        broker: the node id of the leader that answered.
        refused: None: it let the member read the partition; else the error by which it
            refused (Kafka's error, by name, as `ReadRefusedError.error`).
    """

    broker: int
    refused: str | None


class ReadProbe:
    """Fetches partitions once each, through a client its owner started (see the module)."""

    def __init__(
        self,
        client: Any,
        *,
        isolation: int,
        refresh: Callable[[Collection[str]], Awaitable[None]],
    ) -> None:
        """Args:
        client: the aiokafka client (``AIOKafkaClient``) to ask through.
        isolation: the Fetch's isolation level (1: read_committed), the member's own.
        refresh: follows the topics given and refreshes the client's metadata (raising
            `BrokerError` when it cannot): called when a leader is unknown or moved.
        """
        self._client = client
        self._isolation = isolation
        self._refresh = refresh

    async def ask(self, offsets: Mapping[KafkaPartition, int]) -> dict[KafkaPartition, ReadAnswer]:
        """Fetch each partition of ``offsets`` (partition -> offset to fetch at) from its leader.

        A partition is left out of the answer when its leader is not known or the request to
        it failed, or when the leader answered with another error (it moved, say): nothing is
        known of the read yet. A stale leadership refreshes the metadata for the next probe.

        Raises:
            BrokerError: the metadata could not be refreshed.
        """
        cluster = self._client.cluster
        by_leader: dict[int, dict[str, list[tuple[int, int, int]]]] = collections.defaultdict(
            lambda: collections.defaultdict(list)
        )
        stale: set[str] = set()
        for tp, offset in offsets.items():
            leader = cluster.leader_for_partition(tp)
            if leader is None or leader < 0:
                stale.add(tp.topic)
                continue
            by_leader[leader][tp.topic].append((tp.partition, max(offset, 0), _MAX_BYTES))
        answers = await settle(
            functools.partial(self._fetch_from, node, asked) for node, asked in by_leader.items()
        )
        found: dict[KafkaPartition, ReadAnswer] = {}
        for answer in answers:
            if isinstance(answer, Exception):
                continue  # no answer from that leader: its partitions are probed again
            for tp, code in answer[1].items():
                error = for_code(code) if code else None
                if error is None or issubclass(error, _READ):
                    found[tp] = ReadAnswer(answer[0], None)
                elif issubclass(error, _REFUSALS):
                    found[tp] = ReadAnswer(answer[0], error.__name__)
                elif error.invalid_metadata:
                    stale.add(tp.topic)
        if stale:
            await self._refresh(stale)
        return found

    async def _fetch_from(
        self, node: int, asked: Mapping[str, list[tuple[int, int, int]]]
    ) -> tuple[int, dict[KafkaPartition, int]]:
        """One Fetch request to ``node``: the node and each partition's error code.

        Raises:
            KafkaError: the request failed, or the answer has an error of its own.
        """
        request = FetchRequest(0, 0, _MAX_BYTES, self._isolation, list(asked.items()))
        answer = await self._client.send(node, request, group=ConnectionGroup.COORDINATION)
        if code := getattr(answer, "error_code", 0):  # the request's own (v7 and later)
            raise for_code(code)(f"fetch probe to broker {node}")
        codes: dict[KafkaPartition, int] = {}
        for topic, partitions in answer.topics:
            for partition, code, *_rest in partitions:
                codes[KafkaPartition(topic, partition)] = code
        return node, codes
