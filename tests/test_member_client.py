"""A member's one Kafka client, against the real server: its start reads a topic's metadata once
(and bootstraps once), its offset look-ups do not wait behind its long-polling fetches, they are
those of its isolation level, and the metadata and offset errors keep their types and messages."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.protocol.offset import OffsetRequest
from confluent_kafka import Producer

from aio_cluster import BrokerError, ConfigurationError, ConsumerGroup, TopicPartition
from aio_cluster.kafka.fetcher import IsolationLevel
from aio_cluster.kafka.offset_reader import OffsetReader
from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.local import LocalCluster

from conftest import MakeTopic
from support import KafkaWire, fetcher_of, fresh, leaderless, member, topic_known, wait_until

pytestmark = pytest.mark.asyncio

P0 = PartitionKey(0)


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> KafkaWire:
    return KafkaWire(monkeypatch)


async def ready(cluster: LocalCluster, topic: str, partitions: int) -> None:
    """Wait until the broker leads every partition of a topic just made: it knows the topic a
    moment before, and answers a fetch meanwhile with NOT_LEADER (aiokafka then refreshes its
    metadata). An offset look-up asks again until the partitions are led."""
    reader = OffsetReader(cluster.bootstrap, client_id=fresh("ready"))
    await reader.start()
    try:
        await reader.ends({topic: list(range(partitions))})
    finally:
        await reader.stop()


@pytest_asyncio.fixture
async def reader(cluster: LocalCluster) -> AsyncIterator[OffsetReader]:
    started = OffsetReader(cluster.bootstrap, client_id=fresh("reader"), request_timeout_ms=2000)
    await started.start()
    yield started
    await started.stop()


async def test_a_fetchers_start_reads_its_topics_metadata_once(
    cluster: LocalCluster, make_topic: MakeTopic, wire: KafkaWire
) -> None:
    """Start, the partitions, assignments (of all, of none, of all again), fetches and offset
    look-ups: one metadata request names the topic, and none asks for every topic."""
    topic = await make_topic(partitions=4)
    await ready(cluster, topic, 4)
    client_id = fresh("once")
    fetcher = fetcher_of(cluster, topic, client_id)
    await fetcher.start()
    try:
        assert wire.metadata(client_id) == [[]], "the bootstrap asks no topic"
        partitions = await fetcher.partitions(topic)
        assert partitions == [0, 1, 2, 3]
        everything = {PartitionKey(p): 0 for p in partitions}
        fetcher.assign(everything)
        await fetcher.fetch(list(everything), 50)
        assert await fetcher.ends(list(everything)) == dict.fromkeys(everything, 0)
        fetcher.assign({})
        await fetcher.fetch([], 50)
        fetcher.assign(everything)
        await fetcher.bounds(list(everything))
        await fetcher.offsets_for_time(list(everything), 0)
        await fetcher.fetch(list(everything), 50)
        assert wire.metadata(client_id) == [[], [topic]]
        assert fetcher._consumer._client._topics == {topic}, "followed across the assignments"
    finally:
        await fetcher.stop()


async def test_a_members_start_reads_its_topics_metadata_once(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str, wire: KafkaWire
) -> None:
    """A member (sticky, waiting for its topic: the defaults) bootstraps once and reads its
    topic's metadata once until it reads every partition."""
    topic = await make_topic(partitions=3)
    await ready(cluster, topic, 3)
    async with member(cluster, group_name, topic, metadata_interval=600.0) as group:
        await wait_until(lambda: group.claimed == [0, 1, 2], what="the member claims all")
        asked = wire.metadata(group.id)
        assert asked.count([]) == 1, "one bootstrap"
        assert [topics for topics in asked if topics] == [[topic]]
        assert None not in asked, "a metadata request for every topic"


async def test_a_member_of_many_topics_reads_their_metadata_in_one_request(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str, wire: KafkaWire
) -> None:
    """A member that may not wait for its topics asks their partitions before it joins: at once,
    so that one refresh of its client's metadata answers them all."""
    topics = [await make_topic(partitions=2) for _ in range(3)]
    for topic in topics:
        await ready(cluster, topic, 2)
    everything = sorted(TopicPartition(topic, p) for topic in topics for p in (0, 1))
    group: ConsumerGroup[TopicPartition] = ConsumerGroup(
        group_name,
        cluster.bootstrap,
        cluster.zookeeper,
        topics,
        wait_for_topic=False,
        metadata_interval=600.0,
        loop_delay=0.1,
    )
    async with group:
        await wait_until(lambda: sorted(group.claimed) == everything, what="all claimed")
        asked = [sorted(names) for names in wire.metadata(group.id) if names]
        assert asked == [sorted(topics)]


async def test_an_offset_look_up_does_not_wait_behind_a_long_polling_fetch(
    cluster: LocalCluster, make_topic: MakeTopic, wire: KafkaWire
) -> None:
    """The broker holds a fetch of an empty partition for max_wait_ms; ``ends()`` is answered
    meanwhile, on the client's other connection to the same broker."""
    topic = await make_topic(partitions=1)
    await ready(cluster, topic, 1)
    client_id = fresh("polling")
    fetcher = fetcher_of(cluster, topic, client_id, max_wait_ms=3000)
    await fetcher.start()
    try:
        await fetcher.partitions(topic)
        fetcher.assign({P0: 0})
        polling = asyncio.ensure_future(fetcher.fetch([P0], 5000))

        def in_flight() -> list[Any]:
            fetches = wire.of(client_id, FetchRequest)
            return [sent for sent in fetches if not sent.answered.is_set()]

        await wait_until(lambda: bool(in_flight()), what="a fetch waiting at the broker")
        waiting = in_flight()
        assert await fetcher.ends([P0]) == {P0: 0}
        assert any(not sent.answered.is_set() for sent in waiting), "ends() waited for the fetch"
        assert not polling.done()
        (offsets,) = wire.of(client_id, OffsetRequest)
        assert offsets.answered.is_set()
        polling.cancel()
        await asyncio.gather(polling, return_exceptions=True)
    finally:
        await fetcher.stop()


def open_transaction(bootstrap: str, topic: str) -> Producer:
    """Two records committed, then three in a transaction left open: the log end is 6 (with the
    commit marker), the last stable offset 3. Returns the producer, to abort it."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": uuid.uuid4().hex})
    producer.init_transactions(60)
    for commit in (True, False):
        producer.begin_transaction()
        for i in range(2 if commit else 3):
            producer.produce(topic, value=b"%d" % i, partition=0)
        assert producer.flush(60) == 0
        if commit:
            producer.commit_transaction(60)
    return producer


@pytest.mark.parametrize(
    ("isolation_level", "end"), [("read_uncommitted", 6), ("read_committed", 3)]
)
async def test_the_log_end_is_that_of_the_members_isolation_level(
    cluster: LocalCluster, make_topic: MakeTopic, isolation_level: IsolationLevel, end: int
) -> None:
    topic = await make_topic(partitions=1)
    producer = await asyncio.to_thread(open_transaction, cluster.bootstrap, topic)
    fetcher = fetcher_of(cluster, topic, fresh("isolation"), isolation_level=isolation_level)
    await fetcher.start()
    try:
        assert await fetcher.ends([P0]) == {P0: end}
        assert await fetcher.bounds([P0]) == {P0: (0, end)}
    finally:
        await fetcher.stop()
        await asyncio.to_thread(producer.abort_transaction, 60)


async def test_offsets_at_a_time_and_the_bounds(
    cluster: LocalCluster, make_topic: MakeTopic, reader: OffsetReader
) -> None:
    topic = await make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(5):
        producer.produce(topic, value=b"%d" % i, partition=1, timestamp=1_000_000 + i)
    assert await asyncio.to_thread(producer.flush, 60) == 0
    assert await reader.bounds({topic: [0, 1]}) == {(topic, 0): (0, 0), (topic, 1): (0, 5)}
    assert await reader.offsets_for_time({topic: [0, 1]}, 1_000_003) == {
        (topic, 0): None,
        (topic, 1): 3,
    }
    assert await reader.offsets_for_time({topic: [1]}, 2_000_000) == {(topic, 1): None}


async def test_a_topic_that_does_not_exist_is_a_configuration_error_until_made(
    admin: AIOKafkaAdminClient, make_topic: MakeTopic, reader: OffsetReader
) -> None:
    """Not followed by the client's refreshes (asked on its own again); once it is made, its
    partitions are found, and it is followed."""
    other = await make_topic(partitions=1)
    assert await reader.partitions(other) == [0]
    topic = fresh("missing")
    for _ in range(2):
        with pytest.raises(ConfigurationError, match=f"topic '{topic}' does not exist in Kafka"):
            await reader.partitions(topic)
    assert reader._client._topics == {other}
    assert await reader.topics([other, topic]) == {other: [0]}
    assert reader._client._topics == {other}
    await admin.create_topics([NewTopic(topic, 3, 1)])
    await wait_until(lambda: topic_known(admin, topic), what=f"the broker knows {topic}")
    assert await reader.partitions(topic) == [0, 1, 2]
    assert reader._client._topics == {other, topic}


async def test_a_topic_answered_with_another_error_code_is_a_broker_error(
    make_topic: MakeTopic, reader: OffsetReader, wire: KafkaWire
) -> None:
    """Its leader moving: the topic exists, so not a configuration error; a listing and
    ``topics()`` leave it out."""
    topic = await make_topic(partitions=2)
    assert await reader.partitions(topic) == [0, 1]
    wire.answer = leaderless(topic)
    with pytest.raises(BrokerError, match=f"metadata of topic '{topic}' has error code 5"):
        await reader.partitions(topic)
    assert topic not in await reader.topics()
    assert await reader.topics([topic]) == {}
    wire.answer = None
    assert await reader.partitions(topic) == [0, 1]


async def test_a_failed_metadata_request_is_a_broker_error(
    make_topic: MakeTopic, reader: OffsetReader, wire: KafkaWire
) -> None:
    """The topic asked first (a refresh of the client's metadata) and again (on its own)."""
    topic = await make_topic(partitions=1)
    refused = [False]
    wire.refuse = lambda sent: (
        refused[0]
        and sent.client_id == reader.client_id
        and isinstance(sent.request, MetadataRequest)
    )
    for _ in range(2):
        refused[0] = True
        with pytest.raises(BrokerError, match="metadata request failed"):
            await reader.partitions(topic)
        with pytest.raises(BrokerError, match="metadata request failed"):
            await reader.topics()
        with pytest.raises(BrokerError, match="metadata request failed"):
            await reader.topics([topic])
        refused[0] = False
        assert await reader.partitions(topic) == [0]


async def test_an_offset_of_a_partition_kafka_does_not_have_is_a_broker_error_in_time(
    make_topic: MakeTopic, reader: OffsetReader
) -> None:
    """Asked again on fresh metadata within the request timeout, then a `BrokerError` naming the
    partition."""
    topic = await make_topic(partitions=1)
    with pytest.raises(BrokerError, match="offset request failed") as raised:
        await reader.ends({topic: [7]})
    assert f"partition 7 of topic '{topic}'" in str(raised.value)
