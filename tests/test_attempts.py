"""A bound on one attempt of a handler (``attempt_timeout``), against the real local ZooKeeper and
Kafka: a handler that hangs is cut, retried, then meets ``on_failure`` while the group goes on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from aio_cluster import AttemptTimeoutError, Record
from aio_cluster.kafka.dead_letters import HEADERS
from aio_cluster.local import LocalCluster

from conftest import MakeTopic
from support import member, wait_until

pytestmark = pytest.mark.asyncio


@contextlib.asynccontextmanager
async def running(work: Awaitable[None]) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``work`` in a task for the block; cancel it after and wait for its end."""
    task = asyncio.ensure_future(work)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)


async def dead_letters(cluster: LocalCluster, topic: str, count: int) -> list[Any]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        return [await asyncio.wait_for(consumer.getone(), 30) for _ in range(count)]
    finally:
        await consumer.stop()


async def test_a_hanging_handler_is_cut_retried_and_dead_lettered_while_the_group_goes_on(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
) -> None:
    topic = await make_topic(1)
    dead = await make_topic(1)
    await producer.send_and_wait(topic, key=b"a", value=b"0")
    await producer.send_and_wait(topic, key=b"b", value=b"hang")
    for i in range(1, 6):
        await producer.send_and_wait(topic, key=b"c", value=str(i).encode())
    tries = 0
    cancelled = 0
    handled: list[bytes] = []

    async def handler(record: Record) -> None:
        nonlocal tries, cancelled
        assert record.value is not None
        if record.value == b"hang":
            tries += 1
            try:
                await anyio.sleep_forever()
            except BaseException:
                cancelled += 1
                raise
        handled.append(record.value)

    async with member(cluster, group_name, topic, commit_interval=0.2) as group:
        work = group.process(
            handler,
            attempt_timeout=0.5,
            attempts=3,
            retry_initial=0.05,
            retry_jitter=0.01,
            on_failure="dead_letter",
            dead_letter_topic=dead,
        )
        async with running(work):
            await wait_until(lambda: len(handled) == 6, what="the records beside the hang")

            async def past() -> bool:
                return await group.offset(0) == 7

            await wait_until(past, what="the partition goes on past the hanging record")
            stats = await group.statistics()
        assert stats.dead_lettered == 1
        assert stats.retried == 2
    assert (tries, cancelled) == (3, 3), "each attempt cut at the bound"
    (letter,) = await dead_letters(cluster, dead, 1)
    assert (letter.key, letter.value) == (b"b", b"hang")
    headers = dict(letter.headers)
    assert headers[HEADERS["error_type"]] == b"aio_cluster.errors.AttemptTimeoutError"
    assert headers[HEADERS["attempts"]] == b"3"


async def test_raise_ends_process_with_the_attempt_timeout(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(1)
    await producer.send_and_wait(topic, value=b"hang")

    async def handler(record: Record) -> None:
        await anyio.sleep_forever()

    async with member(cluster, group_name, topic) as group:
        with pytest.raises(AttemptTimeoutError) as raised:
            await asyncio.wait_for(
                group.process(handler, attempt_timeout=0.2, attempts=1, on_failure="raise"), 60
            )
        assert raised.value.timeout == 0.2
        assert await group.offset(0) in (None, 0), "the record did not finish"


async def test_a_bulk_call_that_hangs_is_cut_then_split_down_to_its_record(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(1)
    dead = await make_topic(1)
    for i in range(6):
        await producer.send(topic, key=str(i).encode(), value=b"hang" if i == 3 else b"ok")
    await producer.flush()
    finished: list[int] = []

    async def handler(records: list[Record]) -> None:
        if any(record.value == b"hang" for record in records):
            await anyio.sleep_forever()
        finished.extend(record.offset for record in records)

    async with member(cluster, group_name, topic, commit_interval=0.2) as group:
        work = group.process_bulk(
            handler,
            size=6,
            linger=0.2,
            attempt_timeout=0.5,
            attempts=2,
            retry_initial=0.05,
            retry_jitter=0.01,
            on_failure="dead_letter",
            dead_letter_topic=dead,
        )
        async with running(work):

            async def past() -> bool:
                return await group.offset(0) == 6

            await wait_until(past, timeout=60, what="the partition goes on past the hang")
    assert sorted(finished) == [0, 1, 2, 4, 5]
    (letter,) = await dead_letters(cluster, dead, 1)
    assert letter.offset == 0
    assert letter.value == b"hang"
    assert dict(letter.headers)[HEADERS["error_type"]] == b"aio_cluster.errors.AttemptTimeoutError"


async def test_a_handler_that_ignores_its_cancellation_is_named_then_finishes(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await make_topic(1)
    await producer.send_and_wait(topic, value=b"deaf")
    release = asyncio.Event()

    async def handler(record: Record) -> None:
        with anyio.CancelScope(shield=True):
            await release.wait()

    caplog.set_level(logging.WARNING, logger="aio_cluster.member.processing.bounds")
    group = member(cluster, group_name, topic, commit_interval=0.2)

    async def finished() -> bool:
        return await group.offset(0) == 1

    async with group, running(group.process(handler, attempt_timeout=0.3)):
        await wait_until(
            lambda: any("ignores its cancellation" in m for m in caplog.messages),
            what="the warning",
        )
        (message,) = [m for m in caplog.messages if "ignores its cancellation" in m]
        assert group.id in message
        assert "the record at offset 0 of partition 0" in message
        release.set()
        await wait_until(finished, what="it returned: its record finished")
