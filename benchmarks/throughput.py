"""One member's consuming throughput against raw aiokafka in assign() mode, in the same run.

Both read the same topic from the start to the end; the runs alternate so that neither gets a
warmer broker. The ratio's target is >= 0.95: committing offsets to ZooKeeper must stay off the
hot path.

    python benchmarks/throughput.py [--messages N] [--size BYTES] [--partitions P] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from common import create_topic, fill, fresh, median, table

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster


async def raw_aiokafka(bootstrap: str, topic: str, partitions: int, total: int) -> float:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=1_048_576,
        fetch_max_wait_ms=100,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen = 0
        start = time.perf_counter()
        while seen < total:
            for records in (await consumer.getmany(timeout_ms=100)).values():
                seen += len(records)
        return total / (time.perf_counter() - start)
    finally:
        await consumer.stop()


async def consumer_group(bootstrap: str, zookeeper: str, topic: str, total: int) -> float:
    async with ConsumerGroup(fresh("bench"), [bootstrap], [zookeeper], topic) as group:
        seen = 0
        start = time.perf_counter()
        async for _partition, batch in group:
            seen += len(batch)
            if seen >= total:
                break
        elapsed = time.perf_counter() - start
    return total / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # aiokafka's heartbeat chatter is not the result
    async with LocalCluster() as cluster:
        topic = await create_topic(cluster.bootstrap, args.partitions)
        await fill(cluster.bootstrap, topic, args.messages, args.size)
        raw: list[float] = []
        ours: list[float] = []
        for _ in range(args.rounds):
            raw.append(await raw_aiokafka(cluster.bootstrap, topic, args.partitions, args.messages))
            ours.append(
                await consumer_group(cluster.bootstrap, cluster.zookeeper, topic, args.messages)
            )
    base = median(raw)
    print(
        f"{args.messages} messages of {args.size} B on {args.partitions} partitions, "
        f"{args.rounds} alternating rounds, median msg/s"
    )
    print(
        table(
            ["consumer", "msg/s (median)", "min", "max", "ratio"],
            [
                [
                    "aiokafka assign() (baseline)",
                    f"{base:,.0f}",
                    f"{min(raw):,.0f}",
                    f"{max(raw):,.0f}",
                    "1.00",
                ],
                [
                    "aio_cluster ConsumerGroup",
                    f"{median(ours):,.0f}",
                    f"{min(ours):,.0f}",
                    f"{max(ours):,.0f}",
                    f"{median(ours) / base:.2f}",
                ],
            ],
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
