"""Member processes joining and leaving while messages are produced: every message exactly once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster

from conftest import MakeTopic, Produce
from support import Worker, wait_until

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize("mode", ["auto", "manual"])
async def test_processes_join_and_leave_exactly_once(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    tmp_path: Path,
    mode: str,
) -> None:
    topic = await make_topic(6)
    workers = [Worker(tmp_path / f"worker{i}.txt") for i in range(4)]
    counts: Counter[int] = Counter()

    def consumed() -> list[str]:
        return [key for worker in workers for key in worker.consumed_keys()]

    try:
        await workers[0].start(cluster, topic, group_name, mode)
        counts += await produce(topic, 300)
        await workers[1].start(cluster, topic, group_name, mode)
        counts += await produce(topic, 300, start=300)
        await wait_until(lambda: len(consumed()) >= 400, timeout=60, what="400 consumed")
        await workers[2].start(cluster, topic, group_name, mode)
        await workers[0].leave()
        counts += await produce(topic, 300, start=600)
        await workers[3].start(cluster, topic, group_name, mode)
        await workers[1].leave()
        counts += await produce(topic, 300, start=900)
        await wait_until(lambda: len(consumed()) >= 1200, timeout=90, what="1200 consumed")
        await workers[2].leave()
        await workers[3].leave()
    finally:
        for worker in workers:
            worker.kill()

    keys = Counter(consumed())
    assert sorted(keys) == sorted(f"k{i}" for i in range(1200)), "a message was lost"
    assert set(keys.values()) == {1}, "a message was delivered twice"
    async with ConsumerGroup(group_name, [cluster.bootstrap], [cluster.zookeeper], topic) as reader:
        stored = {p: await reader.offset(p) for p in reader.partitions}
    assert stored == {p: counts[p] for p in range(6)}
