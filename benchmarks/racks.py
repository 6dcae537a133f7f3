"""The bytes that cross racks: members in racks reading a replicated topic, against members
reading from the partitions' leaders only (today's reading, no ``rack``) and a group with one
member that has no rack, in one run.

Three brokers in racks ``a``, ``b`` and ``c`` (the rack-aware replica selector on). For each
replication factor of ``--replicas`` and each setup, a fresh topic of ``--partitions``
partitions and a fresh group of three members, one *living* in each rack; once the group has
settled, a backlog of ``--messages`` records of ``--size`` bytes is written and the group reads
it all. A member is given its rack (``rack=...``) or not, by setup. With three replicas every
broker holds every partition, so only the fetch's rack matters; with two, a partition has no
replica in one rack, and the rack-aware target has to give it to a member in one of the other
two. Each
member's bytes fetched from each broker are the member's own fetch statistics
(`GroupStatistics.fetched_bytes`: the record bytes of every fetch answer, by broker). A byte
crosses racks when the broker it came from is not in the rack the member lives in: in a cloud,
one rack is one availability zone, and those bytes are billed.

    python benchmarks/racks.py [--partitions P] [--replicas R ...] [--messages N] [--size B]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import anyio
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from common import RESULTS, fill, fresh, markdown_table, table

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster

RACKS = ("a", "b", "c")
SETUPS: dict[str, tuple[str | None, ...]] = {
    "leader only (no rack)": (None, None, None),
    "members in racks": RACKS,
    "one member without a rack": ("a", "b", None),
}
"""Each setup: the rack each of the three members (living in racks a, b, c) is given."""
PRICE_PER_GB = 0.02
"""A cloud's price of one GB crossing zones, both directions together (0.01 out + 0.01 in)."""


@dataclass(frozen=True)
class Read:
    """What one member living in ``zone`` read, given ``rack``: bytes by broker rack."""

    zone: str
    rack: str | None
    by_rack: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_rack.values())

    @property
    def crossed(self) -> int:
        return self.total - self.by_rack.get(self.zone, 0)


async def make_topic(bootstrap: str, partitions: int, replicas: int) -> str:
    name = fresh("racks")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, replicas)])
        while True:
            (described,) = await admin.describe_topics([name])
            if not described["error_code"] and len(described["partitions"]) == partitions:
                return name
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


async def read_all(
    cluster: LocalCluster, args: argparse.Namespace, replicas: int, racks: Sequence[str | None]
) -> list[Read]:
    """A fresh topic and a fresh group of one member per zone, given ``racks``: once the group
    settled, the backlog is written and read."""
    topic = await make_topic(cluster.bootstrap, args.partitions, replicas)
    group = fresh("racks")
    members = [
        ConsumerGroup(group, cluster.bootstrap, cluster.zookeeper, topic, rack=rack)
        for rack in racks
    ]
    handed = [0] * len(members)
    done = anyio.Event()
    async with members[0], members[1], members[2]:
        while True:
            shares = [len(member.claimed) for member in members]
            if sum(shares) == args.partitions and max(shares) - min(shares) <= 1:
                break
            await asyncio.sleep(0.1)
        await fill(cluster.bootstrap, topic, args.messages, args.size)
        async with anyio.create_task_group() as tasks:

            async def read(index: int) -> None:
                async for _partition, batch in members[index]:
                    handed[index] += len(batch)
                    if sum(handed) >= args.messages:
                        done.set()

            for index in range(len(members)):
                tasks.start_soon(read, index)
            await done.wait()
            tasks.cancel_scope.cancel()
        stats = [await member.statistics() for member in members]
    return [
        Read(zone, rack, {RACKS[node - 1]: size for node, size in s.fetched_bytes.items()})
        for zone, rack, s in zip(RACKS, racks, stats, strict=True)
    ]


def mb(size: float) -> str:
    return f"{size / 1e6:,.1f}"


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.ERROR)
    async with LocalCluster(brokers=3, racks=RACKS) as cluster:
        reads = {
            f"{name}, {replicas} replicas": await read_all(cluster, args, replicas, racks)
            for replicas in args.replicas
            for name, racks in SETUPS.items()
        }
    load = os.getloadavg()[0]
    member_headers = [
        "setup",
        "member lives in",
        "rack given",
        *[f"MB from {r}" for r in RACKS],
        "own rack %",
    ]
    member_rows = [
        [
            name,
            read.zone,
            read.rack or "-",
            *[mb(read.by_rack.get(r, 0)) for r in RACKS],
            f"{100 * (read.total - read.crossed) / max(read.total, 1):.1f}",
        ]
        for name, found in reads.items()
        for read in found
    ]
    group_headers = ["setup", "MB read", "MB across racks", "across %", "$ per TB read"]
    group_rows = []
    for name, found in reads.items():
        total = sum(r.total for r in found)
        crossed = sum(r.crossed for r in found)
        share = crossed / max(total, 1)
        group_rows.append(
            [
                name,
                mb(total),
                mb(crossed),
                f"{100 * share:.1f}",
                f"{share * 1000 * PRICE_PER_GB:.2f}",
            ]
        )
    print(table(member_headers, member_rows))
    print()
    print(table(group_headers, group_rows))
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = (
        f"python benchmarks/racks.py --partitions {args.partitions} --replicas "
        f"{' '.join(map(str, args.replicas))} --messages {args.messages} --size {args.size}"
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "racks.md").write_text(
        "# Bytes across racks\n\n"
        f"`{command}`, {stamp}, load average {load:.1f}.\n\n"
        f"Three brokers in racks a, b, c; for each setup a fresh topic of {args.partitions} "
        f"partitions and a fresh group of three members, one living in each rack; once it "
        f"settled, {args.messages:,} records of {args.size} B are written and the group reads "
        "them all.\n\n"
        "## Each member's bytes, by the rack of the broker they came from\n\n"
        f"{markdown_table(member_headers, member_rows)}\n\n"
        "## The group\n\n"
        f"{markdown_table(group_headers, group_rows)}\n\n"
        f"'$ per TB read': the bytes across racks of each TB the group reads, at "
        f"${PRICE_PER_GB} per GB across zones (in and out together).\n"
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--replicas", type=int, nargs="+", default=[3, 2])
    parser.add_argument("--messages", type=int, default=12_000)
    parser.add_argument("--size", type=int, default=1_000)
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
