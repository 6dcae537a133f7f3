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

The broker keeps a session until it is closed or evicted, in a cache of its own
(``max.incremental.fetch.session.cache.slots``, 1,000 by default) shared by every client of the
broker: a session left behind takes a slot another client's session needs. So every session the
broker made for us is closed: by the next opening request (which names it), or by
`FetchSessions.close()` when the fetcher stops (on the client's second connection, not to
wait behind a long-polling fetch). Answers are read even for requests aiokafka gave up
on (it cancels its fetches at every new assignment): an opening request's answer is the only
place the new session's id appears.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
from aiokafka import errors
from aiokafka.client import ConnectionGroup
from aiokafka.protocol.fetch import FetchRequest

from ..concurrency import background, detached, gather, settled
from .seams import Actions, actions_hook, fetch_fields

__all__ = ["FetchSession", "FetchSessions", "Partitions", "Stage", "Wire"]

log = logging.getLogger(__name__)

Partitions = list[tuple[str, list[tuple[int, int, int]]]]
"""aiokafka's fetch list: topic -> [(partition, fetch offset, max bytes)]."""

_INITIAL_EPOCH = 0
"""A request's epoch that opens a session (closing the one its session id names, if any)."""
_FINAL_EPOCH = -1
"""A request's epoch that opens no session (closing the one its session id names, if any)."""
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


class Stage(enum.Enum):
    """Where a `FetchSession` stands with its broker."""

    OPENING = "the next request opens a session"
    PENDING = "an opening request is out: its answer names the session"
    OPEN = "requests are incremental"


@dataclass
class FetchSession:
    """The incremental fetch session with one broker: pure state, no I/O.

    ``OPENING`` --next()--> ``PENDING`` --answered(id)--> ``OPEN`` --reset(), an error-->
    ``OPENING``. A ``PENDING`` opening that fails, or whose answer names no session, goes back
    to ``OPENING``. While ``PENDING`` (aiokafka sends again once it gave up on the opening
    request), and once closed, requests open no session: the broker fetches as for aiokafka's own
    requests. A reset while ``PENDING`` makes the coming session stale: its id is kept for the next
    opening request to close. Closed is for good: `closing()` gives the request that closes the
    session the broker holds.
    """

    session_id: int = 0
    """The session the broker holds for us (0: none known); the next opening request closes it."""
    epoch: int = _INITIAL_EPOCH
    """The epoch of the next incremental request."""
    stage: Stage = Stage.OPENING
    sent: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    """(topic, partition) -> (fetch offset, max bytes), as the broker holds them."""
    opening: Wire | None = None
    """The opening request out, while ``PENDING``."""
    stale: bool = False
    """The ``PENDING`` opening's session is to be closed, not used."""
    closed: bool = False
    """No session is opened any more (see `close()`)."""

    def next(self, partitions: Partitions) -> Wire:
        """The request that makes the broker fetch exactly ``partitions``; taken as sent."""
        if self.closed or self.stage is Stage.PENDING:
            # A request outside any session, as aiokafka's own: id 0 at the final epoch.
            return Wire(0, _FINAL_EPOCH, partitions, [])
        wanted = {
            (topic, partition): (offset, size)
            for topic, entries in partitions
            for partition, offset, size in entries
        }
        if self.stage is Stage.OPENING:
            # Everything, in full, at the initial epoch: the broker closes the session named
            # (if any) and answers with a new one's id.
            self.stage, self.stale, self.sent = Stage.PENDING, False, wanted
            self.opening = Wire(self.session_id, _INITIAL_EPOCH, partitions, [])
            return self.opening
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

    def answered(self, wire: Wire, session_id: int, error_code: int) -> None:
        """The broker answered the request that carried ``wire``, naming ``session_id``.

        The answer to the opening request names the new session (0: the broker keeps none for
        us now, its cache is full, and the next request asks again). An error in the open
        session's answer (the broker forgot the session, or an epoch went missing) makes the next
        request open a new one. Answers to requests outside the session are no news.
        """
        if wire is self.opening:
            # The opening request closed `session_id` before making this one.
            self.session_id = session_id
            self.opening = None
            if error_code or session_id == 0 or self.stale or self.closed:
                self._reopen()
            else:
                self.stage, self.epoch = Stage.OPEN, 1
        elif error_code and self._carried_by(wire):
            self.reset()

    def failed(self, wire: Wire) -> None:
        """The request that carried ``wire`` or its answer was lost (the connection broke): the
        broker's session, if any, went out of step, and the next request opens a new one. A lost
        opening request's session cannot be closed, its id unknown: the broker evicts it once
        idle and short of room."""
        if wire is self.opening:
            self.opening = None
            self._reopen()
        elif self._carried_by(wire):
            self.reset()

    def reset(self) -> None:
        """The next request opens a new session, in full (closing this one); while ``PENDING``,
        the session coming is closed by that request."""
        if self.stage is Stage.PENDING:
            self.stale = True
        else:
            self._reopen()

    def close(self) -> None:
        """Open no session from now on: each request is outside any session."""
        self.closed = True

    def closing(self) -> Wire | None:
        """The request that closes the session the broker holds, if one is known (taken as sent:
        the session is forgotten). Ask once no opening request is ``PENDING``: its session is
        not known yet."""
        if self.session_id == 0 or self.stage is Stage.PENDING:
            return None
        wire = Wire(self.session_id, _FINAL_EPOCH, [], [])
        self.session_id = 0
        self._reopen()
        return wire

    def _carried_by(self, wire: Wire) -> bool:
        """Whether ``wire`` is an incremental request of the open session."""
        return self.stage is Stage.OPEN and wire.session_id == self.session_id and wire.epoch > 0

    def _reopen(self) -> None:
        self.stage, self.epoch, self.sent, self.stale = Stage.OPENING, _INITIAL_EPOCH, {}, False


def _with_session(built: Any, wire: Wire) -> Any:
    """``built`` (a fetch request struct of a version with sessions) carrying ``wire``."""
    built.__dict__.update(
        session_id=wire.session_id,
        session_epoch=wire.epoch,
        forgotten_topics_data=wire.forgotten,
    )
    return built


def _record_bytes(response: Any) -> int:
    """The bytes of the record batches in a fetch answer (each partition's last field)."""
    return sum(len(part[-1] or b"") for _topic, parts in response.topics for part in parts)


class _SessionFetchRequest(FetchRequest):  # type: ignore[misc]  # aiokafka is untyped here
    """aiokafka's fetch request, sent within a session: aiokafka reads ``topics`` (every
    partition asked) for the response, the broker gets the session's `Wire`."""

    def __init__(self, request: Any, session: FetchSession) -> None:
        self.fields = max_wait, min_bytes, max_bytes, isolation, rack = fetch_fields(request)
        super().__init__(max_wait, min_bytes, max_bytes, isolation, request.topics, rack_id=rack)
        self.session = session
        self.wire: Wire | None = None
        """What the request carried of the session, once built (None: nothing)."""

    def build(self, request_struct_class: Any) -> Any:
        if request_struct_class.API_VERSION < _SESSION_VERSION:
            return super().build(request_struct_class)
        self.wire = wire = self.session.next(self.topics)
        max_wait, min_bytes, max_bytes, isolation, rack = self.fields
        built = FetchRequest(
            max_wait, min_bytes, max_bytes, isolation, wire.topics, rack_id=rack
        ).build(request_struct_class)
        return _with_session(built, wire)


class _ClosingFetchRequest(FetchRequest):  # type: ignore[misc]  # aiokafka is untyped here
    """A fetch of no partition that closes a session (its `Wire` from `FetchSession.closing`):
    the broker answers it at once."""

    def __init__(self, wire: Wire) -> None:
        super().__init__(0, 1, 1, 0, [])
        self.wire = wire

    def build(self, request_struct_class: Any) -> Any:
        built = super().build(request_struct_class)
        if request_struct_class.API_VERSION < _SESSION_VERSION:
            return built
        return _with_session(built, self.wire)


def _outcome(request: Any, response: Any) -> tuple[list[tuple[str, int]], list[str]]:
    """What a session's answer tells of the partitions ``request`` asked (aiokafka's, every one
    in ``topics``): those answered without an error, and the errors named (the session's own
    error, when it has one, fails every partition)."""
    if response.error_code:
        return [], [f"fetch session error {response.error_code}"]
    failed = {
        (topic, partition): errors.for_code(error_code).__name__
        for topic, partitions in response.topics
        for partition, error_code, *_rest in partitions
        if error_code
    }
    answered = [
        (topic, partition)
        for topic, partitions in request.topics
        for partition, *_rest in partitions
        if (topic, partition) not in failed
    ]
    return answered, list(failed.values())


class FetchSessions:
    """A session per broker for one aiokafka consumer's background fetch (see the module).

    aiokafka has no public hook for either step: the fetch requests are wrapped as its fetcher
    makes them, and the answers seen as its client returns them.
    """

    def __init__(self, fetched: collections.Counter[int] | None = None) -> None:
        """``fetched``: the count to add the bytes to (a fetcher's, kept across the sessions
        of its renewed consumers); a new one by default."""
        self.fetched: collections.Counter[int] = (
            collections.Counter() if fetched is None else fetched
        )
        """Broker node id -> the record bytes its answers brought (those to fetches given up
        on too: they crossed the network all the same), what a member in a rack reads from
        each broker."""
        self._sessions: dict[int, FetchSession] = {}
        self._assignment: Any = None
        """aiokafka's assignment the sessions were made for."""
        self._client: Any = None
        self._sends: dict[asyncio.Future[Any], _SessionFetchRequest] = {}
        """The session requests whose answers are still to come."""
        self._closed = False
        """Set by `close()`: requests from then on open no session and are sent unshielded."""
        self.answered: Callable[[list[tuple[str, int]], list[str]], None] | None = None
        """Told of each answer within a session, if set: the partitions it answered without
        an error (an answer names only the partitions that changed, so every partition asked
        that it leaves out was answered too), and the errors it names (the fetcher's
        progress)."""

    def install(self, fetcher: Any, client: Any) -> None:
        """Send ``fetcher``'s requests (aiokafka's) within sessions, through ``client``."""

        def hooked(actions: Actions) -> Actions:
            def with_sessions(assignment: Any) -> tuple[Any, ...]:
                if assignment is not self._assignment:
                    # A new assignment makes every partition's state again in aiokafka, its
                    # log end unknown: a session's answers would name only the partitions that
                    # changed. New sessions answer the first time in full.
                    self._assignment = assignment
                    for session in self._sessions.values():
                        session.reset()
                fetches, *rest = actions(assignment)
                return (self.wrap(fetches), *rest)

            return with_sessions

        actions_hook(fetcher, hooked)
        self._client = client
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
        """``send`` that tells a session's requests' answers to the session, even the answers to
        requests whose sender was cancelled meanwhile (the send goes on, shielded, until its
        answer comes or its connection fails)."""

        async def sent(node_id: int, request: Any, **options: Any) -> Any:
            if not isinstance(request, _SessionFetchRequest) or self._closed:
                # Once closed, nothing is learned from an answer: a send cancelled with its
                # fetch ends with it, and none outlives the client's closing.
                return await send(node_id, request, **options)

            async def send_it() -> Any:
                response = await send(node_id, request, **options)
                self.fetched[node_id] += _record_bytes(response)
                return response

            sending = background(send_it(), name="fetch session send")
            self._sends[sending] = request
            sending.add_done_callback(functools.partial(self._settled, request))
            return await detached(sending)

        return sent

    def _settled(self, request: _SessionFetchRequest, sending: asyncio.Future[Any]) -> None:
        del self._sends[sending]
        wire = request.wire
        if wire is None:
            return  # never written, or outside sessions (an old broker)
        if sending.cancelled() or sending.exception() is not None:
            request.session.failed(wire)
        else:
            response = sending.result()
            request.session.answered(wire, response.session_id, response.error_code)
            if self.answered is not None:
                self.answered(*_outcome(request, response))

    async def close(self, timeout: float) -> None:
        """Close the sessions the brokers hold for us, within ``timeout`` seconds; call it while
        the client is still connected (before the consumer stops). From now on no request
        opens a session. The answers to opening requests still out are awaited first: they name
        sessions to close (a broker makes an opening request's session as it answers it). The
        closing requests ride the client's second connection to each broker (the look-ups'):
        on the fetches' own one each would wait behind the long-polling fetch, up to its
        ``max_wait``, since a broker answers a connection in order. A broker takes a session's
        close on any connection, at once, and the fetch still waiting there ends without it.
        Where that connection is not open it is opened here; cut short by the bound, aiokafka
        closes it again (its opening closes what it made when cancelled), and the task group
        has ended it before the consumer stops. A broker that does not answer in time keeps its
        session until it evicts it; errors are logged, never raised: a stop goes on whatever the
        brokers do.
        """
        self._closed = True
        for session in self._sessions.values():
            session.close()
        # In a task group (see aio_cluster.concurrency): cut short by the bound, asyncio's
        # gather, when a closing request finished anyway, raised a CancelledError that the
        # bound let through, and the consumer's stop after it never ran.
        with anyio.move_on_after(timeout) as scope:
            await settled(
                sending
                for sending, request in self._sends.items()
                if request.wire is not None and request.wire is request.session.opening
            )
            await gather(
                functools.partial(self._close_one, node, wire)
                for node, session in self._sessions.items()
                if (wire := session.closing()) is not None
            )
        if scope.cancelled_caught:
            log.info("fetch sessions not all closed within %gs: the brokers evict them", timeout)

    async def abandon(self) -> None:
        """Cancel the session requests still out, once `close()` ended: their answers name no
        session to close any more (those of the opening requests were awaited there), and an
        idle fetch's would come only after its ``max_wait``. Before the client closes: a
        shielded send that outlived the client could open a connection nobody closes
        (aiokafka's connecting is safe to cancel)."""
        pending = [sending for sending in self._sends if not sending.done()]
        for sending in pending:
            sending.cancel()
        await settled(pending)

    async def _close_one(self, node: int, wire: Wire) -> None:
        try:
            response = await self._client.send(
                node, _ClosingFetchRequest(wire), group=ConnectionGroup.COORDINATION
            )
        except Exception as exc:  # a stop goes on whatever the broker does
            log.info("fetch session %d on broker %d not closed: %r", wire.session_id, node, exc)
            return
        if response.error_code:
            log.info(
                "fetch session %d on broker %d not closed: error %d",
                wire.session_id,
                node,
                response.error_code,
            )
