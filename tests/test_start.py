"""A member's start (its clients start at once; a failed start closes them all) and its budget of
buffered bytes, against the real local ZooKeeper and Kafka."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import warnings
from collections.abc import AsyncIterator, Collection
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaProducer

from aio_cluster import BrokerError, ConfigurationError, ConsumerGroup, CoordinationError
from aio_cluster.group import GroupState
from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.local import FaultProxy, LocalCluster
from aio_cluster.zookeeper.client import NoNodeError, ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic
from support import wait_until

pytestmark = pytest.mark.asyncio


def closed_port() -> str:
    """``127.0.0.1:<port>`` where nothing listens (the port was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def no_unclosed_clients() -> list[str]:
    """Collect garbage and return the ResourceWarnings of clients left open (aiokafka's warn in
    ``__del__``)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


async def test_a_failing_kafka_start_closes_the_zookeeper_session_and_registers_nothing(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(2)
    # The member reaches ZooKeeper through a proxy of its own, which counts its connections
    # alone (the server's count has those of the tests running alongside).
    async with FaultProxy(cluster.zookeeper) as proxy:
        group = ConsumerGroup(group_name, closed_port(), proxy.address, topic, register=False)
        with pytest.raises(BrokerError):
            await group.register()
        assert group.state is GroupState.CLOSED
        assert proxy.forwarded > 0, "the member's ZooKeeper session was started"
        # The session started alongside the Kafka clients was closed with them.
        await wait_until(
            lambda: proxy.connections == 0, what="the member's ZooKeeper connection to close"
        )
    layout = GroupLayout(group_name, topic)
    try:
        registered = await zk.get_children(layout.ids)
    except NoNodeError:
        registered = []
    assert registered == []
    del group
    assert no_unclosed_clients() == []


async def test_a_failing_zookeeper_start_closes_the_kafka_clients(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(2)
    group = ConsumerGroup(
        group_name,
        cluster.bootstrap,
        closed_port(),
        topic,
        register=False,
        request_timeout=1.0,
        kafka_offsets="mirror",  # a third Kafka client, started alongside
    )
    with pytest.raises(CoordinationError):
        await group.register()
    assert group.state is GroupState.CLOSED
    del group
    assert no_unclosed_clients() == []


async def test_a_member_starts_and_consumes_as_before(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(3)
    async with (
        ConsumerGroup(group_name, cluster.bootstrap, cluster.zookeeper, topic) as first,
        ConsumerGroup(group_name, cluster.bootstrap, cluster.zookeeper, topic) as second,
    ):
        await wait_until(
            lambda: sorted(first.claimed + second.claimed) == [0, 1, 2],
            what="the two members to share the partitions",
        )
        assert first.partitions == [0, 1, 2]


async def test_the_budget_is_checked() -> None:
    for bad in (0, -1, 1.5, "32MB", True):
        with pytest.raises(ConfigurationError, match="max_buffered_bytes"):
            ConsumerGroup("g", "127.0.0.1:9092", "127.0.0.1:2181", "t", max_buffered_bytes=bad)  # type: ignore[arg-type]
    # Valid values (a positive int, None) join and consume: test_the_budget_bounds_the_...


def _aiokafka_bytes(member: ConsumerGroup) -> int:
    """The bytes of the responses aiokafka holds for the member and it did not take yet."""
    inner = member._member.parts.fetcher._consumer._fetcher
    return sum(
        result._partition_records._records.size_in_bytes()
        for result in list(inner._records.values())
        if getattr(result, "_partition_records", None) is not None
    )


class Sampler:
    """Samples the most bytes a member ever buffered (taken and not handed out, and held in
    aiokafka): before each fetch, when told, and every millisecond."""

    def __init__(self, member: ConsumerGroup) -> None:
        self.member = member
        self.most = 0
        fetcher = member._member.parts.fetcher
        fetch = fetcher.fetch

        async def sampled(partitions: Collection[PartitionKey], timeout_ms: int) -> Any:
            self.sample()
            return await fetch(partitions, timeout_ms)

        fetcher.fetch = sampled  # type: ignore[method-assign]

    def sample(self) -> None:
        held = self.member._member.parts.states.buffered_bytes + _aiokafka_bytes(self.member)
        self.most = max(self.most, held)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Sampler]:
        async def sampling() -> None:
            while True:
                self.sample()
                await asyncio.sleep(0.001)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(sampling)
            yield self
            tasks.cancel_scope.cancel()


async def _write(cluster: LocalCluster, topic: str, counts: list[int], size: int) -> None:
    """``counts[p]`` records of ``size`` bytes to each partition ``p``, valued ``"<p>-<i>"``,
    each its own record batch (each send awaited), so that the broker can honour small bounds."""
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=0)
    await producer.start()
    try:
        for i in range(max(counts)):
            for partition, count in enumerate(counts):
                if i < count:
                    value = f"{partition}-{i}".encode().ljust(size, b".")
                    await producer.send_and_wait(topic, value, partition=partition)
    finally:
        await producer.stop()


def _index(record: Any) -> int:
    return int(record.value.rstrip(b".").split(b"-")[1])


async def _held_at_most(
    cluster: LocalCluster, topic: str, group: str, total: int, budget: int | None
) -> tuple[int, int, dict[int, list[int]]]:
    """Read ``total`` records slowly, so that the fetcher runs ahead; returns the most bytes
    ever buffered, the largest batch, and each partition's records in order."""
    largest = 0
    seen: dict[int, list[int]] = {}
    async with (
        ConsumerGroup(
            group, cluster.bootstrap, cluster.zookeeper, topic, max_buffered_bytes=budget
        ) as member,
        Sampler(member).running() as sampler,
    ):
        async for partition, batch in member:
            sampler.sample()
            largest = max(largest, len(batch))
            seen.setdefault(partition, []).extend(map(_index, batch))
            if sum(map(len, seen.values())) >= total:
                break
            await asyncio.sleep(0.01)  # a slow consumer: aiokafka would run ahead
    return sampler.most, largest, seen


async def test_the_budget_bounds_the_bytes_buffered(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    partitions, per_partition, size = 8, 40, 1_000
    topic = await make_topic(partitions)
    await _write(cluster, topic, [per_partition] * partitions, size)
    total = partitions * per_partition
    expected = {p: list(range(per_partition)) for p in range(partitions)}
    budget = 64 * 1024
    held, largest, seen = await _held_at_most(cluster, topic, group_name, total, budget)
    assert seen == expected, "every record once, in order per partition"
    # Soft as Kafka's bound: a response may pass its share by one record batch (~1.1 KB here).
    assert held <= budget + 2 * size
    # A partition is still fetched in chunks of max_bytes, not of the budget over the
    # partitions (4 KiB here, four records): small chunks are what slows aiokafka down.
    assert largest > 4
    # Without a budget aiokafka fetches each partition's backlog ahead: the bound is the budget's.
    held, _largest, seen = await _held_at_most(cluster, topic, group_name + "-free", total, None)
    assert seen == expected
    assert held > budget


async def test_a_partition_whose_records_do_not_finish_holds_a_part_of_the_budget_only(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    # Partition 0 has five budgets of backlog, and its first record does not finish until every
    # other partition's did; with one budget shared as it comes, partition 0's backlog would
    # take it all and the others would never be fetched.
    size, budget = 1_000, 64 * 1024
    counts = [320, 100, 100, 100]
    topic = await make_topic(len(counts))
    await _write(cluster, topic, counts, size)
    others_done = asyncio.Event()
    handled: dict[int, list[int]] = {p: [] for p in range(len(counts))}

    async def handler(record: Any) -> None:
        if record.partition == 0 and not others_done.is_set():
            await others_done.wait()
        handled[record.partition].append(_index(record))
        if all(len(handled[p]) == counts[p] for p in range(1, len(counts))):
            others_done.set()

    async with (
        ConsumerGroup(
            group_name,
            cluster.bootstrap,
            cluster.zookeeper,
            topic,
            max_buffered_bytes=budget,
            max_bytes=4_096,
        ) as member,
        Sampler(member).running() as sampler,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(member.process, handler)
        await wait_until(others_done.is_set, what="the other partitions to be handled")
        await wait_until(lambda: len(handled[0]) == counts[0], what="partition 0 to be handled")
        tasks.cancel_scope.cancel()
    assert handled == {p: list(range(count)) for p, count in enumerate(counts)}
    assert sampler.most <= budget + 2 * size
