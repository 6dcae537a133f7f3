"""The offset reader's one Kafka client, against the real server: the offsets it reads, and the
metadata and offset errors keep their types and messages."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.protocol.metadata import MetadataRequest
from confluent_kafka import Producer

from aio_cluster import BrokerError, ConfigurationError
from aio_cluster.kafka.offset_reader import OffsetReader
from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.local import LocalCluster

from conftest import MakeTopic
from support import KafkaWire, fresh, leaderless, topic_known, wait_until

pytestmark = pytest.mark.asyncio

P0 = PartitionKey(0)


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> KafkaWire:
    return KafkaWire(monkeypatch)


@pytest_asyncio.fixture
async def reader(cluster: LocalCluster) -> AsyncIterator[OffsetReader]:
    started = OffsetReader(cluster.bootstrap, client_id=fresh("reader"), request_timeout_ms=2000)
    await started.start()
    yield started
    await started.stop()


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
