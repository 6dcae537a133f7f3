"""A member's start (its clients start at once; a failed start closes them all) and its budget of
buffered bytes, against the real local ZooKeeper and Kafka."""

from __future__ import annotations

import gc
import socket
import warnings
from collections import Counter

import pytest
from aiokafka import AIOKafkaProducer

from aio_cluster import BrokerError, ConfigurationError, ConsumerGroup, CoordinationError
from aio_cluster.group import GroupState
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
    # Valid values (a positive int, None) join and consume: test_the_budget_is_shared_...


async def _largest_batch(
    cluster: LocalCluster, topic: str, group: str, total: int, budget: int | None
) -> tuple[int, Counter[bytes]]:
    seen: Counter[bytes] = Counter()
    largest = 0
    async with ConsumerGroup(
        group, cluster.bootstrap, cluster.zookeeper, topic, max_buffered_bytes=budget
    ) as member:
        async for _partition, batch in member:
            largest = max(largest, len(batch))
            seen.update(record.value for record in batch if record.value is not None)
            if sum(seen.values()) >= total:
                break
    return largest, seen


async def test_the_budget_is_shared_over_the_partitions(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    partitions, per_partition, size = 8, 30, 1_000
    topic = await make_topic(partitions)
    # One record per batch (each send awaited), so that the broker can honour a small bound.
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=0)
    await producer.start()
    try:
        for i in range(partitions * per_partition):
            value = str(i).encode().ljust(size, b".")
            await producer.send_and_wait(topic, value, partition=i % partitions)
    finally:
        await producer.stop()
    total = partitions * per_partition
    # 64 KiB over 8 partitions: 4 KiB a partition's fetch, three or four 1 KB records.
    largest, seen = await _largest_batch(cluster, topic, group_name, total, 64 * 1024)
    assert len(seen) == total
    assert max(seen.values()) == 1
    assert largest <= 4
    # Without a budget a fetch takes a partition's whole backlog: the bound above is the budget's.
    largest, seen = await _largest_batch(cluster, topic, group_name + "-free", total, None)
    assert len(seen) == total
    assert largest > 4
