"""Many topics in one group: one member's read rate over 10 topics, and a join over 50.

**Read rate.** One member subscribed to 10 topics of 4 partitions reads every record from the
start, against raw aiokafka ``assign()`` on the same 40 partitions, alternately in the same run
(``--rounds``, medians, and the paired ratio: the median of each round's ratio). Target >= 0.95.

**A join over 50 topics.** Four members read 50 topics of 4 partitions (200 partitions, each
topic assigned on its own with its own sticky target); a fifth joins, then leaves gracefully,
``--rounds`` times. Reported: the time until every partition is owned again, each topic balanced
over the members (the join's time includes the newcomer's start); the partitions taken from
members that stay; the newcomer's share; and the requests ZooKeeper received (``mntr``). With 4
partitions per topic and 5 members, each topic's partitions go to four of the five; the targets
also balance the members' totals, so the newcomer takes 40 (one in 40 of the topics): the fewest
moves that leave no member idle. A leave moves none of the stayers' partitions.

    python benchmarks/topics.py [--rounds R] [--messages N]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTopicPartition
from common import (
    RESULTS,
    create_topic,
    fill,
    fresh,
    markdown_table,
    median,
    table,
    zookeeper_packets,
)

from aio_cluster import ConsumerGroup, TopicPartition
from aio_cluster.local import LocalCluster


async def raw(bootstrap: str, topics: Sequence[str], total: int) -> float:
    """Records per second of raw aiokafka assign() over every partition of ``topics``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [KafkaTopicPartition(t, p) for t in topics for p in range(4)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen, first = 0, 0.0
        while seen < total:
            asked = time.perf_counter()
            got = sum(len(r) for r in (await consumer.getmany(timeout_ms=100)).values())
            if got and not seen:
                first = asked
            seen += got
        return seen / (time.perf_counter() - first)
    finally:
        await consumer.stop()


async def ours(cluster: LocalCluster, topics: Sequence[str], total: int) -> float:
    """Records per second of one member subscribed to ``topics`` (a fresh group: from the
    start), counted from the first batch's request."""
    group = ConsumerGroup(fresh("bench"), cluster.bootstrap, cluster.zookeeper, list(topics))
    async with group:
        batches = group.batches()
        seen, first = 0, 0.0
        while seen < total:
            asked = time.perf_counter()
            _tp, batch = await anext(batches)
            if not seen:
                first = asked
            seen += len(batch)
        rate = seen / (time.perf_counter() - first)
        await batches.aclose()  # type: ignore[attr-defined]
    return rate


async def read_rate(
    cluster: LocalCluster, args: argparse.Namespace
) -> tuple[list[float], list[float]]:
    topics = [await create_topic(cluster.bootstrap, 4) for _ in range(10)]
    per_topic = args.messages // 10
    await asyncio.gather(*(fill(cluster.bootstrap, t, per_topic, 100) for t in topics))
    total = per_topic * 10
    base: list[float] = []
    mine: list[float] = []
    for round_ in range(args.rounds):
        order = ["raw", "ours"] if round_ % 2 == 0 else ["ours", "raw"]
        for name in order:
            if name == "raw":
                base.append(await raw(cluster.bootstrap, topics, total))
            else:
                mine.append(await ours(cluster, topics, total))
    return base, mine


def balanced(members: Sequence[ConsumerGroup[TopicPartition]], topics: Sequence[str]) -> bool:
    """Every partition of ``topics`` owned by exactly one member, each topic balanced."""
    owned = [tp for m in members for tp in m.claimed]
    if len(owned) != len(set(owned)) or len(owned) != 4 * len(topics):
        return False
    for topic in topics:
        counts = Counter(m.id for m in members for tp in m.claimed if tp.topic == topic)
        sizes = [counts.get(m.id, 0) for m in members]
        if max(sizes) - min(sizes) > 1:
            return False
    return True


async def settle(members: Sequence[ConsumerGroup[TopicPartition]], topics: Sequence[str]) -> None:
    deadline = time.perf_counter() + 120
    while not balanced(members, topics):
        if time.perf_counter() > deadline:
            raise TimeoutError("the group did not settle in 120 s")
        await asyncio.sleep(0.002)


def owners(members: Sequence[ConsumerGroup[TopicPartition]]) -> dict[TopicPartition, str]:
    return {tp: m.id for m in members for tp in m.claimed}


async def join_and_leave(
    cluster: LocalCluster, args: argparse.Namespace
) -> list[tuple[float, int, int, float, int, int, int]]:
    topics = [await create_topic(cluster.bootstrap, 4) for _ in range(50)]
    name = fresh("bench")

    def member() -> ConsumerGroup[TopicPartition]:
        return ConsumerGroup(
            name, cluster.bootstrap, cluster.zookeeper, topics, register=False, loop_delay=0.05
        )

    stay = [member() for _ in range(4)]
    rows = []
    try:
        for group in stay:
            await group.register()
        await settle(stay, topics)
        for _ in range(args.rounds):
            before = owners(stay)
            packets = await zookeeper_packets(cluster.zookeeper)
            start = time.perf_counter()
            newcomer = member()
            await newcomer.register()
            await settle([*stay, newcomer], topics)
            join_s = time.perf_counter() - start
            join_packets = await zookeeper_packets(cluster.zookeeper) - packets
            after = owners([*stay, newcomer])
            share = sum(1 for owner in after.values() if owner == newcomer.id)
            join_moved = sum(1 for tp, owner in before.items() if after[tp] != owner)

            before = after
            packets = await zookeeper_packets(cluster.zookeeper)
            start = time.perf_counter()
            await newcomer.close()
            await settle(stay, topics)
            leave_s = time.perf_counter() - start
            leave_packets = await zookeeper_packets(cluster.zookeeper) - packets
            after = owners(stay)
            leave_moved = sum(
                1 for tp, owner in before.items() if owner != newcomer.id and after[tp] != owner
            )
            rows.append(
                (join_s, join_moved, join_packets, leave_s, leave_moved, leave_packets, share)
            )
    finally:
        for group in stay:
            await group.close()
    return rows


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.ERROR)
    async with LocalCluster() as cluster:
        base, mine = await read_rate(cluster, args)
        rounds = await join_and_leave(cluster, args)
    load = os.getloadavg()[0]
    paired = median([m / b for m, b in zip(mine, base, strict=True)])
    rate_headers = ["reader", "records/s (median)", "ratio", "paired ratio"]
    rate_rows = [
        ["aiokafka assign(), 40 partitions (baseline)", f"{median(base):,.0f}", "1.00", "1.00"],
        [
            "aio_cluster, one member on 10 topics",
            f"{median(mine):,.0f}",
            f"{median(mine) / median(base):.2f}",
            f"{paired:.2f}",
        ],
    ]
    join_headers = [
        "change",
        "settle ms (median, max)",
        "moved from stayers (each round)",
        "newcomer's share",
        "ZooKeeper packets",
    ]
    join_rows = []
    for label, offset in (("a 5th member joins", 0), ("it leaves", 3)):
        times = [r[offset] * 1000 for r in rounds]
        join_rows.append(
            [
                label,
                f"{median(times):.0f} ({max(times):.0f})",
                ", ".join(str(r[offset + 1]) for r in rounds),
                ", ".join(str(r[6]) for r in rounds) if offset == 0 else "",
                f"{median([float(r[offset + 2]) for r in rounds]):.0f}",
            ]
        )
    print(table(rate_headers, rate_rows))
    print()
    print(table(join_headers, join_rows))
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "topics.md").write_text(
        "# Many topics in one group\n\n"
        f"`python benchmarks/topics.py --rounds {args.rounds} --messages {args.messages}`, "
        f"{stamp}, load average {load:.1f}.\n\n"
        f"## One member on 10 topics x 4 partitions, {args.messages:,} records of 100 B\n\n"
        f"{markdown_table(rate_headers, rate_rows)}\n\n"
        "Target: ratio >= 0.95.\n\n"
        "## Four members on 50 topics x 4 partitions; a fifth joins and leaves\n\n"
        f"{markdown_table(join_headers, join_rows)}\n\n"
        "Targets: the join settles in < 1 s; it moves the fewest partitions that balance every "
        "topic and the members' totals (the newcomer's 40); a leave moves none of the "
        "stayers'.\n"
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=200_000)
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
