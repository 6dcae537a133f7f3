"""A cancelled ``process()`` against the real local ZooKeeper and Kafka: the records whose
handlers finished beyond the completed prefix are not handled again, by the next owner nor by
the same member's next ``process()``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import Counter
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from aio_cluster import ConsumerGroup, Record
from aio_cluster import __main__ as command_line
from aio_cluster.local import LocalCluster

from conftest import MakeTopic
from support import wait_until

pytestmark = pytest.mark.asyncio

RECORDS = 200


def member(cluster: LocalCluster, group: str, topic: str, **options: Any) -> ConsumerGroup:
    options.setdefault("loop_delay", 0.1)
    options.setdefault("claim_timeout", 10.0)
    options.setdefault("commit_interval", 0.2)
    return ConsumerGroup(group, [cluster.bootstrap], [cluster.zookeeper], topic, **options)


async def one_slow_key_first(producer: AIOKafkaProducer, topic: str) -> None:
    """Offset 0 under key ``slow``, then `RECORDS` - 1 records of keys of their own, written
    20 at a time (so that a small ``max_bytes`` fetches them in many batches)."""
    await (await producer.send(topic, key=b"slow", value=b"0"))
    for start in range(1, RECORDS, 20):
        futures = [
            await producer.send(topic, key=f"k{i}".encode(), value=str(i).encode())
            for i in range(start, min(start + 20, RECORDS))
        ]
        await asyncio.gather(*futures)


class Counting:
    """A handler that counts its finished runs by offset; offset 0 waits until ``slow`` is set
    (it is cancelled meanwhile, by the test)."""

    def __init__(self) -> None:
        self.finished: Counter[int] = Counter()
        self.slow = asyncio.Event()

    async def __call__(self, record: Record) -> None:
        if record.offset == 0:
            await self.slow.wait()
        else:
            await asyncio.sleep(0)  # a handler that waits, as most do
        self.finished[record.offset] += 1


async def stored_at(group: ConsumerGroup, offset: int) -> bool:
    return await group.offset(0) == offset


async def processed_to_the_end(group: ConsumerGroup, handler: Counting) -> None:
    """Run ``process(handler)`` on ``group`` until the whole partition is stored, then cancel
    it."""
    task = asyncio.create_task(group.process(handler, ordering="key", concurrency=50))
    try:
        await wait_until(lambda: stored_at(group, RECORDS), what="the whole partition stored")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def cancelled_after_the_rest(group: ConsumerGroup, handler: Counting) -> None:
    """Run ``process()`` until every record but the slow one finished, then cancel it."""
    task = asyncio.create_task(group.process(handler, ordering="key", concurrency=50))
    await wait_until(
        lambda: len(handler.finished) == RECORDS - 1 or task.done(),
        what="every record but the slow one finished",
    )
    assert not task.done(), task
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def assert_none_repeated(first: Counting, second: Counting) -> None:
    repeated = sorted(set(first.finished) & set(second.finished))
    assert repeated == [], f"{len(repeated)} finished records handled again: {repeated[:10]}"


@pytest.mark.parametrize("max_bytes", [None, 1024], ids=["one batch", "small batches"])
async def test_the_next_owner_repeats_no_finished_record(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    max_bytes: int | None,
) -> None:
    """The next owner handles only the slow record; with small batches, most of its batches
    finished before they came."""
    topic = await make_topic(1)
    await one_slow_key_first(producer, topic)
    first = Counting()
    async with member(cluster, group_name, topic) as group:
        await cancelled_after_the_rest(group, first)

    second = Counting()
    second.slow.set()
    options = {} if max_bytes is None else {"max_bytes": max_bytes}
    async with member(cluster, group_name, topic, **options) as group:
        await processed_to_the_end(group, second)
    assert_none_repeated(first, second)
    assert set(second.finished) == {0}


async def test_the_same_members_next_call_repeats_no_finished_record(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(1)
    await one_slow_key_first(producer, topic)
    first = Counting()
    async with member(cluster, group_name, topic) as group:
        await cancelled_after_the_rest(group, first)
        second = Counting()
        second.slow.set()
        await processed_to_the_end(group, second)
    assert_none_repeated(first, second)


async def test_an_offset_reset_makes_the_note_stale(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    """A reset to the very offset stored beside the note (it bumps the fences) means: handle
    everything from there again, the records noted as finished included."""
    topic = await make_topic(1)
    await one_slow_key_first(producer, topic)
    first = Counting()
    async with member(cluster, group_name, topic) as group:
        await cancelled_after_the_rest(group, first)
    argv = [
        *("reset-offsets", group_name, "--topic", topic, "--to-offset", "0", "--execute"),
        *("--bootstrap", cluster.bootstrap, "--zookeeper", cluster.zookeeper),
    ]
    levels = {name: logging.getLogger(name).level for name in ("kazoo", "aiokafka")}
    try:
        assert await asyncio.to_thread(command_line.main, argv) == 0
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)

    second = Counting()
    second.slow.set()
    async with member(cluster, group_name, topic) as group:
        await processed_to_the_end(group, second)
    assert sorted(second.finished) == list(range(RECORDS)), "every record handled again"


async def test_a_close_that_cuts_a_handler_short_repeats_no_finished_record(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    """``close()`` waits for the slow handler at most ``rebalance_timeout``, then cancels it:
    the records that finished meanwhile are not handled again."""
    topic = await make_topic(1)
    await one_slow_key_first(producer, topic)
    first = Counting()
    async with member(cluster, group_name, topic, rebalance_timeout=0.5) as group:
        task = asyncio.create_task(group.process(first, ordering="key", concurrency=50))
        await wait_until(
            lambda: len(first.finished) == RECORDS - 1, what="every record but the slow one"
        )
    await task  # the member closed: process() returned

    second = Counting()
    second.slow.set()
    async with member(cluster, group_name, topic) as group:
        await processed_to_the_end(group, second)
    assert 0 not in first.finished
    assert sorted(second.finished) == [0], "only the record cut short is handled again"


async def test_joins_and_leaves_by_cancellation_repeat_no_finished_record(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    """The issue's churn: members join, and leave by their ``process()`` task cancelled (as a
    SIGTERM handler does) before they close, while handlers of many keys run; no record whose
    handler finished is handled again."""
    topic = await make_topic(4)
    total = 4000
    futures = [
        await producer.send(topic, key=f"k{i % 40}".encode(), value=str(i).encode())
        for i in range(total)
    ]
    await asyncio.gather(*futures)
    rng = random.Random(43)
    finished: Counter[tuple[int, int]] = Counter()

    async def handler(record: Record) -> None:
        await asyncio.sleep(rng.random() * 0.004)
        finished[(record.partition, record.offset)] += 1

    members: list[tuple[ConsumerGroup, asyncio.Task[None]]] = []

    async def join() -> None:
        group = member(cluster, group_name, topic)
        await group.register()
        task = asyncio.create_task(group.process(handler, ordering="key", concurrency=50))
        members.append((group, task))

    async def leave_by_cancelling() -> None:
        group, task = members.pop(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await group.close()

    async def progress(count: int) -> None:
        goal = min(total, len(finished) + count)
        await wait_until(lambda: len(finished) >= goal, timeout=60, what=f"{goal} finished")

    try:
        for step in (join, join, leave_by_cancelling, join, leave_by_cancelling, join):
            await step()
            await progress(400)
        await wait_until(lambda: len(finished) == total, timeout=60, what="every record")
    finally:
        while members:
            await leave_by_cancelling()
    repeated = sorted(slot for slot, runs in finished.items() if runs > 1)
    assert repeated == [], f"{len(repeated)} finished records handled again: {repeated[:10]}"
