"""The main demo: a local cluster, a producer, and a consumer group rebalancing live.

Starts a single-node ZooKeeper + Kafka (or uses the one AIO_CLUSTER_BOOTSTRAP and
AIO_CLUSTER_ZOOKEEPER name), creates a topic of six partitions, produces a steady stream of
keyed messages, and lets members join and leave while they consume. Every second it prints who
owns which partition and how much each member consumed; at the end it checks that every message
was consumed exactly once.

    python examples/demo.py [--seconds 30] [--members 3]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid
from collections import Counter

import anyio
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster

PARTITIONS = 6


async def produce(bootstrap: str, topic: str, stop: asyncio.Event, sent: list[int]) -> None:
    """About 200 messages a second, key ``k<i>``, until ``stop``."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        i = 0
        while not stop.is_set():
            await producer.send(topic, key=f"k{i}".encode(), value=f"message {i}".encode())
            i += 1
            sent[0] = i
            await asyncio.sleep(0.005)
        await producer.flush()
    finally:
        await producer.stop()


class Member:
    """A group member consuming in a task of its own, counting what it got."""

    def __init__(self, name: str, cluster: LocalCluster, group: str, topic: str) -> None:
        self.name = name
        self.group = ConsumerGroup(
            group, [cluster.bootstrap], [cluster.zookeeper], topic, loop_delay=0.1
        )
        self.consumed = 0

    async def run(self, seen: Counter[bytes]) -> None:
        async for _partition, batch in self.group:
            seen.update(record.key or b"" for record in batch)
            self.consumed += len(batch)


def status(elapsed: float, sent: int, members: list[Member], seen: Counter[bytes]) -> str:
    owned = "  ".join(f"{m.name}:{m.group.claimed}" for m in members) or "(no members)"
    return f"{elapsed:5.1f}s  produced {sent:6d}  consumed {sum(seen.values()):6d}  {owned}"


async def main(seconds: float, most: int) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    async with LocalCluster() as cluster:
        print(f"cluster: Kafka {cluster.bootstrap}, ZooKeeper {cluster.zookeeper}")
        topic, group = f"demo-{uuid.uuid4().hex[:6]}", f"demo-group-{uuid.uuid4().hex[:6]}"
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        await admin.close()
        print(f"topic {topic} with {PARTITIONS} partitions, group {group}")

        seen: Counter[bytes] = Counter()
        sent = [0]
        stop = asyncio.Event()
        members: list[Member] = []
        names = iter(f"member{i}" for i in range(1, 100))
        start = time.monotonic()
        # The script of the show: joins first, then a leave, then a join.
        plan = [(0.0, "join")] + [(3.0 * i, "join") for i in range(1, most)]
        plan += [(seconds * 0.55, "leave"), (seconds * 0.75, "join")]

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(produce, cluster.bootstrap, topic, stop, sent)
            next_print = 0.0
            while (elapsed := time.monotonic() - start) < seconds:
                while plan and plan[0][0] <= elapsed:
                    _at, action = plan.pop(0)
                    if action == "join":
                        member = Member(next(names), cluster, group, topic)
                        await member.group.register()
                        tasks.start_soon(member.run, seen)
                        members.append(member)
                        print(f"-> {member.name} joined and owns {member.group.claimed}")
                    elif members:
                        leaving = members.pop(0)
                        await leaving.group.close()
                        print(f"<- {leaving.name} left after consuming {leaving.consumed}")
                if elapsed >= next_print:
                    print(status(elapsed, sent[0], members, seen))
                    next_print += 1.0
                await asyncio.sleep(0.1)
            stop.set()
            deadline = time.monotonic() + 30
            while sum(seen.values()) < sent[0] and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)  # a demo's progress check, not a synchronisation
            print(status(time.monotonic() - start, sent[0], members, seen))
            for member in members:
                await member.group.close()

    expected = {f"k{i}".encode() for i in range(sent[0])}
    missing = expected - set(seen)
    twice = [key for key, count in seen.items() if count > 1]
    print(
        f"produced {sent[0]}, consumed {sum(seen.values())}: "
        f"{len(missing)} missing, {len(twice)} delivered twice"
    )
    return 0 if not missing and not twice else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="aio_cluster's live rebalancing demo")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--members", type=int, default=3)
    options = parser.parse_args()
    raise SystemExit(asyncio.run(main(options.seconds, options.members)))
