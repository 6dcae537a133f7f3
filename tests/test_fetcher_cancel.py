"""A fetch cancelled after aiokafka handed records out loses none of them: the fetcher reads them
again from where it was. Shown where it was lost, in the search for the partition behind an
unreadable fetch: each partition is probed on its own, and a probe that finished had taken its
records out of aiokafka (its position moved past them) when the caller was cancelled.

The consumer here is a stand-in that keeps positions as aiokafka does (pure logic: what the
fetcher does with positions when cancelled); the search itself runs against the real broker in
tests/test_records.py's unreadable-batch tests."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import UnsupportedCodecError

from aio_cluster.kafka.fetcher import Fetcher
from aio_cluster.kafka.topics import PartitionKey, TopicKeys

TOPIC = "t"
A, B = PartitionKey(0), PartitionKey(1)


@dataclass(frozen=True)
class FakeRecord:
    offset: int


class PositionKeepingConsumer:
    """aiokafka's consumer as far as positions go: ``getmany`` hands out the records from each
    partition's position and moves it past them; a read of partition 1 while it is fetched with
    another raises an unreadable-batch error (as a batch of a codec this machine lacks does),
    and partition 1 alone waits until the test lets it answer."""

    def __init__(self) -> None:
        self.positions = {TopicPartition(TOPIC, 0): 0, TopicPartition(TOPIC, 1): 0}
        self.release_b = asyncio.Event()
        self.probing = asyncio.Event()

    def assignment(self) -> set[Any]:
        return set(self.positions)

    def assign(self, tps: list[Any]) -> None:
        pass

    def paused(self) -> set[Any]:
        return set()

    def pause(self, *tps: Any) -> None:
        pass

    def resume(self, *tps: Any) -> None:
        pass

    def seek(self, tp: Any, offset: int) -> None:
        self.positions[tp] = offset

    async def position(self, tp: Any) -> int:
        return self.positions[tp]

    async def getmany(self, *tps: Any, timeout_ms: int = 0, max_records: int | None = None) -> Any:
        if len(tps) > 1:
            raise UnsupportedCodecError("a codec this machine lacks")
        (tp,) = tps
        if tp.partition == 1:
            self.probing.set()
            await self.release_b.wait()
            return {}
        start = self.positions[tp]
        self.positions[tp] = start + 3
        return {tp: [FakeRecord(offset) for offset in range(start, start + 3)]}


@pytest.mark.asyncio
async def test_a_fetch_cancelled_while_probing_reads_the_probed_records_again() -> None:
    fetcher = Fetcher(
        "127.0.0.1:1",
        keys=TopicKeys((TOPIC,)),
        client_id="test",
        max_bytes=1 << 20,
        max_wait_ms=100,
        min_bytes=1,
    )
    real = fetcher._consumer
    consumer = PositionKeepingConsumer()
    fetcher._consumer = consumer
    try:
        fetcher.assign({A: 0, B: 0})
        fetching = asyncio.ensure_future(fetcher.fetch([A, B], 100))
        await asyncio.wait_for(consumer.probing.wait(), 5)
        await asyncio.sleep(0)  # partition 0's probe has its records by now
        fetching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await fetching
        assert consumer.positions[TopicPartition(TOPIC, 0)] == 0, "records 0-2 would be lost"
        assert fetcher.position(A) == 0
    finally:
        await real.stop()
