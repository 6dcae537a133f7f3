"""Kafka proxies against the real servers: a client bootstrapped at ``proxies.bootstrap`` sends
all its Kafka traffic through a FaultProxy per broker, so a test cuts it off from all of Kafka, or
from one broker, while a client of the brokers' own addresses reads on."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from test_exactly_once_producers import named, running

from aio_cluster import ConsumerGroup
from aio_cluster.errors import ConfigurationError, LocalClusterError
from aio_cluster.kafka.transactions import PartitionProducer
from aio_cluster.local import LocalCluster

from support import create_topic, fresh, producer_of, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def proxied_cluster() -> AsyncIterator[LocalCluster]:
    """One node of each, with one set of Kafka proxies' listeners."""
    async with LocalCluster(use_env=False, kafka_proxies=1) as started:
        yield started


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def proxied_brokers() -> AsyncIterator[LocalCluster]:
    """Three Kafka nodes (one ZooKeeper), with one set of Kafka proxies' listeners."""
    async with LocalCluster(brokers=3, use_env=False, kafka_proxies=1) as started:
        yield started


class Reader:
    """A consumer of every partition of a topic from the start (no group), recording what it
    read by partition."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, **options: Any) -> None:
        self.consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **options)
        self.partitions = [TopicPartition(topic, p) for p in range(partitions)]
        self.read: dict[int, list[bytes]] = {p: [] for p in range(partitions)}

    def count(self, partitions: set[int] | None = None) -> int:
        return sum(len(v) for p, v in self.read.items() if partitions is None or p in partitions)

    async def run(self) -> None:
        await self.consumer.start()
        try:
            self.consumer.assign(self.partitions)
            await self.consumer.seek_to_beginning()
            while True:
                batches = await self.consumer.getmany(timeout_ms=200)
                for tp, records in batches.items():
                    self.read[tp.partition].extend(r.value or b"" for r in records)
        finally:
            with anyio.CancelScope(shield=True):
                await self.consumer.stop()


async def _send(producer: AIOKafkaProducer, topic: str, partitions: int, each: int) -> None:
    for partition in range(partitions):
        for i in range(each):
            await producer.send(topic, f"{partition}-{i}".encode(), partition=partition)
    await producer.flush()


async def test_drop_stalls_the_proxied_consumer_while_a_direct_one_reads_and_forward_heals(
    proxied_cluster: LocalCluster,
) -> None:
    cluster = proxied_cluster
    topic = await create_topic(cluster.bootstrap, 2)
    async with (
        producer_of(cluster) as producer,
        cluster.kafka_proxies() as proxies,
        anyio.create_task_group() as tasks,
    ):
        assert len(proxies) == 1
        assert proxies.bootstrap != cluster.bootstrap
        proxied = Reader(proxies.bootstrap, topic, 2)
        direct = Reader(cluster.bootstrap, topic, 2)
        tasks.start_soon(proxied.run)
        tasks.start_soon(direct.run)
        await _send(producer, topic, 2, 10)
        await wait_until(lambda: proxied.count() == 20, what="the proxied consumer read")
        assert proxies[0].forwarded > 0

        proxies.drop()
        await _send(producer, topic, 2, 10)
        await wait_until(lambda: direct.count() == 40, what="the direct consumer read on")
        assert proxied.count() == 20, "a record passed a dropped proxy"
        await wait_until(lambda: proxies.connections > 0 and proxies[0].dropped > 0)

        proxies.forward()
        await wait_until(lambda: proxied.count() == 40, timeout=90, what="the healed one read")
        assert proxied.read == direct.read
        tasks.cancel_scope.cancel()


async def test_a_member_through_the_proxies_consumes_and_the_set_is_given_back(
    proxied_cluster: LocalCluster,
) -> None:
    cluster = proxied_cluster
    topic = await create_topic(cluster.bootstrap, 2)
    got: list[bytes] = []
    async with producer_of(cluster) as producer:
        await _send(producer, topic, 2, 5)
    async with cluster.kafka_proxies() as proxies:
        with pytest.raises(LocalClusterError, match="kafka_proxies=1"):
            async with cluster.kafka_proxies():
                pass
        group = ConsumerGroup(
            fresh("proxied"), proxies.bootstrap, cluster.zookeeper, topic, loop_delay=0.1
        )
        with anyio.fail_after(60):
            async with group:
                async for _partition, batch in group:
                    got.extend(record.value or b"" for record in batch)
                    if len(got) >= 10:
                        break
        assert proxies[0].forwarded > 0
    assert sorted(got) == sorted(f"{p}-{i}".encode() for p in range(2) for i in range(5))
    async with cluster.kafka_proxies() as again:  # the set was given back
        assert again.bootstrap == proxies.bootstrap


async def test_dropping_one_brokers_proxy_stalls_only_the_partitions_it_leads(
    proxied_brokers: LocalCluster,
) -> None:
    cluster = proxied_brokers
    partitions = 6
    topic = await create_topic(cluster.bootstrap, partitions, replicas=3)
    leaders = {p: await cluster.leader(topic, p) for p in range(partitions)}
    cut = max(set(leaders.values()), key=list(leaders.values()).count)
    stalled = {p for p, leader in leaders.items() if leader == cut}
    if len(stalled) == partitions:
        pytest.skip(f"broker {cut} leads every partition: {leaders}")
    async with (
        producer_of(cluster) as producer,
        cluster.kafka_proxies() as proxies,
        anyio.create_task_group() as tasks,
    ):
        assert len(proxies) == 3
        proxied = Reader(proxies.bootstrap, topic, partitions)
        tasks.start_soon(proxied.run)
        await _send(producer, topic, partitions, 5)
        await wait_until(lambda: proxied.count() == 5 * partitions, what="it read everything")

        proxies[cut].drop()
        await _send(producer, topic, partitions, 5)
        others = set(range(partitions)) - stalled
        await wait_until(
            lambda: proxied.count(others) == 10 * len(others),
            timeout=60,
            what="the partitions of the other brokers read on",
        )
        assert proxied.count(stalled) == 5 * len(stalled), "a record passed the dropped proxy"

        proxies[cut].forward()
        await wait_until(
            lambda: proxied.count() == 10 * partitions, timeout=90, what="all read after the heal"
        )
        tasks.cancel_scope.cancel()


async def test_a_negative_count_of_kafka_proxies_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="kafka_proxies=-1"):
        LocalCluster(kafka_proxies=-1)


async def test_kafka_proxies_need_a_running_cluster() -> None:
    with pytest.raises(LocalClusterError, match="not running"):
        async with LocalCluster(kafka_proxies=1).kafka_proxies():
            pass


USER_SUITE = """
import uuid

import anyio
import pytest

from aio_cluster import ConsumerGroup

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_member_cut_off_from_kafka(
    local_cluster, new_topic, produce, kafka_fault_proxies
) -> None:
    topic = await new_topic(partitions=2)
    proxies = await kafka_fault_proxies()
    got = []
    name = f"billing-{uuid.uuid4().hex[:8]}"
    cut = ConsumerGroup(name, proxies.bootstrap, local_cluster.zookeeper, topic, loop_delay=0.05)

    async def consume() -> None:
        async for _partition, batch in cut:
            got.extend(record.value for record in batch)

    async def until(condition) -> None:
        with anyio.fail_after(60):
            while not condition():
                await anyio.sleep(0.05)

    async with cut, anyio.create_task_group() as tasks:
        tasks.start_soon(consume)
        await produce(topic, [f"a{i}" for i in range(10)])
        await until(lambda: len(got) == 10)
        proxies.drop()
        await produce(topic, [f"b{i}" for i in range(10)])
        await until(lambda: proxies.dropped > 0)
        assert len(got) == 10 and cut.claimed
        proxies.forward()
        await until(lambda: len(got) == 20)
        tasks.cancel_scope.cancel()
"""


async def test_a_transactional_producer_cut_off_with_a_batch_pending_is_stopped_for_good(
    proxied_cluster: LocalCluster,
) -> None:
    """An exactly-once producer cut off from Kafka with a batch pending (an idempotent producer
    retries it for ever): its stop runs out of its bound and is finished in the same call, no
    sender routine or connection of it left."""
    topic = await create_topic(proxied_cluster.bootstrap)
    before = running()
    async with proxied_cluster.kafka_proxies() as proxies:
        producer = PartitionProducer(
            proxies.bootstrap, fresh("group"), (topic, 0), client_id="test", timeout=2
        )
        await producer.start()
        kafka = producer._producer
        await kafka.partitions_for(topic)  # known: the send below needs no broker to be queued
        await kafka.begin_transaction()
        proxies.drop()
        pending = await kafka.send(topic, b"pending", partition=0)
        await producer.stop()
        assert producer.stopped
        assert pending.done()
        assert pending.exception() is not None  # failed: never sent by this producer
        await wait_until(
            lambda: not running() - before, what=f"their end: {named(running() - before)}"
        )


@pytest.mark.own_cluster
async def test_the_plugins_kafka_fault_proxies_cut_a_member_off(tmp_path: Path) -> None:
    """The pytest plugin as a user's suite runs it, on a cluster of its own start (the
    environment's has no proxies)."""
    (tmp_path / "test_user.py").write_text(USER_SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = session\n")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AIO_CLUSTER_")}
    if "AIO_CLUSTER_CACHE" in os.environ:
        environment["AIO_CLUSTER_CACHE"] = os.environ["AIO_CLUSTER_CACHE"]
    suite = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "pytest", "-p", "aio_cluster.testing", "-p", "no:cacheprovider"),
        *("-q", str(tmp_path)),
        cwd=tmp_path,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    with anyio.fail_after(240):
        out, _ = await suite.communicate()
    assert suite.returncode == 0, out.decode()
    assert "1 passed" in out.decode()
