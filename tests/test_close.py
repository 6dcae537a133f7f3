"""Leaving against the real local ZooKeeper and Kafka: close() tells the listener what it gives up,
is idempotent, survives a second cancellation, is bounded by ``close_timeout``, and may be awaited
from the listener itself."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest

from aio_cluster import ConsumerGroup, GroupClosedError, GroupState, RebalanceListener
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout
from aio_cluster.zookeeper.values import SessionState

from conftest import MakeTopic
from support import owners, settled, wait_until

pytestmark = pytest.mark.asyncio


def member(cluster: LocalCluster, group: str, topic: str, **options: Any) -> ConsumerGroup:
    options.setdefault("loop_delay", 0.1)
    options.setdefault("claim_timeout", 10.0)
    return ConsumerGroup(group, [cluster.bootstrap], [cluster.zookeeper], topic, **options)


class Flushing(RebalanceListener):
    """Commits its own offset for every revoked partition, as an application flushing its work."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.group: ConsumerGroup | None = None
        self.calls: list[tuple[str, list[int]]] = []

    async def on_partitions_assigned(self, partitions: list[int]) -> None:
        self.calls.append(("assigned", partitions))

    async def on_partitions_revoked(self, partitions: list[int]) -> None:
        self.calls.append(("revoked", partitions))
        assert self.group is not None
        for partition in partitions:
            await self.group.commit(partition, self.offset)


async def test_close_awaits_revoked_and_stores_what_the_listener_commits(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(2)
    layout = GroupLayout(group_name, topic)
    listener = Flushing(9)
    async with member(cluster, group_name, topic, listener=listener) as group:
        listener.group = group
        assert group.claimed == [0, 1]
    assert listener.calls == [("assigned", [0, 1]), ("revoked", [0, 1])]
    for partition in (0, 1):
        assert (await zk.get(layout.offset(partition)))[0] == b"9"
    assert await owners(zk, layout, [0, 1]) == {}, "released after the listener flushed"


async def test_close_is_idempotent_and_concurrent_closes_share_one_closing(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(2)
    listener = Flushing(1)
    group = member(cluster, group_name, topic, listener=listener)
    listener.group = group
    await group.register()
    await asyncio.gather(group.close(), group.close(), group.close())
    await group.close()
    assert group.state is GroupState.CLOSED
    assert listener.calls.count(("revoked", [0, 1])) == 1
    with pytest.raises(GroupClosedError):
        await group.commit(0, 1)


class Gated(RebalanceListener):
    """``on_partitions_revoked`` waits for ``gate`` (forever, unless it is set)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self.revoked: list[list[int]] = []

    async def on_partitions_revoked(self, partitions: list[int]) -> None:
        self.revoked.append(partitions)
        self.entered.set()
        await self.gate.wait()


async def test_a_second_cancellation_does_not_leave_the_member_closing(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(2)
    layout = GroupLayout(group_name, topic)
    listener = Gated()
    group = member(cluster, group_name, topic, listener=listener, close_timeout=60.0)

    async def serve() -> None:
        async with group:
            await asyncio.Event().wait()

    serving = asyncio.create_task(serve())
    await wait_until(lambda: group.state is GroupState.JOINED, what="joined")
    serving.cancel()
    await wait_until(listener.entered.is_set, what="close began and awaits revoked")
    closing = group.state  # not narrowed: the state moves on while the test awaits
    assert closing is GroupState.CLOSING
    serving.cancel()
    for _ in range(20):
        await asyncio.sleep(0)
    assert not serving.done(), "the closing goes on under a second cancellation"
    listener.gate.set()
    with anyio.fail_after(30), pytest.raises(asyncio.CancelledError):
        await serving
    assert group.state is GroupState.CLOSED
    assert listener.revoked == [[0, 1]]
    assert await owners(zk, layout, [0, 1]) == {}, "it still released its claims"


async def test_close_is_bounded_by_close_timeout_with_a_listener_that_hangs(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(2)
    listener = Gated()
    group = member(
        cluster, group_name, topic, listener=listener, close_timeout=2.0, rebalance_timeout=600.0
    )
    await group.register()
    with anyio.fail_after(60):
        await group.close()
    assert listener.revoked == [[0, 1]]
    assert group.state is GroupState.CLOSED
    assert group._member.parts.zk.state is SessionState.CLOSED, (
        "the clients were closed within the bound"
    )
    async with member(cluster, group_name, topic) as successor:
        await wait_until(lambda: successor.claimed == [0, 1], what="the session's claims went")


class Closing(RebalanceListener):
    """Closes its own member from ``hook``."""

    def __init__(self, hook: str) -> None:
        self.hook = hook
        self.group: ConsumerGroup | None = None
        self.closed = 0

    async def _close(self, method: str) -> None:
        if method == self.hook:
            assert self.group is not None
            await self.group.close()
            self.closed += 1

    async def on_partitions_assigned(self, partitions: list[int]) -> None:
        await self._close("on_partitions_assigned")

    async def on_partitions_revoked(self, partitions: list[int]) -> None:
        await self._close("on_partitions_revoked")


async def test_a_listener_that_closes_its_member_at_a_rebalance_does_not_deadlock(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(4)
    listener = Closing("on_partitions_revoked")
    first = member(cluster, group_name, topic, listener=listener, close_timeout=20.0)
    listener.group = first
    await first.register()
    try:
        async with member(cluster, group_name, topic) as second:
            # The join revokes two of first's partitions; its listener closes first, and the
            # closing's own revoked call (which closes again) returns at once.
            await wait_until(lambda: first.state is GroupState.CLOSED, what="first closed")
            await wait_until(lambda: second.claimed == [0, 1, 2, 3], what="second owns all")
            assert await settled(zk, [second])
    finally:
        with anyio.fail_after(30):
            await first.close()


async def test_a_listener_that_closes_its_member_while_it_joins_does_not_deadlock(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(2)
    listener = Closing("on_partitions_assigned")
    group = member(cluster, group_name, topic, listener=listener)
    listener.group = group
    with anyio.fail_after(60), pytest.raises(GroupClosedError):
        await group.register()
    assert group.state is GroupState.CLOSED
    assert await owners(zk, GroupLayout(group_name, topic), [0, 1]) == {}
