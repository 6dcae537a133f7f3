"""Claim epochs that fence, and nodes nobody owns, against the real servers: a replaced owner
node refuses the commit and survives the leave; a stray owner node of the member's own session is
reconciled, also beside a release in flight when another failed; a claim reads and watches a node
in its way in one request; a ZooKeeper restart during a join settles; a reset planned before a
member claimed wins over the offset the member held; a claim whose offset read fails, or whose
session is lost during it, leaves no node and records no claim."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from aio_cluster import ConsumerGroup, CoordinationTimeout, NotOwnedError
from aio_cluster import __main__ as command_line
from aio_cluster.kafka.topics import PartitionKey
from aio_cluster.local import LocalCluster
from aio_cluster.operator import survey
from aio_cluster.zookeeper.client import NoNodeError, ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout
from aio_cluster.zookeeper.values import Delete, Op, Stat

from conftest import MakeTopic, Produce
from support import closable, create_topic, settled, wait_until

pytestmark = pytest.mark.asyncio


def member(cluster: LocalCluster, group: str, topic: str, **options: Any) -> ConsumerGroup:
    return ConsumerGroup(group, [cluster.bootstrap], [cluster.zookeeper], topic, **options)


async def stored(zk: ZooKeeper, layout: GroupLayout, partition: int) -> int | None:
    try:
        data, _stat = await zk.get(layout.offset(partition))
    except NoNodeError:
        return None
    return int(data)


async def test_a_replaced_owner_node_refuses_the_commit_and_survives_the_leave(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(2)
    layout = GroupLayout(group_name, topic)
    group = member(cluster, group_name, topic, claim_timeout=0.5)
    async with group:
        assert group.claimed == [0, 1]
        await group.commit(1, 7)
        # Another session deletes the owner node and creates it again, as an operator's script
        # or a stale process would: same data, another session, version 0.
        data, _stat = await zk.get(layout.owner(0))
        await zk.delete(layout.owner(0))
        await zk.create(layout.owner(0), data, ephemeral=True)

        with pytest.raises(NotOwnedError):
            await group.commit(0, 42)
        assert await stored(zk, layout, 0) is None, "nothing stored under a claim that is gone"

        # The member drops the claim, and its claim again gives up on the stranger's node.
        await wait_until(lambda: group.claimed == [1], what="the claim dropped")
        await wait_until(
            lambda: unowned(group), what="the stranger's node counted as owned by nobody"
        )
        await group.commit(1, 8)  # the other claim is untouched
    _data, stat = await zk.get(layout.owner(0))
    assert stat.ephemeral_owner == zk.session_id, "the member's leave deleted the stranger's node"
    assert await stored(zk, layout, 0) is None
    assert await stored(zk, layout, 1) == 8


def claimed_anew(group: ConsumerGroup, partition: int) -> bool:
    claim = group._member.parts.membership.claims.get(PartitionKey(partition))
    return claim is not None and not claim.fenced


async def unowned(group: ConsumerGroup) -> bool:
    return (await group.statistics()).unowned_nodes >= 1


class FailFirstDelete:
    """Wraps a client's ``transaction`` so that its first one that deletes an owner node fails
    with a time-out without reaching the server: a delete that failed."""

    def __init__(self, zk: ZooKeeper, layout: GroupLayout) -> None:
        self._transaction: Callable[[Sequence[Op]], Awaitable[list[Stat | None]]]
        self._transaction = zk.transaction
        self._owners = layout.owners + "/"
        self.failed: list[str] = []

    async def __call__(self, ops: Sequence[Op]) -> list[Stat | None]:
        deletes = [op.path for op in ops if isinstance(op, Delete)]
        if not self.failed and any(path.startswith(self._owners) for path in deletes):
            self.failed.extend(deletes)
            raise CoordinationTimeout("injected: the delete did not reach ZooKeeper")
        return await self._transaction(ops)


async def test_a_stray_owner_node_of_the_members_session_is_reconciled(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = await make_topic(4)
    releasing = a_release_failing(cluster, zk, group_name, topic, monkeypatch, FailFirstDelete)
    async with releasing as (failing, second):
        for path in failing.failed:
            _data, stat = await zk.get(path)
            assert stat.ephemeral_owner == second._member.parts.zk.session_id


@contextlib.asynccontextmanager
async def a_release_failing(
    cluster: LocalCluster,
    zk: ZooKeeper,
    group_name: str,
    topic: str,
    monkeypatch: pytest.MonkeyPatch,
    failure: type[FailFirstDelete],
) -> AsyncIterator[tuple[FailFirstDelete, ConsumerGroup]]:
    """A member of the 4 partitions of ``topic`` whose ZooKeeper transactions go through
    ``failure``, and a second one joining, once the group settled with a release of the
    first failed: the failure and the second member, both members still in the group."""
    layout = GroupLayout(group_name, topic)
    # A long claim_timeout: the newcomer could not get the stray's partition by waiting it out.
    async with member(cluster, group_name, topic, claim_timeout=120.0) as first:
        assert first.claimed == [0, 1, 2, 3]
        failing = failure(first._member.parts.zk, layout)
        monkeypatch.setattr(first._member.parts.zk, "transaction", failing)
        async with member(cluster, group_name, topic, claim_timeout=120.0) as second:
            await wait_until(lambda: settled(zk, [first, second]), what="the group settled")
            assert failing.failed, "a release failed"
            assert len(first.claimed) == len(second.claimed) == 2
            yield failing, second


class FailFirstDeleteBesideAnother(FailFirstDelete):
    """`FailFirstDelete`, and each later delete of an owner node is still in flight when the
    first has failed: it reaches the server after a checkpoint (where a sibling's failure that
    cancelled it would end it)."""

    async def __call__(self, ops: Sequence[Op]) -> list[Stat | None]:
        if self.failed and any(isinstance(op, Delete) for op in ops):
            await anyio.lowlevel.checkpoint()
        return await super().__call__(ops)


async def test_a_release_beside_one_that_failed_ends_released_or_reconciled(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two releases of one rebalance, the first failing at once (as a connection loss): the
    other is not cut short by it, leaving its owner node to this session with no claim and no
    doubt, where the newcomer would wait for it for the session's life."""
    topic = await make_topic(4)
    async with a_release_failing(
        cluster, zk, group_name, topic, monkeypatch, FailFirstDeleteBesideAnother
    ):
        pass


async def test_a_zookeeper_restart_during_a_join_settles_within_twice_the_claim_timeout(
    restartable: LocalCluster, group_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = restartable  # its ZooKeeper is restarted: never the shared one
    topic = await create_topic(cluster.bootstrap, 20)
    claim_timeout = 10.0
    group = member(
        cluster,
        group_name,
        topic,
        request_timeout=1.0,
        session_timeout=30.0,
        claim_timeout=claim_timeout,
    )
    restarted = asyncio.Event()
    ensure_path = group._member.parts.zk.ensure_path

    async def restart() -> None:
        await cluster.start_zookeeper()
        restarted.set()

    async def stop_zookeeper_then_ensure_path(path: str, *, shared: bool = False) -> None:
        # The session exists; ZooKeeper goes away just before register() first writes to it.
        if not tasks:
            await cluster.stop_zookeeper()
            tasks.append(asyncio.create_task(restart()))
        await ensure_path(path, shared=shared)

    tasks: list[asyncio.Task[None]] = []
    monkeypatch.setattr(group._member.parts.zk, "ensure_path", stop_zookeeper_then_ensure_path)
    join = asyncio.create_task(group.register())
    try:
        await wait_until(restarted.is_set, timeout=120, what="ZooKeeper restarted")
        # An observer of its own: the fixture's shorter session may not outlive the restart.
        observer = ZooKeeper(cluster.zookeeper, session_timeout=30.0)
        await observer.start()
        try:
            await wait_until(
                lambda: settled(observer, [group]),
                timeout=2 * claim_timeout,
                what="every partition owned",
            )
        finally:
            await observer.close()
        await join  # the restart did not fail the join
        assert group.claimed == list(range(20))
    finally:
        await asyncio.gather(join, *tasks, return_exceptions=True)
        await group.close()


async def test_a_reset_wins_over_a_member_that_claims_between_plan_and_execute(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = await make_topic(1)
    await produce(topic, 20)
    layout = GroupLayout(group_name, topic)
    await zk.ensure_path(layout.offsets)
    await zk.create(layout.offset(0), b"3")

    planned = threading.Event()
    claimed = threading.Event()
    read_offset_nodes = survey.read_offset_nodes

    async def read_then_wait(zk: ZooKeeper, layout: GroupLayout) -> Any:
        nodes = await read_offset_nodes(zk, layout)
        if not planned.is_set():
            planned.set()
            # The member registers and claims here, between the plan's read and the write.
            await asyncio.to_thread(claimed.wait, 60)
        return nodes

    monkeypatch.setattr(survey, "read_offset_nodes", read_then_wait)
    argv = [
        "reset-offsets",
        group_name,
        "--topic",
        topic,
        "--to-offset",
        "10",
        "--execute",
        "--bootstrap",
        cluster.bootstrap,
        "--zookeeper",
        cluster.zookeeper,
    ]
    levels = {name: logging.getLogger(name).level for name in ("kazoo", "aiokafka")}
    command = asyncio.ensure_future(asyncio.to_thread(command_line.main, argv))
    try:
        await asyncio.to_thread(planned.wait, 60)
        async with member(cluster, group_name, topic) as group:
            assert group.claimed == [0]
            assert group._member.parts.membership.claims[PartitionKey(0)].stored == 3, (
                "the member read the old offset"
            )
            claimed.set()
            assert await command == 0
            assert await stored(zk, layout, 0) == 10

            with pytest.raises(NotOwnedError):
                await group.commit(0, 4)
            assert await stored(zk, layout, 0) == 10, "the reset was overwritten"

            await wait_until(lambda: claimed_anew(group, 0), what="partition 0 claimed again")
            batches = closable(group.batches())
            partition, batch = await anext(batches)
            await batches.aclose()
            assert (partition, batch[0].offset) == (0, 10), "the new claim starts at the reset"
    finally:
        claimed.set()
        await asyncio.gather(command, return_exceptions=True)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


async def test_a_reset_plans_again_when_an_offset_changes_before_the_write(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = await make_topic(1)
    await produce(topic, 20)
    layout = GroupLayout(group_name, topic)
    await zk.ensure_path(layout.offsets)
    await zk.create(layout.offset(0), b"3")
    read_offset_nodes = survey.read_offset_nodes
    reads = 0

    async def read_then_store(client: ZooKeeper, layout: GroupLayout) -> Any:
        nonlocal reads
        nodes = await read_offset_nodes(client, layout)
        reads += 1
        if reads == 1:
            # Someone stores an offset between the plan's read and the write.
            await client.set(layout.offset(0), b"8")
        return nodes

    monkeypatch.setattr(survey, "read_offset_nodes", read_then_store)
    argv = [
        *("reset-offsets", group_name, "--topic", topic, "--shift-by", "-1", "--execute"),
        *("--bootstrap", cluster.bootstrap, "--zookeeper", cluster.zookeeper),
    ]
    levels = {name: logging.getLogger(name).level for name in ("kazoo", "aiokafka")}
    try:
        assert await asyncio.to_thread(command_line.main, argv) == 0
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    assert reads == 2, "planned again"
    assert await stored(zk, layout, 0) == 7, "the shift applies to what was stored at the write"


async def test_a_claim_reads_and_watches_the_node_in_its_way_in_one_request(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At a join most claims meet a node its owner has not released yet: the claim reads it and
    watches it in one request (not a read, then an exists to watch), and takes the partition
    once the node goes."""
    topic = await make_topic(1)
    layout = GroupLayout(group_name, topic)
    await zk.create(layout.owner(0), b"leaving", ephemeral=True, makepath=True)
    group = member(cluster, group_name, topic, claim_timeout=60.0)
    client = group._member.parts.zk
    reads: Counter[str] = Counter()
    for name in ("get", "exists"):
        original = getattr(client, name)

        async def counted(
            path: str, *args: Any, _name: str = name, _call: Any = original, **kw: Any
        ) -> Any:
            if path == layout.owner(0):
                reads[_name] += 1
            return await _call(path, *args, **kw)

        monkeypatch.setattr(client, name, counted)
    joining = asyncio.ensure_future(group.register())
    try:
        await wait_until(lambda: reads["get"] >= 1, what="the claim reading the node in its way")
        await asyncio.sleep(0.3)
        assert not joining.done(), "the claim waits for the node to go"
        await zk.delete(layout.owner(0))
        await asyncio.wait_for(joining, 30)
        assert group.claimed == [0]
        # A newer rebalance may interrupt a wait, and the next claim reads the node again.
        assert reads["get"] >= 1
        assert reads["exists"] == 0, "each wait read and watched the node in one request"
    finally:
        await group.close()
        if not joining.done():
            joining.cancel()
        await asyncio.gather(joining, return_exceptions=True)


async def test_a_claim_whose_offset_read_fails_gives_its_node_back(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The owner node was taken and the offset read after it failed: the node is given back at
    once, so the member that the assignment gives the partition to next gets it (before, the node
    stayed with the first member's session and the newcomer waited for it for ever)."""
    topic = await make_topic(2)
    layout = GroupLayout(group_name, topic)
    options: dict[str, Any] = {"strategy": "range", "claim_timeout": 1.0}
    first = member(cluster, group_name, topic, member_name="a", **options)
    read = first._member.parts.offsets.stored
    failures = 0

    async def failing_for_one(partition: PartitionKey) -> int | None:
        nonlocal failures
        if partition == 1:
            failures += 1
            raise CoordinationTimeout("injected: the offset read did not return")
        return await read(partition)

    monkeypatch.setattr(first._member.parts.offsets, "stored", failing_for_one)
    async with first:
        await wait_until(lambda: failures >= 2, what="the claim of partition 1 failed twice")
        assert first.claimed == [0]
        # Range gives "b" partition 1: it must not wait on a node that no claim of "a" records.
        async with member(cluster, group_name, topic, member_name="b", **options) as second:
            await wait_until(lambda: second.claimed == [1], what="the newcomer owns partition 1")
            _data, stat = await zk.get(layout.owner(1))
            assert stat.ephemeral_owner == second._member.parts.zk.session_id
            assert first.claimed == [0]


async def test_a_claim_is_not_recorded_for_a_session_lost_during_its_offset_read(
    cluster: LocalCluster,
    make_topic: MakeTopic,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session is lost while the claim reads its offset: that rebalance records no claim
    (the node went with the session); the next one claims afresh (before, the claim of the dead
    session was recorded, since its epoch was checked before the read)."""
    topic = await make_topic(2)
    first = member(cluster, group_name, topic, claim_timeout=1.0)
    membership = first._member.parts.membership
    read = first._member.parts.offsets.stored
    record = first._member.parts.states.claimed
    rebalances = 0
    lost_in: int | None = None
    recorded: list[tuple[int, int]] = []

    # The loop that runs the rebalances is the rebalancer's: count them there.
    rebalancer = membership._rebalancer
    rebalance = rebalancer._rebalance

    async def counted(*args: Any) -> bool:
        nonlocal rebalances
        rebalances += 1
        return await rebalance(*args)

    async def losing_during_the_read(partition: PartitionKey) -> int | None:
        nonlocal lost_in
        stored = await read(partition)
        if partition == 1 and lost_in is None:
            lost_in = rebalances
            membership.lose()
        return stored

    def recording(claim: Any) -> None:
        recorded.append((rebalances, claim.partition))
        record(claim)

    monkeypatch.setattr(rebalancer, "_rebalance", counted)
    monkeypatch.setattr(first._member.parts.offsets, "stored", losing_during_the_read)
    monkeypatch.setattr(first._member.parts.states, "claimed", recording)
    async with first:
        await wait_until(lambda: first.claimed == [0, 1], what="claimed afresh")
    assert lost_in is not None
    assert (lost_in, 1) not in recorded, "no claim recorded in the rebalance that lost it"
    assert any(r > lost_in and p == 1 for r, p in recorded), "claimed by a later rebalance"
