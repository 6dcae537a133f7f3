"""ConsumerGroup.process_bulk() against the real local ZooKeeper and Kafka: records written to a
SQLite table a call at a time, every record once and a poison record alone in the dead-letter
topic; key order across calls; the split of a failed call and the stop and raise policies."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from aio_cluster import ConfigurationError, ConsumerGroup, HandlerCancelledError, Record
from aio_cluster.local import LocalCluster

from conftest import MakeTopic
from support import member, wait_until

pytestmark = pytest.mark.asyncio

BulkHandler = Callable[[list[Record]], Awaitable[None]]


async def send(producer: AIOKafkaProducer, topic: str, values: list[bytes], keys: int) -> None:
    """Records with value ``values[i]`` and key ``k<i % keys>``, over the topic's partitions by
    key."""
    futures = [
        await producer.send(topic, key=f"k{i % keys}".encode(), value=value)
        for i, value in enumerate(values)
    ]
    await asyncio.gather(*futures)


async def ends(cluster: LocalCluster, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        parts = consumer.partitions_for_topic(topic) or set()
        found = await consumer.end_offsets([TopicPartition(topic, p) for p in parts])
        return {tp.partition: offset for tp, offset in found.items()}
    finally:
        await consumer.stop()


async def read_all(cluster: LocalCluster, topic: str) -> list[Any]:
    """Every record of ``topic`` (up to its end now)."""
    end = sum((await ends(cluster, topic)).values())
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    found: list[Any] = []
    try:
        while len(found) < end:
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
            for records in batches.values():
                found.extend(records)
    finally:
        await consumer.stop()
    return found


@contextlib.asynccontextmanager
async def bulk(
    group: ConsumerGroup, handler: BulkHandler, **options: Any
) -> AsyncIterator[asyncio.Task[None]]:
    """``group.process_bulk(handler, **options)`` in a task for the block; cancelled after, and
    it must end."""
    task = asyncio.create_task(group.process_bulk(handler, **options))
    try:
        yield task
    finally:
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=60)
        assert done, "process_bulk() did not end after its cancellation"
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def stored_at(group: ConsumerGroup, end: dict[int, int]) -> bool:
    return all([await group.offset(p) == offset for p, offset in end.items()])


async def offset_is(group: ConsumerGroup, offset: int) -> bool:
    return await group.offset(0) == offset


async def test_ten_thousand_records_into_sqlite_a_call_at_a_time(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    tmp_path: Path,
) -> None:
    topic = await make_topic(4)
    dead = await make_topic(1)
    total, poison_at = 10_000, 6_123
    values = [b"poison" if i == poison_at else str(i).encode() for i in range(total)]
    await send(producer, topic, values, keys=1_000)
    end = await ends(cluster, topic)
    sizes: list[int] = []
    async with aiosqlite.connect(tmp_path / "store.db") as db:
        await db.execute("CREATE TABLE stored (partition INTEGER, offset INTEGER, value TEXT)")

        async def handler(records: list[Record]) -> None:
            if any(record.value == b"poison" for record in records):
                raise ValueError("cannot store poison")
            rows = ", ".join("(?, ?, ?)" for _ in records)
            values = [
                field
                for r in records
                for field in (r.partition, r.offset, (r.value or b"").decode())
            ]
            # One statement per call.
            await db.execute(f"INSERT INTO stored VALUES {rows}", values)
            await db.commit()
            sizes.append(len(records))

        async def count() -> int:
            async with db.execute("SELECT COUNT(*) FROM stored") as cursor:
                row = await cursor.fetchone()
            assert row is not None
            return int(row[0])

        async with (
            member(cluster, group_name, topic, commit_interval=0.2) as group,
            bulk(
                group,
                handler,
                size=500,
                linger=0.05,
                concurrency=2_000,
                attempts=2,
                retry_initial=0.01,
                on_failure="dead_letter",
                dead_letter_topic=dead,
            ),
        ):
            await wait_until(
                lambda: stored_at(group, end), timeout=120, what="every partition's end stored"
            )
            assert (await group.statistics()).dead_lettered == 1
        assert await count() == total - 1
        async with db.execute(
            "SELECT partition, offset, value, COUNT(*) FROM stored GROUP BY partition, offset"
        ) as cursor:
            rows = list(await cursor.fetchall())
    assert [row for row in rows if row[3] != 1] == [], "every record once"
    assert len(rows) == total - 1
    assert sorted(int(row[2]) for row in rows) == [i for i in range(total) if i != poison_at]
    assert max(sizes) >= 100, f"records were written in bulk: {sorted(sizes)[-5:]}"
    letters = await read_all(cluster, dead)
    assert [letter.value for letter in letters] == [b"poison"], "the poison alone"


@pytest.mark.parametrize("ordering", ["key", "none"])
async def test_a_key_is_in_one_call_at_a_time_in_offset_order(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    ordering: str,
) -> None:
    """Under key order no key is in two calls running at once (nor twice in one), and each
    key's records come in offset order across calls; ``"none"`` is the control that shows the
    check sees a violation: its full calls of 50 hold more records than there are keys."""
    topic = await make_topic(2)
    total, keys = 2_000, 40
    await send(producer, topic, [str(i).encode() for i in range(total)], keys=keys)
    end = await ends(cluster, topic)
    rng = random.Random(44)
    running: set[tuple[int, bytes | None]] = set()
    overlaps: list[tuple[int, bytes | None]] = []
    seen: dict[tuple[int, bytes | None], list[int]] = defaultdict(list)
    sizes: list[int] = []
    handled = 0

    async def handler(records: list[Record]) -> None:
        nonlocal handled
        mine = []
        for record in records:
            key = (record.partition, record.key)
            if key in running:
                overlaps.append(key)
            running.add(key)
            mine.append(key)
            seen[key].append(record.offset)
        sizes.append(len(records))
        try:
            await asyncio.sleep(rng.uniform(0, 0.005))
        finally:
            running.difference_update(mine)
        handled += len(records)

    async with (
        member(cluster, group_name, topic, commit_interval=0.2) as group,
        bulk(group, handler, size=50, linger=0.02, concurrency=200, ordering=ordering),
    ):
        await wait_until(lambda: handled >= total, timeout=90, what="every record handled")
        await wait_until(lambda: stored_at(group, end), what="every partition's end stored")
    if ordering == "none":
        assert max(sizes) > keys, "full calls: more records than keys"
        assert overlaps, "the check sees a key twice at once"
        return
    assert overlaps == []
    assert max(sizes) > 1, "calls gathered several keys"
    assert sum(len(offsets) for offsets in seen.values()) == total
    for key, offsets in seen.items():
        assert offsets == sorted(offsets), f"{key} in offset order across calls"


async def test_a_failed_call_is_split_and_only_the_poison_stops_its_partition(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(1)
    count, poison_at = 20, 7
    values = [b"poison" if i == poison_at else str(i).encode() for i in range(count)]
    await send(producer, topic, values, keys=count)
    calls: list[list[int]] = []
    handled: set[int] = set()

    async def handler(records: list[Record]) -> None:
        calls.append([record.offset for record in records])
        if any(record.value == b"poison" for record in records):
            raise RuntimeError("poison")
        handled.update(record.offset for record in records)

    async with (
        member(cluster, group_name, topic, commit_interval=0.2) as group,
        bulk(
            group,
            handler,
            size=count,
            linger=2.0,
            concurrency=count,
            attempts=2,
            retry_initial=0.01,
        ) as task,
    ):
        await wait_until(lambda: group.paused() == [0], what="partition 0 stopped")
        await wait_until(lambda: len(handled) == count - 1, what="the others of its calls")
        stats = await group.statistics()
        assert stats.stopped == (0,)
        await wait_until(lambda: offset_is(group, poison_at), what="stored up to the poison")
        assert not task.done()
    assert handled == set(range(count)) - {poison_at}
    poisoned = [call for call in calls if poison_at in call]
    assert poisoned[-1] == [poison_at], "the poison ran alone last"
    assert [call for call in calls if len(call) == 1 and call != [poison_at]] == []
    first = poisoned[0]
    assert poisoned[:2] == [first, first], "the whole call ran its two attempts first"
    halves = poisoned[2:]
    assert all(len(b) < len(a) for a, b in itertools.pairwise(halves)), halves


async def test_with_raise_the_poison_alone_ends_the_call(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(1)
    await send(producer, topic, [str(i).encode() for i in range(10)], keys=10)

    class Poison(Exception):
        pass

    handled: set[int] = set()

    async def handler(records: list[Record]) -> None:
        if any(record.offset == 5 for record in records):
            raise Poison(5)
        handled.update(record.offset for record in records)

    async with member(cluster, group_name, topic) as group:
        with pytest.raises(Poison):
            await asyncio.wait_for(
                group.process_bulk(
                    handler, size=10, linger=1.0, concurrency=10, attempts=1, on_failure="raise"
                ),
                60,
            )
        stored = await group.offset(0)
        assert stored is None or stored <= 5, "never past the failed record"
    assert 5 not in handled


async def test_bad_arguments_are_refused_before_any_record_is_taken(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(1)
    await send(producer, topic, [b"0", b"1"], keys=2)
    taken: list[Record] = []

    async def handler(records: list[Record]) -> None:
        taken.extend(records)

    def not_async(records: list[Record]) -> None:
        pass

    async with member(cluster, group_name, topic) as group:
        bad: list[tuple[object, dict[str, Any], str]] = [
            (not_async, {}, "handler"),
            (handler, {"size": 0}, "size"),
            (handler, {"linger": -0.5}, "linger"),
            (handler, {"size": 200}, "concurrency (100) must be at least size (200)"),
            (handler, {"attempts": 0}, "attempts"),
            (handler, {"on_failure": "dead_letter", "dead_letter_topic": topic}, "dead_letter"),
        ]
        for given, options, named in bad:
            with pytest.raises(ConfigurationError) as raised:
                await group.process_bulk(given, **options)  # type: ignore[arg-type]
            assert named in str(raised.value)
    assert taken == []


@pytest.mark.parametrize("api", ["process_bulk", "process"])
async def test_a_handler_raising_cancelled_error_unasked_fails_its_attempt(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    api: str,
) -> None:
    """A ``CancelledError`` the handler raises when nobody cancelled it (a library's leaked
    cancellation) is a failed attempt, retried like any: its records are not counted finished,
    and the call goes on."""
    topic = await make_topic(1)
    count = 50
    await send(producer, topic, [str(i).encode() for i in range(count)], keys=count)
    handled: set[int] = set()
    raised: list[int] = []

    async def once(offsets: list[int]) -> None:
        if not raised:
            raised.append(offsets[0])
            raise asyncio.CancelledError
        handled.update(offsets)

    async def records(batch: list[Record]) -> None:
        await once([record.offset for record in batch])

    async def record(one: Record) -> None:
        await once([one.offset])

    options: dict[str, Any] = {"concurrency": 10, "attempts": 2, "retry_initial": 0.01}
    async with member(cluster, group_name, topic, commit_interval=0.2) as group:
        if api == "process_bulk":
            task = asyncio.create_task(group.process_bulk(records, size=10, linger=0.1, **options))
        else:
            task = asyncio.create_task(group.process(record, **options))
        try:
            await wait_until(lambda: len(handled) == count or task.done(), what="every record")
            assert not task.done(), "the call goes on"
            assert handled == set(range(count))
            await wait_until(lambda: offset_is(group, count), what="stored to the end")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert raised == [0]


async def test_a_bulk_handler_cancelled_unasked_for_good_meets_on_failure(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(1)
    await send(producer, topic, [str(i).encode() for i in range(10)], keys=10)

    async def handler(records: list[Record]) -> None:
        if any(record.offset == 5 for record in records):
            raise asyncio.CancelledError

    async with member(cluster, group_name, topic) as group:
        with pytest.raises(HandlerCancelledError) as raised:
            await asyncio.wait_for(
                group.process_bulk(
                    handler, size=10, linger=1.0, concurrency=10, attempts=1, on_failure="raise"
                ),
                60,
            )
        assert isinstance(raised.value.__cause__, asyncio.CancelledError)
        stored = await group.offset(0)
        assert stored is None or stored <= 5, "never past the record whose call was cancelled"


async def test_a_call_over_two_partitions_lets_go_of_the_one_handed_over(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    """A record whose partition is handed over (its batch given up after ``rebalance_timeout``)
    leaves the user's handler before the next owner claims the partition: the call is cancelled,
    and the records still waiting in it run again in a call of their own."""
    topic = await make_topic(2)
    for partition in (0, 1):
        await producer.send_and_wait(
            topic, key=b"k", value=str(partition).encode(), partition=partition
        )
    inside: set[int] = set()
    calls: list[list[int]] = []
    released = asyncio.Event()

    async def handler(records: list[Record]) -> None:
        partitions = [record.partition for record in records]
        calls.append(partitions)
        inside.update(partitions)
        try:
            if len(calls) == 1:
                await released.wait()
        finally:
            inside.difference_update(partitions)

    first = member(cluster, group_name, topic, rebalance_timeout=1.0, commit_interval=0.2)
    async with (
        first,
        bulk(first, handler, size=2, linger=5.0, concurrency=2, attempts=1),
    ):
        await wait_until(lambda: sorted(inside) == [0, 1], what="one call over both partitions")
        async with member(cluster, group_name, topic) as second:
            await wait_until(lambda: len(second.claimed) == 1, what="a partition handed over")
            (moved,) = second.claimed
            assert moved not in inside, "no record of a partition handed over in the handler"
            kept = 1 - moved
            await wait_until(lambda: [kept] in calls[1:], what="the record kept run again alone")
            await wait_until(lambda: offset_is_of(first, kept, 1), what="the record kept stored")
        released.set()


async def offset_is_of(group: ConsumerGroup, partition: int, offset: int) -> bool:
    return await group.offset(partition) == offset
