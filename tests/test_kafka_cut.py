"""Liveness by progress against the real servers (issue 53): a member that keeps its ZooKeeper
session but cannot read Kafka gives its partitions to a member that can, within
``fetch_timeout`` and a few seconds; nothing is lost, no two members work on a partition at once,
and after the heal the group settles with both. When every member is cut, nothing moves. Cut
from one broker of three, a member gives up only the partitions that broker leads.

The cut is the local cluster's Kafka fault proxies (one per broker, `LocalCluster.kafka_proxies`):
the cut member's connections stay open and nothing arrives, as in a network partition; its
ZooKeeper traffic is untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer
from test_network_faults import Log, Run

from aio_cluster import ConsumerGroup, RebalanceListener, Record, UnreadableError
from aio_cluster.local import KafkaProxies, LocalCluster
from aio_cluster.zookeeper.client import NoNodeError, ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout, marks_path

from support import (
    create_topic,
    fresh,
    observed,
    producer_of,
    settled,
    stored_offsets,
    wait_until,
)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.faults]

PARTITIONS = 4
FETCH_TIMEOUT = 5.0
CUT = 15.0
"""Seconds of the cut: three times ``fetch_timeout``, so its outcome is clearly the bound's."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def proxied_brokers() -> AsyncIterator[LocalCluster]:
    """Three Kafka nodes (one ZooKeeper), with two sets of Kafka proxies' listeners: two
    members at a time may be cut."""
    async with LocalCluster(brokers=3, use_env=False, kafka_proxies=2) as started:
        yield started


class Told(RebalanceListener[int]):
    """What the listener of the cut member hears of what it cannot read."""

    def __init__(self) -> None:
        self.unreadable: list[tuple[list[int], UnreadableError]] = []

    async def on_partitions_unreadable(self, partitions: list[int], error: UnreadableError) -> None:
        self.unreadable.append((partitions, error))


def member(
    cluster: LocalCluster,
    group: str,
    topic: str,
    bootstrap: str,
    strategy: str = "sticky",
    listener: RebalanceListener[int] | None = None,
) -> ConsumerGroup:
    return ConsumerGroup(
        group,
        bootstrap,
        [cluster.zookeeper],
        topic,
        strategy=strategy,
        listener=listener,
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


async def write_on(
    producer: AIOKafkaProducer, topic: str, partitions: int, ends: dict[int, int]
) -> None:
    """Until cancelled: a record to every partition every 50 ms; ``ends`` the offsets written."""
    i = 0
    while True:
        for partition in range(partitions):
            metadata = await (
                await producer.send(topic, value=str(i).encode(), partition=partition)
            )
            ends[partition] = max(ends.get(partition, 0), metadata.offset + 1)
        i += 1
        await asyncio.sleep(0.05)


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
    consume: Callable[[ConsumerGroup, Log], Coroutine[Any, Any, None]],
    *,
    cut_off: str,
    partitions: int = PARTITIONS,
    strategy: str = "sticky",
    stranger: bool = False,
) -> None:
    """Two members under load; ``cut_off`` one member from every broker (``"one"``), from the
    leader of one of its partitions only (``"broker"``), or both from every broker (``"all"``),
    for `CUT` seconds; then heal and check (see the module)."""
    topic = await create_topic(cluster.bootstrap, partitions)
    group_name = fresh("group")
    layout = GroupLayout(group_name, topic)
    log = Log()
    ends: dict[int, int] = {}
    async with contextlib.AsyncExitStack() as stack:
        observer = await stack.enter_async_context(observed(cluster))
        producer = await stack.enter_async_context(producer_of(cluster))
        cut_proxies = await stack.enter_async_context(cluster.kafka_proxies())
        other_proxies: KafkaProxies | None = None
        if cut_off == "all":
            other_proxies = await stack.enter_async_context(cluster.kafka_proxies())
        if stranger:
            # Something else wrote a node among the marks: ignored, it crashes nobody.
            await observer.create(
                f"{marks_path(group_name)}/stranger", b"not a mark", makepath=True
            )
        told = Told()
        cut = member(cluster, group_name, topic, cut_proxies.bootstrap, strategy, told)
        other = member(
            cluster,
            group_name,
            topic,
            cluster.bootstrap if other_proxies is None else other_proxies.bootstrap,
            strategy,
        )
        async with cut, other:
            await wait_until(lambda: settled(observer, [cut, other]), what="both members joined")
            before = {m.id: sorted(m.claimed) for m in (cut, other)}
            moving = before[cut.id]
            if cut_off == "broker":
                leaders = {p: await cluster.leader(topic, p) for p in moving}
                broker = leaders[moving[0]]
                moving = [p for p in moving if leaders[p] == broker]
                assert len(moving) < len(before[cut.id]), f"one broker leads all: {leaders}"
            tasks = [
                asyncio.create_task(write_on(producer, topic, partitions, ends)),
                asyncio.create_task(log.watch_offsets(observer, layout)),
                *(asyncio.create_task(consume(m, log)) for m in (cut, other)),
            ]
            try:
                await wait_until(
                    lambda: {run.member for run in log.runs} == {cut.id, other.id},
                    what="both members work",
                )
                began = time.monotonic()
                if cut_off == "broker":
                    cut_proxies[broker].drop()
                else:
                    cut_proxies.drop()
                if other_proxies is not None:
                    other_proxies.drop()
                if cut_off == "all":
                    # Both mark what they own; nobody can read, so nothing moves.
                    await wait_until(
                        lambda: _count(marked(observer, group_name), 2),
                        timeout=FETCH_TIMEOUT + 15,
                        what="both members marked",
                    )
                    await hold(began, time.monotonic())
                    assert {m.id: sorted(m.claimed) for m in (cut, other)} == before
                else:
                    expected = sorted(before[other.id] + moving)
                    await wait_until(
                        lambda: sorted(other.claimed) == expected,
                        timeout=FETCH_TIMEOUT + 15,
                        what="the other member took the partitions the cut member cannot read",
                    )
                    taken = time.monotonic()
                    # It consumes them: records written after it took them.
                    await wait_until(
                        lambda: all(
                            any(
                                r.member == other.id and r.partition == p and r.started > taken
                                for r in log.runs
                            )
                            for p in moving
                        ),
                        timeout=15,
                        what="the other member consumes them",
                    )
                    assert set(await marked(observer, group_name)) - {"stranger"} == {cut.id}
                    # The application sees it, without waiting on the leaders it cannot reach.
                    seen = await cut.statistics()
                    assert list(seen.unreadable) == moving
                    assert seen.unreadable_error
                    # So does its listener, once per leader, with the typed error.
                    assert sorted(p for ps, _error in told.unreadable for p in ps) == moving
                    assert all(error.broker is not None for _ps, error in told.unreadable)
                    await hold(began, taken)
                    # Still so at the end of the cut: the cut member keeps what it reads.
                    assert sorted(cut.claimed) == sorted(set(before[cut.id]) - set(moving))
                cut_proxies.forward()
                if other_proxies is not None:
                    other_proxies.forward()
                await wait_until(
                    lambda: _count(marked(observer, group_name), 0),
                    timeout=60,
                    what="the marks cleared",
                )

                async def both() -> bool:
                    shares = sorted([len(cut.claimed), len(other.claimed)])
                    return shares == [partitions // 2, partitions - partitions // 2] and (
                        await settled(observer, [cut, other])
                    )

                await wait_until(both, timeout=60, what="settled again with both")
            finally:
                tasks[0].cancel()
                await asyncio.gather(tasks[0], return_exceptions=True)

            async def done() -> bool:
                stored = await stored_offsets(observer, layout, partitions)
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
    log.check_complete(ends)
    if cut_off == "all":
        repeated = sum(run.last - run.first + 1 for run in log.runs) - sum(
            len(offsets) for offsets in log.handled().values()
        )
        assert repeated == 0, f"{repeated} records handled twice"


async def hold(began: float, settled_at: float) -> None:
    """Keep the cut until `CUT` seconds after it began, and at least two ``fetch_timeout`` after
    the group settled on it (``settled_at``): long enough that a partition moving again (or, all
    cut, moving at all) would show."""
    until = max(began + CUT, settled_at + 2 * FETCH_TIMEOUT)
    await asyncio.sleep(max(0.0, until - time.monotonic()))


async def _count(names: Awaitable[list[str]], count: int) -> bool:
    return len([name for name in await names if name != "stranger"]) == count


async def test_a_member_cut_off_from_kafka_gives_its_partitions_up_async_for(
    proxied_brokers: LocalCluster,
) -> None:
    await run_cut(proxied_brokers, by_async_for, cut_off="one")


async def test_a_member_cut_off_from_kafka_gives_its_partitions_up_process(
    proxied_brokers: LocalCluster,
) -> None:
    await run_cut(proxied_brokers, by_process, cut_off="one")


async def test_every_member_cut_off_from_kafka_moves_nothing(
    proxied_brokers: LocalCluster,
) -> None:
    await run_cut(proxied_brokers, by_async_for, cut_off="all")


async def test_a_member_cut_off_from_one_broker_gives_up_only_its_partitions(
    proxied_brokers: LocalCluster,
) -> None:
    await run_cut(proxied_brokers, by_async_for, cut_off="broker", partitions=6)


async def test_a_member_cut_off_with_range_gives_its_partitions_up_and_strangers_are_ignored(
    proxied_brokers: LocalCluster,
) -> None:
    await run_cut(proxied_brokers, by_async_for, cut_off="one", strategy="range", stranger=True)
