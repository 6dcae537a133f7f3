"""Members obeying an operator's controls, against the real ZooKeeper and Kafka: a paused
partition stops on every member within a batch and stays paused across a rebalance; a skip
moves a stopped partition past its poison record, which goes to the dead-letter topic."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from aio_cluster import ConsumerGroup, Record
from aio_cluster.control.model import format_at
from aio_cluster.control.store import ControlStore
from aio_cluster.local import LocalCluster
from aio_cluster.member.controls import SKIPPED_BY
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from support import fresh, member, stored_offsets, topic_known, wait_until

pytestmark = pytest.mark.asyncio


@dataclass
class Seen:
    """Every record handed out, by any member: partition, offset and when."""

    records: list[tuple[int, int, float]] = field(default_factory=list)

    def add(self, record: Record) -> None:
        self.records.append((record.partition, record.offset, time.monotonic()))

    def of(self, partition: int, *, since: float) -> int:
        return sum(1 for p, _o, at in self.records if p == partition and at >= since)

    def others(self, partition: int, *, since: float) -> int:
        return sum(1 for p, _o, at in self.records if p != partition and at >= since)


@contextlib.asynccontextmanager
async def consuming(group: ConsumerGroup[Any], seen: Seen, mode: str) -> AsyncIterator[None]:
    """``group`` joined and handing records to ``seen`` through ``async for`` or
    ``process()``, until the block ends (then it closes)."""

    async def handle(record: Record) -> None:
        seen.add(record)

    async def loop() -> None:
        if mode == "process":
            await group.process(handle, concurrency=8)
        else:
            async for _partition, batch in group:
                for record in batch:
                    seen.add(record)

    async with group:
        task = asyncio.create_task(loop())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@contextlib.asynccontextmanager
async def load(producer: AIOKafkaProducer, topic: str) -> AsyncIterator[None]:
    """Records written to every partition of ``topic`` all along the block."""

    async def write() -> None:
        i = 0
        while True:
            for _ in range(30):
                await producer.send(topic, key=f"k{i}".encode(), value=b"x")
                i += 1
            await asyncio.sleep(0.05)

    task = asyncio.create_task(write())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.parametrize("mode", ["async for", "process"])
async def test_a_paused_partition_stops_everywhere_and_stays_paused_across_a_rebalance(
    cluster: LocalCluster,
    zk: ZooKeeper,
    producer: AIOKafkaProducer,
    make_topic: MakeTopic,
    group_name: str,
    mode: str,
) -> None:
    topic = await make_topic(6)
    seen = Seen()
    store = ControlStore(zk, group_name)
    groups = [member(cluster, group_name, topic) for _ in range(3)]
    async with contextlib.AsyncExitStack() as stack:
        loading = contextlib.AsyncExitStack()
        await loading.enter_async_context(load(producer, topic))
        stack.push_async_exit(loading)
        for group in groups:
            await stack.enter_async_context(consuming(group, seen, mode))
        await wait_until(lambda: seen.of(2, since=0) > 0, what="partition 2 flowing")

        await store.pause([(topic, 2)], "test@host")
        quiet_from = time.monotonic() + 2.0
        await asyncio.sleep(4.0)  # two seconds to obey, two of load watched
        assert seen.of(2, since=quiet_from) == 0, "no record of partition 2 after 2 s"
        assert seen.others(2, since=quiet_from) > 0, "the other partitions go on"
        owner = next(g for g in groups if 2 in g.claimed)
        stats = await owner.statistics()
        assert 2 in stats.operator_paused
        assert next(p for p in stats.partitions if p.partition == 2).operator_paused

        # The owner leaves, a newcomer joins: partition 2 moves and stays paused.
        others = [g for g in groups if g is not owner]
        await owner.close()
        newcomer = member(cluster, group_name, topic)
        await stack.enter_async_context(consuming(newcomer, seen, mode))
        live = [*others, newcomer]
        await wait_until(
            lambda: sorted(p for g in live for p in g.claimed) == list(range(6)),
            what="the partitions claimed by the three left",
        )
        moved_at = time.monotonic()
        await asyncio.sleep(3.0)
        assert seen.of(2, since=quiet_from) == 0, "still paused on its new owner"
        assert seen.others(2, since=moved_at) > 0
        new_owner = next(g for g in live if 2 in g.claimed)
        assert 2 in (await new_owner.statistics()).operator_paused

        # Resumed: partition 2 is consumed to its end (its lag falls to 0).
        await loading.aclose()
        await producer.flush()  # every record sent is in the log before the ends are read
        ends = await _ends(cluster, topic)
        layout = GroupLayout(group_name, topic)
        assert (await stored_offsets(zk, layout, 6)).get(2, 0) < ends[2], "2 fell behind"
        assert [p.partition for p in await store.resume([(topic, 2)], "test@host")] == [2]

        async def caught_up() -> bool:
            return await stored_offsets(zk, layout, 6) == ends

        await wait_until(caught_up, timeout=30.0, what="every partition stored to its end")
        lag = {p.partition: p.lag for g in live for p in (await g.statistics()).partitions}
        assert lag[2] == 0
        assert 2 not in (await new_owner.statistics()).operator_paused


async def _ends(cluster: LocalCluster, topic: str) -> dict[int, int]:
    """Each partition's log-end offset."""
    consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, partition) for partition in range(6)]
        return {tp.partition: end for tp, end in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()


async def test_a_skip_moves_a_stopped_partition_past_its_poison_record(
    cluster: LocalCluster,
    zk: ZooKeeper,
    producer: AIOKafkaProducer,
    make_topic: MakeTopic,
    group_name: str,
) -> None:
    topic = await make_topic(1)
    dead = await make_topic(1)
    for i in range(10):
        value = b"poison" if i == 4 else b"%d" % i
        await producer.send_and_wait(topic, key=b"k%d" % i, value=value, partition=0)
    handled: list[int] = []

    async def handler(record: Record) -> None:
        if record.value == b"poison":
            raise ValueError("poison")
        handled.append(record.offset)

    store = ControlStore(zk, group_name)
    layout = GroupLayout(group_name, topic)
    group = member(cluster, group_name, topic)
    async with group:
        task = asyncio.create_task(
            group.process(
                handler, concurrency=1, on_failure="stop", attempts=1, dead_letter_topic=dead
            )
        )
        try:

            async def stopped() -> bool:
                return (topic, 0) in (await store.read()).stopped

            await wait_until(stopped, what="the stop published")
            stop = (await store.read()).stopped[(topic, 0)]
            assert (stop.offset, stop.member) == (4, group.id)
            assert "poison" in stop.error
            assert handled[:4] == [0, 1, 2, 3]

            skip = await store.request_skip(topic, 0, None, "ann@host")
            assert skip.target == 5
            await wait_until(lambda: set(handled) == {0, 1, 2, 3, 5, 6, 7, 8, 9}, what="on")
            await wait_until(
                lambda: _stored_is(zk, layout, 10), what="stored to the end, past the poison"
            )
            controls = await store.read()
            assert (controls.skips, controls.stopped) == ({}, {})
            assert [e.action for e in await store.history()] == ["skipped", "skip-requested"]
            stats = await group.statistics()
            assert (stats.stopped, stats.paused, stats.skips_applied) == ((), (), 1)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert 4 not in handled, "the skipped record was never handled"

    consumer = AIOKafkaConsumer(
        dead, bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        letter = await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()
    assert letter.value == b"poison"
    headers = dict(letter.headers)
    assert headers[SKIPPED_BY].decode().startswith("ann@host at ")
    assert headers[SKIPPED_BY].decode() == f"ann@host at {format_at(skip.at)}"


async def _stored_is(zk: ZooKeeper, layout: GroupLayout, offset: int) -> bool:
    return (await stored_offsets(zk, layout, 1)).get(0) == offset


async def test_a_pause_is_obeyed_from_a_members_first_batch(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
) -> None:
    topic = await make_topic(2)
    counts = await produce(topic, 60)
    await ControlStore(zk, group_name).pause([(topic, 0)], "test@host")
    seen = Seen()
    async with consuming(member(cluster, group_name, topic), seen, "async for"):
        await wait_until(lambda: seen.of(1, since=0) == counts[1], what="partition 1 read")
    assert seen.of(0, since=0) == 0, "the pause held from the member's first batch"


async def test_a_pause_is_obeyed_on_a_topic_a_pattern_member_meets(
    cluster: LocalCluster,
    zk: ZooKeeper,
    admin: AIOKafkaAdminClient,
    produce: Produce,
    group_name: str,
) -> None:
    base = fresh("met")
    topic = f"{base}.new"
    await ControlStore(zk, group_name).pause([(topic, 0)], "test@host")
    seen = Seen()
    group = ConsumerGroup(
        group_name,
        cluster.bootstrap,
        cluster.zookeeper,
        re.compile(re.escape(base) + r"\..*"),
        loop_delay=0.1,
        metadata_interval=0.2,
    )
    async with consuming(group, seen, "async for"):
        await admin.create_topics([NewTopic(topic, 2, 1)])
        await wait_until(lambda: topic_known(admin, topic), what=f"the broker knows {topic}")
        counts = await produce(topic, 60)
        await wait_until(lambda: seen.of(1, since=0) == counts[1], what="partition 1 read")
    assert seen.of(0, since=0) == 0, "the pause held from the topic's first batch"
