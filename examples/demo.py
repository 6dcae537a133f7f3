"""The main demo: a local cluster, a producer, and a consumer group rebalancing live.

Starts a single-node ZooKeeper + Kafka (or uses the one AIO_CLUSTER_BOOTSTRAP and
AIO_CLUSTER_ZOOKEEPER name), creates a topic of six partitions, produces a steady stream of
keyed messages, and lets members join and leave while they consume. In a terminal it shows a
live table (each member, its partitions, its rate and its lag) and each rebalance as it happens;
elsewhere it prints the same as plain lines. At the end it checks that every message was
consumed exactly once.

    python examples/demo.py [--duration 30] [--members 3]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid
from collections import Counter, deque

import anyio
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster

PARTITIONS = 6
TICK = 0.25
"""Seconds between two looks at the members (and redraws of the table)."""


class Tally:
    """What was produced to and consumed from each partition, and each message's deliveries."""

    def __init__(self) -> None:
        self.sent: Counter[int] = Counter()
        self.consumed: Counter[int] = Counter()
        self.deliveries: Counter[bytes] = Counter()

    def lag(self, partitions: list[int]) -> int:
        return sum(max(0, self.sent[p] - self.consumed[p]) for p in partitions)


async def produce(bootstrap: str, topic: str, stop: anyio.Event, tally: Tally) -> None:
    """About 200 messages a second, key ``k<i>``, round the partitions, until ``stop``."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        i = 0
        while not stop.is_set():
            partition = i % PARTITIONS
            await producer.send(
                topic, key=f"k{i}".encode(), value=f"message {i}".encode(), partition=partition
            )
            tally.sent[partition] += 1
            i += 1
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
        self.owned: list[int] = []
        self.rate = 0.0
        self._last = (time.monotonic(), 0)

    async def run(self, tally: Tally) -> None:
        async for partition, batch in self.group:
            tally.deliveries.update(record.key or b"" for record in batch)
            tally.consumed[partition] += len(batch)
            self.consumed += len(batch)

    def measure(self) -> None:
        """Update the rate (records a second since the last measure)."""
        now = time.monotonic()
        at, count = self._last
        if now - at >= 1.0:
            self.rate = (self.consumed - count) / (now - at)
            self._last = (now, self.consumed)


class Show:
    """The demo's output: a live rich table in a terminal, plain lines elsewhere."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self.events: deque[str] = deque(maxlen=10)
        self._display: Live | None = None
        self._next_line = 0.0

    def __enter__(self) -> Show:
        if self.live:
            self._display = Live(console=self.console, auto_refresh=False, transient=False)
            self._display.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._display is not None:
            self._display.__exit__(None, None, None)

    def say(self, line: str) -> None:
        """Something that happened: a join, a leave, a rebalance."""
        if self.live:
            self.events.append(line)
        else:
            print(line, flush=True)

    def update(self, elapsed: float, members: list[Member], tally: Tally) -> None:
        if self._display is not None:
            self._display.update(self._render(elapsed, members, tally), refresh=True)
        elif elapsed >= self._next_line:
            self._next_line += 1.0
            owned = "  ".join(f"{m.name}:{m.owned}" for m in members) or "(no members)"
            print(
                f"{elapsed:5.1f}s  produced {tally.sent.total():6d}  "
                f"consumed {tally.consumed.total():6d}  lag {tally.lag(list(range(PARTITIONS)))}  "
                f"{owned}",
                flush=True,
            )

    def _render(self, elapsed: float, members: list[Member], tally: Tally) -> Group:
        table = Table(
            title=f"{elapsed:5.1f}s  produced {tally.sent.total()}  "
            f"consumed {tally.consumed.total()}",
            title_justify="left",
        )
        table.add_column("member")
        table.add_column("partitions")
        table.add_column("records/s", justify="right")
        table.add_column("lag", justify="right")
        table.add_column("consumed", justify="right")
        for member in members:
            table.add_row(
                member.name,
                " ".join(map(str, member.owned)) or "-",
                f"{member.rate:,.0f}",
                f"{tally.lag(member.owned):,}",
                f"{member.consumed:,}",
            )
        events = Text("\n".join(self.events) or "(no rebalance yet)", style="dim")
        return Group(table, Text("rebalances", style="bold"), events)


def watch(elapsed: float, members: list[Member], show: Show) -> None:
    """Report each member whose partitions changed since the last look: a rebalance."""
    for member in members:
        member.measure()
        claimed = member.group.claimed
        if claimed != member.owned:
            show.say(f"{elapsed:5.1f}s  rebalance: {member.name} {member.owned} -> {claimed}")
            member.owned = claimed


async def main(duration: float, most: int) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    console = Console()
    tally = Tally()
    async with LocalCluster() as cluster:
        console.print(f"cluster: Kafka {cluster.bootstrap}, ZooKeeper {cluster.zookeeper}")
        topic, group = f"demo-{uuid.uuid4().hex[:6]}", f"demo-group-{uuid.uuid4().hex[:6]}"
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        await admin.close()
        console.print(f"topic {topic} with {PARTITIONS} partitions, group {group}")

        stop = anyio.Event()
        members: list[Member] = []
        names = iter(f"member{i}" for i in range(1, 1000))
        start = time.monotonic()
        # The script of the show: joins first, then a leave, then a join.
        plan = [(0.0, "join")] + [(3.0 * i, "join") for i in range(1, most)]
        plan += [(duration * 0.55, "leave"), (duration * 0.75, "join")]
        plan.sort()

        with Show(console) as show:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(produce, cluster.bootstrap, topic, stop, tally)
                while (elapsed := time.monotonic() - start) < duration:
                    while plan and plan[0][0] <= elapsed:
                        _at, action = plan.pop(0)
                        if action == "join":
                            member = Member(next(names), cluster, group, topic)
                            await member.group.register()
                            tasks.start_soon(member.run, tally)
                            members.append(member)
                            show.say(f"{elapsed:5.1f}s  -> {member.name} joined")
                        elif members:
                            leaving = members.pop(0)
                            await leaving.group.close()
                            show.say(
                                f"{elapsed:5.1f}s  <- {leaving.name} left after consuming "
                                f"{leaving.consumed}"
                            )
                    watch(elapsed, members, show)
                    show.update(elapsed, members, tally)
                    await asyncio.sleep(TICK)
                stop.set()
                # Let the members drain what was produced (bounded): a demo's progress check.
                deadline = time.monotonic() + 30
                while tally.deliveries.total() < tally.sent.total():
                    if time.monotonic() > deadline:
                        break
                    watch(time.monotonic() - start, members, show)
                    show.update(time.monotonic() - start, members, tally)
                    await asyncio.sleep(TICK)
                show.update(time.monotonic() - start, members, tally)
                for member in members:
                    await member.group.close()

    sent = tally.sent.total()
    expected = {f"k{i}".encode() for i in range(sent)}
    lost = len(expected - set(tally.deliveries))
    twice = sum(1 for count in tally.deliveries.values() if count > 1)
    console.print(
        f"produced {sent}, consumed {tally.deliveries.total()}: lost {lost}, "
        f"delivered twice {twice}",
        highlight=False,
    )
    return 0 if not lost and not twice else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="aio_cluster's live rebalancing demo")
    parser.add_argument(
        "--duration", "--seconds", type=float, default=30.0, help="seconds of the show"
    )
    parser.add_argument("--members", type=int, default=3, help="how many members join first")
    options = parser.parse_args()
    if options.duration <= 0 or options.members < 1:
        parser.error("--duration must be positive and --members at least 1")
    raise SystemExit(asyncio.run(main(options.duration, options.members)))
