"""An operator's pause through the faults, against the real ZooKeeper and Kafka: the owner of a
paused partition loses its session, or its process is killed, and the partition moves or comes
back; it stays paused on whoever owns it next (nothing of it handed out) while the others flow,
and once resumed its lag falls to 0 with each of its records handed out once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from aio_cluster.control.store import ControlStore
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic
from support import Worker, member, owners, settled, stored_offsets, wait_until
from test_control_member import Seen, _ends, consuming, load

pytestmark = pytest.mark.asyncio

PAUSED = 2
"""The partition the operator pauses, of a 6-partition topic."""


async def _stored_at(zk: ZooKeeper, layout: GroupLayout, offset: int) -> None:
    """Wait until the paused partition's stored offset is ``offset`` (its last batch before the
    pause committed), so that what comes after the pause is told apart by offset."""

    async def there() -> bool:
        return (await stored_offsets(zk, layout, 6)).get(PAUSED) == offset

    await wait_until(there, timeout=30.0, what=f"partition {PAUSED} stored at {offset}")


@pytest.mark.parametrize("mode", ["async for", "process"])
async def test_a_pause_holds_when_its_owner_loses_its_session(
    cluster: LocalCluster,
    zk: ZooKeeper,
    producer: AIOKafkaProducer,
    make_topic: MakeTopic,
    group_name: str,
    mode: str,
) -> None:
    topic = await make_topic(6)
    layout = GroupLayout(group_name, topic)
    store = ControlStore(zk, group_name)
    seen = Seen()
    groups = [member(cluster, group_name, topic, session_timeout=4.0) for _ in range(3)]
    async with contextlib.AsyncExitStack() as stack:
        loading = contextlib.AsyncExitStack()
        await loading.enter_async_context(load(producer, topic))
        stack.push_async_exit(loading)
        for group in groups:
            await stack.enter_async_context(consuming(group, seen, mode))
        await wait_until(lambda: seen.of(PAUSED, since=0) > 0, what="the partition flowing")

        await store.pause([(topic, PAUSED)], "test@host")
        quiet_from = time.monotonic() + 2.0
        await asyncio.sleep(2.0)
        held_from = 1 + max(o for p, o, _at in seen.records if p == PAUSED)
        await _stored_at(zk, layout, held_from)

        owner = next(g for g in groups if PAUSED in g.claimed)
        old = owner._member.parts.zk.session_id
        password = owner._member.parts.zk.session_password
        assert old is not None
        assert password is not None
        await cluster.expire_session(old, password)
        await wait_until(
            lambda: owner._member.parts.zk.session_id not in (None, old),
            what="the owner's new session",
        )

        async def all_claimed() -> bool:
            return await settled(zk, groups)

        await wait_until(all_claimed, timeout=30.0, what="every partition claimed again")
        moved_at = time.monotonic()
        await asyncio.sleep(3.0)
        assert seen.of(PAUSED, since=quiet_from) == 0, "still paused on its owner after the fault"
        assert seen.others(PAUSED, since=moved_at) > 0, "the other partitions flow"
        new_owner = next(g for g in groups if PAUSED in g.claimed)
        assert PAUSED in (await new_owner.statistics()).operator_paused

        await loading.aclose()
        await producer.flush()
        ends = await _ends(cluster, topic)
        assert ends[PAUSED] > held_from, "records were written to it while it was paused"
        resumed_at = time.monotonic()
        assert [p.partition for p in await store.resume([(topic, PAUSED)], "test@host")] == [PAUSED]

        async def caught_up() -> bool:
            return await stored_offsets(zk, layout, 6) == ends

        await wait_until(caught_up, timeout=30.0, what="every partition stored to its end")
        lag = {p.partition: p.lag for g in groups for p in (await g.statistics()).partitions}
        assert lag[PAUSED] == 0
        after = sorted(o for p, o, at in seen.records if p == PAUSED and at >= resumed_at)
        assert after == list(range(held_from, ends[PAUSED])), "each record once, none missing"


def _lines(workers: list[Worker]) -> list[tuple[int, int]]:
    """Every record the worker processes handed out: (partition, offset)."""
    found: list[tuple[int, int]] = []
    for worker in workers:
        if worker.out.exists():
            text = worker.out.read_text()
            for line in text[: text.rfind("\n") + 1].splitlines():
                partition, offset, _key = line.split()
                found.append((int(partition), int(offset)))
    return found


async def test_a_pause_holds_when_its_owner_is_killed_and_the_partition_moves(
    cluster: LocalCluster,
    zk: ZooKeeper,
    producer: AIOKafkaProducer,
    make_topic: MakeTopic,
    group_name: str,
    tmp_path: Path,
) -> None:
    topic = await make_topic(6)
    layout = GroupLayout(group_name, topic)
    store = ControlStore(zk, group_name)
    workers = [Worker(tmp_path / f"worker{i}.txt") for i in range(3)]

    def of(partition: int, since: int = 0) -> list[int]:
        return [o for p, o in _lines(workers) if p == partition and o >= since]

    try:
        async with contextlib.AsyncExitStack() as loading:
            await loading.enter_async_context(load(producer, topic))
            for worker in workers:
                await worker.start(cluster, topic, group_name, "manual", session=4.0)
            await wait_until(lambda: len(of(PAUSED)) > 0, what="the partition flowing")

            await store.pause([(topic, PAUSED)], "test@host")
            await asyncio.sleep(2.0)
            held_from = 1 + max(of(PAUSED))
            await _stored_at(zk, layout, held_from)

            owner_id = (await owners(zk, layout, [PAUSED]))[PAUSED]
            pid = int(owner_id.split("-")[-3])
            (owner,) = [w for w in workers if w.process is not None and w.process.pid == pid]
            others = [w for w in workers if w is not owner]
            owner.kill()
            await owner.reap()
            before = Counter(p for p, _o in _lines(others))

            async def moved() -> bool:
                found = await owners(zk, layout, range(6))
                return len(found) == 6 and owner_id not in found.values()

            await wait_until(moved, timeout=30.0, what="the killed member's partitions moved")
            await asyncio.sleep(3.0)
            assert of(PAUSED, since=held_from) == [], "still paused on its new owner"
            after = Counter(p for p, _o in _lines(others))
            assert sum(after.values()) > sum(before.values()), "the other partitions flow"
        await producer.flush()
        ends = await _ends(cluster, topic)
        assert ends[PAUSED] > held_from, "records were written to it while it was paused"
        await store.resume([(topic, PAUSED)], "test@host")

        async def caught_up() -> bool:
            return await stored_offsets(zk, layout, 6) == ends

        await wait_until(caught_up, timeout=30.0, what="every partition stored to its end")
        assert sorted(of(PAUSED, since=held_from)) == list(range(held_from, ends[PAUSED])), (
            "each record once, none missing"
        )
    finally:
        for worker in workers:
            worker.kill()
            await worker.reap()


async def test_a_resume_written_after_the_session_expired_is_read_by_the_next_session(
    cluster: LocalCluster,
    zk: ZooKeeper,
    producer: AIOKafkaProducer,
    make_topic: MakeTopic,
    group_name: str,
) -> None:
    """The controls are read again when a new session starts, not on a timer: the watches went
    with the old session, and nothing else changes in ZooKeeper after the resume."""
    topic = await make_topic(2)
    store = ControlStore(zk, group_name)
    await store.pause([(topic, 0)], "test@host")
    seen = Seen()
    group = member(cluster, group_name, topic, session_timeout=4.0)
    async with load(producer, topic), consuming(group, seen, "async for"):
        await wait_until(lambda: seen.of(1, since=0) > 0, what="partition 1 flowing")
        assert seen.of(0, since=0) == 0
        old = group._member.parts.zk.session_id
        password = group._member.parts.zk.session_password
        assert old is not None
        assert password is not None
        await cluster.expire_session(old, password)
        assert [p.partition for p in await store.resume([(topic, 0)], "test@host")] == [0]
        await wait_until(lambda: seen.of(0, since=0) > 0, what="partition 0 read once resumed")
        assert group._member.parts.zk.session_id not in (None, old)
