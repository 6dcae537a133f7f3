"""Incremental fetch sessions (Kafka's KIP-227) for the fetcher's aiokafka consumer.

aiokafka sends full fetches only: each request names every partition the member fetches from the
broker, and each response names them all again, with or without records. An idle member of a
hundred partitions encodes and decodes both twice a second (one per ``max_wait``): most of the
CPU it spends at rest.

In a session the broker keeps the partitions and their fetch offsets of the last request. So a
request names only the partitions new to the session or whose offset or size changed since, and
the partitions to forget (the member's set is always exactly what aiokafka asked to fetch); a
response names only the partitions with records, an error, or a changed log end or start. aiokafka
still gets the whole list of what it asked for, and reads the response as ever.

A session lives on one broker (a `FetchSession` per node). The first request of one is full, at
epoch 0 (closing the session before it, if any), and the broker answers with its id; each request
after it takes the next epoch. A request is taken as sent once it is written (aiokafka builds it
right before), even if its response never comes to aiokafka (the fetch was cancelled by a new
assignment): the broker reads it all the same, on that connection before the next. Whatever
breaks the sequence (the broker forgot the session, an epoch was lost with a connection) makes
the broker answer with a session error and no partition: the session starts again with a full
request, so nothing is skipped, only a round trip spent. A new aiokafka assignment (a member
that gains partitions) starts new sessions too: it makes every partition's state again, and only
a full answer tells each its log end. A broker too old for sessions (before fetch version 7) gets
aiokafka's own requests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.protocol.fetch import FetchRequest

__all__ = ["FetchSession", "FetchSessions", "Partitions", "Wire"]

Partitions = list[tuple[str, list[tuple[int, int, int]]]]
"""aiokafka's fetch list: topic -> [(partition, fetch offset, max bytes)]."""

_INITIAL_EPOCH = 0
"""A request's epoch that opens a session (closing the one its session id names, if any)."""
_MAX_EPOCH = 2**31 - 1
_SESSION_VERSION = 7
"""The first fetch version with sessions."""


@dataclass(frozen=True)
class Wire:
    """What one fetch request carries of a session."""

    session_id: int
    epoch: int
    topics: Partitions
    """The partitions new to the session, or whose offset or size changed."""
    forgotten: list[tuple[str, list[int]]]
    """The partitions the session drops."""


@dataclass
class FetchSession:
    """The incremental fetch session with one broker: pure state, no I/O."""

    session_id: int = 0
    """The session's id; while `opening`, the one the opening request closes (0: none)."""
    epoch: int = _INITIAL_EPOCH
    opening: bool = True
    """The next request opens a session, in full."""
    sent: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    """(topic, partition) -> (fetch offset, max bytes), as the broker holds them."""

    def next(self, partitions: Partitions) -> Wire:
        """The request that makes the broker fetch exactly ``partitions``; taken as sent."""
        wanted = {
            (topic, partition): (offset, size)
            for topic, entries in partitions
            for partition, offset, size in entries
        }
        if self.opening:
            # Everything, in full, at the initial epoch: the broker closes the session named
            # (if any) and answers with a new one's id.
            self.epoch = _INITIAL_EPOCH
            self.sent = wanted
            return Wire(self.session_id, _INITIAL_EPOCH, partitions, [])
        changed: dict[str, list[tuple[int, int, int]]] = {}
        for (topic, partition), (offset, size) in wanted.items():
            if self.sent.get((topic, partition)) != (offset, size):
                changed.setdefault(topic, []).append((partition, offset, size))
        forgotten: dict[str, list[int]] = {}
        for topic, partition in self.sent:
            if (topic, partition) not in wanted:
                forgotten.setdefault(topic, []).append(partition)
        epoch = self.epoch
        self.epoch = 1 if epoch == _MAX_EPOCH else epoch + 1
        self.sent = wanted
        return Wire(self.session_id, epoch, list(changed.items()), list(forgotten.items()))

    def answered(self, session_id: int, error_code: int) -> None:
        """The broker answered a request of this session: with an error (it forgot the
        session, or an epoch went missing) the next request opens a new one."""
        if error_code:
            self.reset()
        elif self.opening:
            # The answer to an opening request. An id of 0: the broker keeps no session for us
            # now (its cache is full), and the next request asks again.
            self.session_id = session_id
            self.opening = session_id == 0
            self.epoch = 1

    def reset(self) -> None:
        """The next request opens a new session, in full (closing this one)."""
        self.opening = True
        self.epoch = _INITIAL_EPOCH
        self.sent = {}


class _SessionFetchRequest(FetchRequest):  # type: ignore[misc]  # aiokafka is untyped here
    """aiokafka's fetch request, sent within a session: aiokafka reads ``topics`` (every
    partition asked) for the response, the broker gets the session's `Wire`."""

    def __init__(self, request: Any, session: FetchSession) -> None:
        super().__init__(
            request._max_wait_ms,
            request._min_bytes,
            request._max_bytes,
            request._isolation_level,
            request.topics,
            rack_id=request._rack_id,
        )
        self.session = session

    def build(self, request_struct_class: Any) -> Any:
        if request_struct_class.API_VERSION < _SESSION_VERSION:
            return super().build(request_struct_class)
        wire = self.session.next(self.topics)
        built = FetchRequest(
            self._max_wait_ms,
            self._min_bytes,
            self._max_bytes,
            self._isolation_level,
            wire.topics,
            rack_id=self._rack_id,
        ).build(request_struct_class)
        built.__dict__.update(
            session_id=wire.session_id,
            session_epoch=wire.epoch,
            forgotten_topics_data=wire.forgotten,
        )
        return built


class FetchSessions:
    """A session per broker for one aiokafka consumer's background fetch (see the module).

    aiokafka has no public hook for either step: the fetch requests are wrapped as its fetcher
    makes them, and the answers seen as its client returns them.
    """

    def __init__(self) -> None:
        self._sessions: dict[int, FetchSession] = {}
        self._assignment: Any = None
        """aiokafka's assignment the sessions were made for."""

    def install(self, fetcher: Any, client: Any) -> None:
        """Send ``fetcher``'s requests (aiokafka's) within sessions, through ``client``."""
        actions: Callable[[Any], tuple[Any, ...]] = fetcher._get_actions_per_node

        def with_sessions(assignment: Any) -> tuple[Any, ...]:
            if assignment is not self._assignment:
                # A new assignment makes every partition's state again in aiokafka, its log
                # end unknown: a session's answers would name only the partitions that
                # changed. New sessions answer the first time in full.
                self._assignment = assignment
                for session in self._sessions.values():
                    session.reset()
            fetches, *rest = actions(assignment)
            return (self.wrap(fetches), *rest)

        fetcher._get_actions_per_node = with_sessions
        client.send = self.watching(client.send)

    def wrap(self, fetches: Iterable[tuple[int, Any]]) -> list[tuple[int, Any]]:
        """Each (node, request) with the request sent within the node's session."""
        return [
            (node, _SessionFetchRequest(request, self.session(node))) for node, request in fetches
        ]

    def session(self, node: int) -> FetchSession:
        """The session with broker ``node`` (made on first use)."""
        found = self._sessions.get(node)
        if found is None:
            found = self._sessions[node] = FetchSession()
        return found

    def watching(self, send: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        """``send`` that tells a session's requests' answers to the session: a failed send may
        have lost the request or its answer, so the session starts again."""

        async def sent(node_id: int, request: Any, **options: Any) -> Any:
            if not isinstance(request, _SessionFetchRequest):
                return await send(node_id, request, **options)
            try:
                response = await send(node_id, request, **options)
            except Exception:
                request.session.reset()
                raise
            if response.API_VERSION >= _SESSION_VERSION:
                request.session.answered(response.session_id, response.error_code)
            return response

        return sent
