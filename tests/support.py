"""Helpers for the integration tests: polling with a deadline, the group-wide ownership check."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from aio_cluster import ConsumerGroup
from aio_cluster.layout import GroupLayout
from aio_cluster.zk import NoNodeError, ZooKeeper


async def wait_until(
    condition: Callable[[], Awaitable[bool] | bool], *, timeout: float = 30.0, what: str = ""
) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or condition}")
        await asyncio.sleep(0.05)


async def owners(zk: ZooKeeper, layout: GroupLayout, partitions: Sequence[int]) -> dict[int, str]:
    """partition -> the member id its claim node holds (claims that exist)."""
    found: dict[int, str] = {}
    for partition in partitions:
        try:
            data, _stat = await zk.get(layout.owner(partition))
        except NoNodeError:
            continue
        found[partition] = data.decode()
    return found


async def settled(zk: ZooKeeper, members: Sequence[ConsumerGroup]) -> bool:
    """Every partition is claimed by exactly one of ``members``, and their ``claimed`` lists
    agree with the owner nodes in ZooKeeper."""
    first = members[0]
    partitions = first.partitions
    layout = GroupLayout(first.name, first.topic)
    claimed = [p for member in members for p in member.claimed]
    if sorted(claimed) != partitions:
        return False
    by_node = await owners(zk, layout, partitions)
    by_member = {p: member.id for member in members for p in member.claimed}
    return by_node == by_member
