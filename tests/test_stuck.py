"""A member stuck in a handler or a batch body that never ends, shown everywhere, against the real
local ZooKeeper and Kafka: ``statistics()``, the metrics, ``aio-cluster describe`` and
``check``'s ``stuck`` verdict naming the member and for how long; and a member where nothing
hangs publishes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time

import anyio
import pytest
from prometheus_client import CollectorRegistry

from aio_cluster import AttemptTimeoutError, ConsumerGroup, Record
from aio_cluster.config import Processing
from aio_cluster.control.store import ControlStore
from aio_cluster.kafka.topics import PartitionKey, TopicKeys
from aio_cluster.local import LocalCluster
from aio_cluster.member.protocol.keyed_layout import KeyedLayout
from aio_cluster.member.stuck import StuckWatch
from aio_cluster.metrics import GroupMetrics
from aio_cluster.zookeeper.client import NoNodeError, ZooKeeper
from aio_cluster.zookeeper.layout import stuck_path

from conftest import MakeTopic, Produce
from support import fresh, member, wait_until
from test_cli import run

pytestmark = pytest.mark.asyncio

WINDOW = ("--window", "1s", "--samples", "2")


async def stuck_nodes(zk: ZooKeeper, group: str, topic: str) -> list[str]:
    """The stuck marks of ``topic``: ``<partition>/<member>`` each."""
    parent = f"{stuck_path(group)}/{topic}"
    try:
        partitions = await zk.get_children(parent)
    except NoNodeError:
        return []
    marks = []
    for partition in partitions:
        with contextlib.suppress(NoNodeError):
            marks += [f"{partition}/{m}" for m in await zk.get_children(f"{parent}/{partition}")]
    return sorted(marks)


async def scraped(group: ConsumerGroup, name: str, **labels: str) -> float | None:
    registry = CollectorRegistry()
    metrics = GroupMetrics(group, registry=registry)
    try:
        await metrics.refresh()
        return registry.get_sample_value(name, {"group": group.name, "member": group.id, **labels})
    finally:
        metrics.unregister()


async def test_a_loop_body_that_hangs_is_stuck_in_statistics_metrics_describe_and_check(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    zk: ZooKeeper,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await make_topic(partitions=1)
    await produce(topic, 5)
    release = asyncio.Event()
    first: list[int] = []
    caplog.set_level(logging.WARNING, logger="aio_cluster.member.stuck")
    group = member(cluster, group_name, topic, stuck_after=1.0)

    async def hang() -> None:
        async for _partition, batch in group:
            first.append(batch[0].offset)
            await release.wait()  # the body that never ends, until the test lets it

    async with group, anyio.create_task_group() as tasks:
        tasks.start_soon(hang)
        await wait_until(lambda: bool(first), what="a batch handed out")

        async def stuck() -> bool:
            return (await group.statistics()).stuck == (0,)

        await wait_until(stuck, what="the partition stuck")
        stats = await group.statistics()
        assert stats.stuck_for is not None
        assert stats.stuck_for >= 1.0
        assert stats.oldest_running == stats.stuck_for
        assert await scraped(group, "aio_cluster_stuck") == 1
        assert await scraped(group, "aio_cluster_partition_stuck", topic=topic, partition="0") == 1
        await wait_until(
            lambda: any("past stuck_after" in m and group.id in m for m in caplog.messages),
            what="the warning",
        )

        code, out, err = await run(cluster, "check", group_name, *WINDOW, "--json")
        assert code == 2, (out, err)
        (finding,) = json.loads(out)
        assert finding["status"] == "stuck"
        assert finding["stuck"]["member"] == group.id
        assert finding["stuck"]["kind"] == "body"
        assert finding["stuck"]["offset"] == 0
        assert finding["stuck"]["seconds"] >= 1.0
        code, out, err = await run(cluster, "check", group_name, *WINDOW)
        assert code == 2, (out, err)
        verdict = out.splitlines()[-1]
        assert verdict.startswith(f"error: group {group_name}: {topic}/0 stuck for ")
        assert f"in member {group.id} (the loop body of the batch at offset 0)" in verdict

        code, out, err = await run(cluster, "describe", group_name, "--json")
        assert code == 0, (out, err)
        (row,) = json.loads(out)
        assert row["stuck"]["member"] == group.id

        release.set()

        async def unstuck() -> bool:
            stats = await group.statistics()
            return stats.stuck == () and not await stuck_nodes(zk, group_name, topic)

        await wait_until(unstuck, what="the mark removed once the body ended")
        assert await scraped(group, "aio_cluster_stuck") == 0
        tasks.cancel_scope.cancel()


async def test_a_handler_without_attempt_timeout_that_hangs_is_stuck(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(partitions=1)
    await produce(topic, 3)
    release = asyncio.Event()

    async def handler(record: Record) -> None:
        if record.offset == 1:
            await release.wait()

    group = member(cluster, group_name, topic, stuck_after=1.0)
    async with group, anyio.create_task_group() as tasks:
        tasks.start_soon(group.process, handler)

        async def stuck() -> bool:
            return (await group.statistics()).stuck == (0,)

        await wait_until(stuck, what="the partition stuck")
        code, out, err = await run(cluster, "check", group_name, *WINDOW, "--json")
        assert code == 2, (out, err)
        (finding,) = json.loads(out)
        assert finding["status"] == "stuck"
        assert (finding["stuck"]["member"], finding["stuck"]["kind"]) == (group.id, "handler")
        assert finding["stuck"]["offset"] == 1
        release.set()

        async def done() -> bool:
            return (await group.statistics()).stuck == () and await group.offset(0) == 3

        await wait_until(done, what="the handler returned")
        tasks.cancel_scope.cancel()


async def test_a_member_where_nothing_hangs_publishes_nothing(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str, zk: ZooKeeper
) -> None:
    topic = await make_topic(partitions=2)
    await produce(topic, 20)
    group = member(cluster, group_name, topic, stuck_after=0.5)
    taken = 0
    async with group:
        with anyio.move_on_after(1.5):
            async for _partition, batch in group:
                taken += len(batch)
        stats = await group.statistics()
        assert stats.stuck == ()
        assert stats.oldest_running is None
        with pytest.raises(NoNodeError):
            await zk.get_children(stuck_path(group_name))
    assert taken == 20


async def test_an_old_owners_handler_that_ends_leaves_the_new_owners_mark(
    cluster: LocalCluster, group_name: str, zk: ZooKeeper
) -> None:
    """After a handover, the old owner's handler (which ignored its cancellation) and the new
    owner's hang on the same record, each member on its own session: the old one's ending
    clears its own mark only, and the partition stays stuck in the new owner for the tools.
    Nodes a member never writes under the marks are named unreadable."""
    topic = fresh("topic")
    keys = TopicKeys((topic,))
    layout = KeyedLayout(group_name, keys, many=False)
    key = keys.key(topic, 0)
    running: dict[str, list[tuple[PartitionKey, int, float]]] = {"old": [], "new": []}
    sessions = [ZooKeeper(cluster.zookeeper, session_timeout=10.0) for _ in range(2)]
    long_ago = time.monotonic() - 100
    try:
        watches = {}
        for name, session in zip(running, sessions, strict=True):
            await session.start()
            watches[name] = StuckWatch(
                session,
                layout,
                member_id=name,
                stuck_after=1,
                handlers=functools.partial(running.__getitem__, name),
            )
        running["old"] = [(key, 5, long_ago)]
        await watches["old"].look()
        running["new"] = [(key, 5, long_ago + 50)]
        await watches["new"].look()
        running["old"] = []
        await watches["old"].look()

        store = ControlStore(zk, group_name)
        stuck, unreadable = await store.read_stuck()
        assert {p: mark.member for p, mark in stuck.items()} == {(topic, 0): "new"}
        assert unreadable == {}
        assert await stuck_nodes(zk, group_name, topic) == ["0/new"]

        parent = f"{stuck_path(group_name)}/{topic}"
        await zk.ensure_path(f"{parent}/01/x")
        await zk.create(f"{parent}/0/stranger", b"not a mark")
        stuck, unreadable = await store.read_stuck()
        assert {p: mark.member for p, mark in stuck.items()} == {(topic, 0): "new"}
        assert sorted(unreadable) == [f"{parent}/0/stranger", f"{parent}/01"]
    finally:
        for session in sessions:
            await session.close()


@pytest.mark.parametrize("bulk", [False, True], ids=["process", "process_bulk"])
async def test_a_record_retried_with_bounded_attempts_is_never_stuck(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    caplog: pytest.LogCaptureFixture,
    bulk: bool,
) -> None:
    """A handler (a bulk call) that hangs in every attempt, each cut by ``attempt_timeout``:
    together its attempts run well past ``stuck_after``, one never does, so the partition is
    never stuck (``stuck_after`` is one attempt's bound), and the record fails as its policy
    says."""
    topic = await make_topic(partitions=1)
    await produce(topic, 1)
    attempts = 0
    caplog.set_level(logging.WARNING, logger="aio_cluster.member.stuck")

    async def hang(_record: object) -> None:
        nonlocal attempts
        attempts += 1
        await asyncio.Event().wait()  # never set: cut by attempt_timeout

    policy = Processing(
        attempts=8,
        attempt_timeout=0.3,
        retry_initial=0.05,
        retry_max=0.1,
        retry_jitter=0.0,
        on_failure="raise",
    )
    group = member(cluster, group_name, topic, stuck_after=1.5)
    async with group:
        running = (
            group.process_bulk(hang, size=1, processing=policy)
            if bulk
            else group.process(hang, processing=policy)
        )
        with pytest.raises(AttemptTimeoutError):
            await running
    assert attempts == 8
    assert not [r for r in caplog.records if "past stuck_after" in r.getMessage()]
