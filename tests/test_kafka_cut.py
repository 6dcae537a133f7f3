"""Liveness by progress against the real servers (issue 53): a member that keeps its ZooKeeper
session but cannot read Kafka gives its partitions to a member that can, within
``fetch_timeout`` and a few seconds; nothing is lost, no two members work on a partition at once,
and after the heal the group settles with both. When every member is cut, nothing moves.

The cut is made in the process: every request of the cut member's Kafka clients (told apart by
their client id, the member's id) is written nowhere and never answered, as behind a network
partition whose connections stay open, until aiokafka's request timeout closes the connection;
the next connection is made and fares the same. ZooKeeper is untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.conn import AIOKafkaConnection
from test_network_faults import Log, Run

from aio_cluster import ConsumerGroup, Record
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import NoNodeError, ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout, marks_path

from conftest import MakeTopic
from support import settled, stored_offsets, wait_until

pytestmark = [pytest.mark.asyncio, pytest.mark.serial]

PARTITIONS = 4
FETCH_TIMEOUT = 5.0
CUT = 25.0
"""Seconds of the cut: five times ``fetch_timeout``, so its outcome is clearly the bound's."""


class KafkaCut:
    """Drops the Kafka requests of the clients whose id is in `cut` (see the module)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.cut: set[str] = set()
        original = AIOKafkaConnection.send
        wire = self

        def send(conn: Any, request: Any, expect_response: bool = True) -> Awaitable[Any]:
            client_id = conn._client_id  # aiokafka has no public attribute for it
            if client_id not in wire.cut:
                return original(conn, request, expect_response)
            # Never written, never answered (not even after the heal): the caller's request
            # timeout ends the wait. aiokafka has no public attribute for it.
            return asyncio.wait_for(asyncio.Event().wait(), conn._request_timeout)

        monkeypatch.setattr(AIOKafkaConnection, "send", send)

    def drop(self, *members: ConsumerGroup) -> None:
        self.cut = {member.id for member in members}

    def heal(self) -> None:
        self.cut = set()


@contextlib.asynccontextmanager
async def observed(cluster: LocalCluster) -> AsyncIterator[ZooKeeper]:
    observer = ZooKeeper(cluster.zookeeper, session_timeout=30.0)
    await observer.start()
    try:
        yield observer
    finally:
        await observer.close()


def member(cluster: LocalCluster, group: str, topic: str) -> ConsumerGroup:
    return ConsumerGroup(
        group,
        [cluster.bootstrap],
        [cluster.zookeeper],
        topic,
        session_timeout=6.0,
        fetch_timeout=FETCH_TIMEOUT,
        loop_delay=0.1,
        commit_interval=0.2,
        claim_timeout=10.0,
        rebalance_timeout=10.0,
        close_timeout=10.0,
        kafka_options={"request_timeout_ms": 3_000},
    )


async def marked(observer: ZooKeeper, group: str) -> list[str]:
    try:
        return await observer.get_children(marks_path(group))
    except NoNodeError:
        return []


async def write_on(producer: AIOKafkaProducer, topic: str, ends: dict[int, int]) -> None:
    """Until cancelled: a record to every partition every 20 ms; ``ends`` the offsets written."""
    i = 0
    while True:
        for partition in range(PARTITIONS):
            metadata = await (
                await producer.send(topic, value=str(i).encode(), partition=partition)
            )
            ends[partition] = max(ends.get(partition, 0), metadata.offset + 1)
        i += 1
        await asyncio.sleep(0.02)


async def by_async_for(group: ConsumerGroup, log: Log) -> None:
    async for partition, batch in group:
        started = time.monotonic()
        await asyncio.sleep(0.001 * len(batch))
        log.runs.append(
            Run(group.id, partition, batch[0].offset, batch[-1].offset, started, time.monotonic())
        )


async def by_process(group: ConsumerGroup, log: Log) -> None:
    async def handler(record: Record) -> None:
        started = time.monotonic()
        await asyncio.sleep(0.001)
        log.runs.append(
            Run(group.id, record.partition, record.offset, record.offset, started, time.monotonic())
        )

    await group.process(handler, concurrency=8)


async def run_cut(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
    consume: Callable[[ConsumerGroup, Log], Coroutine[Any, Any, None]],
    *,
    everyone: bool,
) -> None:
    topic = await make_topic(PARTITIONS)
    layout = GroupLayout(group_name, topic)
    wire = KafkaCut(monkeypatch)
    log = Log()
    ends: dict[int, int] = {}
    async with observed(cluster) as observer:
        cut = member(cluster, group_name, topic)
        other = member(cluster, group_name, topic)
        async with cut, other:
            await wait_until(lambda: settled(observer, [cut, other]), what="both members joined")
            before = {m.id: sorted(m.claimed) for m in (cut, other)}
            tasks = [
                asyncio.create_task(write_on(producer, topic, ends)),
                asyncio.create_task(log.watch_offsets(observer, layout)),
                *(asyncio.create_task(consume(m, log)) for m in (cut, other)),
            ]
            try:
                await wait_until(
                    lambda: {run.member for run in log.runs} == {cut.id, other.id},
                    what="both members work",
                )
                began = time.monotonic()
                wire.drop(*((cut, other) if everyone else (cut,)))
                if everyone:
                    # Both mark what they own; nobody can read, so nothing moves.
                    await wait_until(
                        lambda: _count(marked(observer, group_name), 2),
                        timeout=FETCH_TIMEOUT + 15,
                        what="both members marked",
                    )
                    await asyncio.sleep(max(0.0, began + CUT - time.monotonic()))
                    assert {m.id: sorted(m.claimed) for m in (cut, other)} == before
                else:
                    await wait_until(
                        lambda: sorted(other.claimed) == list(range(PARTITIONS)),
                        timeout=FETCH_TIMEOUT + 15,
                        what="the other member took every partition",
                    )
                    taken = time.monotonic()
                    # It consumes them: records written after the cut began, of each partition
                    # the cut member owned.
                    await wait_until(
                        lambda: all(
                            any(
                                r.member == other.id and r.partition == p and r.started > taken
                                for r in log.runs
                            )
                            for p in before[cut.id]
                        ),
                        timeout=15,
                        what="the other member consumes the cut member's partitions",
                    )
                    assert await marked(observer, group_name) == [cut.id]
                    await asyncio.sleep(max(0.0, began + CUT - time.monotonic()))
                wire.heal()
                if not everyone:
                    await wait_until(
                        lambda: _count(marked(observer, group_name), 0),
                        timeout=FETCH_TIMEOUT + 15,
                        what="the cut member cleared its mark",
                    )

                async def both() -> bool:
                    shares = len(cut.claimed) == len(other.claimed) == PARTITIONS // 2
                    return shares and await settled(observer, [cut, other])

                await wait_until(both, timeout=60, what="settled again with both")
            finally:
                tasks[0].cancel()
                await asyncio.gather(tasks[0], return_exceptions=True)

            async def done() -> bool:
                stored = await stored_offsets(observer, layout, PARTITIONS)
                # A record whose send was cancelled with the writer may be past ``ends``.
                return all(stored.get(p, 0) >= end for p, end in ends.items())

            try:
                await wait_until(done, timeout=60, what="every record consumed and stored")
            finally:
                for task in tasks[1:]:
                    task.cancel()
                results = await asyncio.gather(*tasks[1:], return_exceptions=True)
            for result in results:
                if not isinstance(result, asyncio.CancelledError):
                    raise AssertionError(f"a consumer ended early: {result!r}")
    overlapping = log.overlaps()
    assert not overlapping, f"{len(overlapping)} overlapping runs, e.g. {overlapping[:3]}"
    handled = log.handled()
    for partition, end in ends.items():
        missing = set(range(end)) - handled.get(partition, set())
        assert not missing, f"partition {partition}: {len(missing)} records never handled"
    assert not log.backwards, f"stored offsets went back: {log.backwards}"
    if everyone:
        repeated = sum(run.last - run.first + 1 for run in log.runs) - sum(
            len(offsets) for offsets in handled.values()
        )
        assert repeated == 0, f"{repeated} records handled twice"


async def _count(names: Awaitable[list[str]], count: int) -> bool:
    return len(await names) == count


async def test_a_member_cut_off_from_kafka_gives_its_partitions_up_async_for(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await run_cut(
        cluster, make_topic, producer, group_name, monkeypatch, by_async_for, everyone=False
    )


async def test_a_member_cut_off_from_kafka_gives_its_partitions_up_process(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await run_cut(
        cluster, make_topic, producer, group_name, monkeypatch, by_process, everyone=False
    )


async def test_every_member_cut_off_from_kafka_moves_nothing(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await run_cut(
        cluster, make_topic, producer, group_name, monkeypatch, by_async_for, everyone=True
    )
