"""Subscriptions against the real local ZooKeeper and Kafka: one group over many topics, topics by
pattern as the cluster's topics come and go, members with different subscriptions, and the
per-partition calls with TopicPartition keys."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import re
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.protocol.metadata import MetadataRequest
from prometheus_client import CollectorRegistry

from aio_cluster import Batch, ConsumerGroup, RebalanceListener, Record, TopicPartition
from aio_cluster.kafka.group_offsets import KafkaGroupOffsets
from aio_cluster.kafka.topics import PartitionKey, TopicKeys
from aio_cluster.local import LocalCluster
from aio_cluster.metrics import GroupMetrics
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout, decode_registration
from aio_cluster.zookeeper.values import Delete, Op, Stat

from support import KafkaWire, closable, fresh, leaderless, topic_known, wait_until

pytestmark = pytest.mark.asyncio


@pytest.fixture(autouse=True)
def _collected() -> Iterator[None]:
    """Collect each test's garbage (Kafka clients in reference cycles) while its loop is gone:
    CPython 3.11.7 raises ``SystemError: AST constructor recursion depth mismatch`` when their
    finalizers run inside a later ``ast.parse`` (pytest's assertion rewriting at the session's
    end)."""
    yield
    gc.collect()


TP = TopicPartition


def many(
    cluster: LocalCluster, group: str, topics: list[str] | re.Pattern[str], **options: Any
) -> ConsumerGroup[TopicPartition]:
    """A member on many topics with the tests' short delays."""
    options.setdefault("loop_delay", 0.05)
    options.setdefault("max_wait", 0.05)
    options.setdefault("claim_timeout", 10.0)
    return ConsumerGroup(group, cluster.bootstrap, cluster.zookeeper, topics, **options)


async def new_topic(admin: AIOKafkaAdminClient, name: str, partitions: int) -> str:
    await admin.create_topics([NewTopic(name, partitions, 1)])
    await wait_until(lambda: topic_known(admin, name), what=f"the broker knows {name}")
    return name


async def gone(admin: AIOKafkaAdminClient, name: str) -> bool:
    return not await topic_known(admin, name)


async def send(producer: AIOKafkaProducer, topic: str, keys: list[str]) -> None:
    futures = [await producer.send(topic, key=key.encode(), value=b"v") for key in keys]
    for future in futures:
        await future


@contextlib.asynccontextmanager
async def consuming(
    group: ConsumerGroup[TopicPartition], seen: Counter[tuple[str, str]]
) -> AsyncIterator[asyncio.Future[None]]:
    """Counts every record ``group`` hands out, by (topic, key), while the block runs."""

    async def consume() -> None:
        async for tp, batch in group:
            assert isinstance(tp, TopicPartition)
            for record in batch:
                assert (record.topic, record.partition) == tp
                seen[(tp.topic, (record.key or b"").decode())] += 1

    task = asyncio.ensure_future(consume())
    try:
        yield task
    finally:
        await group.close()
        await task


async def test_three_topics_every_record_once_across_a_join_and_a_leave(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, producer: AIOKafkaProducer, group_name: str
) -> None:
    base = fresh("three")
    topics = [await new_topic(admin, f"{base}.{n}", 3) for n in ("a", "b", "c")]
    seen: Counter[tuple[str, str]] = Counter()
    wanted: list[tuple[str, str]] = []

    async def produce(start: int, count: int) -> None:
        for topic in topics:
            keys = [f"k{i}" for i in range(start, start + count)]
            await send(producer, topic, keys)
            wanted.extend((topic, key) for key in keys)

    await produce(0, 30)
    first = many(cluster, group_name, topics)
    second = many(cluster, group_name, topics)
    async with first:
        assert sorted(first.claimed) == sorted(TP(t, p) for t in topics for p in range(3))
        async with consuming(first, seen):
            await produce(30, 30)
            await wait_until(lambda: sum(seen.values()) >= 90, what="the first records")
            async with second, consuming(second, seen):
                await wait_until(
                    lambda: len(first.claimed) + len(second.claimed) == 9 and bool(second.claimed),
                    what="the join settled",
                )
                # Every topic is balanced on its own: 3 partitions, 2 and 1.
                for topic in topics:
                    mine = [tp for tp in first.claimed if tp.topic == topic]
                    assert len(mine) in (1, 2)
                await produce(60, 30)
                await first.close()  # the leave
                await wait_until(lambda: len(second.claimed) == 9, what="the leave settled")
                await produce(90, 30)
                await wait_until(
                    lambda: sum(seen.values()) >= len(wanted), what=f"all {len(wanted)}"
                )
    assert sorted(seen) == sorted(wanted), "a record was lost"
    assert set(seen.values()) == {1}, "a record was delivered twice"


async def test_a_pattern_follows_the_topics_of_the_cluster(
    cluster: LocalCluster,
    admin: AIOKafkaAdminClient,
    producer: AIOKafkaProducer,
    zk: ZooKeeper,
    group_name: str,
) -> None:
    base = fresh("events")
    first = await new_topic(admin, f"{base}.first", 2)
    group = many(
        cluster,
        group_name,
        re.compile(re.escape(base) + r"\..*"),
        exclude=re.compile(re.escape(base) + r"\.skip.*"),
        metadata_interval=0.3,
    )
    seen: Counter[tuple[str, str]] = Counter()
    async with group:
        assert group.topics == [first]
        data, _stat = await zk.get(GroupLayout(group_name, first).member(group.id))
        info = decode_registration(data)
        assert info.subscribes(first)
        assert not info.subscribes(f"{base}.skipped")
        async with consuming(group, seen) as task:
            await send(producer, first, ["a0", "a1"])
            await wait_until(lambda: seen[(first, "a0")] + seen[(first, "a1")] == 2)
            later = await new_topic(admin, f"{base}.later", 2)
            skipped = await new_topic(admin, f"{base}.skipped", 1)
            other = await new_topic(admin, fresh("unrelated"), 1)
            await wait_until(lambda: len(group.claimed) == 4, what="the new topic claimed")
            await send(producer, later, ["b0", "b1", "b2"])
            await send(producer, skipped, ["s0"])
            await send(producer, other, ["o0"])
            await wait_until(lambda: sum(seen[(later, f"b{i}")] for i in range(3)) == 3)
            assert group.topics == sorted([first, later])

            # A deleted topic's partitions are released, its target and shares go, without an
            # error.
            target = GroupLayout(group_name, first).assignment
            shares = GroupLayout(group_name, first).shares
            assert await zk.exists(target) is not None
            await admin.delete_topics([first])
            await wait_until(lambda: gone(admin, first), what="the topic deleted")
            await wait_until(
                lambda: all(tp.topic == later for tp in group.claimed) and len(group.claimed) == 2,
                what="the deleted topic released",
            )
            await wait_until(
                lambda: _absent(zk, target), what="the deleted topic's target node removed"
            )
            await wait_until(lambda: _absent(zk, shares), what="the deleted topic's shares removed")
            await send(producer, later, ["b3"])
            await wait_until(lambda: seen[(later, "b3")] == 1, what="reading on after the delete")
            assert not task.done()
            assert group.topics == [later]
            client = group._member.parts.fetcher._consumer._client
            assert first not in client._topics, "the member's client follows the deleted topic"
    assert not any(topic in (skipped, other) for topic, _key in seen)


async def _absent(zk: ZooKeeper, path: str) -> bool:
    return await zk.exists(path) is None


@pytest.mark.parametrize("strategy", ["sticky", "range"])
async def test_members_with_different_subscriptions(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, group_name: str, strategy: str
) -> None:
    base = fresh("differ")
    a = await new_topic(admin, f"{base}.a", 4)
    b = await new_topic(admin, f"{base}.b", 4)
    both = many(cluster, group_name, [a, b], strategy=strategy)
    only_b = many(cluster, group_name, [b], strategy=strategy)
    async with both, only_b:

        def split() -> bool:
            return (
                sorted(tp.partition for tp in both.claimed if tp.topic == a) == [0, 1, 2, 3]
                and len([tp for tp in both.claimed if tp.topic == b]) == 2
                and len(only_b.claimed) == 2
                and all(tp.topic == b for tp in only_b.claimed)
            )

        await wait_until(split, what="a all to the first, b split")
        assert set(both.claimed).isdisjoint(only_b.claimed)
        assert only_b.topics == [b]
        await both.close()
        await wait_until(
            lambda: sorted(only_b.claimed) == [TP(b, p) for p in range(4)],
            what="b all to the one left",
        )


class Recorder(RebalanceListener[TopicPartition]):
    def __init__(self) -> None:
        self.assigned: list[TopicPartition] = []
        self.revoked: list[TopicPartition] = []

    async def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        self.assigned.extend(partitions)

    async def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        self.revoked.extend(partitions)


async def test_listener_pause_seek_and_statistics_speak_topic_partitions(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, producer: AIOKafkaProducer, group_name: str
) -> None:
    base = fresh("keys")
    a = await new_topic(admin, f"{base}.a", 1)
    b = await new_topic(admin, f"{base}.b", 1)
    await send(producer, a, ["a0", "a1", "a2"])
    await send(producer, b, ["b0", "b1"])
    recorder = Recorder()
    group = many(cluster, group_name, [a, b], listener=recorder)
    async with group:
        assert sorted(recorder.assigned) == [TP(a, 0), TP(b, 0)]
        assert group.partitions == [TP(a, 0), TP(b, 0)]
        group.pause(TP(a, 0))
        assert group.paused() == [TP(a, 0)]
        batches = closable(group.batches())
        got: list[tuple[TopicPartition, Batch]] = []
        got.append(await anext(batches))
        assert got[0][0] == TP(b, 0)
        stats = await group.statistics()
        assert stats.claimed == (TP(a, 0), TP(b, 0))
        assert stats.paused == (TP(a, 0),)
        assert [entry.partition for entry in stats.partitions] == [TP(a, 0), TP(b, 0)]
        assert {entry.partition: entry.end for entry in stats.partitions} == {
            TP(a, 0): 3,
            TP(b, 0): 2,
        }
        registry = CollectorRegistry()
        metrics = GroupMetrics(group, registry=registry)
        await metrics.refresh()
        for topic, end in ((a, 3), (b, 2)):
            labels = {"group": group_name, "topic": topic, "partition": "0", "member": group.id}
            assert registry.get_sample_value("aio_cluster_partition_end_offset", labels) == end
        group.resume(TP(a, 0))
        await group.seek(TP(a, 0), 2)
        partition, batch = await anext(batches)
        assert partition == TP(a, 0)
        assert [record.key for record in batch] == [b"a2"]
        await batches.aclose()
        await group.commit(TP(b, 0), 1)
        assert await group.offset(TP(b, 0)) == 1
        assert await group.offset(TP("never-read", 0)) is None
        with pytest.raises(Exception, match="TopicPartition"):
            group.pause(0)  # type: ignore[arg-type]
    assert sorted(recorder.revoked) == [TP(a, 0), TP(b, 0)]


async def test_the_mirror_commits_every_topic(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, producer: AIOKafkaProducer, group_name: str
) -> None:
    base = fresh("mirrored")
    topics = [await new_topic(admin, f"{base}.{n}", 2) for n in ("a", "b")]
    for topic in topics:
        for partition in range(2):
            await (await producer.send(topic, value=b"x", partition=partition))
    group = many(cluster, group_name, topics, kafka_offsets="mirror", commit_interval=0.2)
    async with group:
        seen = 0
        batches = closable(group.batches())
        async for tp, batch in batches:
            seen += len(batch)
            await group.commit(tp, batch[-1].offset + 1)  # a break leaves the batch uncommitted
            if seen == 4:
                break
        await batches.aclose()  # not left to the garbage collector, after the loop closed
    for topic in topics:
        # Kafka's own record of the group, as its consumer-groups tool reads it.
        kafka = KafkaGroupOffsets(
            cluster.bootstrap, group_name, TopicKeys((topic,)), client_id="test"
        )
        await kafka.start()
        try:
            assert await kafka.committed([PartitionKey(0), PartitionKey(1)], 10) == {0: 1, 1: 1}
        finally:
            await kafka.stop()


async def test_a_busy_topic_never_starves_a_quiet_one(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, producer: AIOKafkaProducer, group_name: str
) -> None:
    base = fresh("fair")
    busy = await new_topic(admin, f"{base}.busy", 1)
    quiet = await new_topic(admin, f"{base}.quiet", 1)
    await send(producer, busy, [f"b{i}" for i in range(300)])
    group = many(cluster, group_name, [busy, quiet], max_bytes=1024)
    async with group:
        batches = closable(group.batches())
        order: list[str] = []
        await send(producer, quiet, ["q0"])
        while quiet not in order:
            tp, _batch = await anext(batches)
            order.append(tp.topic)
            assert len(order) < 50, "the quiet topic starved"
        await batches.aclose()
    # Round-robin over the topic-partitions with batches: the busy one had many buffered.
    assert order.count(busy) <= order.count(quiet) + 2


async def test_process_handles_every_topic(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, producer: AIOKafkaProducer, group_name: str
) -> None:
    base = fresh("handled")
    topics = [await new_topic(admin, f"{base}.{n}", 2) for n in ("a", "b")]
    for topic in topics:
        await send(producer, topic, [f"k{i}" for i in range(20)])
    handled: Counter[tuple[str, str]] = Counter()

    async def handler(record: Record) -> None:
        handled[(record.topic, (record.key or b"").decode())] += 1

    group = many(cluster, group_name, topics, commit_interval=0.2)
    async with group:
        task = asyncio.ensure_future(group.process(handler))
        try:
            await wait_until(lambda: sum(handled.values()) == 40, what="every record handled")
            await wait_until(
                lambda: _stored(group, topics), what="the offsets of both topics stored"
            )
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert set(handled.values()) == {1}


async def _stored(group: ConsumerGroup[TopicPartition], topics: list[str]) -> bool:
    stored = [await group.offset(TP(topic, p)) for topic in topics for p in range(2)]
    return sum(offset or 0 for offset in stored) == 40


async def test_pattern_members_share_a_topic_created_later(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, group_name: str
) -> None:
    base = fresh("shared")
    pattern = re.compile(re.escape(base) + r"\..*")
    first = many(cluster, group_name, pattern, metadata_interval=0.3)
    second = many(cluster, group_name, pattern, metadata_interval=0.3)
    async with first, second:
        assert first.claimed == second.claimed == []
        topic = await new_topic(admin, f"{base}.new", 4)
        await wait_until(
            lambda: len(first.claimed) == len(second.claimed) == 2,
            what="the new topic shared by both pattern members",
        )
        assert sorted(first.claimed + second.claimed) == [TP(topic, p) for p in range(4)]


async def test_a_transient_metadata_error_keeps_a_pattern_topic_and_its_claims(
    cluster: LocalCluster,
    admin: AIOKafkaAdminClient,
    zk: ZooKeeper,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kafka answers a topic with LEADER_NOT_AVAILABLE, in the listing and asked on its own (every
    metadata answer, the member's client's refreshes too): the topic exists, so a pattern member
    keeps it, its claims and its target."""
    base = fresh("blip")
    topic = await new_topic(admin, f"{base}.t", 2)
    steady = await new_topic(admin, f"{base}.steady", 1)  # listed as ever
    recorder = Recorder()
    group = many(
        cluster,
        group_name,
        re.compile(re.escape(base) + r"\..*"),
        metadata_interval=0.2,
        listener=recorder,
    )
    claimed = sorted([TP(steady, 0), TP(topic, 0), TP(topic, 1)])
    async with group:
        assert sorted(group.claimed) == claimed
        target = GroupLayout(group_name, topic).assignment
        assert await zk.exists(target) is not None
        wire = KafkaWire(monkeypatch)
        wire.answer = leaderless(topic)

        def listings() -> int:
            asked = wire.of(group.id, MetadataRequest)
            return sum(1 for s in asked if s.metadata_topics is None and s.answered.is_set())

        await wait_until(lambda: listings() >= 2, what="the topic listed without a leader twice")
        membership = group._member.parts.membership

        async def rebalanced() -> None:
            count = membership.rebalances
            membership.request_rebalance()
            await wait_until(lambda: membership.rebalances > count, what="a rebalance")

        # The second of these began after the listings above were taken in.
        await rebalanced()
        await rebalanced()
        assert recorder.revoked == [], "a partition of a topic that exists was released"
        assert sorted(group.claimed) == claimed
        assert group.topics == sorted([steady, topic])
        assert await zk.exists(target) is not None, "the target of a topic that exists was deleted"


async def test_the_target_of_a_deleted_topic_written_again_meanwhile_stays(
    cluster: LocalCluster,
    admin: AIOKafkaAdminClient,
    zk: ZooKeeper,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The leader of a deleted topic deletes its target only as it last saw it: a target another
    leader writes just before (the topic made again) stays."""
    base = fresh("rewritten")
    topic = await new_topic(admin, f"{base}.t", 2)
    steady = await new_topic(admin, f"{base}.steady", 1)  # so that the listing is not empty
    group = many(cluster, group_name, re.compile(re.escape(base) + r"\..*"), metadata_interval=0.2)
    async with group:
        assert group.topics == sorted([steady, topic])
        target = GroupLayout(group_name, topic).assignment
        data, _stat = await zk.get(target)
        written: list[int] = []
        tried = asyncio.Event()
        transaction = group._member.parts.zk.transaction

        async def written_first(ops: Sequence[Op]) -> list[Stat | None]:
            if not (ops and isinstance(ops[0], Delete) and ops[0].path == target):
                return await transaction(ops)
            # Another leader's write lands between this member's last read and its delete (of
            # the target and its shares, in one transaction).
            written.append((await zk.set(target, data)).version)
            try:
                return await transaction(ops)
            finally:
                tried.set()

        monkeypatch.setattr(group._member.parts.zk, "transaction", written_first)
        await admin.delete_topics([topic])
        await wait_until(lambda: gone(admin, topic), what="the topic deleted")
        await wait_until(tried.is_set, what="the member deleting the deleted topic's target")
        assert group.topics == [steady]
        stat = await zk.exists(target)
        assert stat is not None, "the member deleted a target written after it read it"
        assert stat.version == written[-1]
