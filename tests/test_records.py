"""Records as real producers write them, against the real servers: topics written with
confluent-kafka's ``Producer`` (librdkafka, as Java, Go and librdkafka services write them) with
every codec, in transactions, larger than a fetch, and records a deserializer refuses."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAuthorizationFailedError
from confluent_kafka import Producer

from aio_cluster import ConsumerGroup, DeserializationError, FetchError
from aio_cluster.kafka.fetcher import Fetcher
from aio_cluster.kafka.group_offsets import KafkaGroupOffsets
from aio_cluster.kafka.offset_reader import OffsetReader
from aio_cluster.kafka.topics import PartitionKey, TopicKeys
from aio_cluster.local import LocalCluster

from conftest import MakeTopic
from support import add_topic, consume_exactly_once, wait_until
from test_cli import run, start

pytestmark = pytest.mark.asyncio

WORKER = Path(__file__).with_name("codec_missing_worker.py")

Write = tuple[int, bytes | None, bytes | None]
"""A record to write: partition, key, value."""


def write(bootstrap: str, topic: str, records: Sequence[Write], **config: Any) -> None:
    """Write ``records`` with a librdkafka producer, in order, and wait until each is stored."""
    failures: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for partition, key, value in records:
        producer.produce(
            topic,
            key=key,
            value=value,
            partition=partition,
            on_delivery=lambda error, _message: failures.append(error) if error else None,
        )
    assert producer.flush(60) == 0, "records left unsent"
    assert not failures, failures


def write_transactions(
    bootstrap: str, topic: str, steps: Sequence[tuple[str, Sequence[Write]]]
) -> None:
    """Write each step's records in a transaction of its own, then commit or abort it as the
    step says (``"commit"`` / ``"abort"``); aborted records are in the log before the abort."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(60)
    for action, records in steps:
        producer.begin_transaction()
        for partition, key, value in records:
            producer.produce(topic, key=key, value=value, partition=partition)
        assert producer.flush(60) == 0
        if action == "commit":
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)


def numbered(prefix: str, count: int, partitions: int = 2, start: int = 0) -> list[Write]:
    """Records keyed ``<prefix><i>`` spread over the partitions, with values long and alike
    enough that librdkafka compresses them (it sends a batch as it is where compressing would
    not make it smaller)."""
    return [
        (i % partitions, f"{prefix}{i}".encode(), f"{prefix}{i} {'payload ' * 64}".encode())
        for i in range(start, start + count)
    ]


class Reader:
    """Iterates a member in a task of its own, keeping every record handed out."""

    def __init__(self, group: ConsumerGroup) -> None:
        self.records: list[Any] = []
        self._task = asyncio.ensure_future(self._read(group))

    async def _read(self, group: ConsumerGroup) -> None:
        async for _partition, batch in group:
            self.records.extend(batch)

    def keys(self) -> Counter[bytes]:
        return Counter(record.key for record in self.records)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


@pytest_asyncio.fixture
async def admin_of(cluster: LocalCluster) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    await client.start()
    yield client
    await client.close()


async def ends(cluster: LocalCluster, topic: str, partitions: list[int]) -> dict[int, int]:
    reader = OffsetReader(cluster.bootstrap, client_id="test-ends")
    await reader.start()
    try:
        return {tp.partition: end for tp, end in (await reader.ends({topic: partitions})).items()}
    finally:
        await reader.stop()


async def lag_is_zero(group: ConsumerGroup) -> bool:
    statistics = await group.statistics()
    return bool(statistics.partitions) and statistics.lag == 0


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_every_codec_is_consumed_exactly_once(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str, codec: str
) -> None:
    topic = await make_topic(partitions=2)

    async def produce(start: int, count: int) -> None:
        records = numbered("k", count, start=start)
        await asyncio.to_thread(
            write, cluster.bootstrap, topic, records, **{"compression.type": codec}
        )

    member = ConsumerGroup(group_name, cluster.bootstrap, cluster.zookeeper, topic, loop_delay=0.1)
    await consume_exactly_once([member], produce, 200)


async def test_read_committed_hands_out_only_committed_records_and_ends_without_lag(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(partitions=2)
    await asyncio.to_thread(
        write_transactions,
        cluster.bootstrap,
        topic,
        [
            ("commit", numbered("c", 100)),
            ("abort", numbered("a", 50)),
            ("commit", numbered("c", 100, start=100)),
        ],
    )
    committed = {f"c{i}".encode() for i in range(200)}
    async with ConsumerGroup(
        group_name,
        cluster.bootstrap,
        cluster.zookeeper,
        topic,
        loop_delay=0.1,
        commit_interval=0.2,
        isolation_level="read_committed",
        kafka_offsets="mirror",
    ) as group:
        reader = Reader(group)
        try:
            await wait_until(lambda: len(reader.records) >= 200, what="the 200 committed records")
            # Every partition's stored offset reaches its log end, past the commit markers.
            await wait_until(lambda: lag_is_zero(group), what="lag 0 in statistics()")
            assert reader.keys() == Counter(committed)
            statistics = await group.statistics()
            log_end = await ends(cluster, topic, [0, 1])
            assert {p.partition: p.stored for p in statistics.partitions} == log_end
            # 100 + 50 + 100 records and three transaction markers in each partition.
            assert log_end == {0: 128, 1: 128}

            code, out, err = await run(cluster, "describe", group_name, "--json")
            assert code == 0, err
            assert {row["partition"]: row["lag"] for row in json.loads(out)} == {0: 0, 1: 0}

            mirror = KafkaGroupOffsets(
                cluster.bootstrap, group_name, TopicKeys((topic,)), client_id="test"
            )
            await mirror.start()
            try:

                async def mirrored() -> bool:
                    return await mirror.committed([PartitionKey(0), PartitionKey(1)], 10) == log_end

                await wait_until(mirrored, what="the log ends committed in Kafka")
            finally:
                await mirror.stop()
            assert len(reader.records) == 200, "a record came after the committed ones"
        finally:
            await reader.stop()


async def test_read_uncommitted_by_default_hands_out_aborted_records_too(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(partitions=2)
    await asyncio.to_thread(
        write_transactions,
        cluster.bootstrap,
        topic,
        [("commit", numbered("c", 100)), ("abort", numbered("a", 50))],
    )
    written = [*numbered("c", 100), *numbered("a", 50)]
    async with ConsumerGroup(
        group_name, cluster.bootstrap, cluster.zookeeper, topic, loop_delay=0.1, commit_interval=0.2
    ) as group:
        reader = Reader(group)
        try:
            await wait_until(lambda: len(reader.records) >= 150, what="all 150 records")
            await wait_until(lambda: lag_is_zero(group), what="lag 0 in statistics()")
            assert reader.keys() == Counter(key for _p, key, _v in written)
        finally:
            await reader.stop()


async def test_the_command_consumes_read_committed(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(partitions=1)
    steps = [
        ("commit", [(0, f"c{i}".encode(), b"committed") for i in range(5)]),
        ("abort", [(0, f"a{i}".encode(), b"aborted") for i in range(3)]),
        ("commit", [(0, f"c{i}".encode(), b"committed") for i in range(5, 10)]),
    ]
    await asyncio.to_thread(write_transactions, cluster.bootstrap, topic, steps)
    async with start(
        cluster,
        *("consume", group_name, topic, "--from-beginning"),
        *("--isolation-level", "read_committed"),
    ) as process:
        assert process.stdout is not None
        lines = [await asyncio.wait_for(process.stdout.readline(), 60) for _ in range(10)]
        process.send_signal(signal.SIGINT)
        _rest, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    keys = [line.decode().split("\t")[2] for line in lines]
    assert keys == [f"c{i}" for i in range(10)]


async def test_a_record_the_deserializer_refuses_raises_and_seeking_past_it_goes_on(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(partitions=1)
    values = [json.dumps({"n": n}).encode() for n in range(10)]
    values[5] = b"not json {"
    await asyncio.to_thread(write, cluster.bootstrap, topic, [(0, None, value) for value in values])
    async with ConsumerGroup(
        group_name,
        cluster.bootstrap,
        cluster.zookeeper,
        topic,
        loop_delay=0.1,
        value_deserializer=json.loads,
    ) as group:
        got: list[Any] = []

        async def read_values() -> None:
            async for _partition, batch in group:
                got.extend(record.value for record in batch)

        with pytest.raises(DeserializationError) as raised:
            await read_values()
        assert got == [{"n": n} for n in range(5)]
        error = raised.value
        assert (error.topic, error.partition, error.offset) == (topic, 0, 5)
        assert (error.value, error.key, error.field) == (b"not json {", None, "value")
        assert isinstance(error.__cause__, json.JSONDecodeError)
        assert "offset 5" in str(error)
        assert await group.offset(0) == 5, "an offset was committed past the refused record"

        # Iterating again without a seek meets the same record again; the member stays joined.
        with pytest.raises(DeserializationError) as again:
            await read_values()
        assert again.value.offset == 5
        assert group.state.value == "joined"

        await group.seek(0, error.offset + 1)
        async for _partition, batch in group:
            got += [record.value for record in batch]
            if len(got) == 9:
                break
        assert got == [{"n": n} for n in range(10) if n != 5]


async def test_an_undecodable_codec_raises_a_fetch_error_naming_what_to_install(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(partitions=2)
    gzip = {"compression.type": "gzip"}
    await asyncio.to_thread(write, cluster.bootstrap, topic, numbered("g", 10, 1), **gzip)
    fine = [(1, key, value) for _p, key, value in numbered("h", 5, 1)]
    await asyncio.to_thread(write, cluster.bootstrap, topic, fine, **gzip)
    unreadable = [(1, key, value) for _p, key, value in numbered("z", 5, 1)]
    await asyncio.to_thread(
        write, cluster.bootstrap, topic, unreadable, **{"compression.type": "zstd"}
    )
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, str(WORKER), cluster.bootstrap, cluster.zookeeper, topic, group_name),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    report = json.loads(out)
    error = report["error"]
    assert error["type"] == FetchError.__name__, error
    assert (error["partition"], error["offset"]) == (1, 5)
    assert topic in error["message"]
    assert "zstd" in error["message"]
    assert "pip install cramjam" in error["message"]
    assert error["state"] == "joined"
    # Everything before the unreadable batch was handed out, each record once.
    handed_out = sorted(map(tuple, report["handed_out"]))
    assert handed_out == [(0, n) for n in range(10)] + [(1, n) for n in range(5)]


async def log_segment(admin: AIOKafkaAdminClient, topic: str, partition: int) -> Path:
    """The first log segment of a partition on the (local, single) broker's disk."""
    (node,) = (await admin.describe_cluster())["brokers"]
    resource = ConfigResource(ConfigResourceType.BROKER, str(node["node_id"]), {"log.dirs": None})
    (response,) = await admin.describe_configs([resource])
    entries = {entry[0]: entry[1] for entry in response.resources[0][4]}
    (directory,) = entries["log.dirs"].split(",")
    return Path(directory) / f"{topic}-{partition}" / f"{0:020d}.log"


async def test_a_corrupt_batch_raises_a_fetch_error_and_seeking_past_it_goes_on(
    cluster: LocalCluster, make_topic: MakeTopic, admin_of: AIOKafkaAdminClient, group_name: str
) -> None:
    topic = await make_topic(partitions=1)
    for name in ("before", "corrupt", "after"):  # one producer, so one batch, each
        records = [(0, None, f"{name}-{i}".encode()) for i in range(5)]
        await asyncio.to_thread(write, cluster.bootstrap, topic, records)
    segment = await log_segment(admin_of, topic, 0)
    if not segment.exists():
        pytest.skip(f"the broker's log {segment} is not on this machine")
    # A byte of the middle batch's data changed behind the broker's back: its CRC no longer
    # matches, which the consumer checks (the broker serves the bytes as they are).
    data = segment.read_bytes()
    at = data.index(b"corrupt-2")
    with segment.open("r+b") as file:
        file.seek(at)
        file.write(b"C")
    async with ConsumerGroup(
        group_name, cluster.bootstrap, cluster.zookeeper, topic, loop_delay=0.1
    ) as group:
        got: list[Any] = []

        async def read_values() -> None:
            async for _partition, batch in group:
                got.extend(record.value for record in batch)
                if len(got) == 10:
                    return

        with pytest.raises(FetchError) as raised:
            await read_values()
        assert got == [f"before-{i}".encode() for i in range(5)]
        error = raised.value
        assert (error.topic, error.partition, error.offset) == (topic, 0, 5)
        assert "CorruptRecord" in str(error)
        assert await group.offset(0) == 5

        await group.seek(0, 10)  # past the corrupt batch
        await read_values()
        assert got[5:] == [f"after-{i}".encode() for i in range(5)]


async def test_a_record_larger_than_max_bytes_is_delivered(
    cluster: LocalCluster, admin_of: AIOKafkaAdminClient, group_name: str
) -> None:
    limit = str(8 * 1024 * 1024)
    topic = await add_topic(admin_of, prefix="large", configs={"max.message.bytes": limit})
    large = os.urandom(5 * 1024 * 1024)
    records = [(0, b"before", b"small"), (0, b"large", large), (0, b"after", b"small")]
    await asyncio.to_thread(
        write, cluster.bootstrap, topic, records, **{"message.max.bytes": int(limit)}
    )
    async with ConsumerGroup(
        group_name, cluster.bootstrap, cluster.zookeeper, topic, loop_delay=0.1
    ) as group:
        got: list[Any] = []
        async for _partition, batch in group:
            got += batch
            if len(got) >= 3:
                break
    assert [record.key for record in got] == [b"before", b"large", b"after"]
    assert got[1].value == large


class RefusingConsumer:
    """aiokafka's consumer as it behaves where the broker answers a fetch of partition 1 with
    TOPIC_AUTHORIZATION_FAILED: ``getmany`` raises, naming the topic only, for any call that
    includes partition 1. Its client is the real consumer's, in which the fetcher looks up the
    leader it names in the error (a seam checked once a process, against whichever consumer
    comes first)."""

    def __init__(self, client: object) -> None:
        self._client = client
        self.positions: dict[int, int] = {}
        self.assigned: set[TopicPartition] = set()

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned = set(tps)

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def paused(self) -> set[TopicPartition]:
        return set()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp.partition] = offset

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp.partition]

    def last_poll_timestamp(self, tp: TopicPartition) -> int | None:
        return None  # no fetch answered

    async def getmany(
        self, *tps: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        if any(tp.partition == 1 for tp in tps):
            raise TopicAuthorizationFailedError(tps[0].topic)
        return {}


async def test_an_authorization_failure_raises_a_fetch_error_naming_the_partition() -> None:
    fetcher = Fetcher(
        "127.0.0.1:1",
        keys=TopicKeys(("secret-topic",)),
        client_id="test",
        max_bytes=1024,
        max_wait_ms=10,
        min_bytes=1,
    )
    real = fetcher._consumer
    fetcher._consumer = RefusingConsumer(real._client)
    try:
        fetcher.assign({PartitionKey(0): 3, PartitionKey(1): 7})
        with pytest.raises(FetchError) as raised:
            await fetcher.fetch([PartitionKey(0), PartitionKey(1)], 10)
        error = raised.value
        assert (error.topic, error.partition, error.offset) == ("secret-topic", 1, 7)
        assert "refused" in str(error)
        assert await fetcher.fetch([PartitionKey(0)], 10) == {}, "partition 0 is readable"
    finally:
        fetcher._consumer = real
        await fetcher.stop()
