"""A user's integration suite, written the way an application would write it: only the fixtures
of the ``aio_cluster.testing`` plugin (``local_cluster``, ``new_topic``, ``produce``) and
``ConsumerGroup``. Run with ``pytest -p aio_cluster.testing tests_user``."""

from __future__ import annotations

import uuid

import anyio
import pytest

from aio_cluster import ConfigurationError, ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.testing import NewTopicFactory, ProduceFunction

pytestmark = pytest.mark.asyncio(loop_scope="session")


def member(cluster: LocalCluster, group: str, topic: str) -> ConsumerGroup:
    return ConsumerGroup(group, cluster.bootstrap, cluster.zookeeper, topic, loop_delay=0.05)


async def consume(group: ConsumerGroup, want: int, into: list[str]) -> None:
    """Consume until ``want`` values arrived, then close the member, which stores the offsets of
    every batch whose body finished; fails the test after 30 s."""

    enough = anyio.Event()

    async def close_when_done() -> None:
        await enough.wait()
        await group.close()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(close_when_done)
            async for _partition, batch in group:
                into.extend(record.value.decode() for record in batch if record.value)
                if len(into) >= want:
                    enough.set()


async def test_two_members_share_the_topic(
    local_cluster: LocalCluster, new_topic: NewTopicFactory, produce: ProduceFunction
) -> None:
    topic = await new_topic(partitions=4)
    sent = [f"order-{i}" for i in range(200)]
    acks = await produce(topic, sent, keys=[f"customer-{i % 17}" for i in range(200)])
    assert len(acks) == 200

    group = f"billing-{uuid.uuid4().hex[:8]}"
    async with member(local_cluster, group, topic) as a, member(local_cluster, group, topic) as b:
        with anyio.fail_after(30):
            while True:
                if sorted(a.claimed + b.claimed) == [0, 1, 2, 3] and a.claimed and b.claimed:
                    break
                await anyio.sleep(0.05)
        assert set(a.claimed).isdisjoint(b.claimed)
        got_a: list[str] = []
        got_b: list[str] = []
        by_a = sum(1 for partition, _offset in acks if partition in a.claimed)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(consume, a, by_a, got_a)
            tasks.start_soon(consume, b, 200 - by_a, got_b)
    assert sorted(got_a + got_b) == sorted(sent)


async def test_a_restarted_member_resumes_after_the_committed_offsets(
    local_cluster: LocalCluster, new_topic: NewTopicFactory, produce: ProduceFunction
) -> None:
    topic = await new_topic(partitions=2)
    group = f"audit-{uuid.uuid4().hex[:8]}"
    await produce(topic, [f"first-{i}" for i in range(50)])
    first: list[str] = []
    async with member(local_cluster, group, topic) as consumer:
        await consume(consumer, 50, first)

    await produce(topic, [f"second-{i}" for i in range(30)])
    second: list[str] = []
    async with member(local_cluster, group, topic) as consumer:
        await consume(consumer, 30, second)
    assert sorted(first) == sorted(f"first-{i}" for i in range(50))
    assert sorted(second) == sorted(f"second-{i}" for i in range(30))


async def test_the_fixtures_refuse_bad_input(
    local_cluster: LocalCluster, new_topic: NewTopicFactory, produce: ProduceFunction
) -> None:
    with pytest.raises(ConfigurationError, match="partitions must be a positive integer, not 0"):
        await new_topic(partitions=0)
    topic = await new_topic()
    with pytest.raises(ConfigurationError, match="keys must be as many as values: 1 keys, 2"):
        await produce(topic, ["a", "b"], keys=["k"])
    with pytest.raises(ConfigurationError, match="values and keys must be str or bytes, not 1"):
        await produce(topic, [1])
    assert await produce(topic, [b"raw", "text"], keys=[None, "k"]) == [(0, 0), (0, 1)]
