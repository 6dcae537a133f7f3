"""Members in racks against three real brokers in racks ``a``, ``b`` and ``c`` (with Kafka's
rack-aware replica selector): each member reads from the broker in its own rack, and the sticky
target gives each partition to a member in one of its replicas' racks while the shares stay
balanced, through joins, leaves, members without a rack (or in a rack no broker has) and a
reassignment of replicas. One cluster for the module; small backlogs."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import pytest
import pytest_asyncio
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import AlterPartitionReassignmentsRequest
from test_shares_group import Requests

from aio_cluster import ConsumerGroup
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout, decode_registration

from support import create_topic, fresh, member, observed, owners, producer_of, wait_until

# own_cluster: it starts three brokers of its own, which no cluster fixture names (so it is not
# server_free, which the other Pythons' sessions run, three at a time); faults: in a pytest of
# their own, two at a time, since a leave's handover is timed against the member's session.
pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.own_cluster,
    pytest.mark.faults,
]

RACKS = ["a", "b", "c"]
PARTITIONS = 12
RECORD = b"x" * 1000


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def racked_brokers() -> AsyncIterator[LocalCluster]:
    """Three Kafka nodes, node ``i + 1`` in rack ``RACKS[i]``."""
    async with LocalCluster(brokers=3, racks=RACKS) as started:
        yield started


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def racked_admin(racked_brokers: LocalCluster) -> AsyncIterator[AIOKafkaAdminClient]:
    """An admin client of the racked brokers, to describe and reassign replicas."""
    client = AIOKafkaAdminClient(bootstrap_servers=racked_brokers.bootstrap)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


def rack_of(node: int) -> str:
    return RACKS[node - 1]


async def replica_racks(admin: AIOKafkaAdminClient, topic: str) -> dict[int, set[str]]:
    """partition -> the racks of its replicas, as Kafka describes the topic now."""
    (described,) = await admin.describe_topics([topic])
    return {
        p["partition"]: {rack_of(node) for node in p["replicas"]} for p in described["partitions"]
    }


def racked(cluster: LocalCluster, group: str, topic: str, rack: str | None) -> ConsumerGroup:
    return member(cluster, group, topic, rack=rack, metadata_interval=0.5, rebalance_timeout=10.0)


async def owned(zk: ZooKeeper, group: str, topic: str) -> dict[int, str]:
    return await owners(zk, GroupLayout(group, topic), list(range(PARTITIONS)))


async def settle_on(
    zk: ZooKeeper, group: str, topic: str, members: Sequence[ConsumerGroup]
) -> dict[int, str]:
    """The owners once every partition is claimed by one of ``members``, each claiming its
    share and nothing else."""
    ids = {m.id for m in members}

    async def done() -> bool:
        found = await owned(zk, group, topic)
        counts = [sum(1 for owner in found.values() if owner == i) for i in ids]
        claimed = sorted(p for m in members for p in m.claimed)
        return (
            len(found) == PARTITIONS
            and set(found.values()) <= ids
            and max(counts) - min(counts) <= 1
            and claimed == list(range(PARTITIONS))
        )

    await wait_until(done, what="the group settles", timeout=60.0)
    return await owned(zk, group, topic)


def local_split(
    owners_now: dict[int, str],
    leaver: str,
    stayers: list[str],
    racks: dict[str, str | None],
    placed: dict[int, set[str]],
) -> bool:
    """Whether the leaver's partitions can go to ``stayers`` so that their shares are balanced
    and each goes to a stayer in one of its replicas' racks, none of the stayers' moving."""
    gone = [p for p, owner in owners_now.items() if owner == leaver]
    held = [sum(owner == stayer for owner in owners_now.values()) for stayer in stayers]
    for split in itertools.product(range(len(stayers)), repeat=len(gone)):
        shares = [held[i] + split.count(i) for i in range(len(stayers))]
        if max(shares) - min(shares) <= 1 and all(
            racks[stayers[i]] in placed[p] for p, i in zip(gone, split, strict=True)
        ):
            return True
    return False


def local(
    owners_now: dict[int, str], racks: dict[str, str | None], placed: dict[int, set[str]]
) -> int:
    return sum(racks[owner] in placed[p] for p, owner in owners_now.items())


async def test_each_member_reads_from_the_broker_in_its_rack(racked_brokers: LocalCluster) -> None:
    """The issue's first case: replication factor 3, one member per rack, a backlog: at least
    95 % of each member's fetched bytes come from the broker in its rack."""
    cluster = racked_brokers
    topic = await create_topic(cluster.bootstrap, PARTITIONS, replicas=3, prefix="racks")
    per_partition = 100
    async with producer_of(cluster) as producer:
        for partition in range(PARTITIONS):
            for _ in range(per_partition):
                await producer.send(topic, RECORD, partition=partition)
        await producer.flush()
    group = fresh("racks")
    members = [racked(cluster, group, topic, rack) for rack in RACKS]
    handed = [0, 0, 0]
    async with members[0], members[1], members[2]:
        async with anyio.create_task_group() as tasks:

            async def read(index: int) -> None:
                async for _partition, batch in members[index]:
                    handed[index] += len(batch)

            for index in range(3):
                tasks.start_soon(read, index)
            await wait_until(
                lambda: sum(handed) >= PARTITIONS * per_partition, what="the backlog read"
            )
            tasks.cancel_scope.cancel()
        for rack, group_member in zip(RACKS, members, strict=True):
            fetched = (await group_member.statistics()).fetched_bytes
            total = sum(fetched.values())
            mine = sum(size for node, size in fetched.items() if rack_of(node) == rack)
            assert total > 0, f"the member in rack {rack} fetched nothing"
            assert mine >= 0.95 * total, (rack, dict(fetched))


async def test_replication_factor_two_joins_leaves_strangers_and_a_reassignment(
    racked_brokers: LocalCluster, racked_admin: AIOKafkaAdminClient
) -> None:
    """The issue's second and third cases: with two replicas each, every partition goes to a
    member in one of its replicas' racks, balanced; a join and a leave move only what they
    must; a member without a rack and one in a rack no broker has take their share; a
    reassignment of replicas moves the partitions it leaves outside their racks, and one that
    leaves them inside costs the members no ZooKeeper request."""
    cluster, admin = racked_brokers, racked_admin
    topic = await create_topic(cluster.bootstrap, PARTITIONS, replicas=2, prefix="racks2")
    placed: dict[int, set[str]] = {}

    async def described() -> bool:
        # A new topic's partitions reach the brokers' metadata a moment after its creation: a
        # description may name only some of them first.
        placed.update(await replica_racks(admin, topic))
        return len(placed) == PARTITIONS and all(len(racks) == 2 for racks in placed.values())

    await wait_until(described, what="every partition described with its two replicas")
    group = fresh("racks2")
    by_rack = {rack: racked(cluster, group, topic, rack) for rack in RACKS}
    racks: dict[str, str | None] = {m.id: rack for rack, m in by_rack.items()}
    members = list(by_rack.values())
    async with observed(cluster) as zk, contextlib.AsyncExitStack() as stack:
        for member_ in members[:2]:
            await stack.enter_async_context(member_)
        two = await settle_on(zk, group, topic, members[:2])
        assert local(two, racks, placed) == PARTITIONS
        await stack.enter_async_context(members[2])
        now = await settle_on(zk, group, topic, members)
        taken = [p for p in now if now[p] != two[p]]
        assert len(taken) == 4, "a join moved more than its share"
        assert {now[p] for p in taken} == {members[2].id}
        assert local(now, racks, placed) == PARTITIONS
        for name, stranger_rack in (("no rack", None), ("a rack no broker has", "x")):
            stranger = racked(cluster, group, topic, stranger_rack)
            racks[stranger.id] = stranger_rack
            async with stranger:
                joined = await settle_on(zk, group, topic, [*members, stranger])
                taken = [p for p in joined if joined[p] != now[p]]
                assert len(taken) == 3, name
                assert {joined[p] for p in taken} == {stranger.id}, name
                assert local(joined, racks, placed) == PARTITIONS - 3, name
            left = await settle_on(zk, group, topic, members)
            assert all(left[p] == now[p] for p in now if joined[p] != stranger.id), name
            assert local(left, racks, placed) == PARTITIONS, name
            now = left
        # A leave moves the leaver's partitions, each to a stayer in one of its racks; a
        # stayer's own moves too only where no balanced split of them keeps every partition
        # local (locality comes before stickiness). The same rack's next member joins in its
        # place.
        await members[2].close()
        left = await settle_on(zk, group, topic, members[:2])
        assert local(left, racks, placed) == PARTITIONS
        if local_split(now, members[2].id, [m.id for m in members[:2]], racks, placed):
            assert all(left[p] == now[p] for p in now if now[p] != members[2].id), "a leave"
        members[2] = racked(cluster, group, topic, "c")
        racks[members[2].id] = "c"
        await stack.enter_async_context(members[2])
        now = await settle_on(zk, group, topic, members)
        assert sum(now[p] != left[p] for p in now) == 4
        noted = [Requests(m._member.parts.zk) for m in members]
        await moved_replicas(admin, topic, placed, now, racks, keep_local=True)
        await anyio.sleep(6 * 0.5)  # several metadata checks of the leader
        assert await owned(zk, group, topic) == now
        for n in noted:
            assert [p for p in n.paths if p != "/"] == [], "a reassignment moving nothing cost"
        partition = await moved_replicas(admin, topic, placed, now, racks, keep_local=False)

        async def relocated() -> bool:
            found = await owned(zk, group, topic)
            return len(found) == PARTITIONS and local(found, racks, placed) == PARTITIONS

        await wait_until(relocated, what="the reassigned partition goes to its racks")
        after = await settle_on(zk, group, topic, members)
        assert after[partition] != now[partition]
        # Balance kept: the member that lost it took one back from the other's rack.
        assert sum(after[p] != now[p] for p in after) == 2


async def moved_replicas(
    admin: AIOKafkaAdminClient,
    topic: str,
    placed: dict[int, set[str]],
    owners_now: dict[int, str],
    racks: dict[str, str | None],
    *,
    keep_local: bool,
) -> int:
    """Reassign one partition's replicas: to two brokers one of which is in its owner's rack
    (``keep_local``), or to the two outside it. Updates ``placed``; returns the partition."""
    partition = 0
    owner_rack = racks[owners_now[partition]]
    assert owner_rack is not None
    others = [r for r in RACKS if r != owner_rack]
    chosen = others
    if keep_local:
        chosen = [owner_rack, next(r for r in others if r not in placed[partition])]
    nodes = [RACKS.index(rack) + 1 for rack in chosen]
    request = AlterPartitionReassignmentsRequest(
        30_000, [(topic, [(partition, nodes, {})], {})], {}
    )
    answer: Any = await admin._send_to_controller(request)
    assert not answer.error_code, answer

    async def done() -> bool:
        return (await replica_racks(admin, topic))[partition] == set(chosen)

    await wait_until(done, what="the reassignment completes")
    placed[partition] = set(chosen)
    return partition


async def test_registration_says_the_rack(racked_brokers: LocalCluster) -> None:
    """The rack is published in the registration (what ``describe`` and the dashboard show)."""
    cluster = racked_brokers
    topic = await create_topic(cluster.bootstrap, 2, replicas=3, prefix="racks-reg")
    group = fresh("racks-reg")
    async with racked(cluster, group, topic, "b") as one, observed(cluster) as zk:
        data, _stat = await zk.get(GroupLayout(group, topic).member(one.id))
        assert decode_registration(data).rack == "b"
