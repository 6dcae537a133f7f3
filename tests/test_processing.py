"""ConsumerGroup.process() against the real local ZooKeeper and Kafka: key order, offsets past
the completed prefix only, rebalances while handlers run, and the failure policies."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from prometheus_client import CollectorRegistry

from aio_cluster import ConfigurationError, ConsumerGroup, Record
from aio_cluster.kafka.dead_letters import HEADERS
from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.local import LocalCluster
from aio_cluster.metrics import GroupMetrics
from aio_cluster.zookeeper.client import ZooKeeper

from conftest import MakeTopic
from support import closable, settled, tasks_waiting, wait_until

pytestmark = pytest.mark.asyncio


def member(cluster: LocalCluster, group: str, topic: str, **options: Any) -> ConsumerGroup:
    options.setdefault("loop_delay", 0.1)
    options.setdefault("claim_timeout", 10.0)
    options.setdefault("commit_interval", 0.2)
    return ConsumerGroup(group, [cluster.bootstrap], [cluster.zookeeper], topic, **options)


async def send(producer: AIOKafkaProducer, topic: str, values: range, keys: int) -> None:
    """Records with value ``i`` and key ``k<i % keys>``."""
    futures = [
        await producer.send(topic, key=f"k{i % keys}".encode(), value=str(i).encode())
        for i in values
    ]
    await asyncio.gather(*futures)


async def ends(producer: AIOKafkaProducer, cluster: LocalCluster, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap)
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        if not parts:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(topic) or set()
        found = await consumer.end_offsets([TopicPartition(topic, p) for p in parts])
        return {tp.partition: offset for tp, offset in found.items()}
    finally:
        await consumer.stop()


async def stored_is(group: ConsumerGroup, partition: int, offset: int) -> bool:
    return await group.offset(partition) == offset


@contextlib.asynccontextmanager
async def processing(
    group: ConsumerGroup, handler: Callable[[Record], Awaitable[None]], **kw: Any
) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``group.process(handler, **kw)`` in a task for the block; cancel it after: the
    cancelled call must end (within a bound, else the test fails naming what still waits)."""
    task = asyncio.create_task(group.process(handler, **kw))
    try:
        yield task
    finally:
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=60)
        assert done, "process() did not end after its cancellation:\n" + tasks_waiting()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_bad_input_is_refused_before_any_record_is_taken(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(1)
    await send(producer, topic, range(5), keys=5)
    taken: list[Record] = []

    async def handler(record: Record) -> None:
        taken.append(record)

    def not_async(record: Record) -> None:
        pass

    async with member(cluster, group_name, topic) as group:
        bad: list[tuple[object, dict[str, object], str]] = [
            (not_async, {}, "handler"),
            (handler, {"concurrency": 0}, "concurrency"),
            (handler, {"concurrency": True}, "concurrency"),
            (handler, {"ordering": "offset"}, "ordering"),
            (handler, {"on_failure": "ignore"}, "on_failure"),
            (handler, {"on_failure": "dead_letter"}, "dead_letter_topic"),
            (handler, {"attempts": 0}, "attempts"),
            (handler, {"retry_initial": 5.0, "retry_max": 1.0}, "retry_initial"),
            (handler, {"max_records": 0}, "max_records"),
            (handler, {"on_failure": "dead_letter", "dead_letter_topic": topic}, "dead_letter"),
            (
                handler,
                {"on_failure": "dead_letter", "dead_letter_topic": f"{topic}-missing"},
                "does not exist",
            ),
        ]
        for given, options, named in bad:
            with pytest.raises(ConfigurationError, match=re.escape(named)):
                await group.process(given, **options)  # type: ignore[arg-type]

        # Beside a running iteration, and twice at once.
        batches = closable(group.batches())
        await anext(batches)
        with pytest.raises(ConfigurationError, match="batch iteration"):
            await group.process(handler)
        await batches.aclose()
        gate = asyncio.Event()

        async def blocked(record: Record) -> None:
            await gate.wait()

        async with processing(group, blocked, concurrency=2):
            await wait_until(
                lambda: (
                    group._member.processes.processor is not None
                    and group._member.processes.processor.running
                )
            )
            with pytest.raises(ConfigurationError, match="runs already"):
                await group.process(handler)
            with pytest.raises(ConfigurationError, match="process"):
                await anext(group.batches())
        assert taken == [], "no record reached a refused call"


async def test_key_order_and_offsets_past_the_completed_prefix_only(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(2)
    total = 3000
    await send(producer, topic, range(total), keys=1000)
    end = await ends(producer, cluster, topic)
    rng = random.Random(18)
    started: dict[tuple[int, bytes], list[int]] = defaultdict(list)
    running: set[tuple[int, bytes]] = set()
    finished: dict[int, set[int]] = defaultdict(set)
    handled: Counter[bytes] = Counter()
    overlaps: list[tuple[int, bytes]] = []
    most = 0

    async def handler(record: Record) -> None:
        nonlocal most
        assert record.key is not None
        assert record.value is not None
        slot = (record.partition, record.key)
        if slot in running:
            overlaps.append(slot)
        running.add(slot)
        most = max(most, len(running))
        started[slot].append(record.offset)
        await asyncio.sleep(rng.random() * 0.005)
        running.discard(slot)
        handled[record.value] += 1
        finished[record.partition].add(record.offset)

    violations: list[str] = []

    async with member(cluster, group_name, topic) as group:

        async def sample() -> None:
            while True:
                for partition in (0, 1):
                    stored = await group.offset(partition)
                    if stored is None:
                        continue
                    missing = set(range(stored)) - finished[partition]
                    if missing:
                        violations.append(
                            f"{partition}: stored {stored}, {min(missing)} unfinished"
                        )
                await asyncio.sleep(0.01)

        sampler = asyncio.create_task(sample())
        try:
            async with processing(group, handler, concurrency=200, ordering="key"):
                await wait_until(lambda: len(handled) == total, what="every record handled")
                await wait_until(
                    lambda: (
                        all(
                            group._member.parts.membership.claims[PartitionKey(p)].pending is None
                            for p in (0, 1)
                        )
                        and all(
                            group._member.parts.membership.claims[PartitionKey(p)].stored == end[p]
                            for p in (0, 1)
                        )
                    ),
                    what="the end stored",
                )
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        assert await group.offset(0) == end[0]
        assert await group.offset(1) == end[1]
    assert overlaps == [], "a key ran two records at once"
    assert violations == [], "the stored offset passed an unfinished record"
    assert all(offsets == sorted(offsets) for offsets in started.values()), "key order broken"
    assert set(handled) == {str(i).encode() for i in range(total)}
    assert most > 1, "records of different keys ran side by side"


@pytest.mark.parametrize("ordering", ["partition", "none"])
async def test_partition_and_no_ordering(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    ordering: str,
) -> None:
    topic = await make_topic(2)
    await send(producer, topic, range(400), keys=1)
    per_partition: Counter[int] = Counter()
    most: Counter[int] = Counter()
    handled: set[int] = set()
    order: dict[int, list[int]] = defaultdict(list)

    async def handler(record: Record) -> None:
        per_partition[record.partition] += 1
        most[record.partition] = max(most[record.partition], per_partition[record.partition])
        order[record.partition].append(record.offset)
        await asyncio.sleep(0.001)
        per_partition[record.partition] -= 1
        assert record.value is not None
        handled.add(int(record.value))

    async with (
        member(cluster, group_name, topic) as group,
        processing(group, handler, concurrency=50, ordering=ordering),
    ):
        await wait_until(lambda: len(handled) == 400, what="every record handled")
    if ordering == "partition":
        assert max(most.values()) == 1, "one record at a time per partition"
        assert all(offsets == sorted(offsets) for offsets in order.values())
    else:
        assert max(most.values()) > 1, "records of one key ran side by side"


async def test_join_and_leave_while_handlers_run(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
) -> None:
    topic = await make_topic(4)
    total = 2000
    await send(producer, topic, range(total // 2), keys=300)
    rng = random.Random(7)
    active: dict[int, Counter[str]] = defaultdict(Counter)
    overlaps: list[str] = []
    handled: Counter[int] = Counter()

    def handler_of(group: ConsumerGroup) -> Callable[[Record], Awaitable[None]]:
        async def handler(record: Record) -> None:
            others = [m for m, n in active[record.partition].items() if n and m != group.id]
            if others:
                overlaps.append(f"partition {record.partition}: {group.id} beside {others}")
            active[record.partition][group.id] += 1
            try:
                await asyncio.sleep(rng.random() * 0.01)
            finally:
                active[record.partition][group.id] -= 1
            assert record.value is not None
            handled[int(record.value)] += 1

        return handler

    first = member(cluster, group_name, topic, strategy="range")
    second = member(cluster, group_name, topic, strategy="range")
    async with first, processing(first, handler_of(first), concurrency=40):
        await wait_until(lambda: len(handled) > 200, what="first is processing")
        await second.register()
        async with processing(second, handler_of(second), concurrency=40):
            await wait_until(lambda: settled(zk, [first, second]), what="two share the topic")
            await send(producer, topic, range(total // 2, total), keys=300)
            await wait_until(lambda: len(handled) > total * 3 // 4, what="both process")
            await first.close()
            await wait_until(lambda: settled(zk, [second]), what="second has it all")
            await wait_until(lambda: len(handled) == total, what="every record handled")
        await second.close()
    assert overlaps == [], "a moving partition's records ran on two members at once"
    assert set(handled) == set(range(total)), "nothing lost"


async def test_handover_abandons_handlers_after_rebalance_timeout(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
) -> None:
    topic = await make_topic(2)
    await send(producer, topic, range(20), keys=20)
    end = await ends(producer, cluster, topic)
    cancelled: list[int] = []
    by_second: list[tuple[int, int]] = []

    async def stuck(record: Record) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(record.partition)
            raise

    async def quick(record: Record) -> None:
        by_second.append((record.partition, record.offset))

    first = member(cluster, group_name, topic, strategy="range", rebalance_timeout=1.0)
    second = member(cluster, group_name, topic, strategy="range")
    async with first, processing(first, stuck, concurrency=100):
        await wait_until(
            lambda: (
                first._member.processes.processor is not None
                and first._member.processes.processor.in_flight == 20
            )
        )
        stats = await first.statistics()
        assert stats.in_flight == 20
        assert stats.oldest_in_flight is not None
        assert stats.oldest_in_flight > 0
        async with second, processing(second, quick):
            (moved,) = second.claimed
            await wait_until(
                lambda: sum(1 for p, _ in by_second if p == moved) == end[moved],
                what="the next owner handles the abandoned records",
            )
            assert cancelled.count(moved) == end[moved], "the abandoned handlers were cancelled"
            assert await second.offset(moved) is not None


async def test_a_handler_that_ignores_cancellation_keeps_its_partition_until_it_ends(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A timed-out handover cancels the handler, whose shielded clean-up runs on: the partition is
    released only once it ended, so the next owner never handles its records beside it."""
    topic = await make_topic(2)
    # One record in each partition, so a stubborn handler runs in whichever one moves (which
    # depends on how the members' ids sort).
    for partition in (0, 1):
        await producer.send_and_wait(topic, key=b"k", value=b"0", partition=partition)
    ended: dict[int, float] = {}
    started_by_second: dict[int, float] = {}
    release = threading.Event()

    async def stubborn(record: Record) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            # A clean-up that must not be interrupted: a shielded section.
            with anyio.CancelScope(shield=True):
                await asyncio.to_thread(release.wait, 30)
            ended[record.partition] = time.monotonic()

    async def quick(record: Record) -> None:
        started_by_second.setdefault(record.partition, time.monotonic())

    caplog.set_level(logging.WARNING, logger="aio_cluster.member.protocol.handover")
    first = member(cluster, group_name, topic, strategy="range", rebalance_timeout=1.0)
    second = member(cluster, group_name, topic, strategy="range")
    try:
        async with first, processing(first, stubborn):
            await wait_until(
                lambda: (
                    first._member.processes.processor is not None
                    and first._member.processes.processor.in_flight == 2
                )
            )
            async with second, processing(second, quick):
                await wait_until(
                    lambda: "ignores its cancellation" in caplog.text,
                    what="the handover names the stubborn handler",
                )
                assert second.claimed == [], "the partition is kept while its handler runs"
                release.set()
                await wait_until(lambda: len(second.claimed) == 1, what="released once it ended")
                (moved,) = second.claimed
                await wait_until(lambda: moved in started_by_second, what="the next owner runs")
                assert started_by_second[moved] > ended[moved], "never beside the old handler"
    finally:
        release.set()


async def test_poison_record_goes_to_the_dead_letter_topic(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await make_topic(1)
    dead = await make_topic(1)
    await producer.send_and_wait(topic, key=b"a", value=b"0")
    await producer.send_and_wait(topic, key=b"b", value=b"poison", headers=[("trace", b"t-1")])
    for i in range(1, 9):
        await producer.send_and_wait(topic, key=b"c", value=str(i).encode())
    tries = 0
    handled: list[bytes] = []

    async def handler(record: Record) -> None:
        nonlocal tries
        assert record.value is not None
        if record.value == b"poison":
            tries += 1
            raise ValueError(f"cannot digest {record.value!r}")
        handled.append(record.value)

    caplog.set_level(logging.WARNING, logger="aio_cluster.member.processing.failures")
    async with member(cluster, group_name, topic) as group:
        async with processing(
            group,
            handler,
            attempts=4,
            retry_initial=0.05,
            retry_jitter=0.01,
            on_failure="dead_letter",
            dead_letter_topic=dead,
        ):
            await wait_until(lambda: len(handled) == 9, what="the records after the poison")
            await wait_until(
                lambda: stored_is(group, 0, 10), what="the partition goes on past the poison"
            )
            stats = await group.statistics()
            registry = CollectorRegistry()
            metrics = GroupMetrics(group, registry=registry)
            await metrics.refresh()
            who = {"group": group_name, "member": group.id}
            scraped = {
                name: registry.get_sample_value(name, who)
                for name in (
                    "aio_cluster_dead_letters_total",
                    "aio_cluster_processing_retries_total",
                )
            }
            metrics.unregister()
        assert stats.dead_lettered == 1
        assert stats.retried == 3
        assert scraped == {
            "aio_cluster_dead_letters_total": 1,
            "aio_cluster_processing_retries_total": 3,
        }
    assert tries == 4
    waits = [
        float(match.group(1))
        for message in caplog.messages
        if (match := re.search(r"retrying in ([0-9.]+)s", message))
    ]
    assert len(waits) == 3
    assert waits == sorted(waits), f"growing delays: {waits}"
    assert waits[0] < waits[-1], f"growing delays: {waits}"

    consumer = AIOKafkaConsumer(
        dead, bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        letter = await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()
    assert (letter.key, letter.value) == (b"b", b"poison")
    headers = dict(letter.headers)
    assert headers["trace"] == b"t-1"
    assert headers[HEADERS["topic"]] == topic.encode()
    assert headers[HEADERS["partition"]] == b"0"
    assert headers[HEADERS["offset"]] == b"1"
    assert headers[HEADERS["error_type"]] == b"ValueError"
    assert headers[HEADERS["error_message"]] == b"cannot digest b'poison'"
    assert headers[HEADERS["attempts"]] == b"4"


async def test_deserialized_records_keep_their_order_and_dead_letters_their_bytes(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    producer: AIOKafkaProducer,
    group_name: str,
) -> None:
    """With JSON deserializers, keys are dicts: ordering="key" orders by their bytes, and a
    record failed for good reaches the dead-letter topic as it was written (before: every record
    failed on an unhashable key, and dead-lettering raised on a dict value)."""
    topic = await make_topic(1)
    dead = await make_topic(1)
    for i in range(60):
        key = json.dumps({"customer": i % 4}).encode()
        value = b'{"poison": true}' if i == 30 else json.dumps({"n": i}).encode()
        await producer.send_and_wait(topic, key=key, value=value)
    running: set[int] = set()
    overlaps: list[int] = []
    handled: list[int] = []

    async def handler(record: Record) -> None:
        value: Any = record.value
        if value.get("poison"):
            raise ValueError("poison")
        key: Any = record.key
        customer = key["customer"]
        if customer in running:
            overlaps.append(value["n"])
        running.add(customer)
        await asyncio.sleep(0.005)
        running.discard(customer)
        handled.append(value["n"])

    async with (
        member(
            cluster, group_name, topic, key_deserializer=json.loads, value_deserializer=json.loads
        ) as group,
        processing(
            group,
            handler,
            concurrency=8,
            attempts=1,
            on_failure="dead_letter",
            dead_letter_topic=dead,
        ),
    ):
        await wait_until(lambda: len(handled) == 59, what="every record but the poison")
        await wait_until(lambda: stored_is(group, 0, 60), what="stored past the poison")
    assert not overlaps, "one customer's records never ran side by side"
    consumer = AIOKafkaConsumer(
        dead, bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        letter = await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()
    assert (letter.key, letter.value) == (b'{"customer": 2}', b'{"poison": true}')


async def test_poison_record_with_stop_pauses_its_partition(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(2)
    await send(producer, topic, range(40), keys=40)
    end = await ends(producer, cluster, topic)
    handled: set[tuple[int, int]] = set()
    poison: tuple[int, int] | None = None

    async def handler(record: Record) -> None:
        nonlocal poison
        if record.partition == 0 and record.offset == 3:
            poison = (record.partition, record.offset)
            raise RuntimeError("poison")
        handled.add((record.partition, record.offset))

    async with (
        member(cluster, group_name, topic) as group,
        processing(group, handler, ordering="partition", attempts=2, retry_initial=0.01) as task,
    ):
        await wait_until(lambda: group.paused() == [0], what="partition 0 paused")
        await wait_until(lambda: len([h for h in handled if h[0] == 1]) == end[1])
        stats = await group.statistics()
        assert stats.stopped == (0,)
        assert await group.offset(0) == 3, "stored up to the failed record"
        assert {o for p, o in handled if p == 0} == {0, 1, 2}
        assert not task.done(), "the other partition goes on"
        # Mended by skipping it: the partition goes on after the record.
        await group.seek(0, 4)
        group.resume(0)
        await wait_until(lambda: len([h for h in handled if h[0] == 0]) == end[0] - 1)
        await wait_until(lambda: stored_is(group, 0, end[0]), what="the end stored")
        assert (await group.statistics()).stopped == ()


async def test_poison_record_with_raise_reaches_the_caller(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(1)
    await send(producer, topic, range(10), keys=10)

    class Poison(Exception):
        pass

    async def handler(record: Record) -> None:
        if record.offset == 5:
            raise Poison(record.offset)

    async with member(cluster, group_name, topic) as group:
        with pytest.raises(Poison):
            await asyncio.wait_for(
                group.process(handler, attempts=2, retry_initial=0.01, on_failure="raise"), 60
            )
        stored = await group.offset(0)
        assert stored is not None
        assert stored <= 5, "never past the failed record"
        # The next iteration starts at the first unfinished record.
        _partition, batch = await anext(group.batches())
        assert batch[0].offset == stored


async def test_cancellation_and_close_end_the_call(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(1)
    await send(producer, topic, range(10), keys=10)
    gate = asyncio.Event()
    done: set[int] = set()

    async def handler(record: Record) -> None:
        if record.offset >= 4:
            await gate.wait()
        done.add(record.offset)

    before = set(asyncio.all_tasks())
    async with member(cluster, group_name, topic) as group:
        processes = asyncio.create_task(group.process(handler, ordering="none"))
        await wait_until(lambda: len(done) == 4, what="the first four records")
        processes.cancel()
        with pytest.raises(asyncio.CancelledError):
            await processes
        assert group._member.processes.processor is not None
        assert group._member.processes.processor.in_flight == 0
        assert await group.offset(0) == 4, "the completed prefix"
        # Closing the member lets the handlers in flight finish, and stores their offset.
        processes = asyncio.create_task(group.process(handler, ordering="none"))
        await wait_until(
            lambda: (
                group._member.processes.processor is not None
                and group._member.processes.processor.in_flight == 6
            )
        )
        gate.set()
        await group.close()
        await asyncio.wait_for(processes, 30)
    assert done == set(range(10))
    async with member(cluster, group_name, topic) as again:
        assert await again.offset(0) == 10, "close stored the offset past the finished handlers"
    leftover = {t for t in asyncio.all_tasks() - before if not t.done()}
    assert {t for t in leftover if t is not asyncio.current_task()} == set()


async def test_close_past_its_deadline_still_ends_the_call_first(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    """A 5 s handler and close_timeout=2: close() cuts the wait short, and when it returns
    process() has returned and no handler runs, so the next owner never handles beside it."""
    topic = await make_topic(1)
    await send(producer, topic, range(4), keys=4)
    running: set[int] = set()
    started = asyncio.Event()

    async def handler(record: Record) -> None:
        running.add(record.offset)
        started.set()
        try:
            await asyncio.sleep(5)
        finally:
            running.discard(record.offset)

    group = member(cluster, group_name, topic, close_timeout=2.0, rebalance_timeout=10.0)
    await group.register()
    processes = asyncio.create_task(group.process(handler, ordering="none"))
    try:
        await asyncio.wait_for(started.wait(), 30)
        await group.close()
        assert processes.done(), "process() had not returned when close() did"
        assert not running, "a handler still ran after close()"
        await processes
    finally:
        processes.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await processes
    async with member(cluster, group_name, topic) as again:
        assert await again.offset(0) in (None, 0), "nothing finished: nothing stored"


async def test_a_handler_may_close_the_member(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(1)
    await send(producer, topic, range(10), keys=10)
    group = member(cluster, group_name, topic)

    async def handler(record: Record) -> None:
        if record.offset == 2:
            await group.close()

    async with group:
        await asyncio.wait_for(group.process(handler, ordering="partition"), 60)
    async with member(cluster, group_name, topic) as again:
        assert await again.offset(0) == 2, "the records before the closing one were stored"


async def test_a_record_waiting_for_its_retry_holds_back_only_its_own_key(
    cluster: LocalCluster, make_topic: MakeTopic, producer: AIOKafkaProducer, group_name: str
) -> None:
    topic = await make_topic(1)
    await producer.send_and_wait(topic, key=b"a", value=b"flaky")
    await producer.send_and_wait(topic, key=b"a", value=b"after")
    for i in range(8):
        await producer.send_and_wait(topic, key=f"other{i}".encode(), value=b"x")
    events: list[tuple[str, int]] = []

    async def handler(record: Record) -> None:
        if record.value == b"flaky" and len(events) < 8:
            # It can succeed only once the other keys went on while it waited for retries.
            raise RuntimeError("not yet")
        await asyncio.sleep(0)  # the others yield: a back-off holding the slot would show
        events.append(((record.key or b"").decode(), record.offset))

    async with (
        member(cluster, group_name, topic) as group,
        # One handler at a time: the waiting retry must not hold the only slot.
        processing(
            group,
            handler,
            concurrency=1,
            attempts=3,
            retry_initial=0.1,
            retry_max=0.1,
            retry_jitter=0.0,
        ),
    ):
        await wait_until(lambda: len(events) == 10, what="every record")
        stats = await group.statistics()
    order = [offset for _key, offset in events]
    assert order.index(0) > max(order.index(offset) for offset in range(2, 10)), (
        "the other keys went on while key a waited for its retry"
    )
    assert order.index(1) == order.index(0) + 1, "key a's next record waited for the retried one"
    assert stats.retried >= 1
    assert stats.stopped == ()
