"""Exactly once against the real servers: an ``exactly_once`` group's ``transactions()`` loop and
``process_transactional()`` write each input's output once as ``read_committed`` readers see it,
through a body that raises or breaks, a handler retried or dead-lettered, and a newer owner
that fences the older one's producer; the offsets committed in Kafka and stored in ZooKeeper
agree. Members in other processes, killed and frozen: ``tests/test_exactly_once_churn.py``."""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict
from collections.abc import Coroutine
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from aio_cluster import (
    ConfigurationError,
    ConsumerGroup,
    Output,
    ProducerFencedError,
    Record,
    TransactionClosedError,
)
from aio_cluster.kafka.group_offsets import KafkaGroupOffsets
from aio_cluster.kafka.topics import PartitionKey, TopicKeys
from aio_cluster.kafka.transactions import PartitionProducer
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from pipeline import Outputs, outputs_of
from support import add_topic, member, stored_offsets, wait_until, within
from test_cli import run as run_cli

pytestmark = [pytest.mark.asyncio]


class BodyFailed(Exception):
    """A body's or a handler's planned failure."""


async def kafka_offsets(
    cluster: LocalCluster, group: str, topic: str, partitions: int
) -> dict[PartitionKey, int]:
    """The offsets the group committed in Kafka for ``topic``."""
    offsets = KafkaGroupOffsets(cluster.bootstrap, group, TopicKeys((topic,)), client_id="test")
    await offsets.start()
    try:
        return await offsets.committed([PartitionKey(p) for p in range(partitions)], 10)
    finally:
        await offsets.stop()


async def ends(cluster: LocalCluster, topic: str, partitions: int) -> dict[int, int]:
    reader = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap)
    await reader.start()
    try:
        found = await reader.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return {tp.partition: offset for tp, offset in found.items()}
    finally:
        await reader.stop()


async def offsets_agree(
    cluster: LocalCluster, zk: ZooKeeper, group: str, topic: str, partitions: int
) -> None:
    """Kafka's committed offsets, ZooKeeper's stored ones and the input's ends are the same."""
    kafka = await kafka_offsets(cluster, group, topic, partitions)
    stored = await stored_offsets(zk, GroupLayout(group, topic), partitions)
    end = await ends(cluster, topic, partitions)
    assert {int(k): v for k, v in kafka.items()} == end, "Kafka's offsets are not at the end"
    assert stored == end, "ZooKeeper does not follow Kafka"


async def pipe_until_written(
    group: ConsumerGroup[int],
    pipe: Coroutine[Any, Any, None],
    bootstrap: str,
    sink: str,
    partitions: int,
    total: int,
    *,
    ends: str,
) -> Outputs:
    """Run ``pipe`` (the group's loop, which ends once the group closed) until ``sink`` (of
    ``partitions`` partitions) read with read_committed holds ``total`` keys; then close the
    group, wait for the loop's end (``ends`` names it) and read ``sink`` to its end."""
    async with outputs_of(bootstrap, sink, partitions) as outputs:
        piping = asyncio.create_task(pipe)
        try:
            await outputs.wait_for(total, timeout=60, what="every input's output")
            assert not piping.done(), piping
        finally:
            await group.close()
            await within(piping, 30, ends)
        await outputs.to_end()
        return outputs


async def test_the_modes_refuse_each_other(cluster: LocalCluster, make_topic: MakeTopic) -> None:
    topic = await make_topic(1)
    plain = member(cluster, "g", topic, register=False)
    with pytest.raises(ConfigurationError, match="exactly_once=True"):
        plain.transactions()

    async def write(record: Record, output: Output) -> None:
        pass

    with pytest.raises(ConfigurationError, match="exactly_once=True"):
        await plain.process_transactional(write)
    await plain.close()
    once = member(cluster, "g", topic, register=False, exactly_once=True)
    with pytest.raises(ConfigurationError, match="transactions"):
        once.batches()
    with pytest.raises(ConfigurationError, match="transactions"):
        aiter(once)

    async def handler(record: Record) -> None:
        pass

    with pytest.raises(ConfigurationError, match="process_transactional"):
        await once.process(handler)
    with pytest.raises(ConfigurationError, match="commit_interval"):
        await once.process_transactional(write, commit_interval=0)
    await once.close()
    with pytest.raises(ConfigurationError, match="kafka_offsets"):
        member(cluster, "g", topic, exactly_once=True, kafka_offsets="mirror")


async def test_a_body_that_raises_or_breaks_writes_nothing_and_its_batch_comes_again(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    zk: ZooKeeper,
    group_name: str,
) -> None:
    source, sink, total = await make_topic(2), await make_topic(2), 40
    await produce(source, total)
    raised = broke = False
    late: list[Output] = []
    async with member(cluster, group_name, source, exactly_once=True) as group:

        async def pipe() -> None:
            nonlocal raised, broke
            while True:
                try:
                    async for _partition, batch, output in group.transactions():
                        value = b"doomed" if not (raised and broke) else None
                        for record in batch:
                            await output.send(sink, value or record.value, key=record.key)
                        if not raised:
                            raised = True
                            raise BodyFailed
                        if not broke:
                            broke = True
                            late.append(output)
                            break
                    else:
                        return  # the member closed
                except BodyFailed:
                    continue

        outputs = await pipe_until_written(
            group, pipe(), cluster.bootstrap, sink, 2, total, ends="the loop's end"
        )
    assert raised
    assert broke
    assert set(outputs.keys) == {f"k{i}" for i in range(total)}
    assert set(outputs.keys.values()) == {1}, f"twice: {outputs.duplicates()}"
    with pytest.raises(TransactionClosedError):
        await late[0].send(sink, b"after its batch")
    await offsets_agree(cluster, zk, group_name, source, 2)


async def test_a_newer_producer_fences_the_older_ones_commit(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    zk: ZooKeeper,
    group_name: str,
) -> None:
    """While a batch's body runs, another process starts the partition's producer (as a newer
    owner does when it claims the partition; ZooKeeper has not told this member yet): the
    batch's commit fails with ProducerFencedError and its output never shows; the member gives
    the partition up, claims it again (the assignment still gives it here) and writes each
    input once."""
    source, sink, total = await make_topic(1), await make_topic(1), 10
    await produce(source, total)
    fenced_at: list[ProducerFencedError] = []
    async with member(cluster, group_name, source, exactly_once=True) as group:

        async def pipe() -> None:
            while True:
                try:
                    async for _partition, batch, output in group.transactions():
                        zombie = not fenced_at
                        for record in batch:
                            await output.send(sink, b"zombie" if zombie else b"", key=record.key)
                        if zombie:
                            newer = PartitionProducer(
                                cluster.bootstrap,
                                group_name,
                                (source, 0),
                                client_id="newer",
                                timeout=10.0,
                            )
                            await newer.start()
                            await newer.stop()
                    return
                except ProducerFencedError as exc:
                    fenced_at.append(exc)

        outputs = await pipe_until_written(
            group, pipe(), cluster.bootstrap, sink, 1, total, ends="the loop's end"
        )
    assert len(fenced_at) == 1
    assert fenced_at[0].partition == 0
    assert set(outputs.keys.values()) == {1}, f"twice: {outputs.duplicates()}"
    assert len(outputs.keys) == total
    async with outputs_of(cluster.bootstrap, sink, 1, "read_uncommitted") as everything:
        await everything.to_end()
    assert everything.keys.total() == total, "the zombie's output was written (then aborted)"
    await offsets_agree(cluster, zk, group_name, source, 1)


async def pipe_process(
    group: ConsumerGroup[int],
    sink: str,
    total: int,
    bootstrap: str,
    partitions: int,
    handler: Any,
    **options: Any,
) -> Counter[str]:
    """Run ``handler`` under process_transactional() until the output holds ``total`` keys;
    the output's keys, counted, read with read_committed."""
    outputs = await pipe_until_written(
        group,
        group.process_transactional(handler, **options),
        bootstrap,
        sink,
        partitions,
        total,
        ends="process_transactional()'s end",
    )
    return outputs.keys


async def test_retried_handlers_write_once_and_dead_letters_write_no_output(
    cluster: LocalCluster,
    admin: AIOKafkaAdminClient,
    produce: Produce,
    zk: ZooKeeper,
    group_name: str,
) -> None:
    source = await add_topic(admin, 3, prefix="input")
    sink = await add_topic(admin, 3, prefix="output")
    dead = await add_topic(admin, 1, prefix="dead")
    total = 300
    await produce(source, total)
    attempts: Counter[bytes] = Counter()

    async def handler(record: Record, output: Output) -> None:
        key = record.key or b""
        attempts[key] += 1
        await output.send(sink, record.value, key=key)
        number = int(key[1:])
        if number % 7 == 0 and attempts[key] == 1:
            raise BodyFailed  # its send is dropped; the retry sends again
        if number == 5:
            raise BodyFailed  # for good: dead-lettered, no output

    async with member(cluster, group_name, source, exactly_once=True) as group:
        keys = await pipe_process(
            group,
            sink,
            total - 1,
            cluster.bootstrap,
            3,
            handler,
            concurrency=20,
            attempts=2,
            retry_initial=0.01,
            on_failure="dead_letter",
            dead_letter_topic=dead,
        )
    assert set(keys.values()) == {1}, "an input was written twice"
    assert set(keys) == {f"k{i}" for i in range(total) if i != 5}
    assert attempts[b"k7"] == 2
    async with outputs_of(cluster.bootstrap, dead, 1, "read_uncommitted") as letters:
        await letters.wait_for(1, timeout=30, what="the dead letter")
    assert set(letters.keys) == {"k5"}
    await offsets_agree(cluster, zk, group_name, source, 3)


async def test_key_order_holds_in_the_output(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, producer: Any, group_name: str
) -> None:
    source = await add_topic(admin, 2, prefix="input")
    sink = await add_topic(admin, 2, prefix="output")
    total, keys = 400, 10
    for i in range(total):
        await producer.send(source, key=f"key{i % keys}".encode(), value=str(i).encode())
    await producer.flush()
    rng = random.Random(45)

    async def handler(record: Record, output: Output) -> None:
        await asyncio.sleep(rng.random() * 0.01)
        await output.send(sink, record.value, key=record.key)

    seen: dict[bytes, list[int]] = defaultdict(list)
    reader = AIOKafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    async with member(cluster, group_name, source, exactly_once=True) as group:
        processing = asyncio.create_task(
            group.process_transactional(handler, concurrency=30, ordering="key")
        )
        await reader.start()
        try:
            parts = [TopicPartition(sink, p) for p in range(2)]
            reader.assign(parts)
            await reader.seek_to_beginning(*parts)

            async def read_all() -> None:
                count = 0
                while count < total:
                    got = await reader.getmany(timeout_ms=200)
                    for records in got.values():
                        for record in records:
                            seen[record.key].append(int(record.value))
                            count += 1

            await within(read_all(), 60, "every output")
        finally:
            await reader.stop()
            await group.close()
            await within(processing, 30, "process_transactional()'s end")
    for key, values in seen.items():
        assert values == sorted(values), f"{key!r} out of order"
        assert len(values) == total // keys


async def test_a_reset_moves_kafkas_offsets_too_and_the_next_claim_starts_there(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    zk: ZooKeeper,
    group_name: str,
) -> None:
    """An exactly-once group's claims start from the offset committed in Kafka: a reset of the
    stopped group (``aio-cluster reset-offsets``) must move it too, or the reset is ignored."""
    source, sink, total = await make_topic(1), await make_topic(1), 20
    await produce(source, total)

    async def copy(group: ConsumerGroup[int], value: bytes) -> None:
        async for _partition, batch, output in group.transactions():
            for record in batch:
                await output.send(sink, value, key=record.key)

    for run, value in enumerate((b"first", b"again")):
        async with (
            outputs_of(cluster.bootstrap, sink, 1) as outputs,
            member(cluster, group_name, source, exactly_once=True) as group,
        ):
            piping = asyncio.create_task(copy(group, value))

            async def written(expected: int = total * (run + 1)) -> bool:
                await outputs.read(100)
                return sum(outputs.keys.values()) >= expected

            await wait_until(written, timeout=60, what=f"run {run}'s output")
            await group.close()
            await within(piping, 30, "the loop's end")
            assert sum(outputs.keys.values()) == total * (run + 1)
        await offsets_agree(cluster, zk, group_name, source, 1)
        if run == 0:
            status, out, err = await run_cli(
                cluster,
                "reset-offsets",
                group_name,
                "--topic",
                source,
                "--to-earliest",
                "--execute",
            )
            assert status == 0, err
            assert "group's offsets in Kafka of 1 partition" in out
            assert await kafka_offsets(cluster, group_name, source, 1) == {PartitionKey(0): 0}


async def test_commit_goes_through_a_transaction_and_zookeeper_follows(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    zk: ZooKeeper,
    group_name: str,
) -> None:
    source = await make_topic(1)
    await produce(source, 10)
    async with member(cluster, group_name, source, exactly_once=True) as group:
        await group.commit(0, 4)
        assert await kafka_offsets(cluster, group_name, source, 1) == {PartitionKey(0): 4}
        assert await group.offset(0) == 4
    assert await stored_offsets(zk, GroupLayout(group_name, source), 1) == {0: 4}
    async with member(cluster, group_name, source, exactly_once=True) as again:
        batches = again.transactions()
        _partition, batch, _output = await within(anext(batches), 30, "a batch")
        assert batch[0].offset == 4, "the next claim starts at the committed offset"
        await again.close()


async def test_process_transactional_raises_the_documented_error_unwrapped(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    """The handler's error with on_failure="raise" comes out as itself, not inside the
    ExceptionGroup of the task group process_transactional() runs its commits in."""
    source = await make_topic(1)
    await produce(source, 3)

    async def handler(record: Record, output: Output) -> None:
        raise BodyFailed(record.offset)

    async with member(cluster, group_name, source, exactly_once=True) as group:
        with pytest.raises(BodyFailed):
            await within(
                group.process_transactional(handler, attempts=1, on_failure="raise"),
                30,
                "process_transactional()'s end",
            )


async def test_zookeeper_never_runs_ahead_of_kafka_past_markers_and_aborted_records(
    cluster: LocalCluster, make_topic: MakeTopic, zk: ZooKeeper, group_name: str
) -> None:
    """Once the member handled the input, an aborted transaction comes (records and a marker,
    nothing a read_committed reader sees): the member steps over it, and the offset past it is
    committed in Kafka before ZooKeeper holds it (before, the step set ZooKeeper's pending
    offset directly, ahead of Kafka's)."""
    source, sink = await make_topic(1), await make_topic(1)
    writer = AIOKafkaProducer(
        bootstrap_servers=cluster.bootstrap, transactional_id=f"{group_name}-writer"
    )
    layout = GroupLayout(group_name, source)

    async def handler(record: Record, output: Output) -> None:
        await output.send(sink, record.value, key=record.key)

    async def offsets() -> tuple[int | None, int | None]:
        stored = (await stored_offsets(zk, layout, 1)).get(0)
        return stored, (await kafka_offsets(cluster, group_name, source, 1)).get(PartitionKey(0))

    await writer.start()
    try:
        async with writer.transaction():
            for i in range(5):
                await writer.send(source, str(i).encode(), key=f"k{i}".encode(), partition=0)
        async with member(cluster, group_name, source, exactly_once=True) as group:
            processing = asyncio.create_task(group.process_transactional(handler))
            handled = (await ends(cluster, source, 1))[0]

            async def caught_up() -> bool:
                assert not processing.done(), processing
                stored, _kafka = await offsets()
                return stored is not None and stored >= handled - 1

            await wait_until(caught_up, what="the input handled")
            await writer.begin_transaction()
            for i in range(5, 8):
                await writer.send(source, str(i).encode(), key=f"k{i}".encode(), partition=0)
            await writer.abort_transaction()
            aborted = (await ends(cluster, source, 1))[0]

            async def stepped() -> bool:
                stored, _kafka = await offsets()
                return stored is not None and stored >= aborted - 1

            await wait_until(stepped, what="ZooKeeper's offset past the aborted records")
            stored, kafka = await offsets()
            assert kafka is not None
            assert stored is not None
            assert kafka >= stored, f"ZooKeeper ran ahead of Kafka: {stored} > {kafka}"
            await group.close()
            await within(processing, 30, "process_transactional()'s end")
    finally:
        await writer.stop()


async def test_zookeeper_follows_kafka_after_an_out_of_range_restart(
    cluster: LocalCluster,
    admin: AIOKafkaAdminClient,
    make_topic: MakeTopic,
    produce: Produce,
    zk: ZooKeeper,
    group_name: str,
) -> None:
    """The group committed offset 10 and closed; then the records up to the end are deleted
    (retention): the next member's position is out of range and it restarts at the earliest
    offset, 20. That offset is committed in Kafka before ZooKeeper holds it (before, it was
    stored in ZooKeeper at once, and Kafka stayed at 10 while nothing more came)."""
    source, sink = await make_topic(1), await make_topic(1)
    await produce(source, 10)

    async def handler(record: Record, output: Output) -> None:
        await output.send(sink, record.value, key=record.key)

    layout = GroupLayout(group_name, source)

    async def run_until(offset: int) -> None:
        async with member(cluster, group_name, source, exactly_once=True) as group:
            processing = asyncio.create_task(group.process_transactional(handler))

            async def stored() -> bool:
                assert not processing.done(), processing
                return (await stored_offsets(zk, layout, 1)).get(0) == offset

            await wait_until(stored, what=f"ZooKeeper's offset at {offset}")
            kafka = await kafka_offsets(cluster, group_name, source, 1)
            assert kafka[PartitionKey(0)] == offset, "ZooKeeper ran ahead of Kafka"
            await group.close()
            await within(processing, 30, "process_transactional()'s end")

    await run_until(10)
    await produce(source, 10, start=10)
    await admin.delete_records({TopicPartition(source, 0): RecordsToDelete(20)})
    await run_until(20)
