"""An exactly-once group's output read by the tools no one here wrote: aiokafka, confluent-kafka
(librdkafka) and Kafka's own console consumer, each with ``read_committed``, see every input's
output once and never the output of a body that raised (its sends are held until the body
completes, so an aborted body writes nothing)."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from confluent_kafka import Consumer

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster

from conftest import MakeTopic, Produce
from support import kafka_tool, member

pytestmark = [pytest.mark.asyncio]

RECORDS = 60
PARTITIONS = 3
ABORTED = b"aborted"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"


class BodyFailed(Exception):
    """The first body's error: its transaction is aborted."""


async def pipe_with_one_abort(
    cluster: LocalCluster, group_name: str, source: str, sink: str
) -> None:
    """An exactly-once member copying ``source`` to ``sink`` until cancelled; the first batch's
    body writes `ABORTED` records, then raises (its transaction is aborted, the batch comes
    again to the next member)."""
    failed = False
    while True:
        group: ConsumerGroup[int] = member(cluster, group_name, source, exactly_once=True)
        async with group:
            try:
                async for _partition, batch, output in group.transactions():
                    for record in batch:
                        value = record.value if failed else ABORTED
                        await output.send(sink, value, key=record.key)
                    if not failed:
                        failed = True
                        raise BodyFailed
            except BodyFailed:
                continue


async def with_aiokafka(
    cluster: LocalCluster, sink: str, isolation: str, *, at_least: int = 0
) -> list[tuple[bytes, bytes]]:
    """What a reader with ``isolation`` reads of ``sink`` up to its end, waiting until it read
    at least ``at_least`` records."""
    reader = AIOKafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        isolation_level=isolation,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await reader.start()
    try:
        partitions = [TopicPartition(sink, p) for p in range(PARTITIONS)]
        reader.assign(partitions)
        await reader.seek_to_beginning(*partitions)
        seen: list[tuple[bytes, bytes]] = []

        async def behind() -> bool:
            ends = await reader.end_offsets(partitions)
            return any([await reader.position(tp) < end for tp, end in ends.items()])

        while len(seen) < at_least or await behind():
            got = await reader.getmany(timeout_ms=500)
            seen += [(r.key or b"", r.value or b"") for rs in got.values() for r in rs]
        return seen
    finally:
        await reader.stop()


def with_librdkafka(cluster: LocalCluster, sink: str) -> list[tuple[bytes, bytes]]:
    reader = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"interop-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        reader.subscribe([sink])
        seen: list[tuple[bytes, bytes]] = []
        ended: set[int] = set()
        partitions = None
        for _ in range(600):
            message = reader.poll(0.5)
            if partitions is None and reader.assignment():
                partitions = {tp.partition for tp in reader.assignment()}
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == -191:  # _PARTITION_EOF
                    ended.add(message.partition() or 0)
                    if partitions is not None and ended >= partitions:
                        break
                continue
            seen.append((message.key() or b"", message.value() or b""))
        return seen
    finally:
        reader.close()


async def with_console_consumer(cluster: LocalCluster, sink: str) -> list[tuple[bytes, bytes]]:
    """Kafka's ``kafka-console-consumer.sh`` run with ``java`` from the kafka-tools jar."""
    _status, out, _err = await kafka_tool(
        CONSOLE_CONSUMER,
        *("--bootstrap-server", cluster.bootstrap, "--topic", sink, "--from-beginning"),
        *("--isolation-level", "read_committed", "--timeout-ms", "10000"),
        *("--property", "print.key=true", "--property", "key.separator=\t"),
    )
    return [
        tuple(part.encode() for part in line.split("\t", 1))  # type: ignore[misc]
        for line in out.decode().splitlines()
        if "\t" in line
    ]


async def test_read_committed_readers_see_each_output_once_and_no_aborted_one(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    source = await make_topic(PARTITIONS)
    sink = await make_topic(PARTITIONS)
    await produce(source, RECORDS)
    pipe = asyncio.create_task(pipe_with_one_abort(cluster, group_name, source, sink))
    try:
        committed = with_aiokafka(cluster, sink, "read_committed", at_least=RECORDS)
        await asyncio.wait_for(committed, 120)
    finally:
        pipe.cancel()
        await asyncio.gather(pipe, return_exceptions=True)

    expected = Counter(f"k{i}".encode() for i in range(RECORDS))
    readers = {
        "aiokafka": await with_aiokafka(cluster, sink, "read_committed"),
        "confluent-kafka": await asyncio.to_thread(with_librdkafka, cluster, sink),
        "kafka-console-consumer": await with_console_consumer(cluster, sink),
    }
    for reader, seen in readers.items():
        assert ABORTED not in {value for _, value in seen}, f"{reader} saw aborted output"
        assert Counter(key for key, _ in seen) == expected, f"{reader}: not each input once"
        assert all(value == key[1:] for key, value in seen), reader
