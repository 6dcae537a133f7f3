"""Exactly once when Kafka refuses an output for good, against the real servers: a record with
no key to a compacted topic (the broker answers ``INVALID_RECORD`` and refuses the whole record
batch it came in). No input offset is ever committed past an input whose output a
``read_committed`` reader does not see; ``transactions()`` raises `OutputRefusedError`;
``process_transactional()`` treats the record as a failed attempt (here: dead-lettered) and
goes on with the others."""

from __future__ import annotations

import asyncio
from collections import Counter

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import NotLeaderForPartitionError, UnknownError
from test_exactly_once import kafka_offsets

from aio_cluster import (
    BrokerError,
    ConfigurationError,
    ConsumerGroup,
    Output,
    OutputRefusedError,
    ProducerFencedError,
    Record,
)
from aio_cluster.kafka.group_offsets import KafkaGroupOffsets
from aio_cluster.kafka.topics import PartitionKey, TopicKeys
from aio_cluster.kafka.transactions import MAX_REQUEST_SIZE, PartitionProducer, Send
from aio_cluster.local import LocalCluster
from aio_cluster.member.delivery.partitions import PartitionStates
from aio_cluster.member.exactly_once import Transactions, _Refusal
from aio_cluster.member.protocol.keyed_layout import KeyedLayout
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import Produce
from support import add_topic, member, stored_offsets, wait_until, within

pytestmark = [pytest.mark.asyncio]

COMPACTED = {"cleanup.policy": "compact"}


async def committed_values(cluster: LocalCluster, topic: str) -> Counter[bytes]:
    """Every value of ``topic`` (one partition) a read_committed reader sees, counted."""
    reader = AIOKafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await reader.start()
    try:
        part = TopicPartition(topic, 0)
        reader.assign([part])
        await reader.seek_to_beginning(part)
        end = (await reader.end_offsets([part]))[part]
        seen: Counter[bytes] = Counter()
        while await reader.position(part) < end:
            for records in (await reader.getmany(part, timeout_ms=200)).values():
                seen.update(record.value or b"" for record in records)
        return seen
    finally:
        await reader.stop()


async def committed_offset(cluster: LocalCluster, group: str, topic: str) -> int:
    """The offset the group committed in Kafka for ``topic``'s one partition (0 when none)."""
    return sum((await kafka_offsets(cluster, group, topic, 1)).values())


def visible_prefix(values: Counter[bytes], total: int) -> int:
    """How many inputs, from the first, have their output (the input's value) visible."""
    for number in range(total):
        if values[str(number).encode()] != 1:
            return number
    return total


async def test_transactions_raises_and_commits_nothing_when_every_output_is_refused(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, produce: Produce, group_name: str
) -> None:
    source = await add_topic(admin, 1, prefix="input")
    sink = await add_topic(admin, 1, prefix="compacted", configs=COMPACTED)
    await produce(source, 10)
    async with member(cluster, group_name, source, exactly_once=True) as group:

        async def loop() -> None:
            async for _partition, batch, output in group.transactions():
                for record in batch:
                    await output.send(sink, record.value)  # no key: refused

        with pytest.raises(OutputRefusedError) as caught:
            await within(loop(), 30, "the refusal")
    refused = caught.value
    assert refused.topic == sink
    assert refused.partition == 0
    assert refused.offset in range(10)
    assert "UnknownError" in str(refused.error) or "INVALID_RECORD" in str(refused)
    assert await committed_offset(cluster, group_name, source) == 0
    assert not await committed_values(cluster, sink)


async def test_no_offset_is_committed_past_a_refused_output(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, produce: Produce, group_name: str
) -> None:
    """200 inputs, every 50th output without a key: Kafka refuses each record batch that holds
    one, good outputs and all. Whatever transactions() committed before the error, its
    outputs are visible: the offset is never past an input whose output is not."""
    source = await add_topic(admin, 1, prefix="input")
    sink = await add_topic(admin, 1, prefix="compacted", configs=COMPACTED)
    total = 200
    await produce(source, total)
    async with member(cluster, group_name, source, exactly_once=True) as group:

        async def loop() -> None:
            async for _partition, batch, output in group.transactions():
                for record in batch:
                    number = int(record.value or b"")
                    key = None if number % 50 == 0 else record.key
                    await output.send(sink, record.value, key=key)

        with pytest.raises(OutputRefusedError):
            await within(loop(), 30, "the refusal")
    committed = await committed_offset(cluster, group_name, source)
    values = await committed_values(cluster, sink)
    assert committed <= visible_prefix(values, total)
    assert sum(values.values()) == committed, "an output without its input committed"


async def test_process_transactional_dead_letters_the_refused_record_and_goes_on(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, produce: Produce, group_name: str
) -> None:
    source = await add_topic(admin, 1, prefix="input")
    sink = await add_topic(admin, 1, prefix="compacted", configs=COMPACTED)
    dead = await add_topic(admin, 1, prefix="dead")
    total = 200
    await produce(source, total)

    async def handler(record: Record, output: Output) -> None:
        number = int(record.value or b"")
        await output.send(sink, record.value, key=None if number % 50 == 0 else record.key)

    group: ConsumerGroup[int]
    async with member(cluster, group_name, source, exactly_once=True) as group:
        processing = asyncio.create_task(
            group.process_transactional(
                handler,
                concurrency=20,
                attempts=1,
                on_failure="dead_letter",
                dead_letter_topic=dead,
            )
        )

        async def done() -> bool:
            assert not processing.done(), processing
            return await committed_offset(cluster, group_name, source) == total

        await wait_until(done, timeout=60, what="every input committed")
        await group.close()
        await within(processing, 30, "process_transactional()'s end")
    values = await committed_values(cluster, sink)
    refused = {str(n).encode() for n in range(0, total, 50)}
    assert set(values) == {str(n).encode() for n in range(total)} - refused
    assert set(values.values()) == {1}
    letters = await committed_values(cluster, dead)
    assert set(letters) == refused


async def test_send_refuses_what_kafka_cannot_take_and_the_loop_goes_on(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, produce: Produce, group_name: str
) -> None:
    """No key and no value, a partition the topic lacks, a record over the producer's request
    bound: refused at send() with ConfigurationError (before, aiokafka asserted at the commit,
    which ended the loop, and the batch failed so again when read again)."""
    source = await add_topic(admin, 1, prefix="input")
    sink = await add_topic(admin, 1, prefix="output")
    total = 5
    await produce(source, total)
    refusals: list[str] = []
    async with member(cluster, group_name, source, exactly_once=True) as group:

        async def loop() -> None:
            async for _partition, batch, output in group.transactions():
                for record in batch:
                    for bad in (
                        {"value": None, "key": None},
                        {"value": b"v", "partition": 1},
                        {"value": b"v" * (MAX_REQUEST_SIZE + 1)},
                    ):
                        with pytest.raises(ConfigurationError) as caught:
                            await output.send(sink, **bad)
                        refusals.append(str(caught.value))
                    await output.send(sink, record.value, key=record.key)

        looping = asyncio.create_task(loop())

        async def done() -> bool:
            assert not looping.done(), looping
            return await committed_offset(cluster, group_name, source) == total

        await wait_until(done, what="every batch committed")
        await group.close()
        await within(looping, 30, "the loop's end")
    assert len(refusals) == 3 * total
    assert sum((await committed_values(cluster, sink)).values()) == total


async def stable_end(cluster: LocalCluster, topic: str) -> tuple[int, int]:
    """``topic``'s (one partition) last stable offset (where read_committed readers stop) and
    its log end: the former is behind while a transaction is open."""
    part = TopicPartition(topic, 0)
    ends: list[int] = []
    for isolation in ("read_committed", "read_uncommitted"):
        reader = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap, isolation_level=isolation)
        await reader.start()
        try:
            ends.append((await reader.end_offsets([part]))[part])
        finally:
            await reader.stop()
    return ends[0], ends[1]


async def test_a_commit_cancelled_in_flight_leaves_no_transaction_open(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, produce: Produce, group_name: str
) -> None:
    """A commit in flight is cancelled, as closing process_transactional() cancels its
    commits' task: the commit ends (committed or aborted) first, so read_committed readers of
    the output are not held back until the broker times the transaction out (60 s). Before,
    the commit stopped mid-transaction and left it open."""
    source = await add_topic(admin, 1, prefix="input")
    sink = await add_topic(admin, 1, prefix="output")
    total = 2000
    await produce(source, total)
    handled: set[int] = set()

    async def handler(record: Record, output: Output) -> None:
        await output.send(sink, b"x" * 20_000, key=record.key)
        handled.add(record.offset)

    async with member(cluster, group_name, source, exactly_once=True) as group:
        transactions = group._member.parts.transactions
        assert transactions is not None
        processing = asyncio.create_task(
            group.process_transactional(handler, commit_interval=3600, concurrency=50)
        )

        def all_handled() -> bool:
            assert not processing.done(), processing
            return len(handled) == total

        await wait_until(all_handled, what="every record handled")
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(transactions.commit, list(group._member.parts.states.claims))

            async def sending() -> bool:
                return (await stable_end(cluster, sink))[1] > 0

            await wait_until(sending, what="the commit's first records written")
            tasks.cancel_scope.cancel()
        await group.close()
        await within(processing, 30, "process_transactional()'s end")

    async def stable() -> bool:
        last_stable, log_end = await stable_end(cluster, sink)
        return last_stable == log_end

    await wait_until(stable, timeout=20, what="no transaction left open on the output")


@pytest.mark.parametrize("mode", ["exactly_once", "at_least_once"])
async def test_records_finished_beyond_the_prefix_are_handled_again_by_the_next_member(
    mode: str,
    cluster: LocalCluster,
    admin: AIOKafkaAdminClient,
    produce: Produce,
    zk: ZooKeeper,
    group_name: str,
) -> None:
    """process_transactional() is cancelled while its first record still runs and the others
    finished, and the member closes: their outputs were kept, never committed. The next member
    (exactly once, or with the mode switched off) must handle them again, not pass over them
    as "finished beyond the prefix" (a note process() stores in ZooKeeper, right at least once
    only, where the output was written when the handler finished)."""
    source = await add_topic(admin, 1, prefix="input")
    sink = await add_topic(admin, 1, prefix="output")
    total = 20
    await produce(source, total)
    handled: set[int] = set()
    first = asyncio.Event()

    async def handler(record: Record, output: Output) -> None:
        if record.offset == 0:
            await first.wait()  # until the cancellation
        await output.send(sink, record.value, key=record.key)
        handled.add(record.offset)

    async with member(cluster, group_name, source, exactly_once=True) as group:
        processing = asyncio.create_task(group.process_transactional(handler, concurrency=20))
        await wait_until(lambda: len(handled) == total - 1, what="all but the first handled")
        processing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await processing
    again: set[int] = set()

    async def plain(record: Record) -> None:
        again.add(record.offset)

    async def transactional(record: Record, output: Output) -> None:
        await plain(record)

    async with member(cluster, group_name, source, exactly_once=mode == "exactly_once") as next_:
        run = (
            next_.process_transactional(transactional)
            if mode == "exactly_once"
            else next_.process(plain)
        )
        running = asyncio.create_task(run)

        async def through() -> bool:
            assert not running.done(), running
            stored = await stored_offsets(zk, GroupLayout(group_name, source), 1)
            return stored.get(0) == total

        await wait_until(through, what="the next member's offset at the end")
        await next_.close()
        await within(running, 30, "the next member's end")
    assert again == set(range(total)), f"passed over: {sorted(set(range(total)) - again)}"


def causes(error: BaseException) -> list[BaseException]:
    """The chain of ``raise ... from`` behind ``error``."""
    chain = []
    while error.__cause__ is not None:
        error = error.__cause__
        chain.append(error)
    return chain


async def handover(
    cluster: LocalCluster, group: str, source: str, sink: str, offset: int, *, race: bool
) -> bool:
    """The older owner of ``source``'s partition commits a transaction with ``offset``; the
    newer one starts its producer after that commit returned, or (``race``) while it runs.
    Returns whether the older one's commit went through."""
    older = PartitionProducer(cluster.bootstrap, group, (source, 0), client_id="old", timeout=10)
    newer = PartitionProducer(cluster.bootstrap, group, (source, 0), client_id="new", timeout=10)
    await older.start()
    try:
        committing = asyncio.ensure_future(older.commit([(0, Send(sink, b"v", b"k"))], offset))
        if not race:
            await asyncio.wait({committing})
        await newer.start()
        try:
            return not await committing
        except ProducerFencedError:
            return False
        except BrokerError as exc:
            # Kafka 4.4's coordinator answers an EndTxn that races the newer producer's epoch
            # fence with UNKNOWN_SERVER_ERROR (its log: "Preparing transaction state transition
            # to ONGOING while it already a pending state PREPARE_EPOCH_FENCE"); the fence
            # aborts that transaction, which the caller's read of the offset then shows.
            if race and UnknownError in {type(cause) for cause in causes(exc)}:
                return False
            raise
    finally:
        await older.stop()
        await newer.stop()


async def test_a_new_owner_reads_the_offset_its_predecessor_committed(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, group_name: str
) -> None:
    """OffsetFetch v0-v3, all aiokafka sends, cannot ask for stable offsets (require_stable is
    v7): is an offset committed in a transaction that just completed read stale by the next
    owner? A new owner starts the partition's producer first (InitProducerId waits for the
    predecessor's transaction to complete, or aborts it), then reads. 40 handovers, half with
    the new owner's start racing the predecessor's commit: the offset read is always the one
    the predecessor's outcome says."""
    source = await add_topic(admin, 1, prefix="input")
    sink = await add_topic(admin, 1, prefix="output")
    reader = KafkaGroupOffsets(
        cluster.bootstrap, group_name, TopicKeys((source,)), client_id="test"
    )
    await reader.start()
    expected = None
    went_through = 0
    try:
        for offset in range(1, 41):
            if await handover(cluster, group_name, source, sink, offset, race=offset % 2 == 0):
                expected = offset
                went_through += 1
            read = (await reader.committed([PartitionKey(0)], 10)).get(PartitionKey(0))
            assert read == expected, f"handover {offset}: read {read}, committed {expected}"
    finally:
        await reader.stop()
    assert went_through >= 20, "the handovers after a commit"


async def test_a_send_failed_with_a_retriable_error_is_no_refusal() -> None:
    """A batch aiokafka fails with a transient error (its partition leaderless past the request's
    timeout: a real broker cannot be made to answer so on demand, so the send's future is
    failed here) fails the transaction as a `BrokerError`: the partition is read again, no
    input is refused. A non-retriable error is a refusal."""
    producer = PartitionProducer("127.0.0.1:1", "g", ("input", 0), client_id="test", timeout=5)
    kafka = producer._producer
    outcome: list[BaseException] = []

    async def nothing(*_args: object, **_kwargs: object) -> None:
        return None

    async def send(*_args: object, **_kwargs: object) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_exception(outcome[0])
        return future

    for name in ("begin_transaction", "abort_transaction", "commit_transaction"):
        setattr(kafka, name, nothing)
    kafka.send_offsets_to_transaction = nothing
    kafka.send = send
    sends = [(3, Send("output", b"v", key=b"k"))]
    outcome.append(NotLeaderForPartitionError())
    with pytest.raises(BrokerError, match="NotLeaderForPartition"):
        await producer.commit(sends, 4)
    outcome[0] = UnknownError()
    refused = await producer.commit(sends, 4)
    assert [(offset, type(error)) for offset, _send, error in refused] == [(3, UnknownError)]
    await producer.stop()


async def test_a_release_forgets_the_refusals_but_of_a_refusals_giving_up() -> None:
    """The refusals remembered of a partition outlive the release that a refusal's giving up
    makes (the claim taken again tells the bad input apart), and no other: after a handover or
    an operator's reset the input is tried in Kafka again, not refused from memory."""
    keys = TopicKeys(("input",))
    partition = keys.key("input", 0)
    transactions = Transactions(
        "127.0.0.1:1",
        KeyedLayout("g", keys, many=False),
        PartitionStates(transactional=True),
        member_id="m",
        timeout=5,
        options=None,
        on_fenced=lambda _partitions: None,
    )
    sends = [Send("output", None, key=None)]
    error = OutputRefusedError("refused", 0, 3, "output", UnknownError())

    def remembered() -> bool:
        return transactions._refused_again(partition, 3, sends) is not None

    transactions._refused[partition] = {3: _Refusal(error, sends)}
    transactions._refusing.add(partition)
    await transactions.release(partition)
    assert remembered()
    await transactions.release(partition)
    assert not remembered()
    await transactions.stop()
