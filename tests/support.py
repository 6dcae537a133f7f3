"""Helpers for the integration tests: polling with a deadline, the group-wide ownership check."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import NoNodeError, ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout


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


WORKER = Path(__file__).with_name("member_worker.py")


class Worker:
    """A member process and the records it wrote."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.process: asyncio.subprocess.Process | None = None

    async def start(
        self, cluster: LocalCluster, topic: str, group: str, mode: str, session: float = 10.0
    ) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            cluster.bootstrap,
            cluster.zookeeper,
            topic,
            group,
            str(self.out),
            mode,
            str(session),
            stdout=asyncio.subprocess.PIPE,
        )
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), 60)
        assert line == b"joined\n", f"worker did not join: {line!r}"

    async def leave(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(self.process.wait(), 60) == 0

    def kill(self) -> None:
        """SIGKILL: the member dies without a word; its claims go with its session."""
        if self.process is not None and self.process.returncode is None:
            self.process.kill()

    async def reap(self) -> None:
        if self.process is not None:
            await self.process.wait()

    def consumed_keys(self) -> list[str]:
        if not self.out.exists():
            return []
        return [line.split()[2] for line in self.out.read_text().splitlines()]


async def consume_exactly_once(
    members: Sequence[ConsumerGroup],
    produce: Callable[[int, int], Awaitable[object]],
    total: int,
    *,
    joined: Callable[[], Awaitable[object]] | None = None,
) -> Counter[bytes]:
    """Join ``members``, produce ``total`` messages (half before the joins, half after) and consume
    them all with every member at once; returns how often each key was delivered. ``joined``
    runs once every member has joined."""
    seen: Counter[bytes] = Counter()

    async def consume(group: ConsumerGroup) -> None:
        async for _, batch in group:
            seen.update(record.key for record in batch if record.key is not None)

    half = total // 2
    await produce(0, half)
    async with contextlib.AsyncExitStack() as stack:
        for group in members:
            await stack.enter_async_context(group)
        if joined is not None:
            await joined()
        consumers = [asyncio.ensure_future(consume(group)) for group in members]
        try:
            await produce(half, total - half)
            await wait_until(lambda: sum(seen.values()) >= total, what=f"all {total} messages")
        finally:
            for group in members:
                await group.close()
            await asyncio.gather(*consumers)
    return seen
