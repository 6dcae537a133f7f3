"""Offsets mirrored to Kafka (``kafka_offsets="mirror"``) and taken over from a Kafka group
(``"migrate"``), against the real servers and Kafka's own consumer-groups tool."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord

from aio_cluster import Batch, ConfigurationError, ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from support import closable, in_kafka, kafka_tool_describe, wait_until

REPO = Path(__file__).resolve().parent.parent


async def consume_part(
    group: ConsumerGroup, batches: AsyncIterator[tuple[int, Batch]], count: int
) -> list[str]:
    """Read and commit batches until at least ``count`` records came; their values. The batches
    come from one iterator for the whole test: leaving a loop early delivers its batch again."""
    values: list[str] = []
    while len(values) < count:
        partition, batch = await anext(batches)
        values += [record.value.decode() for record in batch if record.value is not None]
        await group.commit(partition, batch[-1].offset + 1)
    return values


async def stored(zk: ZooKeeper, layout: GroupLayout, partitions: int) -> dict[int, int]:
    return {p: int((await zk.get(layout.offset(p)))[0]) for p in range(partitions)}


async def cli_describe(cluster: LocalCluster, group: str) -> list[dict[str, object]]:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "aio_cluster", "describe", group, "--json"),
        *("--bootstrap", cluster.bootstrap, "--zookeeper", cluster.zookeeper),
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith("AIO_CLUSTER_")},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    rows: list[dict[str, object]] = json.loads(out)
    return rows


@pytest.mark.asyncio
async def test_kafkas_own_tool_describes_a_mirrored_group_as_aio_cluster_does(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
) -> None:
    topic = await make_topic(partitions=2)
    await produce(topic, 30)
    async with (
        ConsumerGroup(
            group_name, cluster.bootstrap, cluster.zookeeper, topic, kafka_offsets="mirror"
        ) as group,
        contextlib.aclosing(closable(group.batches(commit=False))) as batches,
    ):
        await consume_part(group, batches, 30)
        await produce(topic, 10, start=30)  # lag on both partitions
        layout = GroupLayout(group_name, topic)
        in_zookeeper = await stored(zk, layout, 2)

        async def mirrored() -> bool:
            return await in_kafka(cluster, group_name, topic) == in_zookeeper

        await wait_until(mirrored, what="the offsets stored in ZooKeeper to reach Kafka")
        ours = {
            row["partition"]: (row["committed"], row["end"], row["lag"])
            for row in await cli_describe(cluster, group_name)
        }
        theirs = {
            p: row for (_t, p), row in (await kafka_tool_describe(cluster, group_name)).items()
        }
    assert theirs == ours
    assert {p: current for p, (current, _end, _lag) in theirs.items()} == in_zookeeper
    assert all(lag > 0 for _current, _end, lag in theirs.values())


@pytest.mark.asyncio
async def test_a_refused_kafka_commit_is_logged_never_blocks_and_is_retried(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    producer: AIOKafkaProducer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While a Kafka consumer of the same group name is active, Kafka refuses commits without a
    generation; consumption and ZooKeeper go on, and what was refused lands with the next commit
    after it left."""
    topic, other = await make_topic(partitions=2), await make_topic(partitions=1)
    await produce(topic, 20)
    squatter = AIOKafkaConsumer(
        other, bootstrap_servers=cluster.bootstrap, group_id=group_name, enable_auto_commit=False
    )
    await squatter.start()
    try:
        await wait_until(lambda: bool(squatter.assignment()), what="the Kafka consumer to join")
        caplog.set_level(logging.WARNING, logger="aio_cluster")
        async with (
            ConsumerGroup(
                group_name, cluster.bootstrap, cluster.zookeeper, topic, kafka_offsets="mirror"
            ) as group,
            contextlib.aclosing(closable(group.batches(commit=False))) as batches,
        ):
            assert sorted(await consume_part(group, batches, 20), key=int) == [
                str(i) for i in range(20)
            ]
            layout = GroupLayout(group_name, topic)
            await wait_until(
                lambda: any("Kafka refused the commit" in r.message for r in caplog.records),
                what="a refused commit to be logged",
            )
            assert await in_kafka(cluster, group_name, topic) == {}
            await squatter.stop()
            # The next commit is of partition 0 only; partition 1's refused one goes with it.
            for value in (b"20", b"21"):
                await producer.send_and_wait(topic, value, partition=0)
            assert sorted(await consume_part(group, batches, 2)) == ["20", "21"]
            in_zookeeper = await stored(zk, layout, 2)

            async def mirrored() -> bool:
                return await in_kafka(cluster, group_name, topic) == in_zookeeper

            await wait_until(mirrored, what="the next commit to reach Kafka")
    finally:
        await squatter.stop()


@pytest.mark.asyncio
async def test_migrate_from_an_aiokafka_group_and_back_consumes_each_message_once(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    """aiokafka reads a few records of every partition (so a member that started anywhere but at
    its commits would read some again), aio_cluster goes on, then aiokafka again to the end."""
    topic = await make_topic(partitions=3)
    await produce(topic, 60)
    seen: list[str] = []
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=cluster.bootstrap,
        group_id=group_name,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        await wait_until(lambda: len(consumer.assignment()) == 3, what="aiokafka's assignment")
        ends = await consumer.end_offsets(list(consumer.assignment()))
        for tp in sorted(ends):
            records: list[ConsumerRecord[bytes, bytes]] = []
            while not records:
                records = (await consumer.getmany(tp, timeout_ms=1000, max_records=4)).get(tp, [])
            seen += [record.value.decode() for record in records if record.value is not None]
        await consumer.commit()
    finally:
        await consumer.stop()

    async with (
        ConsumerGroup(
            group_name, cluster.bootstrap, cluster.zookeeper, topic, kafka_offsets="migrate"
        ) as group,
        contextlib.aclosing(closable(group.batches(commit=False))) as batches,
    ):
        seen += await consume_part(group, batches, 20)

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=cluster.bootstrap, group_id=group_name, enable_auto_commit=False
    )
    await consumer.start()
    try:
        await wait_until(lambda: len(consumer.assignment()) == 3, what="aiokafka's assignment")
        while [await consumer.position(tp) for tp in ends] != list(ends.values()):
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                seen += [record.value.decode() for record in records if record.value is not None]
    finally:
        await consumer.stop()
    assert sorted(seen, key=int) == [str(i) for i in range(60)]


def test_kafka_offsets_must_be_off_mirror_or_migrate() -> None:
    with pytest.raises(ConfigurationError, match=r"kafka_offsets 'on'.*off, mirror, migrate"):
        ConsumerGroup("g", "127.0.0.1:1", "127.0.0.1:1", "t", kafka_offsets="on")  # type: ignore[call-overload]
