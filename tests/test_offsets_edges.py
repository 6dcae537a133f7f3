"""Offsets at the edges, against the real servers: an offset stored (or migrated from Kafka) past
the log end, one lag rule for statistics() and describe, a mirror commit that failed at a
handover, and migrating a second time."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from aio_cluster import Batch, BrokerError, ConsumerGroup
from aio_cluster.kafka.group_offsets import KafkaGroupOffsets
from aio_cluster.kafka.topics import PartitionKey, TopicKeys
from aio_cluster.local import LocalCluster
from aio_cluster.member.statistics import lag
from aio_cluster.zookeeper.client import NoNodeError, ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from support import wait_until

pytestmark = pytest.mark.asyncio

REPO = Path(__file__).resolve().parent.parent
FAR = 1000
"""An offset past the log end of every topic here."""


async def store(zk: ZooKeeper, layout: GroupLayout, partition: int, offset: int) -> None:
    await zk.ensure_path(layout.offsets)
    try:
        await zk.set(layout.offset(partition), str(offset).encode())
    except NoNodeError:
        await zk.create(layout.offset(partition), str(offset).encode())


async def stored(zk: ZooKeeper, layout: GroupLayout, partition: int) -> int | None:
    try:
        return int((await zk.get(layout.offset(partition)))[0])
    except NoNodeError:
        return None


async def is_stored(zk: ZooKeeper, layout: GroupLayout, offset: int) -> bool:
    """Whether partition 0's stored offset is ``offset``."""
    return await stored(zk, layout, 0) == offset


async def commit_in_kafka(cluster: LocalCluster, group: str, topic: str, offset: int) -> None:
    """Commit ``offset`` for partition 0 under ``group`` in Kafka, as a Kafka consumer did."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.commit({TopicPartition(topic, 0): offset})
    finally:
        await consumer.stop()


async def in_kafka(cluster: LocalCluster, group: str, topic: str) -> int | None:
    offsets = KafkaGroupOffsets(cluster.bootstrap, group, TopicKeys((topic,)), client_id="test")
    await offsets.start()
    try:
        return (await offsets.committed([PartitionKey(0)], 10)).get(PartitionKey(0))
    finally:
        await offsets.stop()


@contextlib.asynccontextmanager
async def consuming(group: ConsumerGroup) -> AsyncIterator[list[str]]:
    """The member joined, its batches' keys collected (and committed) in the background."""
    keys: list[str] = []

    async def consume(batches: AsyncIterator[tuple[int, Batch]]) -> None:
        async for _partition, batch in batches:
            keys.extend(record.key.decode() for record in batch if record.key is not None)

    async with group:
        task = asyncio.ensure_future(consume(group.batches()))
        try:
            yield keys
        finally:
            await group.close()
            await task


def member(cluster: LocalCluster, group: str, topic: str, **options: Any) -> ConsumerGroup:
    return ConsumerGroup(
        group,
        cluster.bootstrap,
        cluster.zookeeper,
        topic,
        loop_delay=0.05,
        max_wait=0.05,
        commit_interval=0.2,
        **options,
    )


@pytest.mark.parametrize("source", ["zookeeper", "kafka"])
async def test_an_offset_past_the_log_end_with_trail_goes_on_from_the_end(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    source: str,
) -> None:
    topic = await make_topic(1)
    layout = GroupLayout(group_name, topic)
    await produce(topic, 10)
    if source == "zookeeper":
        await store(zk, layout, 0, FAR)
        options: dict[str, object] = {}
    else:
        await commit_in_kafka(cluster, group_name, topic, FAR)
        options = {"kafka_offsets": "migrate"}
    async with consuming(member(cluster, group_name, topic, trail=True, **options)) as keys:
        await wait_until(
            lambda: is_stored(zk, layout, 10), what="the log end stored as the new start"
        )
        await produce(topic, 5, start=10)
        await wait_until(lambda: len(keys) >= 5, what="the new records")
    assert keys == [f"k{i}" for i in range(10, 15)], "old records replayed, or new ones lost"
    assert await stored(zk, layout, 0) == 15


async def test_an_offset_past_the_log_end_without_trail_starts_at_the_earliest(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(1)
    layout = GroupLayout(group_name, topic)
    await produce(topic, 10)
    await commit_in_kafka(cluster, group_name, topic, FAR)
    async with consuming(member(cluster, group_name, topic, kafka_offsets="migrate")) as keys:
        await wait_until(lambda: len(keys) >= 10, what="every record")
        await wait_until(lambda: is_stored(zk, layout, 10), what="the end stored")
    assert keys == [f"k{i}" for i in range(10)]


async def test_describe_and_statistics_share_one_lag_rule(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(2)
    layout = GroupLayout(group_name, topic)
    sent = await produce(topic, 20)
    await store(zk, layout, 0, FAR)
    await store(zk, layout, 1, 3)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AIO_CLUSTER_")}
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "aio_cluster", "describe", group_name, "--json"),
        *("--bootstrap", cluster.bootstrap, "--zookeeper", cluster.zookeeper),
        cwd=REPO,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    rows = {row["partition"]: row["lag"] for row in json.loads(out)}
    assert rows == {0: 0, 1: sent[1] - 3}, "past the end counts as nothing left, never below 0"
    assert rows == {0: lag(sent[0], FAR, 0), 1: lag(sent[1], 3, 0)}
    # A member's statistics() reads the same figures by the same rule, before it consumes.
    async with member(cluster, group_name, topic) as group:
        figures = await group.statistics()
    for partition in figures.partitions:
        assert partition.lag == lag(partition.end, partition.stored, 0) >= 0


async def test_a_mirror_commit_that_failed_at_the_handover_is_sent_again(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = await make_topic(1)
    layout = GroupLayout(group_name, topic)
    await produce(topic, 10)
    first = member(cluster, group_name, topic, kafka_offsets="mirror")

    async def refused(offsets: object, timeout: float) -> None:
        raise BrokerError("Kafka is away (injected)")

    async with consuming(first) as keys:
        # Every commit of this member to Kafka fails, the one at its leave included.
        assert first._member.parts.mirror._kafka is not None
        monkeypatch.setattr(first._member.parts.mirror._kafka, "commit", refused)
        await wait_until(lambda: len(keys) >= 10, what="every record")
        await wait_until(lambda: is_stored(zk, layout, 10), what="the offset stored")
    assert await in_kafka(cluster, group_name, topic) is None, "the injected fault did nothing"
    async with member(cluster, group_name, topic, kafka_offsets="mirror"):

        async def mirrored() -> bool:
            return await in_kafka(cluster, group_name, topic) == 10

        await wait_until(mirrored, what="the next owner to mirror the stored offset")


async def test_migrating_a_second_time_does_not_replay(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    """aio_cluster stored 5 (its first period), a Kafka consumer group went on to 20 (a roll
    back), and the service migrates again: it goes on from 20."""
    topic = await make_topic(1)
    layout = GroupLayout(group_name, topic)
    await produce(topic, 30)
    await store(zk, layout, 0, 5)
    await commit_in_kafka(cluster, group_name, topic, 20)
    async with consuming(member(cluster, group_name, topic, kafka_offsets="migrate")) as keys:
        await wait_until(lambda: len(keys) >= 10, what="the records after Kafka's offset")
        await wait_until(lambda: is_stored(zk, layout, 30), what="the end stored")
    assert keys == [f"k{i}" for i in range(20, 30)]
