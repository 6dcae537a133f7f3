"""The sticky strategy against the real local ZooKeeper and Kafka: the published target, a join
that pauses only what moves, and the publisher's death."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Coroutine
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from aio_cluster import ConsumerGroup
from aio_cluster.assign.target import next_target
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout, decode_target

from conftest import MakeTopic, Produce
from support import Worker, settled, wait_until

pytestmark = pytest.mark.asyncio


def member(cluster: LocalCluster, group: str, topic: str) -> ConsumerGroup:
    return ConsumerGroup(
        group, [cluster.bootstrap], [cluster.zookeeper], topic, loop_delay=0.05, max_wait=0.05
    )


async def produce_to(producer: AIOKafkaProducer, topic: str, partition: int, key: str) -> None:
    await (await producer.send(topic, key=key.encode(), value=b"x", partition=partition))


async def test_fourth_join_pauses_only_the_moved_partitions(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
) -> None:
    topic = await make_topic(12)
    layout = GroupLayout(group_name, topic)
    delivered: list[tuple[str, int, str]] = []  # (member id, partition, key)
    gate = asyncio.Event()
    hold: set[int] = set()
    holding = asyncio.Event()

    async def consume(group: ConsumerGroup) -> None:
        async for partition, batch in group:
            if partition in hold:
                holding.set()
                await gate.wait()  # the body of a moving partition's batch runs on
            delivered.extend((group.id, partition, record.key.decode()) for record in batch)  # type: ignore[union-attr]

    produced: list[str] = []

    async def send(partition: int) -> None:
        key = f"p{partition}-{len(produced)}"
        produced.append(key)
        await produce_to(producer, topic, partition, key)

    async with contextlib.AsyncExitStack() as stack:
        tasks = await stack.enter_async_context(_TaskGroup())
        first, second, third = (member(cluster, group_name, topic) for _ in range(3))
        for group in (first, second, third):
            await stack.enter_async_context(group)
            tasks.start(consume(group))
        await wait_until(lambda: settled(zk, [first, second, third]), what="three settle")
        assert sorted(len(m.claimed) for m in (first, second, third)) == [4, 4, 4]
        for partition in range(12):
            await send(partition)
        await wait_until(lambda: len(delivered) == 12, what="the first 12 delivered")

        data, _stat = await zk.get(layout.assignment)
        before = decode_target(data)
        fourth = member(cluster, group_name, topic)
        after = next_target(before, range(12), [*before.members, fourth.id])
        assert after is not None
        moving = {p for p in range(12) if after.owners[p] != before.owners[p]}
        assert len(moving) == 3, "the newcomer takes 12 // 4 partitions, nothing else moves"
        assert all(after.owners[p] == fourth.id for p in moving)
        staying = set(range(12)) - moving
        claim_nodes = {p: (await zk.get(layout.owner(p)))[1].czxid for p in staying}

        # Hold the body of a batch of a partition the first member gives up: its handover, and
        # so the rebalance, cannot finish while it runs.
        (held,) = [p for p in moving if before.owners[p] == first.id]
        hold.add(held)
        await send(held)
        await holding.wait()
        joining = asyncio.ensure_future(stack.enter_async_context(fourth))
        try:
            # Meanwhile the partitions that stay with the other two deliver new batches.
            others = [p for p in staying if before.owners[p] != first.id]
            marker = len(delivered)
            for partition in others:
                await send(partition)
            await wait_until(
                lambda: {p for _m, p, _k in delivered[marker:]} >= set(others),
                what="staying partitions delivering during the rebalance",
            )
            assert held not in fourth.claimed
            assert not joining.done(), "the join finished before the held batch was done"
        finally:
            gate.set()
        await joining
        tasks.start(consume(fourth))
        await wait_until(lambda: settled(zk, [first, second, third, fourth]), what="four settle")
        assert sorted(fourth.claimed) == sorted(moving)
        for partition, czxid in claim_nodes.items():
            assert (await zk.get(layout.owner(partition)))[1].czxid == czxid, (
                f"partition {partition} stays with its owner, yet its claim was made again"
            )
        for partition in range(12):
            await send(partition)
        await wait_until(lambda: len(delivered) == len(produced), what="everything delivered")
        for group in (first, second, third, fourth):
            await group.close()

    keys = Counter(key for _m, _p, key in delivered)
    assert sorted(keys) == sorted(produced), "a message was lost"
    assert set(keys.values()) == {1}, "a message was delivered twice"


async def test_killing_the_publisher_hands_publishing_to_the_next_oldest(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    tmp_path: Path,
) -> None:
    topic = await make_topic(6)
    layout = GroupLayout(group_name, topic)
    workers = [Worker(tmp_path / f"worker{i}.txt") for i in range(3)]

    def consumed() -> list[str]:
        return [key for worker in workers for key in worker.consumed_keys()]

    try:
        for worker in workers:
            await worker.start(cluster, topic, group_name, "auto", session=4.0)
        await produce(topic, 300)
        await wait_until(lambda: len(consumed()) >= 100, timeout=60, what="100 consumed")
        data, _stat = await zk.get(layout.assignment)
        before = decode_target(data)
        assert len(before.members) == 3
        workers[0].kill()  # the oldest: the publisher; mid-stream, without a word
        await produce(topic, 300, start=300)

        async def republished() -> bool:
            target = decode_target((await zk.get(layout.assignment))[0])
            return len(target.members) == 2 and target.version > before.version

        await wait_until(republished, timeout=60, what="the next oldest publishes")
        after = decode_target((await zk.get(layout.assignment))[0])
        assert after.members == before.members[1:]
        assert all(
            after.owners[p] == before.owners[p]
            for p in range(6)
            if before.owners[p] != before.members[0]
        ), "only the dead publisher's partitions moved"
        await wait_until(
            lambda: set(consumed()) >= {f"k{i}" for i in range(600)},
            timeout=90,
            what="all 600 consumed",
        )
        for worker in workers[1:]:
            await worker.leave()
    finally:
        for worker in workers:
            worker.kill()
        for worker in workers:
            await worker.reap()
    # The killed member may have processed batches it could not commit: those come again, by
    # design (at least once). Nothing is lost.
    assert set(consumed()) == {f"k{i}" for i in range(600)}, "a message was lost"


class _TaskGroup:
    """Tasks that end with the block: cancelled and awaited on exit, so none leaks."""

    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, coroutine: Coroutine[object, object, None]) -> None:
        self._tasks.append(asyncio.ensure_future(coroutine))

    async def __aenter__(self) -> _TaskGroup:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                raise result
