"""ConsumerGroup against the real local ZooKeeper and Kafka."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
from collections import Counter
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions

from aio_cluster import (
    ConfigurationError,
    ConsumerGroup,
    GroupClosedError,
    GroupState,
    NotOwnedError,
    Strategy,
    StrategyMismatchError,
)
from aio_cluster.assign.strategies import assign
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from support import batch_of, closable, member, owners, settled, take, wait_until

pytestmark = pytest.mark.asyncio


async def test_registration_is_ephemeral_classic_json(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(2)
    group = member(cluster, group_name, topic)
    async with group:
        assert re.fullmatch(
            rf"{re.escape(group_name)}-{re.escape(socket.gethostname())}-{os.getpid()}-\d+-\d+",
            group.id,
        )
        path = GroupLayout(group_name, topic).member(group.id)
        data, stat = await zk.get(path)
        doc = json.loads(data)
        assert doc["version"] == 1
        assert doc["subscription"] == {topic: 1}
        assert doc["pattern"] == "static"
        assert doc["timestamp"].isdigit()
        assert doc["assignment"] == "sticky", "the default strategy"
        assert stat.ephemeral_owner != 0
        assert group.partitions == [0, 1]
        assert group.claimed == [0, 1], "a lone member owns every partition once joined"
    assert group.state is GroupState.CLOSED
    assert await zk.exists(path) is None
    assert await zk.get_children(GroupLayout(group_name, topic).owners) == []


@pytest.mark.parametrize("strategy", [Strategy.STICKY, Strategy.RANGE])
async def test_members_joining_and_leaving_rebalance(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    group_name: str,
    strategy: Strategy,
) -> None:
    topic = await make_topic(2)
    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(
            member(cluster, group_name, topic, strategy=strategy)
        )
        assert first.claimed == [0, 1]
        second = await stack.enter_async_context(
            member(cluster, group_name, topic, strategy=strategy)
        )
        assert sorted([first.claimed, second.claimed]) == [[0], [1]], (
            "a joining member's share is claimed when its join returns"
        )
        assert await settled(zk, [first, second])

        third = await stack.enter_async_context(
            member(cluster, group_name, topic, strategy=strategy)
        )
        ids = [first.id, second.id, third.id]
        # Sticky: the two holders keep one each, the newcomer gets nothing (2 // 3 = 0).
        share = [] if strategy is Strategy.STICKY else assign(strategy, [0, 1], ids)[third.id]
        assert third.claimed == share, "a joining member's share is claimed when its join returns"
        await wait_until(lambda: settled(zk, [first, second, third]), what="three settle")
        assert sorted(len(m.claimed) for m in (first, second, third)) == [0, 1, 1]

        leaving = next(m for m in (first, second, third) if m.claimed)
        await leaving.close()
        staying = [m for m in (first, second, third) if m is not leaving]
        await wait_until(lambda: settled(zk, staying), what="two settle after a leave")
        assert sorted(len(m.claimed) for m in staying) == [1, 1]


@pytest.mark.smoke  # tests_compat's real-server test: a member joins, consumes and commits
async def test_commit_after_body_not_before(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(1)
    await produce(topic, 5)
    async with member(cluster, group_name, topic) as group:
        assert await group.offset(0) is None
        batches = closable(group.batches())
        partition, batch = await anext(batches)
        assert partition == 0
        assert [r.value for r in batch] == [b"0", b"1", b"2", b"3", b"4"]
        assert await group.offset(0) is None, "not committed while the body runs"
        await produce(topic, 3, start=5)
        _, second = await anext(batches)
        assert await group.offset(0) == 5, "committed once the loop asked for the next batch"
        assert second[0].offset == 5
        await batches.aclose()
        assert await group.offset(0) == 5, "the batch being processed at close stays uncommitted"


async def test_break_and_exception_leave_the_batch_uncommitted(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(1)
    await produce(topic, 4)
    async with member(cluster, group_name, topic) as group:
        async for _, batch in group:
            first = batch
            break
        assert await group.offset(0) is None

        async def fail_in_body() -> None:
            async for _, batch in group:
                assert [r.offset for r in batch] == [r.offset for r in first], "delivered again"
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            await fail_in_body()
        assert await group.offset(0) is None
        async for _, batch in group:
            assert batch[0].offset == 0, "delivered again after the exception too"
            break
    async with member(cluster, group_name, topic) as successor:
        async for _, batch in successor:
            assert batch[0].offset == 0, "the next owner gets the uncommitted batch"
            break


async def test_manual_commit_stores_only_what_the_caller_commits(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(1)
    await produce(topic, 3)
    async with member(cluster, group_name, topic) as group:
        batches = closable(group.batches(commit=False))
        _, batch = await anext(batches)
        await produce(topic, 2, start=3)
        _, _later = await anext(batches)
        assert await group.offset(0) is None, "nothing stored without a commit"
        await group.commit(0, batch[-1].offset + 1)
        assert await group.offset(0) == 3
        await batches.aclose()
        with pytest.raises(NotOwnedError, match="partition 7"):
            await group.commit(7, 1)
        with pytest.raises(ConfigurationError, match="offset"):
            await group.commit(0, -1)
    assert await group_offset_after_close(cluster, group_name, topic) == 3


async def group_offset_after_close(
    cluster: LocalCluster, group_name: str, topic: str
) -> int | None:
    async with member(cluster, group_name, topic) as reader:
        return await reader.offset(0)


async def test_several_members_in_one_loop_consume_everything_once(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(6)
    counts = await produce(topic, 600)
    seen: Counter[bytes] = Counter()
    members = [member(cluster, group_name, topic) for _ in range(4)]

    async def consume(group: ConsumerGroup, stop_after: int | None) -> None:
        taken = 0
        async for _, batch in group:
            if stop_after is not None and taken >= stop_after:
                break  # before processing: the batch goes to the next owner
            seen.update(record.key or b"" for record in batch)
            taken += 1
        await group.close()

    async with contextlib.AsyncExitStack() as stack:
        for group in members:
            await stack.enter_async_context(group)
        tasks = [
            asyncio.create_task(consume(group, stop))
            for group, stop in zip(members, [None, None, 1, 3], strict=True)
        ]
        counts += await produce(topic, 600, start=600)
        await wait_until(lambda: sum(seen.values()) >= 1200, what="all 1200 messages")
        for group in members:
            await group.close()
        await asyncio.gather(*tasks)
    assert sorted(seen) == sorted(f"k{i}".encode() for i in range(1200))
    assert set(seen.values()) == {1}, "a message was delivered twice"
    async with member(cluster, group_name, topic) as reader:
        stored = {p: await reader.offset(p) for p in reader.partitions}
    assert stored == {p: counts[p] for p in range(6)}


async def test_strategy_mismatch_is_refused(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(2)
    async with member(cluster, group_name, topic) as existing:
        other = member(cluster, group_name, topic, strategy="roundrobin")
        with pytest.raises(StrategyMismatchError, match="sticky"):
            await other.register()
        assert other.state is GroupState.CLOSED
        assert await zk.get_children(GroupLayout(group_name, topic).ids) == [existing.id]
        assert existing.claimed == [0, 1]


async def test_trail_starts_at_the_latest_offset(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(1)
    await produce(topic, 5)
    async with member(cluster, group_name, topic, trail=True) as group:
        assert await group.offset(0) == 5, "the trailing start is stored at once"
        await produce(topic, 2, start=5)
        async for _, batch in group:
            assert [r.value for r in batch] == [b"5", b"6"]
            break


async def test_out_of_range_offset_resets_to_earliest(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await make_topic(1)
    await produce(topic, 3)
    layout = GroupLayout(group_name, topic)
    await zk.ensure_path(layout.offsets)
    await zk.create(layout.offset(0), b"1000")
    async with member(cluster, group_name, topic) as group:
        async for _, batch in group:
            assert batch[0].offset == 0
            break
    assert "out of range" in caplog.text


async def test_bad_input_gets_a_clear_error(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    with pytest.raises(ConfigurationError, match="claim_timeout"):
        member(cluster, group_name, "t", claim_timeout=0)
    with pytest.raises(ConfigurationError, match="strategy"):
        member(cluster, group_name, "t", strategy="stickier")
    with pytest.raises(ConfigurationError, match="topic name"):
        member(cluster, group_name, "no/slash")
    with pytest.raises(ConfigurationError, match="rebalance_timeout"):
        member(cluster, group_name, "t", rebalance_timeout=-1)
    missing = member(cluster, group_name, "no-such-topic", wait_for_topic=False)
    with pytest.raises(ConfigurationError, match="no-such-topic"):
        await missing.register()
    assert missing.state is GroupState.CLOSED
    with pytest.raises(GroupClosedError):
        await missing.register()


async def test_register_false_defers_joining(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(1)
    async with member(cluster, group_name, topic, register=False) as group:
        assert (group.state, group.claimed) == (GroupState.NEW, [])
        await group.register()
        await group.register()
        assert (group.state, group.claimed) == (GroupState.JOINED, [0])
    await group.close()
    assert group.state is GroupState.CLOSED


async def test_session_expiry_drops_claims_then_rejoins(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(2)
    await produce(topic, 10)
    async with member(cluster, group_name, topic, session_timeout=4.0) as group:
        old_session = group._member.parts.zk.session_id
        assert old_session is not None
        assert group._member.parts.zk.session_password is not None
        await cluster.expire_session(old_session, group._member.parts.zk.session_password)
        await wait_until(
            lambda: (
                group._member.parts.zk.session_id not in (None, old_session)
                and group.claimed == [0, 1]
            ),
            what="a new session with the claims back",
        )
        assert await settled(zk, [group])
        batches = closable(group.batches())
        values = {record.value for _, record in await take(batches, 10)}
        assert values == {str(i).encode() for i in range(10)}
        await batches.aclose()


async def test_new_partitions_trigger_a_rebalance(
    cluster: LocalCluster,
    zk: ZooKeeper,
    admin: AIOKafkaAdminClient,
    make_topic: MakeTopic,
    group_name: str,
) -> None:
    topic = await make_topic(2)
    async with (
        member(cluster, group_name, topic, metadata_interval=0.5) as one,
        member(cluster, group_name, topic, metadata_interval=0.5) as two,
    ):
        await admin.create_partitions({topic: NewPartitions(total_count=4)})
        await wait_until(lambda: one.partitions == [0, 1, 2, 3], what="new partitions seen")
        await wait_until(lambda: settled(zk, [one, two]), what="new partitions owned")
        assert sorted(len(m.claimed) for m in (one, two)) == [2, 2]


async def test_handover_waits_for_the_batch_being_processed(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(2)
    await produce(topic, 20)
    layout = GroupLayout(group_name, topic)
    async with member(cluster, group_name, topic, strategy="range") as first:
        second = member(cluster, group_name, topic, strategy="range")
        (moving,) = assign(Strategy.RANGE, [0, 1], [first.id, second.id])[second.id]
        batches = closable(first.batches())
        batch = await batch_of(batches, moving)
        # The body of the moving partition's batch is running now.
        joining = asyncio.create_task(second.register())
        tasks: list[asyncio.Future[Any]] = [joining]
        try:
            await wait_until(
                lambda: moving in first._member.parts.states.withheld,
                what="first starts to hand over",
            )
            # A second in which a wrong handover would happen: the join must not finish.
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(joining), 1.0)
            assert await owners(zk, layout, [moving]) == {moving: first.id}
            # The body ends: asking for the next batch commits it, then the partition moves.
            tasks.append(asyncio.ensure_future(anext(batches)))
            await joining
            assert second.claimed == [moving]
            assert await second.offset(moving) == batch[-1].offset + 1
            await produce(topic, 20, start=20)
            async for got, later in second:
                if got == moving:
                    assert later[0].offset == batch[-1].offset + 1, "nothing delivered twice"
                    break
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await task
            await batches.aclose()
            await second.close()


async def test_a_claim_that_times_out_is_retried_and_the_loop_goes_on(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await make_topic(2)
    await produce(topic, 10)
    layout = GroupLayout(group_name, topic)
    # A claim left by an owner that is not in the group (yet to be released, say).
    await zk.ensure_path(layout.owners)
    await zk.create(layout.owner(1), b"someone-else", ephemeral=True)
    async with member(cluster, group_name, topic, claim_timeout=0.5) as group:
        assert group.claimed == [0], "the join keeps what it could claim"
        assert "still owned by someone-else" in caplog.text
        assert (await group.statistics()).claim_timeouts >= 1
        async for partition, batch in group:
            assert partition == 0, "the loop goes on with what is claimed"
            assert batch
            break
        await zk.delete(layout.owner(1))
        await wait_until(lambda: group.claimed == [0, 1], what="the claim retried")
        assert (await zk.get(layout.owner(1)))[0] == group.id.encode()


async def test_groups_of_one_name_on_two_topics_do_not_share_partitions(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    one, two = await make_topic(2), await make_topic(3)
    async with member(cluster, group_name, one) as a, member(cluster, group_name, two) as b:
        await wait_until(lambda: a.claimed == [0, 1] and b.claimed == [0, 1, 2], what="both")


async def test_round_robin_members_share_the_topic(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(4)
    async with (
        member(cluster, group_name, topic, strategy="roundrobin") as a,
        member(cluster, group_name, topic, strategy=Strategy.ROUND_ROBIN) as b,
    ):
        await wait_until(lambda: settled(zk, [a, b]), what="round-robin settles")
        expected = assign(Strategy.ROUND_ROBIN, range(4), [a.id, b.id])
        assert {a.id: a.claimed, b.id: b.claimed} == expected


async def test_a_record_written_while_a_fetch_waits_at_the_broker_comes_at_once(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str, produce: Produce
) -> None:
    """``max_wait`` bounds how long the broker holds a fetch that finds nothing; with
    ``min_bytes`` 1 it answers as soon as a record arrives, so even a wait of two minutes (the
    default is half a second) delays no record: it comes well before the take's bound of 30 s."""
    topic = await make_topic(1)
    async with member(cluster, group_name, topic, max_wait=120.0) as group:
        batches = group.batches()
        first = asyncio.ensure_future(take(batches, 1, timeout=30.0))
        await asyncio.sleep(1.0)  # the member's fetch is held at the broker by now
        assert not first.done()
        await produce(topic, 3)
        assert len(await first) >= 1
        await closable(batches).aclose()


async def test_an_empty_fetch_is_not_followed_by_the_loop_delay(
    cluster: LocalCluster, make_topic: MakeTopic, group_name: str, produce: Produce
) -> None:
    """The broker's long poll (``max_wait``) is the wait of an idle member: the pause of
    ``loop_delay`` follows only a failed fetch, so records written to an idle topic come at the
    next fetch, not after the pause (an hour here)."""
    topic = await make_topic(2)
    async with member(cluster, group_name, topic, loop_delay=3600.0) as group:
        batches = group.batches()
        first = asyncio.ensure_future(take(batches, 1, timeout=30.0))
        await asyncio.sleep(0.5)  # several fetches find nothing meanwhile
        assert not first.done()
        await produce(topic, 10)
        assert len(await first) >= 1
        await closable(batches).aclose()
