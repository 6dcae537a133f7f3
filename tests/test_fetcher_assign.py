"""The fetcher's assignments against the real server: a partition given up leaves the others
reading where they were (aiokafka is given no new assignment, which would make every partition's
state again and drop what each fetched ahead) while the partitions given up are few, a partition
taken back reads from its new offset, and every record is read exactly once."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from aio_cluster.kafka.fetcher import Fetcher
from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.local import LocalCluster

from conftest import MakeTopic, Produce
from support import fetcher_of, fresh

pytestmark = pytest.mark.asyncio

KEYS = [PartitionKey(p) for p in range(4)]


async def read(fetcher: Fetcher, want: Counter[int], got: dict[int, list[int]]) -> None:
    """Fetch the assigned partitions until each has ``want`` of its records in ``got``."""
    for _ in range(200):
        if all(len(got[p]) >= want[p] for p in fetcher.assigned):
            return
        for key, records in (await fetcher.fetch(KEYS, 200)).items():
            got[key] += [record.offset for record in records]
    raise AssertionError(f"read {got} of {want}")


async def start_reading(fetcher: Fetcher, topic: str) -> dict[int, list[int]]:
    """Assign the topic's four partitions from their start and read at least a record of each:
    the offsets read, by partition."""
    await fetcher.partitions(topic)
    fetcher.assign(dict.fromkeys(KEYS, 0))
    got: dict[int, list[int]] = {p: [] for p in range(4)}
    await read(fetcher, Counter(dict.fromkeys(range(4), 1)), got)
    return got


async def test_a_partition_given_up_and_taken_back_leaves_the_others_reading_where_they_were(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = await make_topic(partitions=4)
    counts = await produce(topic, 400)
    # A few records a fetch: the reading takes many fetches.
    fetcher = fetcher_of(cluster, topic, fresh("assign"), max_bytes=1024)
    assignments: list[Any] = []
    given = fetcher._consumer.assign

    def assign(tps: Any) -> None:
        assignments.append(tps)
        given(tps)

    monkeypatch.setattr(fetcher._consumer, "assign", assign)
    await fetcher.start()
    try:
        got = await start_reading(fetcher, topic)

        fetcher.assign({key: fetcher.position(key) or 0 for key in KEYS[:3]})
        assert fetcher.assigned == frozenset(KEYS[:3])
        kept = len(got[3])
        await read(fetcher, counts, got)
        assert len(got[3]) == kept, "a partition given up hands out nothing more"
        for p in range(3):
            assert got[p] == list(range(counts[p])), f"partition {p}: each record once, in order"

        fetcher.assign({**{key: fetcher.position(key) or 0 for key in KEYS[:3]}, KEYS[3]: 5})
        got[3] = []
        await read(fetcher, Counter({3: counts[3] - 5}), got)
        assert got[3] == list(range(5, counts[3])), "taken back, it reads from its new offset"
        assert len(assignments) == 1, "giving up and taking back asked aiokafka no new assignment"

        fetcher.assign({KEYS[0]: counts[0], KEYS[1]: 0})
        got[1] = []
        await read(fetcher, Counter({1: counts[1]}), got)
        assert got[1] == list(range(counts[1])), "sought back, a partition reads again"
    finally:
        await fetcher.stop()


async def test_partitions_given_up_stay_in_aiokafka_only_while_they_are_few(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce
) -> None:
    # aiokafka's fetch goes over every partition of its assignment at each turn, paused or not:
    # a member that gave most of its partitions up must not keep them there.
    topic = await make_topic(partitions=4)
    counts = await produce(topic, 200)
    fetcher = fetcher_of(cluster, topic, fresh("few"), max_bytes=1024)
    await fetcher.start()
    try:
        got = await start_reading(fetcher, topic)

        fetcher.assign({key: fetcher.position(key) or 0 for key in KEYS[:3]})
        assert len(fetcher._consumer.paused()) == 1, "one given up of four stays, paused"

        fetcher.assign({KEYS[0]: fetcher.position(KEYS[0]) or 0})
        assert fetcher._consumer.assignment() == {fetcher._tp(KEYS[0])}
        assert not fetcher._consumer.paused(), "three of four given up: aiokafka holds one"
        await read(fetcher, Counter({0: counts[0]}), got)
        assert got[0] == list(range(counts[0])), "partition 0: each record once, in order"
    finally:
        await fetcher.stop()


async def test_records_fetched_of_a_held_partition_keep_no_other_partition_waiting(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer
) -> None:
    # With a budget aiokafka sends no request to a broker while it holds records of any of its
    # partitions: records it fetched of a partition held (paused) since must not keep it so.
    topic = await make_topic(partitions=2)
    fetcher = fetcher_of(cluster, topic, fresh("held"), max_buffered_bytes=1 << 20)
    await fetcher.start()
    try:
        await fetcher.partitions(topic)
        fetcher.assign(dict.fromkeys(KEYS[:2], 0))
        await producer.send_and_wait(topic, b"held", partition=1)
        inner = fetcher._consumer._fetcher
        for _ in range(100):  # fetching partition 0 only: aiokafka buffers partition 1's record
            assert await fetcher.fetch(KEYS[:1], 100) == {}
            if inner._records:
                break
        assert set(inner._records) == {fetcher._tp(KEYS[1])}

        fetcher.hold(KEYS[1:2])
        await producer.send_and_wait(topic, b"wanted", partition=0)
        got: list[Any] = []
        for _ in range(50):  # five seconds: aiokafka would otherwise wait for ever
            got += (await fetcher.fetch(KEYS[:1], 100)).get(KEYS[0], [])
            if got:
                break
        assert [record.value for record in got] == [b"wanted"]

        fetcher.hold([])
        held = await fetcher.fetch(KEYS[1:2], 5_000)
        assert [record.value for record in held[KEYS[1]]] == [b"held"], "read again once let go"
    finally:
        await fetcher.stop()
