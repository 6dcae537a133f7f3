"""Incremental fetch sessions: the pure state of one (what a request carries, when a session
starts again), and the fetcher's sessions against the real broker (idle fetches name no
partition, a session the broker refuses starts again, every record is read once)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from aio_cluster.kafka.fetch_sessions import FetchSession, FetchSessions, Wire
from aio_cluster.kafka.fetcher import Fetcher
from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.local import LocalCluster

from conftest import MakeTopic, Produce
from support import fetcher_of, fresh

INVALID_FETCH_SESSION_EPOCH = 71


def test_a_session_opens_in_full_then_names_only_what_changed() -> None:
    session = FetchSession()
    opening = session.next([("t", [(0, 5, 100), (1, 7, 100)])])
    assert opening == Wire(0, 0, [("t", [(0, 5, 100), (1, 7, 100)])], [])
    session.answered(42, 0)

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
    session.next([("t", [(0, 5, 100)])])
    session.answered(42, 0)
    session.next([("t", [(0, 6, 100)])])
    session.answered(42, INVALID_FETCH_SESSION_EPOCH)
    reopening = session.next([("t", [(0, 6, 100)])])
    assert reopening == Wire(42, 0, [("t", [(0, 6, 100)])], []), "closes 42, opens another"
    session.answered(43, 0)
    assert session.next([("t", [(0, 6, 100)])]) == Wire(43, 1, [], [])


def test_a_broker_that_keeps_no_session_is_asked_again_in_full() -> None:
    session = FetchSession()
    session.next([("t", [(0, 5, 100)])])
    session.answered(0, 0)  # its session cache is full
    assert session.next([("t", [(0, 5, 100)])]) == Wire(0, 0, [("t", [(0, 5, 100)])], [])


def test_the_epoch_wraps_to_one() -> None:
    session = FetchSession(session_id=42, epoch=2**31 - 1, opening=False)
    assert session.next([]).epoch == 2**31 - 1
    assert session.next([]).epoch == 1


@pytest.mark.asyncio
async def test_a_failed_send_opens_a_new_session_and_a_cancelled_one_keeps_it() -> None:
    """A send that failed may have lost the request or its answer: the session starts again. A
    cancelled one was written (the broker reads it all the same): the session goes on."""
    sessions = FetchSessions()

    class Request:
        def __init__(self) -> None:
            self._max_wait_ms, self._min_bytes, self._max_bytes = 500, 1, 1000
            self._isolation_level, self._rack_id = 0, ""
            self.topics = [("t", [(0, 5, 100)])]

    ((node, request),) = sessions.wrap([(1, Request())])
    session = sessions.session(node)
    session.next(request.topics)
    session.answered(42, 0)

    async def failing(node_id: int, request: Any) -> Any:
        request.session.next(request.topics)
        raise ConnectionError("gone")

    with pytest.raises(ConnectionError):
        await sessions.watching(failing)(node, request)
    assert session.opening
    assert session.sent == {}

    session.next(request.topics)
    session.answered(43, 0)

    async def cancelled(node_id: int, request: Any) -> Any:
        request.session.next(request.topics)
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await sessions.watching(cancelled)(node, request)
    assert (session.opening, session.session_id, session.epoch) == (False, 43, 2)


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
        for session in fetcher._sessions._sessions.values():
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
