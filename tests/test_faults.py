"""A member through server faults: a ZooKeeper restart within the session timeout, a Kafka
broker restart. These restart the session's shared servers and wait until they answer again."""

from __future__ import annotations

from collections import Counter

import pytest

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import SessionState, ZooKeeper

from conftest import MakeTopic, Produce
from support import Pairs, closable, settled, take, wait_until

pytestmark = pytest.mark.asyncio


async def consume(batches: Pairs, seen: Counter[bytes], total: int) -> None:
    """Pull records from one iterator until ``total`` were seen (see `take`)."""
    got = await take(batches, total - sum(seen.values()))
    seen.update(record.key or b"" for _, record in got)


async def test_zookeeper_restart_within_the_session_keeps_claims(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(2)
    await produce(topic, 20)
    seen: Counter[bytes] = Counter()
    async with ConsumerGroup(
        group_name, [cluster.bootstrap], [cluster.zookeeper], topic, session_timeout=15.0
    ) as group:
        batches = closable(group.batches())
        await consume(batches, seen, 20)
        session = group._member.zk.session_id
        await cluster.stop_zookeeper()
        await wait_until(lambda: group._member.zk.state is SessionState.SUSPENDED, what="suspended")
        await produce(topic, 20, start=20)
        await cluster.start_zookeeper()
        await wait_until(
            lambda: group._member.zk.state is SessionState.CONNECTED, what="reconnected"
        )
        assert group._member.zk.session_id == session, "the session outlived the restart"
        assert group.claimed == [0, 1]
        await consume(batches, seen, 40)
        await batches.aclose()
        zk = ZooKeeper(cluster.zookeeper)
        await zk.start()
        try:
            assert await settled(zk, [group])
        finally:
            await zk.close()
    assert set(seen.values()) == {1}, "delivered twice across the restart"
    assert len(seen) == 40


async def test_kafka_restart_does_not_stop_consumption(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(2)
    await produce(topic, 10)
    seen: Counter[bytes] = Counter()
    async with ConsumerGroup(
        group_name, [cluster.bootstrap], [cluster.zookeeper], topic, loop_delay=0.2
    ) as group:
        batches = closable(group.batches())
        await consume(batches, seen, 10)
        await cluster.stop_kafka()
        await cluster.start_kafka()
        await produce(topic, 10, start=10)
        await consume(batches, seen, 20)
        await batches.aclose()
    assert set(seen) == {f"k{i}".encode() for i in range(20)}
    assert set(seen.values()) == {1}
