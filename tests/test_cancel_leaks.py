"""A bound that cuts concurrent requests short stays the bound's, against the real servers: the
four places where an ``asyncio.gather`` ran inside a time-limited anyio scope (the leave's
releases, Kafka's committed offsets, ListOffsets, the closing of fetch sessions).

Each request here finishes after its cancellation, as a call that catches its cancellation does
(aiokafka's ``AIOKafkaClient.close()`` swallows one while it waits for its metadata task, then
goes on): the stand-in waits until it is cancelled, then sends the real request and insists on
its answer. aiokafka's requests themselves were not seen doing so; the stand-in shows what any
such child did to the bound around a gather. Under ``asyncio.gather`` the bound then raised a
``CancelledError`` without anyio's mark, which it let through: the task ended cancelled, though
nobody cancelled it, and what followed the requests (the client's stop, the documented error)
never came. In task groups each ends as documented."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import anyio
import pytest
from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.offset import OffsetRequest

from aio_cluster import BrokerError
from aio_cluster.kafka.fetch_sessions import FetchSessions
from aio_cluster.kafka.group_offsets import KafkaGroupOffsets
from aio_cluster.kafka.list_offsets import ListOffsets
from aio_cluster.kafka.topics import PartitionKey, TopicKeys
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from support import fetcher_of, fresh, member, stubborn, wait_until

pytestmark = pytest.mark.asyncio

T = TypeVar("T")


async def after_cancellation(request: Callable[[], Awaitable[T]]) -> T:
    """Wait until cancelled, then make ``request`` and return its answer, whatever cancels it
    meanwhile: a request that finishes after its cancellation."""
    with contextlib.suppress(asyncio.CancelledError):
        await anyio.sleep_forever()
    return await stubborn(asyncio.ensure_future(request()))


async def outcome(call: Awaitable[T]) -> T | BaseException:
    """What ``call`` ended with, run as a task of its own: a task that ends cancelled gives its
    ``CancelledError``, which must not be, since only the call's own bound was."""
    task = asyncio.ensure_future(call)
    await asyncio.wait([task])
    if task.cancelled():
        return asyncio.CancelledError()
    return task.exception() or task.result()


async def test_committed_offsets_cut_short_raise_the_broker_error(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(2)
    offsets = KafkaGroupOffsets(cluster.bootstrap, group_name, TopicKeys((topic,)), client_id="t")
    await offsets.start()
    try:
        asked = offsets._consumer.committed

        async def committed(tp: TopicPartition) -> int | None:
            if tp.partition == 0:
                return cast("int | None", await asked(tp))  # answered before the bound
            return await after_cancellation(lambda: asked(tp))

        offsets._consumer.committed = committed
        ended = await outcome(offsets.committed([PartitionKey(0), PartitionKey(1)], 1.0))
        assert isinstance(ended, BrokerError), repr(ended)
        assert "within 1 s" in str(ended)
    finally:
        await offsets.stop()


async def test_list_offsets_cut_short_raises_the_broker_error(
    cluster: LocalCluster, make_topic: MakeTopic
) -> None:
    topic = await make_topic(1)
    client = AIOKafkaClient(bootstrap_servers=cluster.bootstrap)
    await client.bootstrap()
    try:
        client.set_topics([topic])
        await client.force_metadata_update()
        send = client.send

        async def sent(node_id: int, request: Any, **options: Any) -> Any:
            if isinstance(request, OffsetRequest):
                return await after_cancellation(lambda: send(node_id, request, **options))
            return await send(node_id, request, **options)

        client.send = sent

        async def refresh(topics: Any) -> None:
            await client.force_metadata_update()

        asking = ListOffsets(client, backoff=0.1, isolation=0, timeout=1.0, refresh=refresh)
        ended = await outcome(asking.ask({TopicPartition(topic, 0): -1}))
        assert isinstance(ended, BrokerError), repr(ended)
        assert "no answer within" in str(ended)
    finally:
        await client.close()


async def test_a_fetcher_whose_session_closing_is_cut_short_still_stops_its_consumer(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce
) -> None:
    """Before, the stop raised CancelledError before the consumer's stop: its connections
    stayed open, each with a task reading it."""
    topic = await make_topic(1)
    counts = await produce(topic, 20)
    fetcher = fetcher_of(cluster, topic, fresh("leaks"), max_bytes=1024)
    await fetcher.start()
    stopped = False
    try:
        await fetcher.partitions(topic)
        fetcher.assign({PartitionKey(0): 0})
        got: list[int] = []
        for _ in range(200):
            if len(got) >= counts[0]:
                break
            for records in (await fetcher.fetch([PartitionKey(0)], 200)).values():
                got += [record.offset for record in records]
        sessions = fetcher._sessions
        assert isinstance(sessions, FetchSessions)
        assert any(s.session_id for s in sessions._sessions.values()), "a session opened"
        client = fetcher._consumer._client
        send = client.send

        async def sent(node_id: int, request: Any, **options: Any) -> Any:
            if type(request).__name__ == "_ClosingFetchRequest":
                return await after_cancellation(lambda: send(node_id, request, **options))
            return await send(node_id, request, **options)

        client.send = sent
        ended = await outcome(fetcher.stop())
        assert ended is None, repr(ended)
        stopped = True
        assert fetcher._consumer._closed, "the consumer stopped"
    finally:
        if not stopped:
            await fetcher.stop()


async def test_a_leave_cut_short_by_the_closing_deadline_ends_the_close_normally(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    """Before, the releases cut short by the leave's share of ``close_timeout`` ended the
    member's task cancelled, and close() raised CancelledError to a caller nobody cancelled."""
    topic = await make_topic(1)
    group = member(cluster, group_name, topic, close_timeout=2.0)
    await group.register()
    layout = GroupLayout(group_name, topic)
    await wait_until(
        lambda: group._member.parts.states.claims.get(PartitionKey(0)) is not None, what="the claim"
    )
    nodes = group._member.parts.membership._rebalancer._nodes
    release = nodes.release

    async def released(partition: PartitionKey, node_version: int, epoch: int) -> None:
        await after_cancellation(lambda: release(partition, node_version, epoch))

    nodes.release = released  # type: ignore[method-assign]
    ended = await outcome(group.close())
    assert ended is None, repr(ended)

    async def gone() -> bool:
        return await zk.exists(layout.owner(0)) is None

    await wait_until(gone, what="the claim released")
