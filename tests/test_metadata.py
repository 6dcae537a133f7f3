"""The fetcher's compact metadata: it answers every question a consumer asks of aiokafka's
metadata as aiokafka's own does, keeps nothing per partition that the garbage collector tracks,
and is what a member's client reads against the real server."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from aiokafka.cluster import ClusterMetadata
from aiokafka.protocol.metadata import MetadataResponse_v5
from aiokafka.structs import TopicPartition

from aio_cluster.kafka.metadata import CompactMetadata, PartitionTable
from aio_cluster.local import LocalCluster

from conftest import MakeTopic
from support import fetcher_of, fresh

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
    sent = MetadataResponse_v5(0, BROKERS, "cluster", 1, topics)
    return MetadataResponse_v5.decode(sent.encode())


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
    # A tuple stops being tracked at the first pass that finds its items untracked: a row may
    # be looked at before its replicas' tuples, and is let go at the next pass.
    gc.collect()
    gc.collect()
    table = compact._partitions["t"]
    assert len(table) == 1000
    assert not any(gc.is_tracked(row) for row in table._rows.values())
    assert not gc.is_tracked(table._rows)


@pytest.mark.asyncio
async def test_a_members_client_reads_its_metadata_compact(
    cluster: LocalCluster, make_topic: MakeTopic
) -> None:
    topic = await make_topic(partitions=8)
    fetcher = fetcher_of(cluster, topic, fresh("compact"))
    await fetcher.start()
    try:
        assert await fetcher.partitions(topic) == list(range(8))
        cluster_metadata = fetcher._consumer._client.cluster
        assert isinstance(cluster_metadata, CompactMetadata)
        assert isinstance(cluster_metadata._partitions[topic], PartitionTable)
        assert cluster_metadata.available_partitions_for_topic(topic) == set(range(8))
    finally:
        await fetcher.stop()
