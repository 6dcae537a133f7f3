"""A record that waits (for its retries, or in a slow handler) holds back its own key only: the
member takes its partition's next batches meanwhile and runs their other keys, against the real
servers. Its partition's stored offset never passes it while it waits. Under
``ordering="partition"`` a partition stays one line; under ``"none"`` nothing waits for it; and
``max_records`` bounds what it holds back."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from aio_cluster import ConsumerGroup, Record
from aio_cluster.local import LocalCluster

from conftest import MakeTopic
from support import member, wait_until

pytestmark = pytest.mark.asyncio

SLOW = b"slow"


class Slow:
    """A handler whose record of key ``slow`` fails ``failures`` times (its retries wait), the
    others finishing at once; it notes when each record finished."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: Counter[int] = Counter()
        self.finished: dict[int, float] = {}
        self.first_call = asyncio.Event()
        self.twice: list[int] = []

    async def __call__(self, record: Record) -> None:
        if record.key == SLOW and record.offset == 0:
            self.calls[0] += 1
            self.first_call.set()
            if self.calls[0] <= self.failures:
                raise RuntimeError("not yet (the test)")
        if record.offset in self.finished:
            self.twice.append(record.offset)
        self.finished[record.offset] = time.monotonic()

    def before_the_slow_one(self) -> list[int]:
        """The offsets that finished before the slow record did."""
        at = self.finished[0]
        return [offset for offset, done in self.finished.items() if offset and done < at]


async def produce(producer: AIOKafkaProducer, topic: str, count: int, keys: int) -> None:
    """``count`` records of ``keys`` keys (``k0``, ``k1``, ...) after the slow one (of its own
    key when ``keys`` is 0), written 50 at a time: a fetch never returns less than a whole
    record batch as the producer wrote it, so this bounds the batches handed out."""
    for start in range(0, count, 50):
        futures = [
            await producer.send(
                topic, key=f"k{i % keys}".encode() if keys else SLOW, value=b"v", partition=0
            )
            for i in range(start, min(start + 50, count))
        ]
        await asyncio.gather(*futures)


async def run_past_the_slow_one(
    cluster: LocalCluster,
    producer: AIOKafkaProducer,
    topic: str,
    group_name: str,
    handler: Slow,
    *,
    others: int,
    keys: int,
    options: dict[str, Any],
    **processing: Any,
) -> None:
    """The slow record first, then (once its first call failed, so in later batches) ``others``
    records of ``keys`` keys; processed until all finished and the offset stored is the end.
    While the slow record waits, the stored offset must never pass it."""
    await producer.send_and_wait(topic, key=SLOW, value=b"v", partition=0)
    group: ConsumerGroup = member(cluster, group_name, topic, commit_interval=0.2, **options)
    async with group:
        task = asyncio.create_task(group.process(handler, **processing))
        try:
            await wait_until(handler.first_call.is_set, what="the slow record's first call")
            await produce(producer, topic, others, keys)
            while 0 not in handler.finished:
                stored = await group.offset(0)
                assert stored in (None, 0), f"offset {stored} stored past the waiting record"
                await asyncio.sleep(0.2)

            async def at_the_end() -> bool:
                return await group.offset(0) == others + 1

            await wait_until(lambda: len(handler.finished) == others + 1, what="every record")
            await wait_until(at_the_end, what="the end stored")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert handler.twice == [], "a record finished twice"


async def test_a_retrying_record_holds_back_only_its_own_key(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    """The issue's case: four failures with ``retry_initial=2`` (waits of 2, 4, 8 and 8 s),
    then 3,000 records of 50 other keys in later batches: they all finished at least 10 s
    before it (before, they waited for it)."""
    topic = await make_topic(1)
    handler = Slow(failures=4)
    await run_past_the_slow_one(
        cluster,
        producer,
        topic,
        group_name,
        handler,
        others=3_000,
        keys=50,
        options={},
        attempts=5,
        retry_initial=2.0,
        retry_max=8.0,
        retry_jitter=0.0,
    )
    others = [handler.finished[offset] for offset in range(1, 3_001)]
    assert max(others) <= handler.finished[0] - 10, "the other keys waited for the slow one"


async def test_under_partition_order_a_partition_is_one_line(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(1)
    handler = Slow(failures=2)
    await run_past_the_slow_one(
        cluster,
        producer,
        topic,
        group_name,
        handler,
        others=300,
        keys=50,
        options={},
        ordering="partition",
        attempts=3,
        retry_initial=1.0,
        retry_jitter=0.0,
    )
    assert handler.before_the_slow_one() == [], "a record overtook the slow one"


async def test_under_no_order_nothing_waits_for_it(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    """Even the records of its own key go past it."""
    topic = await make_topic(1)
    handler = Slow(failures=2)
    await run_past_the_slow_one(
        cluster,
        producer,
        topic,
        group_name,
        handler,
        others=300,
        keys=0,  # all of its own key
        options={},
        ordering="none",
        attempts=3,
        retry_initial=2.0,
        retry_jitter=0.0,
    )
    assert sorted(handler.before_the_slow_one()) == list(range(1, 301))


async def test_under_key_order_its_own_key_waits_for_it(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    """The records of the slow key that come in later batches finish after it, in offset
    order; the others before it."""
    topic = await make_topic(1)
    handler = Slow(failures=2)
    await producer.send_and_wait(topic, key=SLOW, value=b"v", partition=0)
    group = member(cluster, group_name, topic, commit_interval=0.2)
    async with group:
        task = asyncio.create_task(
            group.process(handler, attempts=3, retry_initial=1.5, retry_jitter=0.0)
        )
        try:
            await wait_until(handler.first_call.is_set, what="the slow record's first call")
            futures = [
                await producer.send(topic, key=SLOW if i % 10 == 0 else b"other", partition=0)
                for i in range(200)
            ]
            await asyncio.gather(*futures)
            await wait_until(lambda: len(handler.finished) == 201, what="every record")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    slow_ones = [1 + i for i in range(200) if i % 10 == 0]
    early = set(handler.before_the_slow_one())
    assert early == set(range(1, 201)) - set(slow_ones), "only its own key waits"
    order = sorted(slow_ones, key=lambda offset: handler.finished[offset])
    assert order == slow_ones, "the slow key's records ran out of offset order"
    assert handler.twice == []


async def test_max_records_bounds_what_a_waiting_record_holds_back(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    """With ``max_records=200`` (and batches of about 50 records), the records after the slow
    one are taken until the running batches keep about 200: the rest wait for it."""
    topic = await make_topic(1)
    handler = Slow(failures=2)
    await run_past_the_slow_one(
        cluster,
        producer,
        topic,
        group_name,
        handler,
        others=1_000,
        keys=50,
        options={"max_bytes": 4_096},
        max_records=200,
        attempts=3,
        retry_initial=2.0,
        retry_jitter=0.0,
    )
    early = handler.before_the_slow_one()
    assert 0 < len(early) < 400, f"{len(early)} records went past the slow one"
