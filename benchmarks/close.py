"""How long a member's ``close()`` takes when nothing is in flight: ``--members`` members (20 by
default) started one after another, each alone in a group of its own on a topic of
``--partitions`` partitions, owning them all and idle in a long poll (no record to read, a fetch
waiting its ``max_wait`` at the broker), each closed in turn and its close timed.

The reference, measured in the same run, alternating with the members: a raw aiokafka consumer
assigned the same partitions, idle in a long poll of the same ``max_wait``, and its ``stop()``
timed. Each figure is also given as a ratio to it. Target (issue 55): a member's close within
50 ms (median). Uses the cluster the environment names (``AIO_CLUSTER_BOOTSTRAP``,
``AIO_CLUSTER_ZOOKEEPER``), else starts the local one. Results go to
``benchmarks/results/close.md``.

    python benchmarks/close.py [--members N] [--partitions P] [--max-wait S]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from common import create_topic, delete_topic, fresh, median, show, write_result

from aio_cluster import ConsumerGroup, Fetching
from aio_cluster.local import LocalCluster


async def member_close(cluster: LocalCluster, topic: str, args: argparse.Namespace) -> float:
    """One member's close, in seconds, once it owns every partition and idles."""
    member = ConsumerGroup(
        fresh("close"),
        cluster.bootstrap,
        cluster.zookeeper,
        topic,
        fetching=Fetching(max_wait=args.max_wait),
        register=False,
    )
    await member.register()  # returns once the member owns its partitions
    try:
        # The first fetch of each broker opens its fetch session; its answer comes after a
        # max_wait (nothing to read). Past three of them the member waits in a long poll.
        await asyncio.sleep(3 * args.max_wait)
    finally:
        began = time.perf_counter()
        await member.close()
    return time.perf_counter() - began


async def raw_stop(cluster: LocalCluster, topic: str, args: argparse.Namespace) -> float:
    """A raw aiokafka consumer's stop, in seconds, assigned every partition and idle."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=int(args.max_wait * 1000),
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(args.partitions)])
        await consumer.seek_to_end()
        await consumer.getmany(timeout_ms=int(args.max_wait * 1000))
        await asyncio.sleep(3 * args.max_wait)
    finally:
        began = time.perf_counter()
        await consumer.stop()
    return time.perf_counter() - began


async def main(args: argparse.Namespace) -> None:
    times: dict[str, list[float]] = {"raw aiokafka consumer's stop()": [], "member's close()": []}
    async with LocalCluster() as cluster:
        topic = await create_topic(cluster.bootstrap, args.partitions)
        try:
            for round_ in range(args.members):
                for label, measure in zip(times, (raw_stop, member_close), strict=True):
                    times[label].append(await measure(cluster, topic, args))
                print(
                    f"{time.strftime('%H:%M:%S')} {round_ + 1}/{args.members}: "
                    + ", ".join(
                        f"{label} {found[-1] * 1000:.1f} ms" for label, found in times.items()
                    )
                )
        finally:
            await delete_topic(cluster.bootstrap, topic)
    reference = median(next(iter(times.values())))
    rows = [
        [
            label,
            f"{median(found) * 1000:.1f}",
            f"{min(found) * 1000:.1f}",
            f"{max(found) * 1000:.1f}",
            f"{median(found) / reference:.2f}",
        ]
        for label, found in times.items()
    ]
    title = (
        f"Closing with nothing in flight: {args.members} of each, one after another, each owning "
        f"{args.partitions} partitions and idle in a long poll (max_wait {args.max_wait:g} s)"
    )
    headers = ["what", "median ms", "min ms", "max ms", "ratio to aiokafka's stop()"]
    table = show(title, headers, rows)
    write_result(
        "close.md",
        "A close with nothing in flight",
        table,
        "Target: a member's close within 50 ms (median).",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--members", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-wait", type=float, default=0.5)
    asyncio.run(main(parser.parse_args()))
