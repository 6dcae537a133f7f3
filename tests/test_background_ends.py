"""Nothing ends silently: a background loop of a member that returns, or that a cancellation
nobody asked for ends, fails the member with `BackgroundEndedError` naming the loop, which
``async for`` and ``process()`` raise, and the member gives its partitions up; against the real
local ZooKeeper and Kafka."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import pytest

from aio_cluster import BackgroundEndedError, ConsumerGroup, Record
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic
from support import fresh, member, owners, wait_until

pytestmark = pytest.mark.asyncio


async def returns(ended: asyncio.Event) -> None:
    await ended.wait()


async def raises_cancelled(ended: asyncio.Event) -> None:
    await ended.wait()
    raise asyncio.CancelledError


async def gather_of_a_cancelled_child(ended: asyncio.Event) -> None:
    """What a library's ``gather()`` does when one of its children is cancelled: the
    ``CancelledError`` reaches the caller, whose task nobody cancelled."""
    await ended.wait()
    child = asyncio.ensure_future(asyncio.sleep(60))
    child.cancel()
    await asyncio.gather(child)


Ending = Callable[[asyncio.Event], Awaitable[None]]


def break_loop(group: ConsumerGroup, loop: str, ending: Ending, ended: asyncio.Event) -> None:
    """Make the member's ``loop`` (``"liveness"`` or ``"controls"``) end by ``ending`` once
    ``ended`` is set."""
    part = getattr(group._member, loop)

    async def run() -> None:
        await ending(ended)

    part.run = run


async def given_up(zk: ZooKeeper, layout: GroupLayout) -> bool:
    return not await owners(zk, layout, [0, 1])


@pytest.mark.parametrize(
    ("loop", "ending"),
    [
        ("controls", returns),
        ("liveness", raises_cancelled),
        ("controls", gather_of_a_cancelled_child),
    ],
)
async def test_a_loop_that_ends_unasked_fails_the_iteration_with_a_typed_error(
    cluster: LocalCluster, make_topic: MakeTopic, zk: ZooKeeper, loop: str, ending: Ending
) -> None:
    topic = await make_topic(partitions=2)
    name = fresh("ended")
    group = member(cluster, name, topic)
    ended = asyncio.Event()
    break_loop(group, loop, ending, ended)
    async with group:
        assert len(group.claimed) == 2
        ended.set()
        with pytest.raises(BackgroundEndedError) as raised:
            async for _partition, _batch in group:
                pass
        assert raised.value.loop == loop
        assert loop in str(raised.value)
        await wait_until(
            lambda: given_up(zk, GroupLayout(name, topic)), what="the partitions given up"
        )


async def test_a_loop_that_ends_unasked_fails_process(
    cluster: LocalCluster, make_topic: MakeTopic, zk: ZooKeeper
) -> None:
    topic = await make_topic(partitions=2)
    name = fresh("ended")
    group = member(cluster, name, topic)
    ended = asyncio.Event()
    break_loop(group, "liveness", gather_of_a_cancelled_child, ended)

    async def handler(record: Record) -> None:
        pass

    async with group:
        ended.set()
        with pytest.raises(BackgroundEndedError) as raised:
            await asyncio.wait_for(group.process(handler), 60)
        assert raised.value.loop == "liveness"
        assert isinstance(raised.value.__cause__, asyncio.CancelledError)
        await wait_until(
            lambda: given_up(zk, GroupLayout(name, topic)), what="the partitions given up"
        )


async def test_the_closing_ends_the_loops_without_an_error(
    cluster: LocalCluster, make_topic: MakeTopic
) -> None:
    topic = await make_topic(partitions=2)
    group = member(cluster, fresh("closed"), topic)
    async with group:
        assert len(group.claimed) == 2
    with contextlib.suppress(StopAsyncIteration):
        assert await anext(aiter(group), None) is None
    assert group._member._failure is None
