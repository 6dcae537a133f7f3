"""A group whose ZooKeeper nodes carry the creator ACL, against the real server: anyone can read
them, only the group's identity can change them, and a member of another identity is refused at
once with a typed error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import READ_ACL_UNSAFE

from aio_cluster import AccessDeniedError, ConsumerGroup, GroupState
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic, Produce
from support import closable, wait_until

RIGHT = [("digest", "orders:right-Pa55word")]
WRONG = [("digest", "intruder:wrong-Pa55word")]


@pytest_asyncio.fixture
async def anonymous(cluster: LocalCluster) -> AsyncIterator[KazooClient]:
    """A plain kazoo client without credentials."""
    client = KazooClient(hosts=cluster.zookeeper)
    await asyncio.to_thread(client.start, 10)
    yield client
    await asyncio.to_thread(client.stop)
    await asyncio.to_thread(client.close)


def _member(
    cluster: LocalCluster, group: str, topic: str, auth: list[tuple[str, str]]
) -> ConsumerGroup:
    return ConsumerGroup(
        group,
        cluster.bootstrap,
        cluster.zookeeper,
        topic,
        loop_delay=0.1,
        commit_interval=0.1,
        zookeeper_auth=auth,
        zookeeper_acl="creator",
    )


@pytest.mark.asyncio
async def test_creator_acl_lets_others_read_but_not_change_the_group(
    cluster: LocalCluster,
    anonymous: KazooClient,
    make_topic: MakeTopic,
    produce: Produce,
    group_name: str,
) -> None:
    topic = await make_topic(2)
    counts = await produce(topic, 20)
    layout = GroupLayout(group_name, topic)
    async with _member(cluster, group_name, topic, RIGHT) as group:
        batches = closable(group.batches(commit=False))
        taken = 0
        while taken < 20:
            partition, batch = await anext(batches)
            await group.commit(partition, batch[-1].offset + 1)
            taken += len(batch)
        await batches.aclose()
        # Reading works without credentials: monitoring keeps working.
        assert await asyncio.to_thread(anonymous.get_children, layout.ids) == [group.id]
        owner, _ = await asyncio.to_thread(anonymous.get, layout.owner(0))
        assert owner == group.id.encode()
        written = next(p for p in counts if counts[p])
        offset, _ = await asyncio.to_thread(anonymous.get, layout.offset(written))
        assert int(offset) == counts[written]

        with pytest.raises(NoAuthError):
            await asyncio.to_thread(anonymous.set, layout.offset(written), b"0")
        with pytest.raises(NoAuthError):
            await asyncio.to_thread(anonymous.delete, layout.owner(0))
        with pytest.raises(NoAuthError):
            await asyncio.to_thread(
                anonymous.create, layout.member("intruder"), b"{}", ephemeral=True
            )
        assert await group.offset(written) == counts[written]

        # A member of another identity is refused at once, and the group is untouched.
        intruder = _member(cluster, group_name, topic, WRONG)
        with pytest.raises(AccessDeniedError, match=layout.ids) as raised:
            await asyncio.wait_for(intruder.register(), 30)
        assert intruder.state is GroupState.CLOSED
        assert "wrong-Pa55word" not in str(raised.value)
        assert group.claimed == [0, 1]

        # A member with the right credentials joins, takes its share and can store offsets.
        async with _member(cluster, group_name, topic, RIGHT) as second:
            await wait_until(
                lambda: (
                    sorted(group.claimed + second.claimed) == [0, 1] and len(second.claimed) == 1
                ),
                what="the second member takes a partition",
            )
            (mine,) = second.claimed
            await second.commit(mine, counts[mine])
            members = await asyncio.to_thread(anonymous.get_children, layout.ids)
            assert sorted(members) == sorted([group.id, second.id])
    assert await asyncio.to_thread(anonymous.get_children, layout.ids) == []


@pytest.mark.asyncio
async def test_a_member_refused_after_joining_stops_with_the_typed_error(
    cluster: LocalCluster, make_topic: MakeTopic, produce: Produce, group_name: str
) -> None:
    topic = await make_topic(1)
    await produce(topic, 3)
    layout = GroupLayout(group_name, topic)
    owner = KazooClient(hosts=cluster.zookeeper, auth_data=RIGHT)
    await asyncio.to_thread(owner.start, 10)
    try:
        async with _member(cluster, group_name, topic, RIGHT) as group:
            batches = closable(group.batches())
            await anext(batches)
            await produce(topic, 2, start=3)
            await anext(batches)  # the first batch completed: its offset is stored soon

            async def stored() -> bool:
                return await asyncio.to_thread(owner.exists, layout.offset(0)) is not None

            await wait_until(stored, what="the first offset stored")
            # The node's owner takes the write permission away: storing offsets is refused now.
            await asyncio.to_thread(owner.set_acls, layout.offset(0), list(READ_ACL_UNSAFE))
            with pytest.raises(AccessDeniedError, match=layout.offset(0)):
                await anext(batches)  # the second completes; storing it fails in the background
            await batches.aclose()
    finally:
        await asyncio.to_thread(owner.stop)
        await asyncio.to_thread(owner.close)
