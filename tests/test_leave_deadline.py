"""The leave near the closing deadline, against the real servers: a member whose background takes
longer to stop than the leave's share of ``close_timeout`` still stores the offsets it completed
since the last periodic store, so the next member does not get those records again; and one
whose background takes the whole bound still ends its ZooKeeper session."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from aio_cluster import ConsumerGroup, Record
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from support import member, stored_offsets, take, wait_until

pytestmark = pytest.mark.asyncio

CLOSE_TIMEOUT = 5.0
STOPPING = 0.8 * CLOSE_TIMEOUT
"""How long the background takes to stop: past the leave's three quarters of the bound, and
short of the whole bound, so that the clients still close (the session ends)."""


def slow_to_stop(group: ConsumerGroup, seconds: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make a background loop of ``group`` take ``seconds`` to stop once cancelled (as a
    shielded offset store on a slow ZooKeeper does)."""
    run = group._member.parts.liveness.run

    async def slow() -> None:
        try:
            await run()
        finally:
            with anyio.CancelScope(shield=True):
                await asyncio.sleep(seconds)

    monkeypatch.setattr(group._member.parts.liveness, "run", slow)


async def test_a_member_whose_background_stops_slowly_stores_its_completed_offsets(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, cancelling the background past three quarters of ``close_timeout`` cancelled the
    leave with it: the ten completed records were not stored, and came again to the next
    member."""
    topic = await make_topic(1)
    await produce(topic, 10)
    # No periodic store before the closing: only the leave stores the completed offsets.
    group = member(cluster, group_name, topic, commit_interval=600.0, close_timeout=CLOSE_TIMEOUT)
    slow_to_stop(group, STOPPING, monkeypatch)
    got: list[Record] = []

    async def consume() -> None:
        async for _partition, batch in group:
            got.extend(batch)  # completed once the loop asks for the next batch

    await group.register()
    consuming = asyncio.create_task(consume())
    try:
        await wait_until(lambda: len(got) >= 10, what="the ten records consumed")
    finally:
        with anyio.fail_after(60):
            await group.close()
            await consuming
    assert [record.offset for record in got] == list(range(10))
    assert await stored_offsets(zk, GroupLayout(group_name, topic), 1) == {0: 10}

    await produce(topic, 1, start=10)
    async with member(cluster, group_name, topic) as successor:
        (first, *_rest) = await take(aiter(successor), 1)
    assert first[1].offset == 10, "the completed records were delivered again"


async def test_a_member_whose_background_takes_the_whole_bound_ends_its_session(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, nothing of the bound was left for the clients, whose closing was cancelled
    before it began: the session lived on with the process, keeping the member's registration
    and its claims."""
    topic = await make_topic(1)
    group = member(cluster, group_name, topic, close_timeout=CLOSE_TIMEOUT)
    slow_to_stop(group, CLOSE_TIMEOUT, monkeypatch)
    await group.register()
    layout = GroupLayout(group_name, topic)
    assert await zk.exists(layout.member(group.id)) is not None
    with anyio.fail_after(60):
        await group.close()

    async def gone() -> bool:
        return await zk.exists(layout.member(group.id)) is None

    await wait_until(gone, what="the session ended, and the registration with it")
    assert await zk.exists(layout.owner(0)) is None, "the claim went with the session"
