"""How long one member's ``register()`` takes: a member joins a group of three on a topic of 12
partitions and leaves again, ``--rounds`` times; the median, min and max of the join, with the
machine's load average.

The join includes the member's own start (its ZooKeeper session and Kafka clients) and its first
rebalance, until it owns its partitions. To compare two versions, run the same command against
each (e.g. with ``PYTHONPATH`` pointing at an export of the other version's ``aio_cluster``).

    python benchmarks/join.py [--rounds N] [--partitions P]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from common import create_topic, fresh, table

import aio_cluster
from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster


async def main(args: argparse.Namespace) -> None:
    async with LocalCluster() as cluster:
        topic = await create_topic(cluster.bootstrap, args.partitions)
        group = fresh("join")
        members = [
            ConsumerGroup(group, cluster.bootstrap, cluster.zookeeper, topic, register=False)
            for _ in range(3)
        ]
        for member in members:
            await member.register()
        times, loads = [], []
        try:
            for _ in range(args.rounds):
                joining = ConsumerGroup(
                    group, cluster.bootstrap, cluster.zookeeper, topic, register=False
                )
                began = time.perf_counter()
                await joining.register()
                times.append(time.perf_counter() - began)
                loads.append(os.getloadavg()[0])
                await joining.close()
        finally:
            for member in members:
                await member.close()
    print(f"aio_cluster from {os.path.dirname(aio_cluster.__file__)}")
    print(
        table(
            ("what", "median ms", "min", "max", "load average"),
            [
                (
                    f"a 4th member joins ({args.partitions} partitions, {args.rounds} rounds)",
                    f"{statistics.median(times) * 1000:.0f}",
                    f"{min(times) * 1000:.0f}",
                    f"{max(times) * 1000:.0f}",
                    f"{statistics.median(loads):.1f}",
                )
            ],
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--partitions", type=int, default=12)
    asyncio.run(main(parser.parse_args()))
