"""A member's topic metadata: an answer read in one pass is what aiokafka's decoding reads (every
version), the compact metadata answers every question a consumer asks as aiokafka's own does and
keeps nothing per partition that the garbage collector tracks, and a member's client refreshes
with both against the real server."""

from __future__ import annotations

import gc
import io
import struct
from typing import Any

import pytest
from aiokafka.cluster import ClusterMetadata
from aiokafka.protocol import metadata as responses
from aiokafka.protocol.metadata import MetadataResponse_v5
from aiokafka.structs import TopicPartition

from aio_cluster.kafka.metadata import (
    CompactMetadata,
    CompactMetadataRequest,
    MetadataAnswer,
    PartitionTable,
    decode_metadata,
)
from aio_cluster.kafka.placement import broker_racks, replica_racks
from aio_cluster.local import LocalCluster

from conftest import MakeTopic
from support import KafkaWire, fetcher_of, fresh

BROKERS = [(1, "one", 9092, None), (2, "two", 9092, None)]


def response(partitions: int, *, leaderless: int | None = None, failed_topic: bool = False) -> Any:
    """A metadata response of topic "t" with ``partitions`` spread over two brokers,
    partition ``leaderless`` without a leader, and topic "gone" answered with an error when
    ``failed_topic``: encoded and decoded, as aiokafka reads a broker's."""
    rows: list[tuple[object, ...]] = [
        (0, p, -1 if p == leaderless else 1 + p % 2, [1, 2], [1 + p % 2], [])
        for p in range(partitions)
    ]
    topics: list[tuple[object, ...]] = [(0, "t", False, rows)]
    if failed_topic:
        topics.append((3, "gone", False, []))
    return MetadataResponse_v5.decode(
        MetadataResponse_v5(0, BROKERS, "cluster", 1, topics).encode()
    )


def both(partitions: int, **options: Any) -> tuple[ClusterMetadata, CompactMetadata]:
    """aiokafka's metadata and the compact one, each updated with the same response."""
    plain, compact = ClusterMetadata(), CompactMetadata()
    for cluster in (plain, compact):
        cluster.update_metadata(response(partitions, **options))
    return plain, compact


def test_it_answers_as_aiokafkas_own_metadata() -> None:
    plain, compact = both(6, leaderless=4, failed_topic=True)
    assert compact.topics() == plain.topics() == {"t"}
    assert compact.partitions_for_topic("t") == plain.partitions_for_topic("t") == set(range(6))
    assert compact.partitions_for_topic("gone") is plain.partitions_for_topic("gone") is None
    assert compact.available_partitions_for_topic("t") == plain.available_partitions_for_topic("t")
    for partition in range(7):  # 6: not known
        tp = TopicPartition("t", partition)
        assert compact.leader_for_partition(tp) == plain.leader_for_partition(tp)
    assert compact.leader_for_partition(TopicPartition("gone", 0)) is None
    for broker in (1, 2, 3):
        assert compact.partitions_for_broker(broker) == plain.partitions_for_broker(broker)
    table = compact._partitions["t"]
    assert isinstance(table, PartitionTable)
    for partition, found in table.items():
        kept = plain._partitions["t"][partition]
        assert found == kept._replace(replicas=tuple(kept.replicas), isr=tuple(kept.isr))


def test_an_update_replaces_what_the_last_one_said() -> None:
    compact = CompactMetadata()
    compact.update_metadata(response(4))
    compact.update_metadata(response(2, leaderless=1))
    assert compact.partitions_for_topic("t") == {0, 1}
    assert compact.leader_for_partition(TopicPartition("t", 1)) == -1
    assert compact.partitions_for_broker(2) is None


def test_the_collector_tracks_nothing_per_partition() -> None:
    _plain, compact = both(1000)
    read = CompactMetadata()
    read.update_metadata(decode_metadata(5, response(1000).encode()))
    # A tuple stops being tracked at the first pass that finds its items untracked: a row may
    # be looked at before its replicas' tuples, and is let go at the next pass.
    gc.collect()
    gc.collect()
    for metadata in (compact, read):
        table = metadata._partitions["t"]
        assert len(table) == 1000
        assert not any(gc.is_tracked(row) for row in table._rows.values())
        assert not gc.is_tracked(table._rows)


def encoded(version: int) -> bytes:
    """A Metadata response of ``version`` as a broker sends it (aiokafka's encoding): two
    brokers (one without a rack), a topic whose partitions have replicas, in-sync and offline
    replicas, an internal topic without partitions, and a topic answered with an error."""
    partitions = [(0, 0, 1, [1, 2], [1, 2], [2]), (9, 1, -1, [2, 1], [], [1, 2])]
    topics: list[tuple[Any, ...]] = [
        (0, "t", False, partitions),
        (0, "__consumer_offsets", True, []),
        (3, "gone", False, []),
    ]
    if version < 5:
        topics = [(*topic[:3], [p[:5] for p in topic[3]]) for topic in topics]
    if version == 0:
        topics = [(error, name, parts) for error, name, _internal, parts in topics]
    brokers: list[tuple[Any, ...]] = [(1, "one", 9092, "rack-a"), (2, "two", 9093, None)]
    if version == 0:
        brokers = [broker[:3] for broker in brokers]
    fields: list[Any] = [brokers]
    if version >= 2:
        fields.append(None if version == 3 else "cluster")
    if version >= 1:
        fields.append(2)
    fields.append(topics)
    if version >= 3:
        fields.insert(0, 0)
    response = getattr(responses, f"MetadataResponse_v{version}")(*fields)
    data: bytes = response.encode()
    return data


def tupled(topics: list[Any]) -> list[Any]:
    """aiokafka's decoded topics with each partition's replica lists made tuples, as
    `decode_metadata` reads them."""
    return [
        (*topic[:-1], [(*p[:3], *(tuple(ids) for ids in p[3:])) for p in topic[-1]])
        for topic in topics
    ]


@pytest.mark.parametrize("version", range(6))
def test_an_answer_read_in_one_pass_reads_as_aiokafka_reads_it(version: int) -> None:
    data = encoded(version)
    theirs = getattr(responses, f"MetadataResponse_v{version}").decode(io.BytesIO(data))
    ours = decode_metadata(version, data)
    assert version == ours.API_VERSION
    assert ours.brokers == [tuple(broker) for broker in theirs.brokers]
    assert ours.topics == tupled(theirs.topics)
    assert ours.controller_id == (theirs.controller_id if version >= 1 else -1)
    assert ours.cluster_id == (theirs.cluster_id if version >= 2 else None)
    # aiokafka's metadata takes it as it takes its own decoding.
    plain, from_ours = ClusterMetadata(), ClusterMetadata()
    plain.update_metadata(theirs)
    from_ours.update_metadata(ours)
    assert from_ours.topics(exclude_internal_topics=False) == {"t", "__consumer_offsets"}
    assert from_ours.brokers() == plain.brokers()
    for partition in (0, 1):
        tp = TopicPartition("t", partition)
        assert from_ours.leader_for_partition(tp) == plain.leader_for_partition(tp)


@pytest.mark.parametrize("version", [1, 5])
def test_an_answer_read_in_one_pass_is_kept_as_read(version: int) -> None:
    data = encoded(version)
    plain = ClusterMetadata()
    plain.update_metadata(
        getattr(responses, f"MetadataResponse_v{version}").decode(io.BytesIO(data))
    )
    answer = decode_metadata(version, data)
    compact = CompactMetadata()
    compact.update_metadata(answer)
    assert compact.topics(exclude_internal_topics=False) == plain.topics(
        exclude_internal_topics=False
    )
    assert compact.internal_topics == plain.internal_topics == {"__consumer_offsets"}
    assert compact.brokers() == plain.brokers()
    assert compact.controller == plain.controller
    for broker in (1, 2):
        assert compact.partitions_for_broker(broker) == plain.partitions_for_broker(broker)
    table = compact._partitions["t"]
    for partition in (0, 1):
        kept = plain._partitions["t"][partition]
        assert table[partition] == kept._replace(replicas=tuple(kept.replicas), isr=tuple(kept.isr))
    # The rows are the answer's own: nothing was made again for them.
    assert [table._rows[p] for p in (0, 1)] == answer.topics[0][-1]
    assert all(table._rows[row[1]] is row for row in answer.topics[0][-1])


def test_a_cut_answer_or_an_unknown_version_is_refused() -> None:
    data = encoded(5)
    for cut in range(len(data)):  # every byte short, the internal flag included
        with pytest.raises((struct.error, ValueError)):
            decode_metadata(5, data[:cut])
    with pytest.raises(ValueError, match="version 6"):
        decode_metadata(6, data)


@pytest.mark.asyncio
async def test_a_members_client_refreshes_in_one_pass_and_keeps_it_compact(
    cluster: LocalCluster, make_topic: MakeTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = await make_topic(partitions=8)
    wire = KafkaWire(monkeypatch)
    answers: list[Any] = []
    wire.answer = lambda request, answer: answers.append((request, answer))
    client_id = fresh("compact")
    fetcher = fetcher_of(cluster, topic, client_id)
    await fetcher.start()
    try:
        assert await fetcher.partitions(topic) == list(range(8))
        assert wire.metadata(client_id) == [[], [topic]]  # the bootstrap's, then the look-up's
        refresh, answer = answers[-1]
        assert isinstance(refresh, CompactMetadataRequest)
        assert isinstance(answer, MetadataAnswer)
        cluster_metadata = fetcher._consumer._client.cluster
        assert isinstance(cluster_metadata, CompactMetadata)
        assert isinstance(cluster_metadata._partitions[topic], PartitionTable)
        assert cluster_metadata.available_partitions_for_topic(topic) == set(range(8))
        # Followed now: asked on its own, answered the same way.
        assert await fetcher.partitions(topic) == list(range(8))
        assert wire.metadata(client_id)[-1] == [topic]
        assert isinstance(answers[-1][1], MetadataAnswer)
    finally:
        await fetcher.stop()


def test_replica_racks_come_from_the_brokers_racks() -> None:
    brokers = [(1, "h", 9092, "a"), (2, "h", 9093, "b"), (3, "h", 9094, None)]
    racks = broker_racks(brokers)
    assert racks == {1: "a", 2: "b"}
    found = replica_racks(racks, [(0, (1, 2)), (1, (2, 3)), (2, (3,)), (3, (2, 1))])
    assert found == {0: {"a", "b"}, 1: {"b"}, 2: set(), 3: {"a", "b"}}
    assert replica_racks({}, [(0, (1, 2))]) == {}, "no rack anywhere: none"
    assert broker_racks([(1, "h", 9092)]) == {}, "a version 0 answer names no rack"
