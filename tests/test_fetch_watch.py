"""aiokafka's background fetch watched, against the real servers: any error in it ends it for good
(aiokafka's consumer then returns no record, ever), so a member notices its end before the next
fetch and fetches on with a new consumer from the positions it holds, every record once; an end
that came through a hook of ours switches the hooks off; ends that keep coming raise
`FetchStalledError` out of the iteration and of `process()`, and the member gives its partitions
up."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.consumer.fetcher import Fetcher as AiokafkaFetcher

from aio_cluster import ConsumerGroup, FetchStalledError
from aio_cluster.kafka import seams
from aio_cluster.kafka.fetch_sessions import FetchSessions
from aio_cluster.kafka.seams import Seam
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic
from support import fresh, member, owners, producer_of, wait_until

RECORDS = 2_000


def inner_fetcher(group: ConsumerGroup) -> Any:
    """aiokafka's fetcher under ``group``'s member now."""
    return group._member.parts.fetcher._consumer._fetcher


def break_once(group: ConsumerGroup) -> None:
    """Make the background fetch of ``group``'s aiokafka consumer raise at its next turn, as a
    renamed private name or a bug would: it ends, for good."""
    fetcher = inner_fetcher(group)

    def broken(assignment: Any) -> Any:
        raise RuntimeError("a fetch routine broken by the test")

    fetcher._get_actions_per_node = broken


def break_metadata(group: ConsumerGroup) -> None:
    """Make the compact metadata's update fail once, at the next refresh of aiokafka's client,
    which runs it in the client's background refresh: that ends, for good."""
    client = group._member.parts.fetcher._consumer._client
    original = seams.replace_tables
    broke: list[bool] = []

    def broken(cluster: Any, tables: dict[str, Any]) -> None:
        if cluster is client.cluster and not broke:
            broke.append(True)  # once, as a passing bug would: the refresh ends all the same
            raise RuntimeError("a metadata update broken by the test")
        original(cluster, tables)

    seams.replace_tables = broken  # restored by the test
    client.force_metadata_update()


async def produce(cluster: LocalCluster, topic: str, start: int, count: int) -> None:
    async with producer_of(cluster) as producer:
        for i in range(start, start + count):
            await producer.send(topic, key=f"k{i}".encode(), value=b"v", partition=i % 2)
        await producer.flush()


def iterating(group: ConsumerGroup) -> Callable[[Counter[bytes]], Any]:
    """Consumes ``group`` with ``async for``, counting each key."""

    async def consume(seen: Counter[bytes]) -> None:
        async for _partition, batch in group:
            seen.update(record.key for record in batch if record.key is not None)

    return consume


def keys(start: int, count: int) -> set[bytes]:
    return {f"k{i}".encode() for i in range(start, start + count)}


async def consume_through_a_death(
    cluster: LocalCluster,
    topic: str,
    group: ConsumerGroup,
    consume: Callable[[Counter[bytes]], Any],
    kill: Callable[[ConsumerGroup], None],
) -> Counter[bytes]:
    """Consume ``RECORDS``, ``kill`` the background fetch, produce as many again: the counts of
    each key consumed."""
    seen: Counter[bytes] = Counter()
    await produce(cluster, topic, 0, RECORDS)
    async with group:
        consuming = asyncio.ensure_future(consume(seen))
        try:
            await wait_until(lambda: sum(seen.values()) >= RECORDS, what="the first records")
            fetcher = group._member.parts.fetcher
            dead = inner_fetcher(group).error_future
            if kill is break_metadata:
                dead = fetcher._consumer._client._sync_task
            kill(group)
            await wait_until(dead.done, what="the background fetch to end")
            await produce(cluster, topic, RECORDS, RECORDS)
            await wait_until(
                lambda: sum(seen.values()) >= 2 * RECORDS, what="the records after its end"
            )
        finally:
            await group.close()
            await asyncio.gather(consuming, return_exceptions=True)
    return seen


@pytest.mark.seams
@pytest.mark.asyncio
async def test_async_for_consumes_on_after_the_fetch_routine_dies(
    cluster: LocalCluster, make_topic: MakeTopic, caplog: pytest.LogCaptureFixture
) -> None:
    topic = await make_topic(partitions=2)
    group = member(cluster, fresh("watched"), topic)

    with caplog.at_level(logging.WARNING, logger="aio_cluster.kafka.fetcher"):
        seen = await consume_through_a_death(cluster, topic, group, iterating(group), break_once)
    assert set(seen) == keys(0, 2 * RECORDS), "a record was lost"
    assert set(seen.values()) == {1}, "a record came twice"
    assert any("background task of aiokafka" in r.getMessage() for r in caplog.records)


@pytest.mark.seams
@pytest.mark.asyncio
async def test_process_consumes_on_after_the_fetch_routine_dies(
    cluster: LocalCluster, make_topic: MakeTopic
) -> None:
    topic = await make_topic(partitions=2)
    group = member(cluster, fresh("watched"), topic)

    async def consume(seen: Counter[bytes]) -> None:
        async def handle(record: Any) -> None:
            seen[record.key] += 1

        await group.process(handle)

    seen = await consume_through_a_death(cluster, topic, group, consume, break_once)
    assert set(seen) == keys(0, 2 * RECORDS), "a record was lost"
    assert set(seen.values()) == {1}, "a record came twice"


@pytest.mark.seams
@pytest.mark.asyncio
async def test_without_the_task_to_watch_a_fetch_that_stops_is_found_by_its_lag(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Where aiokafka's fetch task cannot be watched (its private names moved), fetches that come
    back empty for over ``max_wait`` and a second while records wait still find the end."""
    topic = await make_topic(partitions=2)
    group = member(cluster, fresh("lagging"), topic)
    monkeypatch.setattr(seams, "_check_task", lambda consumer: "its fetch task moved (the test)")

    with caplog.at_level(logging.WARNING, logger="aio_cluster.kafka.fetcher"):
        seen = await consume_through_a_death(cluster, topic, group, iterating(group), break_once)
    assert set(seen) == keys(0, 2 * RECORDS), "a record was lost"
    assert set(seen.values()) == {1}, "a record came twice"
    assert Seam.FETCH_TASK in group._member.parts.fetcher._seams.off
    assert any("partition(s) had more" in r.getMessage() for r in caplog.records)


@pytest.mark.seams
@pytest.mark.asyncio
async def test_an_end_through_a_hook_of_ours_switches_the_hooks_off(
    cluster: LocalCluster, make_topic: MakeTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = await make_topic(partitions=2)
    group = member(cluster, fresh("watched"), topic)

    def break_sessions(group: ConsumerGroup) -> None:
        def broken(self: FetchSessions, fetches: Any) -> Any:
            raise RuntimeError("a session hook broken by the test")

        monkeypatch.setattr(FetchSessions, "wrap", broken)

    assert group._member.parts.fetcher._sessions is None  # not started yet
    seen = await consume_through_a_death(cluster, topic, group, iterating(group), break_sessions)
    assert set(seen) == keys(0, 2 * RECORDS), "a record was lost"
    assert set(seen.values()) == {1}, "a record came twice"
    assert group._member.parts.fetcher._sessions is None, "fetch sessions stayed on"


@pytest.mark.seams
@pytest.mark.asyncio
async def test_a_metadata_refresh_that_dies_is_started_again_without_our_tables(
    cluster: LocalCluster, make_topic: MakeTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = await make_topic(partitions=2)
    group = member(cluster, fresh("watched"), topic)
    monkeypatch.setattr(seams, "replace_tables", seams.replace_tables)  # restored after

    seen = await consume_through_a_death(cluster, topic, group, iterating(group), break_metadata)
    assert set(seen) == keys(0, 2 * RECORDS), "a record was lost"
    assert set(seen.values()) == {1}, "a record came twice"
    assert Seam.COMPACT_METADATA in group._member.parts.fetcher._seams.off


@pytest.mark.seams
@pytest.mark.asyncio
async def test_ends_that_keep_coming_raise_and_give_the_partitions_up(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    zk: ZooKeeper,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = await make_topic(partitions=2)
    name = fresh("stalled")
    group = member(cluster, name, topic)
    await produce(cluster, topic, 0, 10)

    def broken(self: Any, assignment: Any) -> Any:
        raise RuntimeError("every fetch routine broken by the test")

    async with group:
        monkeypatch.setattr(AiokafkaFetcher, "_get_actions_per_node", broken)
        break_once(group)  # the fetcher there holds the method it had (fetch sessions wrap it)
        with pytest.raises(FetchStalledError):
            async for _partition, _batch in group:
                pass
        layout = GroupLayout(name, topic)

        async def given_up() -> bool:
            return not await owners(zk, layout, [0, 1])

        await wait_until(given_up, what="the partitions given up")
