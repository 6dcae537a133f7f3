"""A member cut off from ZooKeeper (a FaultProxy between it and the server drops its traffic;
Kafka stays reachable) past its session, then healed, against the real servers: it stops before
its session may expire, nobody's work on a partition overlaps another's, nothing is lost, the
stored offsets never go back, and the group settles after the heal."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from aio_cluster import ConsumerGroup, Record
from aio_cluster.local import FaultProxy, LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic
from support import observed, settled, stored_offsets, wait_until

# The members' 6-second sessions and the phases of their silence are timed against the real
# servers: tests running beside them on a small machine slow ZooKeeper's answers enough to expire
# a session nobody cut. So these run in a pytest of their own, two at a time, not among the whole
# suite's workers (noxfile.py).
pytestmark = [pytest.mark.asyncio, pytest.mark.faults]

SESSION = 6.0
PARTITIONS = 4


@dataclass
class Run:
    """One handler run (or one loop body) of one member."""

    member: str
    partition: int
    first: int
    last: int
    started: float
    ended: float


class Log:
    """Every run, and the stored offsets as they were seen over time."""

    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.backwards: list[str] = []

    def overlaps(self) -> list[tuple[Run, Run]]:
        """Pairs of runs of different members on one partition that overlap in time."""
        found = []
        by_partition: dict[int, list[Run]] = {}
        for run in self.runs:
            by_partition.setdefault(run.partition, []).append(run)
        for runs in by_partition.values():
            runs.sort(key=lambda run: run.started)
            for i, run in enumerate(runs):
                for other in runs[i + 1 :]:
                    if other.started >= run.ended:
                        break
                    if other.member != run.member:
                        found.append((run, other))
        return found

    def handled(self) -> dict[int, set[int]]:
        found: dict[int, set[int]] = {}
        for run in self.runs:
            found.setdefault(run.partition, set()).update(range(run.first, run.last + 1))
        return found

    def check_complete(self, ends: Mapping[int, int]) -> None:
        """Fail unless every record below ``ends`` (partition -> its end offset) was handled
        and no stored offset went back."""
        handled = self.handled()
        for partition, end in ends.items():
            missing = set(range(end)) - handled.get(partition, set())
            assert not missing, f"partition {partition}: {len(missing)} records never handled"
        assert not self.backwards, f"stored offsets went back: {self.backwards}"

    async def watch_offsets(self, zk: ZooKeeper, layout: GroupLayout) -> None:
        """Until cancelled: read the stored offsets and note any that went back."""
        seen: dict[int, int] = {}
        while True:
            for partition, offset in (await stored_offsets(zk, layout, PARTITIONS)).items():
                if offset < seen.get(partition, -1):
                    self.backwards.append(f"partition {partition}: {seen[partition]} -> {offset}")
                seen[partition] = max(offset, seen.get(partition, -1))
            await asyncio.sleep(0.1)


async def backlog(producer: AIOKafkaProducer, topic: str, count: int) -> dict[int, int]:
    """``count`` records over 40 keys; partition -> its end offset."""
    futures = [
        await producer.send(topic, key=f"k{i % 40}".encode(), value=str(i).encode())
        for i in range(count)
    ]
    ends: dict[int, int] = {}
    for future in futures:
        metadata = await future
        ends[metadata.partition] = max(ends.get(metadata.partition, 0), metadata.offset + 1)
    return ends


def member(cluster: LocalCluster, group: str, topic: str, zookeeper: str) -> ConsumerGroup:
    return ConsumerGroup(
        group,
        [cluster.bootstrap],
        [zookeeper],
        topic,
        session_timeout=SESSION,
        loop_delay=0.05,
        commit_interval=0.2,
        claim_timeout=10.0,
        request_timeout=2.0,
    )


async def cut_and_heal(
    proxy: FaultProxy, cut: ConsumerGroup, other: ConsumerGroup, log: Log
) -> tuple[float, float]:
    """Once the cut member has started work, drop its ZooKeeper traffic for twice the session
    (until the other member took every partition), then heal; returns when the cut began and
    when it ended."""
    await wait_until(
        lambda: any(run.member == cut.id for run in log.runs), what="the cut member works"
    )
    began = time.monotonic()
    proxy.drop()
    await asyncio.sleep(2 * SESSION)
    await wait_until(
        lambda: sorted(other.claimed) == list(range(PARTITIONS)),
        timeout=30,
        what="the other member took every partition",
    )
    healed = time.monotonic()
    proxy.forward()
    return began, healed


def check(log: Log, cut_id: str, began: float, healed: float, ends: dict[int, int]) -> None:
    overlapping = log.overlaps()
    assert not overlapping, f"{len(overlapping)} overlapping runs, e.g. {overlapping[:3]}"
    # Its last answer came before the cut: from half a session after it nothing may start (the
    # margin is for the clock read inside the handler, after the check).
    silent = began + SESSION / 2 + 0.2
    late = [run for run in log.runs if run.member == cut_id and silent < run.started < healed]
    assert not late, f"the cut member started {len(late)} runs once it fell silent: {late[:3]}"
    log.check_complete(ends)


async def run_cut(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    consume: Callable[[ConsumerGroup, Log], Coroutine[Any, Any, None]],
    count: int,
) -> None:
    topic = await make_topic(PARTITIONS)
    ends = await backlog(producer, topic, count)
    log = Log()
    layout = GroupLayout(group_name, topic)

    async with FaultProxy(cluster.zookeeper) as proxy, observed(cluster) as observer:
        cut = member(cluster, group_name, topic, proxy.address)
        other = member(cluster, group_name, topic, cluster.zookeeper)

        async def done() -> bool:
            return await stored_offsets(observer, layout, PARTITIONS) == ends

        async with cut, other:
            await wait_until(lambda: settled(observer, [cut, other]), what="both members joined")
            tasks = [
                asyncio.create_task(log.watch_offsets(observer, layout)),
                *(asyncio.create_task(consume(m, log)) for m in (cut, other)),
            ]
            try:
                began, healed = await cut_and_heal(proxy, cut, other, log)
                await wait_until(done, timeout=120, what="every offset stored")
                await wait_until(
                    lambda: settled(observer, [cut, other]), timeout=60, what="settled again"
                )
            finally:
                for task in tasks:
                    task.cancel()
                results = await asyncio.gather(*tasks, return_exceptions=True)
            for result in results:
                if not isinstance(result, asyncio.CancelledError):
                    raise AssertionError(f"a consumer ended early: {result!r}")
        check(log, cut.id, began, healed, ends)


async def test_process_stops_before_its_session_may_expire(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    """The default max_bytes: a member's batch holds more than it handles in a session."""

    async def consume(group: ConsumerGroup, log: Log) -> None:
        async def handler(record: Record) -> None:
            started = time.monotonic()
            await asyncio.sleep(0.02)
            log.runs.append(
                Run(
                    group.id,
                    record.partition,
                    record.offset,
                    record.offset,
                    started,
                    time.monotonic(),
                )
            )

        await group.process(handler, concurrency=8, ordering="key")

    await run_cut(cluster, make_topic, producer, group_name, consume, 8_000)


async def test_async_for_stops_before_its_session_may_expire(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    async def consume(group: ConsumerGroup, log: Log) -> None:
        async for partition, batch in group:
            started = time.monotonic()
            # A millisecond a record, but never past a quarter of the session: a body longer
            # than half the session is the user's part to avoid (docs/processing.md), and a
            # default-size batch of 8,000 records would make one of 8 s.
            await asyncio.sleep(min(0.001 * len(batch), SESSION / 4))
            log.runs.append(
                Run(
                    group.id,
                    partition,
                    batch[0].offset,
                    batch[-1].offset,
                    started,
                    time.monotonic(),
                )
            )

    await run_cut(cluster, make_topic, producer, group_name, consume, 20_000)
