"""The leave near the closing deadline, against the real servers: a member whose background takes
longer to stop than the leave's share of ``close_timeout`` still stores the offsets it completed
since the last periodic store, so the next member does not get those records again."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from aio_cluster import Record
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
    run = group._member.liveness.run

    async def slow_to_stop() -> None:
        """A background loop that takes `STOPPING` seconds to stop (as a shielded offset store
        on a slow ZooKeeper does)."""
        try:
            await run()
        finally:
            with anyio.CancelScope(shield=True):
                await asyncio.sleep(STOPPING)

    monkeypatch.setattr(group._member.liveness, "run", slow_to_stop)
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
