"""Gaps in a partition's fetched records, against the real servers: records taken out of
aiokafka behind the fetcher's back (as an error search cancelled half-way did) are delivered all
the same, and transaction markers at the start of a fetch, which the fetcher's position has not
passed yet, hold nothing up."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from aio_cluster import ConsumerGroup, Record
from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from support import member, stored_offsets, wait_until

pytestmark = pytest.mark.asyncio

P0 = PartitionKey(0)


async def test_records_taken_out_of_the_fetcher_are_delivered_all_the_same(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
) -> None:
    """While the batch ending at offset 4 runs, records 5 to 7 are taken out of aiokafka and
    dropped: its position moves past them, the fetcher's does not. Before, the next batch began
    at 8 and its commit passed 5 to 7, which nobody received."""
    topic = await make_topic(1)
    await produce(topic, 5)
    got: list[Record] = []
    lost: list[int] = []

    async def consume(group: ConsumerGroup) -> None:
        fetcher = group._member.parts.fetcher
        consumer, tp = fetcher._consumer, fetcher._tp(P0)
        async for _partition, batch in group:
            got.extend(batch)
            if batch[-1].offset == 4:
                await produce(topic, 15, start=5)
                taken = await consumer.getmany(tp, timeout_ms=10_000, max_records=3)
                lost.extend(record.offset for record in taken.get(tp, []))
            if batch[-1].offset == 19:
                return

    async with member(cluster, group_name, topic) as group:
        await asyncio.wait_for(consume(group), 60)
    assert lost == [5, 6, 7], "records were taken out of aiokafka behind the fetcher's back"
    assert [record.offset for record in got] == list(range(20)), "every record, once"


def transaction(producer: Producer, topic: str, start: int) -> None:
    """Three records, committed: a commit marker follows them in the log."""
    producer.begin_transaction()
    for i in range(start, start + 3):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(60) == 0
    producer.commit_transaction(60)


@pytest.mark.parametrize("isolation_level", ["read_uncommitted", "read_committed"])
async def test_transaction_markers_hold_nothing_up(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    group_name: str,
    isolation_level: str,
) -> None:
    """Five transactions, each written once the member has read the one before: a fetch may
    start at a commit marker the fetcher's position has not passed yet. Every record comes once,
    and the member stores the log end, markers included."""
    topic = await make_topic(1)
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "transactional.id": uuid.uuid4().hex}
    )
    await asyncio.to_thread(producer.init_transactions, 60)
    got: list[Record] = []

    async def consume(group: ConsumerGroup) -> None:
        async for _partition, batch in group:
            got.extend(batch)  # completed once the loop asks for the next batch

    async with member(
        cluster, group_name, topic, commit_interval=0.1, isolation_level=isolation_level
    ) as group:
        consuming = asyncio.create_task(consume(group))
        try:
            for round_ in range(5):
                await asyncio.to_thread(transaction, producer, topic, 3 * round_)
                await wait_until(read(got, 3 * (round_ + 1)), what="read the round")
            layout = GroupLayout(group_name, topic)
            await wait_until(
                lambda: stored_is(zk, layout, 20), what="the log end stored, markers included"
            )
        finally:
            consuming.cancel()
            await asyncio.gather(consuming, return_exceptions=True)
    assert [record.value for record in got] == [b"%d" % i for i in range(15)], "every record, once"


def read(got: list[Record], count: int) -> Callable[[], bool]:
    return lambda: len(got) >= count


async def stored_is(zk: ZooKeeper, layout: GroupLayout, offset: int) -> bool:
    return await stored_offsets(zk, layout, 1) == {0: offset}
