"""Incremental fetch sessions: the pure state of one (what a request carries, when a session
starts again), and the fetcher's sessions against the real broker (idle fetches name no
partition, a session the broker refuses starts again, every record is read once)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import struct
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
import pytest_asyncio
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import AIOKafkaConnection
from aiokafka.protocol.fetch import FetchRequest

from aio_cluster.kafka.fetch_sessions import FetchSession, FetchSessions, Partitions, Stage, Wire
from aio_cluster.kafka.fetcher import Fetcher
from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.local import LocalCluster

from conftest import MakeTopic, Produce
from support import fetcher_of, fresh, wait_until

INVALID_FETCH_SESSION_EPOCH = 71


def opened(session: FetchSession, partitions: Partitions, session_id: int) -> None:
    """``session`` opens with ``partitions``, the broker answering ``session_id``."""
    session.answered(session.next(partitions), session_id, 0)


def test_a_session_opens_in_full_then_names_only_what_changed() -> None:
    session = FetchSession()
    opening = session.next([("t", [(0, 5, 100), (1, 7, 100)])])
    assert opening == Wire(0, 0, [("t", [(0, 5, 100), (1, 7, 100)])], [])
    session.answered(opening, 42, 0)

    same = session.next([("t", [(1, 7, 100), (0, 5, 100)])])
    assert same == Wire(42, 1, [], []), "nothing changed: the request names no partition"

    moved = session.next([("t", [(0, 9, 100), (1, 7, 100)]), ("u", [(3, 0, 100)])])
    assert moved == Wire(42, 2, [("t", [(0, 9, 100)]), ("u", [(3, 0, 100)])], [])

    resized = session.next([("t", [(0, 9, 50)]), ("u", [(3, 0, 100)])])
    assert resized == Wire(42, 3, [("t", [(0, 9, 50)])], [("t", [1])])

    assert session.next([]) == Wire(42, 4, [], [("t", [0]), ("u", [3])])
    back = session.next([("t", [(1, 7, 100)])])
    assert back == Wire(42, 5, [("t", [(1, 7, 100)])], []), "a partition forgotten comes back"


def test_an_error_opens_a_new_session_in_full() -> None:
    session = FetchSession()
    opened(session, [("t", [(0, 5, 100)])], 42)
    wire = session.next([("t", [(0, 6, 100)])])
    session.answered(wire, 42, INVALID_FETCH_SESSION_EPOCH)
    reopening = session.next([("t", [(0, 6, 100)])])
    assert reopening == Wire(42, 0, [("t", [(0, 6, 100)])], []), "closes 42, opens another"
    session.answered(reopening, 43, 0)
    assert session.next([("t", [(0, 6, 100)])]) == Wire(43, 1, [], [])


def test_a_broker_that_keeps_no_session_is_asked_again_in_full() -> None:
    session = FetchSession()
    opened(session, [("t", [(0, 5, 100)])], 0)  # its session cache is full
    assert session.next([("t", [(0, 5, 100)])]) == Wire(0, 0, [("t", [(0, 5, 100)])], [])


def test_the_epoch_wraps_to_one() -> None:
    session = FetchSession(session_id=42, epoch=2**31 - 1, stage=Stage.OPEN)
    assert session.next([]).epoch == 2**31 - 1
    assert session.next([]).epoch == 1


def test_while_an_opening_is_out_requests_are_outside_any_session() -> None:
    """aiokafka sends again once it gave up on the opening request: that request opens no
    session, and the session, once answered, goes on from what the opening request named."""
    session = FetchSession()
    opening = session.next([("t", [(0, 5, 100)])])
    outside = session.next([("t", [(0, 5, 100), (1, 0, 100)])])
    assert outside == Wire(0, -1, [("t", [(0, 5, 100), (1, 0, 100)])], [])
    session.answered(outside, 0, 0)
    assert session.stage is Stage.PENDING, "the answer of a request outside is no news"
    session.answered(opening, 42, 0)
    wire = session.next([("t", [(0, 5, 100), (1, 0, 100)])])
    assert wire == Wire(42, 1, [("t", [(1, 0, 100)])], [])


def test_a_reset_while_an_opening_is_out_closes_the_session_it_makes() -> None:
    session = FetchSession()
    opening = session.next([("t", [(0, 5, 100)])])
    session.reset()  # a new assignment
    session.answered(opening, 42, 0)
    assert session.next([("t", [(1, 0, 100)])]) == Wire(42, 0, [("t", [(1, 0, 100)])], [])


def test_late_answers_of_a_session_replaced_change_nothing() -> None:
    session = FetchSession()
    opened(session, [("t", [(0, 5, 100)])], 42)
    incremental = session.next([("t", [(0, 6, 100)])])
    session.reset()
    reopening = session.next([("t", [(0, 6, 100)])])
    session.answered(incremental, 42, INVALID_FETCH_SESSION_EPOCH)
    session.answered(reopening, 43, 0)
    session.answered(incremental, 42, INVALID_FETCH_SESSION_EPOCH)
    assert session.next([("t", [(0, 6, 100)])]) == Wire(43, 1, [], [])


def test_a_lost_request_opens_a_new_session() -> None:
    session = FetchSession()
    opened(session, [("t", [(0, 5, 100)])], 42)
    session.failed(session.next([("t", [(0, 6, 100)])]))
    opening = session.next([("t", [(0, 6, 100)])])
    assert opening == Wire(42, 0, [("t", [(0, 6, 100)])], [])
    session.failed(opening)
    assert session.next([("t", [(0, 6, 100)])]) == Wire(42, 0, [("t", [(0, 6, 100)])], [])


def test_a_closed_session_opens_none_and_is_closed_once() -> None:
    session = FetchSession()
    opened(session, [("t", [(0, 5, 100)])], 42)
    session.next([("t", [(0, 6, 100)])])
    session.close()
    assert session.next([("t", [(0, 6, 100)])]) == Wire(0, -1, [("t", [(0, 6, 100)])], [])
    assert session.closing() == Wire(42, -1, [], [])
    assert session.closing() is None
    assert session.next([("t", [(0, 6, 100)])]).epoch == -1, "closed for good"


def test_a_session_opening_when_closed_is_closed_once_answered() -> None:
    session = FetchSession()
    opening = session.next([("t", [(0, 5, 100)])])
    session.close()
    assert session.closing() is None, "its id is not known yet"
    session.answered(opening, 42, 0)
    assert session.closing() == Wire(42, -1, [], [])
    assert FetchSession().closing() is None, "no session, nothing to close"


class Request:
    """aiokafka's fetch request, as far as a session reads it."""

    def __init__(self) -> None:
        self._max_wait_ms, self._min_bytes, self._max_bytes = 500, 1, 1000
        self._isolation_level, self._rack_id = 0, ""
        self.topics = [("t", [(0, 5, 100)])]


@dataclass
class Answer:
    session_id: int
    error_code: int = 0
    topics: list[tuple[str, list[tuple[Any, ...]]]] = field(default_factory=list)
    """As aiokafka reads them: each partition's record batches last (None: none)."""


@pytest.mark.asyncio
async def test_a_cancelled_senders_answer_still_reaches_its_session() -> None:
    """aiokafka cancels a fetch at each new assignment: the request was written all the same,
    and the answer to an opening one names the session the broker made."""
    sessions = FetchSessions()
    ((node, request),) = sessions.wrap([(1, Request())])
    session = sessions.session(node)
    written = asyncio.Event()
    answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()

    async def send(node_id: int, request: Any) -> Answer:
        request.wire = request.session.next(request.topics)  # as aiokafka builds it
        written.set()
        return await answer

    sender = asyncio.ensure_future(sessions.watching(send)(node, request))
    await written.wait()
    sender.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sender
    answer.set_result(Answer(42, topics=[("t", [(0, 0, 9, b"x" * 70), (1, 0, 9, None)])]))
    await asyncio.wait(list(sessions._sends))
    assert (session.stage, session.session_id) == (Stage.OPEN, 42)
    assert sessions.fetched == {1: 70}, "the records fetched from the broker are counted"

    ((node, request),) = sessions.wrap([(1, Request())])

    async def failing(node_id: int, request: Any) -> Any:
        request.wire = request.session.next(request.topics)
        raise ConnectionError("gone")

    with pytest.raises(ConnectionError):
        await sessions.watching(failing)(node, request)
    assert (session.stage, session.session_id) == (Stage.OPENING, 42), "42 closed when reopening"


KEYS = [PartitionKey(p) for p in range(6)]


class Spy:
    """What the fetcher's sessions sent (each request's `Wire`) and what the broker answered
    (each answer's error and how many partitions it named)."""

    def __init__(self, fetcher: Fetcher, monkeypatch: pytest.MonkeyPatch) -> None:
        self.wires: list[Wire] = []
        self.answers: list[tuple[int, int]] = []
        taken = FetchSession.next

        def next_(session: FetchSession, partitions: Any) -> Wire:
            wire = taken(session, partitions)
            self.wires.append(wire)
            return wire

        monkeypatch.setattr(FetchSession, "next", next_)
        self._fetcher = fetcher

    def watch(self) -> None:
        """Once the fetcher started: see the broker's answers to its fetches."""
        client = self._fetcher._consumer._client
        send = client.send

        async def watched(node_id: int, request: Any, **options: Any) -> Any:
            response = await send(node_id, request, **options)
            if hasattr(request, "session"):
                named = sum(len(partitions) for _topic, partitions in response.topics)
                self.answers.append((response.error_code, named))
            return response

        client.send = watched

    def clear(self) -> None:
        self.wires.clear()
        self.answers.clear()


async def read(fetcher: Fetcher, want: Counter[int], got: dict[int, list[int]]) -> None:
    """Fetch until each partition has ``want`` of its records in ``got``."""
    for _ in range(200):
        if all(len(got[p]) >= want[p] for p in want):
            return
        for key, records in (await fetcher.fetch(KEYS, 200)).items():
            got[key] += [record.offset for record in records]
    raise AssertionError(f"read {got} of {want}")


@pytest_asyncio.fixture
async def produced(make_topic: MakeTopic, produce: Produce) -> tuple[str, Counter[int]]:
    """A fresh topic of `KEYS`'s partitions, and how many of 300 records each got."""
    topic = await make_topic(partitions=len(KEYS))
    return topic, await produce(topic, 300)


@contextlib.asynccontextmanager
async def fetching_all(
    cluster: LocalCluster, topic: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Fetcher, Spy]]:
    """A started fetcher of every partition of ``topic`` from offset 0, a few records a fetch
    (the reading takes many fetches, each moving some offsets), and its spy."""
    fetcher = fetcher_of(cluster, topic, fresh("sessions"), max_bytes=1024)
    spy = Spy(fetcher, monkeypatch)
    await fetcher.start()
    spy.watch()
    try:
        await fetcher.partitions(topic)
        fetcher.assign(dict.fromkeys(KEYS, 0))
        yield fetcher, spy
    finally:
        await fetcher.stop()


def each_once(got: dict[int, list[int]], produced: Counter[int]) -> None:
    for p in range(len(KEYS)):
        assert got[p] == list(range(produced[p])), f"partition {p}: each record once, in order"


@pytest.mark.asyncio
async def test_idle_fetches_name_no_partition_and_every_record_is_read_once(
    cluster: LocalCluster,
    produced: tuple[str, Counter[int]],
    produce: Produce,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, counts = produced
    got: dict[int, list[int]] = {p: [] for p in range(len(KEYS))}
    async with fetching_all(cluster, topic, monkeypatch) as (fetcher, spy):
        await read(fetcher, counts, got)
        read_by = len(spy.wires)
        for _ in range(5):
            assert await fetcher.fetch(KEYS, 200) == {}
        idle, answers = spy.wires[read_by:], spy.answers[read_by:]
        assert len(answers) >= 3
        # The first may still carry the offsets the last records moved.
        assert [wire.topics for wire in idle[1:]] == [[]] * (len(idle) - 1)
        assert all(wire.forgotten == [] for wire in spy.wires)
        assert answers[1:] == [(0, 0)] * (len(answers) - 1), "answers name nothing"
        # One session throughout: opened by the first request, each next at the next epoch.
        assert [wire.epoch for wire in spy.wires] == list(range(len(spy.wires)))
        sessions = {wire.session_id for wire in spy.wires[1:]}
        assert len(sessions) == 1
        assert 0 not in sessions

        more = await produce(topic, 200, start=300)
        await read(fetcher, counts + more, got)
        each_once(got, counts + more)

        fetcher.seek(KEYS[0], 0)
        got[0] = []
        await read(fetcher, Counter({0: counts[0] + more[0]}), got)
        assert got[0] == list(range(counts[0] + more[0])), "sought back, it reads again"


@pytest.mark.asyncio
async def test_a_session_the_broker_refuses_starts_again_and_loses_no_record(
    cluster: LocalCluster,
    produced: tuple[str, Counter[int]],
    produce: Produce,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, counts = produced
    got: dict[int, list[int]] = {p: [] for p in range(len(KEYS))}
    async with fetching_all(cluster, topic, monkeypatch) as (fetcher, spy):
        await read(fetcher, Counter({p: counts[p] // 2 for p in range(len(KEYS))}), got)
        # Requests lost on the way: the broker expects an epoch the next request does not carry.
        for session in sessions_of(fetcher)._sessions.values():
            session.epoch += 3
        spy.clear()
        more = await produce(topic, 200, start=300)
        await read(fetcher, counts + more, got)
        assert (INVALID_FETCH_SESSION_EPOCH, 0) in spy.answers, "the broker refused the session"
        assert any(wire.epoch == 0 for wire in spy.wires[1:]), "a new session was opened"
        each_once(got, counts + more)


@pytest.mark.asyncio
async def test_a_new_assignment_learns_every_partitions_log_end(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce
) -> None:
    """aiokafka makes every partition's state again at a new assignment: a session answering
    only what changed would leave the log end of each idle partition unknown (the lag metrics
    read it)."""
    topic = await make_topic(partitions=len(KEYS))
    counts = await produce(topic, 100)
    fetcher = fetcher_of(cluster, topic, fresh("sessions"))
    await fetcher.start()
    try:
        await fetcher.partitions(topic)
        fetcher.assign(dict.fromkeys(KEYS[:3], 0))
        got: dict[int, list[int]] = {p: [] for p in range(len(KEYS))}
        await read(fetcher, Counter({p: counts[p] for p in range(3)}), got)
        for _ in range(3):
            await fetcher.fetch(KEYS, 200)  # idle: the session names nothing
        # A partition new to aiokafka: a whole new assignment.
        fetcher.assign({**{key: counts[key] for key in KEYS[:3]}, KEYS[3]: counts[3]})
        for _ in range(3):
            await fetcher.fetch(KEYS, 200)
        assert {key: fetcher.highwater(key) for key in KEYS[:4]} == {
            key: counts[key] for key in KEYS[:4]
        }
    finally:
        await fetcher.stop()


def sessions_of(fetcher: Fetcher) -> FetchSessions:
    """The fetcher's sessions (it has them: fetch sessions fit the installed aiokafka)."""
    sessions = fetcher._sessions
    assert sessions is not None
    return sessions


FETCH_SESSION_ID_NOT_FOUND = 70


class Witness:
    """Every fetch session the broker made for this process, read from the answers as they
    come in, the answers to cancelled requests included (aiokafka drops those unread)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made: list[int] = []
        handle = AIOKafkaConnection._handle_frame

        def handle_frame(connection: AIOKafkaConnection, frame: bytes) -> Any:
            _correlation_id, request, _future = connection._requests[0]
            if request is not None and request.API_KEY == 1 and request.API_VERSION >= 7:
                answer = io.BytesIO(frame)
                request.parse_response_header(answer)
                _throttle, _error, session_id = struct.unpack(">ihi", answer.read(10))
                if session_id and session_id not in self.made:
                    self.made.append(session_id)
            return handle(connection, frame)

        monkeypatch.setattr(AIOKafkaConnection, "_handle_frame", handle_frame)


class _Probe(FetchRequest):  # type: ignore[misc]  # aiokafka is untyped here
    """A fetch in session ``session_id`` at an epoch never reached: the broker answers
    INVALID_FETCH_SESSION_EPOCH while it holds the session (and leaves it as it was),
    FETCH_SESSION_ID_NOT_FOUND once it is closed."""

    def __init__(self, session_id: int) -> None:
        super().__init__(0, 1, 1, 0, [])
        self.session_id = session_id

    def build(self, request_struct_class: Any) -> Any:
        built = super().build(request_struct_class)
        built.session_id, built.session_epoch = self.session_id, 2**31 - 1
        return built


async def held(cluster: LocalCluster, session_ids: list[int]) -> dict[int, bool]:
    """Whether the broker holds each of ``session_ids``, asked by a client of its own."""
    client = AIOKafkaClient(bootstrap_servers=cluster.bootstrap)
    await client.bootstrap()
    try:
        (node,) = [broker.nodeId for broker in client.cluster.brokers()]
        found = {}
        for session_id in session_ids:
            error = (await client.send(node, _Probe(session_id))).error_code
            assert error in (INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_ID_NOT_FOUND)
            found[session_id] = error == INVALID_FETCH_SESSION_EPOCH
        return found
    finally:
        await client.close()


async def stop(fetcher: Fetcher) -> None:
    """Stop ``fetcher``: its sessions are closed first."""
    await fetcher.stop()


@pytest.mark.seams
@pytest.mark.asyncio
async def test_a_stopped_fetcher_leaves_no_session_on_the_broker(
    cluster: LocalCluster,
    produced: tuple[str, Counter[int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, counts = produced
    witness = Witness(monkeypatch)
    fetcher = fetcher_of(cluster, topic, fresh("sessions"), max_bytes=1024)
    await fetcher.start()
    try:
        await fetcher.partitions(topic)
        fetcher.assign(dict.fromkeys(KEYS, 0))
        await read(fetcher, counts, {p: [] for p in range(len(KEYS))})
        assert witness.made, "the broker made a session"
        assert (await held(cluster, witness.made[-1:])) == {witness.made[-1]: True}
    finally:
        await stop(fetcher)
    assert await held(cluster, witness.made) == dict.fromkeys(witness.made, False)


@pytest.mark.seams
@pytest.mark.asyncio
async def test_an_opening_request_cancelled_in_flight_leaves_no_session_on_the_broker(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiokafka cancels its fetches at a new assignment; the broker made the session the
    cancelled opening request asked for all the same: the next opening request closes it."""
    topic = await make_topic(partitions=2)
    ends = await produce(topic, 20)  # the partitions' leaders ready
    witness = Witness(monkeypatch)
    # Nothing to read past the ends: the broker holds each fetch for max_wait, the opening one
    # included.
    fetcher = fetcher_of(cluster, topic, fresh("sessions"), max_wait_ms=1500)
    await fetcher.start()
    try:
        await fetcher.partitions(topic)
        fetcher.assign({PartitionKey(0): ends[0]})
        sessions = sessions_of(fetcher)._sessions
        await wait_until(lambda: len(sessions) == 1, what="the fetch request out")
        (session,) = sessions.values()
        await wait_until(lambda: session.stage is Stage.PENDING, what="the opening request out")
        fetcher.assign({PartitionKey(0): ends[0], PartitionKey(1): ends[1]})  # cancels it
        await wait_until(lambda: len(witness.made) == 2, what="a session made, then another")
        cancelled, opened = witness.made
        await wait_until(lambda: session.session_id == opened, what="the second one in use")
        assert await held(cluster, witness.made) == {cancelled: False, opened: True}
    finally:
        await stop(fetcher)
    assert await held(cluster, witness.made) == dict.fromkeys(witness.made, False)


class Connections:
    """Every aiokafka connection opened from now on (closed ones included)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made: list[AIOKafkaConnection] = []
        init = AIOKafkaConnection.__init__

        def made(connection: AIOKafkaConnection, *args: Any, **options: Any) -> None:
            init(connection, *args, **options)
            self.made.append(connection)

        monkeypatch.setattr(AIOKafkaConnection, "__init__", made)

    def open(self) -> list[AIOKafkaConnection]:
        return [connection for connection in self.made if connection.connected()]


async def idle_in_a_long_poll(fetcher: Fetcher, topic: str, ends: Counter[int]) -> FetchSession:
    """Fetch every partition of ``topic`` from its end until the session is open and a fetch
    of it waits at the broker; the session."""
    await fetcher.partitions(topic)
    fetcher.assign({PartitionKey(p): ends[p] for p in range(len(ends))})
    sessions = sessions_of(fetcher)
    while not sessions._sessions or any(
        s.stage is not Stage.OPEN for s in sessions._sessions.values()
    ):
        await fetcher.fetch(list(fetcher.assigned), 100)
    await wait_until(lambda: bool(sessions._sends), what="a fetch of the session out")
    (session,) = sessions._sessions.values()
    return session


async def without_a_second_connection(fetcher: Fetcher, monkeypatch: pytest.MonkeyPatch) -> None:
    """Close the fetcher's second connection to each broker (as aiokafka closes one idle for
    ``connections_max_idle_ms``), and make the broker slow to greet any connection opened from
    now on: the second one, when the sessions' closing opens it again."""
    conns = fetcher._consumer._client._conns
    for node, group in list(conns):
        if group is ConnectionGroup.COORDINATION:
            await conns.pop((node, group)).close()
    greeted = AIOKafkaConnection._do_version_lookup

    async def slow(connection: AIOKafkaConnection) -> None:
        await asyncio.sleep(3600)
        await greeted(connection)

    monkeypatch.setattr(AIOKafkaConnection, "_do_version_lookup", slow)


@pytest.mark.seams
@pytest.mark.asyncio
async def test_a_fetcher_stopped_in_a_long_poll_closes_its_session_and_leaves_nothing_running(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close rides the second connection, past the fetch waiting on the first: the broker
    holds the session no more, and once it answered the waiting fetch (nowhere now) it holds
    none either; no connection stays open, no task of the fetcher runs."""
    topic = await make_topic(partitions=2)
    ends = await produce(topic, 20)
    connections = Connections(monkeypatch)
    before = asyncio.all_tasks()
    fetcher = fetcher_of(cluster, topic, fresh("sessions"), max_wait_ms=1500)
    await fetcher.start()
    try:
        session = await idle_in_a_long_poll(fetcher, topic, ends)
        opened = session.session_id
        assert await held(cluster, [opened]) == {opened: True}
    finally:
        await fetcher.stop()
    assert await held(cluster, [opened]) == {opened: False}
    assert connections.open() == [], "every connection closed"
    await wait_until(lambda: asyncio.all_tasks() <= before, what="the fetcher's tasks ended")
    await asyncio.sleep(1.5)  # the broker answers the waiting fetch within its max_wait
    assert await held(cluster, [opened]) == {opened: False}, "its late answer made none again"


@pytest.mark.seams
@pytest.mark.asyncio
async def test_a_close_cut_short_while_opening_the_second_connection_leaves_it_closed(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second connection closed meanwhile (as aiokafka closes one idle for
    ``connections_max_idle_ms``), and the broker slow to greet it anew: the close's bound cuts
    the opening short, the session is left to the broker to evict, and the connection is
    closed all the same."""
    topic = await make_topic(partitions=1)
    ends = await produce(topic, 5)
    connections = Connections(monkeypatch)
    fetcher = fetcher_of(cluster, topic, fresh("sessions"), max_wait_ms=1500)
    await fetcher.start()
    try:
        await idle_in_a_long_poll(fetcher, topic, ends)
        await without_a_second_connection(fetcher, monkeypatch)
        count = len(connections.made)
    finally:
        await fetcher.stop()
    assert len(connections.made) == count + 1, "the close opened the second connection"
    assert connections.open() == [], "every connection closed, the one cut short included"


@pytest.mark.seams
@pytest.mark.asyncio
async def test_a_stop_its_caller_cuts_short_still_stops_the_consumer(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member's close past its ``close_timeout`` cancels the fetcher's stop while the
    sessions' closing waits for the second connection: the closing is cut short (the broker
    evicts the session), and the consumer still stops, every connection closed, no fetch out."""
    topic = await make_topic(partitions=1)
    ends = await produce(topic, 5)
    connections = Connections(monkeypatch)
    before = asyncio.all_tasks()
    fetcher = fetcher_of(cluster, topic, fresh("sessions"), max_wait_ms=1500)
    await fetcher.start()
    try:
        await idle_in_a_long_poll(fetcher, topic, ends)
        await without_a_second_connection(fetcher, monkeypatch)
        with anyio.move_on_after(0.2) as cut:
            await fetcher.stop()
        assert cut.cancelled_caught, "the stop was cut short while closing the sessions"
        assert fetcher._consumer._closed, "the consumer stopped"
        assert connections.open() == [], "every connection closed"
        await wait_until(lambda: asyncio.all_tasks() <= before, what="the fetcher's tasks ended")
    finally:
        await fetcher.stop()  # the test's own cleanup, should an assertion fail
