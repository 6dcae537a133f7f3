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
from aiokafka.admin import AIOKafkaAdminClient

from aio_cluster import ConsumerGroup, Output, Record
from aio_cluster.local import LocalCluster

from pipeline import outputs_of
from support import (
    add_topic,
    create_topic,
    in_kafka,
    numbered_by,
    producer_of,
    wait_until,
    within,
)

pytestmark = [pytest.mark.asyncio]

Send = Callable[[int, int], Awaitable[None]]


@pytest_asyncio.fixture
async def source(restartable: LocalCluster) -> str:
    return await create_topic(restartable.bootstrap, 2)


@pytest_asyncio.fixture
async def send(restartable: LocalCluster, source: str) -> AsyncIterator[Send]:
    async with producer_of(restartable) as producer:
        yield numbered_by(producer, source)


def member_of(cluster: LocalCluster, group_name: str, source: str) -> ConsumerGroup[int]:
    """An ``exactly_once`` member of ``group_name`` reading ``source``, quick to look again
    after the restart."""
    return ConsumerGroup(
        group_name,
        [cluster.bootstrap],
        [cluster.zookeeper],
        source,
        exactly_once=True,
        loop_delay=0.2,
        request_timeout=10.0,
    )


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
        member_of(cluster, group_name, source) as group,
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


async def test_refused_outputs_a_restart_and_a_close_mid_commit(
    restartable: LocalCluster, source: str, send: Send, group_name: str
) -> None:
    """Faults injected into one exactly-once pipeline: outputs the broker refuses for good
    (without a key to a compacted topic; larger than the topic allows), the transaction
    coordinator gone for a while (the broker restarted), and a member closed while a commit is
    in flight, a second one going on. Each input ends with its output exactly once for a
    read_committed reader, or with none and its record dead-lettered (the refusal reached the
    application's on_failure); every input offset is committed."""
    cluster = restartable
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    await admin.start()
    try:
        configs = {"cleanup.policy": "compact", "max.message.bytes": "4000"}
        sink = await add_topic(admin, 2, prefix="compacted", configs=configs)
        dead = await add_topic(admin, 1, prefix="dead")
    finally:
        await admin.close()
    total = 1200
    keyless = {n for n in range(total) if n % 97 == 13}
    large = {n for n in range(total) if n % 89 == 7} - keyless
    await send(0, total // 2)

    async def copy(record: Record, output: Output) -> None:
        number = int(record.value or b"")
        key = None if number in keyless else record.key
        value = b"x" * 8000 if number in large else record.value
        await output.send(sink, value, key=key)

    def pipe(group: ConsumerGroup[int]) -> asyncio.Task[None]:
        return asyncio.create_task(
            group.process_transactional(
                copy, concurrency=10, attempts=1, on_failure="dead_letter", dead_letter_topic=dead
            )
        )

    good = total - len(keyless) - len(large)
    async with outputs_of(cluster.bootstrap, sink, 2) as outputs:
        first = member_of(cluster, group_name, source)
        async with first:
            processing = pipe(first)
            await outputs.wait_for(good // 10, timeout=60, what="output before the restart")
            await cluster.stop_kafka()
            await cluster.start_kafka()
            await send(total // 2, total // 2)
            await outputs.wait_for(good // 2, timeout=120, what="output after the restart")
            transactions = first._member.parts.transactions
            assert transactions is not None

            def committing() -> bool:
                assert not processing.done(), processing
                return any(entry.lock.locked() for entry in transactions._partitions.values())

            await wait_until(committing, timeout=60, what="a commit in flight")
        await within(processing, 60, "the first member's end")
        second = member_of(cluster, group_name, source)
        async with second:
            processing = pipe(second)
            await outputs.wait_for(good, timeout=180, what="every good input's output")

            async def all_committed() -> bool:
                assert not processing.done(), processing
                committed = await in_kafka(cluster, group_name, source)
                return sum(committed.values()) == total

            await wait_until(all_committed, timeout=60, what="every input committed")
        await within(processing, 60, "the second member's end")
        await outputs.to_end()
    refused = {f"k{n}" for n in keyless | large}
    assert outputs.missing(total) == sorted(refused, key=lambda k: int(k[1:]))
    assert outputs.duplicates() == {}, "an input was written twice"
    async with outputs_of(cluster.bootstrap, dead, 1, "read_uncommitted") as letters:
        await letters.wait_for(len(refused), timeout=30, what="the dead letters")
    assert set(letters.keys) == refused
