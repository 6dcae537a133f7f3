"""A member through server faults: a ZooKeeper restart within the session timeout, a Kafka
broker restart. These restart the servers of the `restartable` cluster (never the shared one,
which other tests use meanwhile) and wait until they answer again."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import pytest_asyncio

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.values import SessionState

from support import (
    Pairs,
    closable,
    create_topic,
    numbered_by,
    producer_of,
    settled,
    take,
    wait_until,
)

# faults: a ZooKeeper restart must end within the member's session, which the whole suite's
# workers can stretch past: these run in a pytest of their own, two at a time (noxfile.py).
pytestmark = [pytest.mark.asyncio, pytest.mark.faults]

Send = Callable[[int, int], Awaitable[None]]


@pytest_asyncio.fixture
async def topic(restartable: LocalCluster) -> str:
    """A fresh topic of two partitions on the restartable cluster."""
    return await create_topic(restartable.bootstrap, 2)


@pytest_asyncio.fixture
async def send(restartable: LocalCluster, topic: str) -> AsyncIterator[Send]:
    """``await send(start, count)``: the numbered messages ``k<start>`` ... to `topic` (see
    `numbered_by`)."""
    async with producer_of(restartable) as producer:
        yield numbered_by(producer, topic)


async def consume(batches: Pairs, seen: Counter[bytes], total: int) -> None:
    """Pull records from one iterator until ``total`` were seen (see `take`)."""
    got = await take(batches, total - sum(seen.values()))
    seen.update(record.key or b"" for _, record in got)


async def test_zookeeper_restart_within_the_session_keeps_claims(
    restartable: LocalCluster, topic: str, send: Send, group_name: str
) -> None:
    cluster = restartable
    await send(0, 20)
    seen: Counter[bytes] = Counter()
    async with ConsumerGroup(
        group_name, [cluster.bootstrap], [cluster.zookeeper], topic, session_timeout=30.0
    ) as group:
        batches = closable(group.batches())
        await consume(batches, seen, 20)
        session = group._member.parts.zk.session_id
        await cluster.stop_zookeeper()
        await wait_until(
            lambda: group._member.parts.zk.state is SessionState.SUSPENDED, what="suspended"
        )
        await send(20, 20)
        await cluster.start_zookeeper()
        await wait_until(
            lambda: group._member.parts.zk.state is SessionState.CONNECTED, what="reconnected"
        )
        assert group._member.parts.zk.session_id == session, "the session outlived the restart"
        assert group.claimed == [0, 1]
        await consume(batches, seen, 40)
        await batches.aclose()
        zk = ZooKeeper(cluster.zookeeper)
        await zk.start()
        try:
            assert await settled(zk, [group])
        finally:
            await zk.close()
    assert set(seen.values()) == {1}, "delivered twice across the restart"
    assert len(seen) == 40


async def test_kafka_restart_does_not_stop_consumption(
    restartable: LocalCluster, topic: str, send: Send, group_name: str
) -> None:
    cluster = restartable
    await send(0, 10)
    seen: Counter[bytes] = Counter()
    async with ConsumerGroup(
        group_name, [cluster.bootstrap], [cluster.zookeeper], topic, loop_delay=0.2
    ) as group:
        batches = closable(group.batches())
        await consume(batches, seen, 10)
        await cluster.stop_kafka()
        await cluster.start_kafka()
        await send(10, 10)
        await consume(batches, seen, 20)
        await batches.aclose()
    assert set(seen) == {f"k{i}".encode() for i in range(20)}
    assert set(seen.values()) == {1}
