"""How long a join and a leave take until every partition is owned again by its new owner.

A group of one member owns every partition of a topic; a second member joins, and the time runs
until both members, and the claim nodes in ZooKeeper, show the new assignment (so the time
includes connecting and registering); then the second member leaves and the time runs until the
first owns everything again, ready to fetch. Repeated ``--rounds`` times (default 20).

Baseline, measured in the same run: aiokafka consumers in a Kafka (broker-side) consumer group on
the same broker, from the second consumer's ``start()`` until both hold disjoint assignments that
cover the topic (the broker runs with group.initial.rebalance.delay.ms=0).

    python benchmarks/rebalance.py [--rounds N] [--partitions P]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer
from common import create_topic, fresh, median, table

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import NoNodeError, ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout


async def poll(condition: Callable[[], object], timeout: float = 60.0) -> None:
    deadline = time.perf_counter() + timeout
    while not await condition():  # type: ignore[misc]
        if time.perf_counter() > deadline:
            raise TimeoutError("the group did not settle")
        await asyncio.sleep(0.002)


async def owners(zk: ZooKeeper, layout: GroupLayout, partitions: list[int]) -> dict[int, str]:
    found = {}
    for p in partitions:
        with contextlib.suppress(NoNodeError):
            found[p] = (await zk.get(layout.owner(p)))[0].decode()
    return found


async def ours(cluster: LocalCluster, topic: str, rounds: int) -> tuple[list[float], list[float]]:
    name = fresh("bench")
    layout = GroupLayout(name, topic)
    zk = ZooKeeper(cluster.zookeeper)
    await zk.start()
    joins: list[float] = []
    leaves: list[float] = []

    def group() -> ConsumerGroup:
        return ConsumerGroup(name, [cluster.bootstrap], [cluster.zookeeper], topic, register=False)

    try:
        async with group() as first:
            await first.register()
            partitions = first.partitions
            for _ in range(rounds):
                second = group()
                start = time.perf_counter()
                await second.register()

                async def moved(second: ConsumerGroup = second) -> bool:
                    # Balanced between the two, every partition owned once, ZooKeeper agreeing.
                    mine = {p: m.id for m in (first, second) for p in m.claimed}
                    halves = sorted([len(first.claimed), len(second.claimed)])
                    return (
                        sorted(mine) == partitions
                        and halves[1] - halves[0] <= 1
                        and await owners(zk, layout, partitions) == mine
                    )

                await poll(moved)
                joins.append(time.perf_counter() - start)
                start = time.perf_counter()
                await second.close()

                async def back() -> bool:
                    want = dict.fromkeys(partitions, first.id)
                    return (
                        first.claimed == partitions and await owners(zk, layout, partitions) == want
                    )

                await poll(back)
                leaves.append(time.perf_counter() - start)
    finally:
        await zk.close()
    return joins, leaves


async def kafka_group(cluster: LocalCluster, topic: str, rounds: int) -> list[float]:
    name = fresh("kgroup")
    joins: list[float] = []

    def consumer() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            topic, bootstrap_servers=cluster.bootstrap, group_id=name, enable_auto_commit=False
        )

    async def spin(c: AIOKafkaConsumer) -> None:
        while True:
            await c.getmany(timeout_ms=50)

    first = consumer()
    await first.start()
    first_loop = asyncio.create_task(spin(first))
    try:
        await poll(lambda: _ready(first), timeout=60)
        partitions = len(first.assignment())
        for _ in range(rounds):
            second = consumer()
            start = time.perf_counter()
            await second.start()
            loop = asyncio.create_task(spin(second))
            await poll(lambda second=second: _split(first, second, partitions))
            joins.append(time.perf_counter() - start)
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
            await second.stop()
            await poll(lambda: _full(first, partitions))
    finally:
        first_loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first_loop
        await first.stop()
    return joins


async def _ready(c: AIOKafkaConsumer) -> bool:
    return bool(c.assignment())


async def _split(a: AIOKafkaConsumer, b: AIOKafkaConsumer, total: int) -> bool:
    x, y = a.assignment(), b.assignment()
    return bool(x) and bool(y) and not (x & y) and len(x | y) == total


async def _full(a: AIOKafkaConsumer, total: int) -> bool:
    return len(a.assignment()) == total


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # aiokafka's heartbeat chatter is not the result
    async with LocalCluster() as cluster:
        topic = await create_topic(cluster.bootstrap, args.partitions)
        joins, leaves = await ours(cluster, topic, args.rounds)
        baseline = await kafka_group(cluster, topic, args.rounds)
    base = median(baseline)

    def row(label: str, values: list[float]) -> list[str]:
        ordered = sorted(values)
        p90 = ordered[int(0.9 * (len(ordered) - 1))]
        return [
            label,
            f"{median(values) * 1000:.0f}",
            f"{p90 * 1000:.0f}",
            f"{max(values) * 1000:.0f}",
            f"{median(values) / base:.2f}",
        ]

    print(f"{args.partitions} partitions, {args.rounds} rounds, milliseconds")
    print(
        table(
            ["what", "median", "p90", "max", "ratio to baseline"],
            [
                row("Kafka group join, aiokafka (baseline)", baseline),
                row("aio_cluster join until all owned", joins),
                row("aio_cluster leave until all owned", leaves),
            ],
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
