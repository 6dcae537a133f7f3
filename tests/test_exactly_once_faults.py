"""Exactly once through a broker restart: an ``exactly_once`` group's transactions are cut
while Kafka stops (commits every 0.1 s, so some are open), and the member goes on once it is
back; the output read with ``read_committed`` holds each input once, nothing lost, nothing
doubled. On a cluster of the test session's own (`restartable`): the shared one is never
stopped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import pytest_asyncio

from aio_cluster import ConsumerGroup, Output, Record
from aio_cluster.local import LocalCluster

from pipeline import outputs_of
from support import create_topic, numbered_by, producer_of, within

pytestmark = [pytest.mark.asyncio]

Send = Callable[[int, int], Awaitable[None]]


@pytest_asyncio.fixture
async def source(restartable: LocalCluster) -> str:
    return await create_topic(restartable.bootstrap, 2)


@pytest_asyncio.fixture
async def send(restartable: LocalCluster, source: str) -> AsyncIterator[Send]:
    async with producer_of(restartable) as producer:
        yield numbered_by(producer, source)


async def test_a_broker_restart_mid_transaction_loses_and_doubles_nothing(
    restartable: LocalCluster, source: str, send: Send, group_name: str
) -> None:
    cluster = restartable
    sink = await create_topic(cluster.bootstrap, 2)
    total = 2000
    await send(0, total // 2)

    async def copy(record: Record, output: Output) -> None:
        await asyncio.sleep(0.01)  # records still flow while Kafka stops
        await output.send(sink, record.value, key=record.key)

    async with (
        outputs_of(cluster.bootstrap, sink, 2) as outputs,
        ConsumerGroup(
            group_name,
            [cluster.bootstrap],
            [cluster.zookeeper],
            source,
            exactly_once=True,
            loop_delay=0.2,
            request_timeout=10.0,
        ) as group,
    ):
        processing = asyncio.create_task(group.process_transactional(copy, concurrency=5))
        await outputs.wait_for(total // 10, timeout=60, what="output before the restart")
        await cluster.stop_kafka()
        await cluster.start_kafka()
        await send(total // 2, total // 2)
        await outputs.wait_for(total, timeout=180, what="every input's output after it")
        await group.close()
        await within(processing, 60, "process_transactional()'s end")
        await outputs.to_end()
    assert outputs.missing(total) == []
    assert outputs.duplicates() == {}, "an input was written twice across the restart"
