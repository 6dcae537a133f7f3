"""Exactly once: every partition's transactional producer is stopped, whatever cuts a stop
short, against the real servers. Counted by aiokafka's own background tasks: a producer's
sender routine, and a reader task per open connection."""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from aio_cluster import ConsumerGroup
from aio_cluster.kafka import seams
from aio_cluster.kafka.transactions import PartitionProducer
from aio_cluster.local import LocalCluster

from conftest import Produce
from support import add_topic, member, wait_until, within

pytestmark = [pytest.mark.asyncio]

WATCHED = ("Sender._sender_routine", "AIOKafkaConnection._read")


def running() -> set[asyncio.Task[Any]]:
    """The loop's tasks running aiokafka's producers' sender routines and connection readers."""
    return {task for task in asyncio.all_tasks() if not task.done() and _name(task) in WATCHED}


def left(before: set[asyncio.Task[Any]]) -> bool:
    """Whether every such task started since ``before`` ended (the session's own clients, the
    test's producer of records among them, may open and close connections meanwhile)."""
    return not running() - before


def named(tasks: set[asyncio.Task[Any]]) -> Counter[str]:
    return Counter(_name(task) for task in tasks)


def _name(task: asyncio.Task[Any]) -> str:
    """The qualified name of what ``task`` runs."""
    return str(getattr(task.get_coro(), "__qualname__", ""))


def producing(members: list[ConsumerGroup[int]], count: int) -> bool:
    """Whether ``members`` hold ``count`` producers at least."""
    return sum(map(producers, members)) >= count


def producers(group: ConsumerGroup[int]) -> int:
    transactions = group._member.parts.transactions
    assert transactions is not None
    return transactions.producers


@pytest.mark.seams
async def test_finishing_a_stop_fits_the_installed_aiokafka(producer: AIOKafkaProducer) -> None:
    assert seams._check_producer(producer) is None


async def test_a_stop_cut_short_is_finished_at_the_close(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, produce: Produce, group_name: str
) -> None:
    """The producers' stop is cancelled from outside anyio (as an asyncio.gather around it is):
    they stay in the member's table, and its close stops them for good."""
    source = await add_topic(admin, 6, prefix="input")
    await produce(source, 60)
    before = running()
    async with member(cluster, group_name, source, exactly_once=True) as group:
        await wait_until(lambda: producers(group) == 6, what="six producers")
        transactions = group._member.parts.transactions
        assert transactions is not None
        stopping = asyncio.create_task(transactions.stop())
        await asyncio.sleep(0)  # the stops begin
        stopping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopping
    await wait_until(lambda: left(before), what=f"their end: {named(running() - before)}")


async def test_members_opened_and_closed_under_load_leave_no_producer(
    cluster: LocalCluster, admin: AIOKafkaAdminClient, produce: Produce, group_name: str
) -> None:
    """Rounds of two members piping a busy topic, closed at once with a short bound while they
    commit: no producer, connection or task of theirs is left."""
    source = await add_topic(admin, 8, prefix="input")
    sink = await add_topic(admin, 8, prefix="output")
    await produce(source, 3000)
    before = running()
    for _round in range(3):
        members = [
            member(cluster, group_name, source, exactly_once=True, close_timeout=1.0)
            for _ in range(2)
        ]

        async def pipe(group: ConsumerGroup[int]) -> None:
            async for _partition, batch, output in group.transactions():
                for record in batch:
                    await output.send(sink, record.value, key=record.key)

        loops = []
        for group in members:
            await group.register()
            loops.append(asyncio.create_task(pipe(group)))
        await wait_until(functools.partial(producing, members, 8), what="every producer")
        await asyncio.gather(*(group.close() for group in members))
        for loop in loops:
            await within(loop, 30, "the loop's end")
    await wait_until(lambda: left(before), what=f"their end: {named(running() - before)}")


async def test_a_producer_stop_cut_short_is_finished_when_called_again(
    cluster: LocalCluster, group_name: str
) -> None:
    """aiokafka's stop() marks its producer closed first: cut short, calling it again would do
    nothing. The second stop() finishes the first one's work."""
    before = running()
    producer = PartitionProducer(
        cluster.bootstrap, group_name, ("input", 0), client_id="test", timeout=10
    )
    await producer.start()
    stopping = asyncio.create_task(producer.stop())
    await asyncio.sleep(0)  # aiokafka's stop() began
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    stopped = [producer.stopped]
    await producer.stop()
    stopped.append(producer.stopped)
    assert stopped == [False, True], "cut short, then finished"
    await wait_until(lambda: left(before), what=f"their end: {named(running() - before)}")
