"""Keyed records with per-key sequence numbers, handled by ``process(handler, ordering="key")`` in
member processes while members join, leave gracefully (SIGTERM) and die (SIGKILL), against the
real servers (issue 24). From every handler run's start and end, which the workers log
(`support.Run`; times from CLOCK_MONOTONIC, one clock for every process of a Linux machine):

- every record is handled (its handler returned) at least once, at the offset it was written to;
- the runs of one key never overlap in time, whichever members ran them, nor do the runs of one
  partition by different members;
- no run of a key's record n starts before a run of its record n-1 has finished;
- with graceful joins and leaves only, no record is handled twice, and no handler is cut short.

Records flow at a steady pace through every change, so that handlers are in flight at each.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from aio_cluster.local import LocalCluster

from conftest import MakeTopic
from support import Run, Worker, partition_overlaps, wait_until

pytestmark = pytest.mark.asyncio

PARTITIONS = 6
KEYS = 24
PACE = 30
"""Records written every 0.1 s."""
MOST = 6_000
"""The feed stops here even if the changes are not over: the test stays bounded."""
STEP = 400
"""Records handled between two changes of the group."""

Placed = dict[tuple[str, int], tuple[int, int]]
"""(key, sequence number) -> (partition, offset) the record was written to."""


class Feed:
    """Keyed records written at a steady pace until `stop()`: the n-th record of key
    ``key-<j>`` carries n as its value, and a key's records go to one partition in order."""

    def __init__(self, producer: AIOKafkaProducer, topic: str) -> None:
        self.placed: Placed = {}
        self._producer = producer
        self._topic = topic
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        produced = 0
        while not self._stop.is_set() and produced < MOST:
            sent = []
            for i in range(produced, produced + PACE):
                key, seq = f"key-{i % KEYS}", i // KEYS
                future = await self._producer.send(
                    self._topic, key=key.encode(), value=str(seq).encode()
                )
                sent.append((key, seq, future))
            for key, seq, future in sent:
                metadata = await future
                self.placed[key, seq] = (metadata.partition, metadata.offset)
            produced += PACE
            await asyncio.sleep(0.1)


def key_overlaps(runs: Sequence[Run]) -> list[tuple[Run, Run]]:
    """Pairs of runs of one key that overlap in time: the second started before the first
    ended."""
    by_key: dict[str, list[Run]] = {}
    for run in runs:
        by_key.setdefault(run.key, []).append(run)
    found: list[tuple[Run, Run]] = []
    for of_key in by_key.values():
        of_key.sort(key=lambda run: run.started)
        last = of_key[0]  # of the runs started so far, the one that ends last
        for run in of_key[1:]:
            if run.started < last.ended:
                found.append((last, run))
            if run.ended > last.ended:
                last = run
    return found


def out_of_order(runs: Sequence[Run]) -> list[Run]:
    """Runs of a key's record n that started before any run of its record n-1 had finished."""
    finished: dict[tuple[str, int], float] = {}
    for run in runs:
        if run.outcome == "done":
            record = (run.key, int(run.value))
            finished[record] = min(run.ended, finished.get(record, math.inf))
    return [
        run
        for run in runs
        if int(run.value) > 0
        and finished.get((run.key, int(run.value) - 1), math.inf) > run.started
    ]


def check(runs: Sequence[Run], placed: Placed) -> None:
    """The promises every run of the group keeps (see the module)."""
    outcomes = Counter(run.outcome for run in runs)
    print(f"{len(placed)} records, {len(runs)} runs: {dict(outcomes)}")
    for key in {key for key, _seq in placed}:
        offsets = [placed[key, seq] for seq in sorted(n for k, n in placed if k == key)]
        assert offsets == sorted(offsets), f"the producer reordered {key}: {offsets}"
    handled = {(run.key, int(run.value)) for run in runs if run.outcome == "done"}
    missing = sorted(placed.keys() - handled)
    assert not missing, f"{len(missing)} records never handled, e.g. {missing[:5]}"
    misplaced = [r for r in runs if placed[r.key, int(r.value)] != (r.partition, r.offset)]
    assert not misplaced, f"runs of records not where they were written: {misplaced[:3]}"
    overlapping = key_overlaps(runs)
    assert not overlapping, f"{len(overlapping)} runs of one key overlap, e.g. {overlapping[:3]}"
    shared = partition_overlaps(runs)
    assert not shared, f"{len(shared)} runs of one partition overlap, e.g. {shared[:3]}"
    early = out_of_order(runs)
    assert not early, (
        f"{len(early)} runs started before their key's previous record finished, e.g. {early[:3]}"
    )


async def run_changes(
    cluster: LocalCluster,
    producer: AIOKafkaProducer,
    topic: str,
    group: str,
    out: Path,
    changes: Sequence[tuple[str, int]],
    session: float,
) -> tuple[list[Run], Placed]:
    """Two ``process`` members, then ``changes`` one after another while the feed runs, each
    once the group handled `STEP` more records: ``("join", _)`` starts a member, ``("leave",
    i)`` stops ``live[i]`` with SIGTERM, ``("kill", i)`` with SIGKILL. Once every record was
    handled the members left leave gracefully. Returns every run and where each record went."""
    workers: list[Worker] = []
    live: list[Worker] = []

    def runs() -> list[Run]:
        return [run for worker in workers for run in worker.runs()]

    def done() -> set[tuple[str, int]]:
        return {(run.key, int(run.value)) for run in runs() if run.outcome == "done"}

    async def handled_more(count: int) -> None:
        goal = len(done()) + count
        await wait_until(lambda: len(done()) >= goal, timeout=60, what=f"{count} more handled")

    async def join() -> None:
        worker = Worker(out / f"worker{len(workers)}.log")
        workers.append(worker)
        await worker.start(cluster, topic, group, "process", session)
        live.append(worker)

    async def leave(worker: Worker) -> None:
        await worker.leave()
        unended = [run for run in worker.runs() if run.outcome == "unended"]
        assert not unended, f"a member left with handlers running: {unended[:3]}"

    feed = Feed(producer, topic)
    feeding = asyncio.create_task(feed.run())
    try:
        for _ in range(2):
            await join()
        for action, index in changes:
            await handled_more(STEP)
            if action == "join":
                await join()
            elif action == "leave":
                await leave(live.pop(index))
            else:
                worker = live.pop(index)
                worker.kill()
                await worker.reap()
        feed.stop()
        await feeding
        await wait_until(
            lambda: feed.placed.keys() <= done(), timeout=90, what="every record handled"
        )
        while live:
            await leave(live.pop())
    finally:
        feeding.cancel()
        for worker in workers:
            worker.kill()
            await worker.reap()
    return runs(), feed.placed


async def test_joins_leaves_and_kills_keep_each_keys_order(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    tmp_path: Path,
) -> None:
    """A kill repeats what the killed member finished after its last stored offset (at least
    once), and its claims wait for its session (4 s) to end, but no run overlaps another of
    its key or partition, and each key's records run in order."""
    topic = await make_topic(PARTITIONS)
    changes = [("join", 0), ("kill", 0), ("join", 0), ("leave", 0), ("kill", -1)]
    runs, placed = await run_changes(
        cluster, producer, topic, group_name, tmp_path, changes, session=4.0
    )
    check(runs, placed)


async def test_graceful_joins_and_leaves_handle_each_record_once(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    tmp_path: Path,
) -> None:
    topic = await make_topic(PARTITIONS)
    changes = [("join", 0), ("leave", 0), ("join", 0), ("leave", 0)]
    runs, placed = await run_changes(
        cluster, producer, topic, group_name, tmp_path, changes, session=10.0
    )
    check(runs, placed)
    twice = [record for record, n in Counter((r.key, int(r.value)) for r in runs).items() if n > 1]
    assert not twice, f"{len(twice)} records handled more than once, e.g. {twice[:5]}"
    cut = [run for run in runs if run.outcome != "done"]
    assert not cut, f"handlers cut short: {cut[:3]}"
