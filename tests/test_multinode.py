"""Two members on a 3-node ZooKeeper ensemble and 3 Kafka nodes while nodes die: the leader
broker of a partition, the ZooKeeper server a member talks to, a majority of the ensemble.

Numbered messages are produced throughout (idempotent, so ``acks="all"``: an acknowledged message
survives one broker's death). None of these faults may rebalance the group: every claim node
is the one made when the members settled (a claim released and made again would be a new node,
a session lost would take it along), and so no batch is ever in flight at a handover and every
message is consumed exactly once. At the end the owner nodes are a disjoint cover of the
partitions and the stored offsets are the partitions' ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Callable

import anyio
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest

from aio_cluster import ConsumerGroup, LocalClusterError
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout
from aio_cluster.zookeeper.values import SessionState

from support import create_topic, fresh, settled, stored_offsets, wait_until

pytestmark = pytest.mark.asyncio

PARTITIONS = 4


@pytest_asyncio.fixture
async def topic(multi_cluster: LocalCluster) -> str:
    """A fresh topic replicated to all three nodes, known to each of them: a broker learns of a
    topic a moment after the controller created it, and a member asking it before would be told
    the topic does not exist."""
    name = await create_topic(multi_cluster.bootstrap, PARTITIONS, replicas=3, prefix="multi")
    client = AIOKafkaClient(bootstrap_servers=multi_cluster.bootstrap)
    await client.bootstrap()
    try:
        for broker in client.cluster.brokers():
            await known_by(client, broker.nodeId, name)
    finally:
        await client.close()
    return name


async def known_by(client: AIOKafkaClient, node: int, topic: str) -> None:
    """Wait until ``node`` answers that it knows ``topic``; a node that does not answer yet is
    asked again, and a timeout names its last error."""
    failures: list[KafkaError] = []

    async def knows() -> bool:
        try:
            metadata = (await client.send(node, MetadataRequest([topic]))).to_object()
        except KafkaError as exc:
            failures.append(exc)
            return False
        return all(not found["error_code"] for found in metadata["topics"])

    try:
        await wait_until(knows, what=f"broker {node} knows the topic")
    except AssertionError as exc:
        raise AssertionError(f"{exc} (its last error: {failures[-1:]})") from exc


@dataclasses.dataclass
class Member:
    """A member and what it was handed: each record's key, and each batch handed out while its
    ZooKeeper session was not connected (there must be none: a suspended member pauses)."""

    group: ConsumerGroup
    keys: list[bytes] = dataclasses.field(default_factory=list)
    by_partition: Counter[int] = dataclasses.field(default_factory=Counter)
    while_away: list[tuple[int, int]] = dataclasses.field(default_factory=list)

    @property
    def session(self) -> SessionState:
        return self.group._member.parts.zk.state

    async def consume(self) -> None:
        async for partition, batch in self.group:
            if self.session is not SessionState.CONNECTED:
                self.while_away.append((partition, batch[0].offset))
            self.keys.extend(record.key or b"" for record in batch)
            self.by_partition[partition] += len(batch)


class Producer:
    """Numbered messages (key ``k<i>``) in small batches until stopped; counts what each
    partition got."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._client = AIOKafkaProducer(
            bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5
        )
        self._topic = topic
        self.counts: Counter[int] = Counter()
        self.stop = asyncio.Event()
        self.done = asyncio.Event()

    @property
    def sent(self) -> int:
        return sum(self.counts.values())

    async def run(self) -> None:
        await self._client.start()
        try:
            numbers = itertools.count()
            while not self.stop.is_set():
                futures = [
                    await self._client.send(self._topic, key=f"k{i}".encode(), value=b"%d" % i)
                    for i in itertools.islice(numbers, 20)
                ]
                for future in futures:
                    self.counts[(await future).partition] += 1
                await asyncio.sleep(0.02)
        finally:
            await self._client.stop()
            self.done.set()


@dataclasses.dataclass
class Run:
    """A producer and two members at work, and what the checks at the end need."""

    cluster: LocalCluster
    producer: Producer
    members: list[Member]
    settled_claims: dict[int, tuple[str, int]]
    final_claims: dict[int, tuple[str, int]] = dataclasses.field(default_factory=dict)
    settled_at_end: bool = False
    stored: dict[int, int] = dataclasses.field(default_factory=dict)

    def consumed(self) -> int:
        return sum(len(member.keys) for member in self.members)

    def consumed_from(self, partitions: list[int]) -> int:
        return sum(member.by_partition[p] for member in self.members for p in partitions)

    async def progress(self, count: Callable[[], int], more: int, what: str) -> None:
        """Wait until ``count()`` grew by ``more``."""
        target = count() + more
        await wait_until(lambda: count() >= target, timeout=90, what=what)


async def claim_nodes(zk: ZooKeeper, layout: GroupLayout) -> dict[int, tuple[str, int]]:
    """partition -> (owner, creation zxid of its claim node)."""
    found = {}
    for partition in range(PARTITIONS):
        data, stat = await zk.get(layout.owner(partition))
        found[partition] = (data.decode(), stat.czxid)
    return found


@contextlib.asynccontextmanager
async def members_at_work(cluster: LocalCluster, topic: str) -> AsyncIterator[Run]:
    """Two settled members consuming and a producer producing while the block runs; then the
    producer stops, the members consume the rest, record what the checks need, and leave."""
    name = fresh("group")
    layout = GroupLayout(name, topic)
    producer = Producer(cluster.bootstrap, topic)
    zk = ZooKeeper(cluster.zookeeper)
    await zk.start()
    try:
        async with (
            ConsumerGroup(name, cluster.bootstrap, cluster.zookeeper, topic, loop_delay=0.1) as a,
            ConsumerGroup(name, cluster.bootstrap, cluster.zookeeper, topic, loop_delay=0.1) as b,
        ):
            await wait_until(lambda: settled(zk, [a, b]), what="both members settled")
            run = Run(cluster, producer, [Member(a), Member(b)], await claim_nodes(zk, layout))
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(producer.run)
                for member in run.members:
                    tasks.start_soon(member.consume)
                await run.progress(run.consumed, 200, "200 consumed before the fault")
                yield run
                producer.stop.set()
                await producer.done.wait()
                await wait_until(
                    lambda: run.consumed() >= producer.sent, timeout=90, what="all consumed"
                )
                run.final_claims = await claim_nodes(zk, layout)
                run.settled_at_end = await settled(zk, [a, b])
                tasks.cancel_scope.cancel()
        # The members stored them as they left.
        run.stored = await stored_offsets(zk, layout, PARTITIONS)
    finally:
        await zk.close()


def check(run: Run) -> None:
    keys = Counter(key for member in run.members for key in member.keys)
    assert run.producer.sent > 400
    assert sorted(keys) == sorted(f"k{i}".encode() for i in range(run.producer.sent)), "lost"
    assert max(keys.values()) == 1, "a message was delivered twice"
    for member in run.members:
        assert member.while_away == [], "a batch was handed out while ZooKeeper was away"
    assert run.final_claims == run.settled_claims, "the group rebalanced"
    assert run.settled_at_end, "the owner nodes are not a disjoint cover of the partitions"
    assert run.stored == {p: run.producer.counts[p] for p in range(PARTITIONS)}


async def test_topics_are_replicated_three_times_with_two_in_sync(
    multi_cluster: LocalCluster, topic: str
) -> None:
    servers = multi_cluster.bootstrap.split(",")
    zookeepers = multi_cluster.zookeeper.split(",")
    assert len(servers) == 3
    assert len(zookeepers) == 3
    admin = AIOKafkaAdminClient(bootstrap_servers=multi_cluster.bootstrap)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
        (configs,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {"min.insync.replicas": None})]
        )
    finally:
        await admin.close()
    assert {len(p["isr"]) for p in described["partitions"]} == {3}
    (resource,) = configs.resources
    assert {entry[0]: entry[1] for entry in resource[4]} == {"min.insync.replicas": "2"}


async def test_bad_node_and_partition(multi_cluster: LocalCluster, topic: str) -> None:
    with pytest.raises(LocalClusterError, match=r"no kafka node 3: this cluster has 3 \(0..2\)"):
        await multi_cluster.stop_broker(3)
    with pytest.raises(LocalClusterError, match="no zookeeper node -1"):
        await multi_cluster.start_zookeeper_node(-1)
    with pytest.raises(LocalClusterError, match=f"topic {topic!r} has no partition 9"):
        await multi_cluster.leader(topic, 9)
    with pytest.raises(LocalClusterError, match="'no-such-topic' does not exist"):
        await multi_cluster.leader("no-such-topic", 0)


async def test_leader_broker_dies_mid_consumption(multi_cluster: LocalCluster, topic: str) -> None:
    """Consumption of the partitions it led goes on from their new leaders, with no rebalance."""
    stopped: int | None = None
    try:
        async with members_at_work(multi_cluster, topic) as run:
            leader = await multi_cluster.leader(topic, 0)
            led = [p for p in range(PARTITIONS) if await multi_cluster.leader(topic, p) == leader]
            await multi_cluster.stop_broker(leader)
            stopped = leader
            for partition in led:
                assert await multi_cluster.leader(topic, partition) != leader
            # A member's metadata requests go to the live brokers, never to the dead one.
            fetcher = run.members[0].group._member.parts.fetcher
            for _ in range(10):
                assert await fetcher.partitions(topic) == list(range(PARTITIONS))
            await run.progress(lambda: run.consumed_from(led), 100, "consumed from the new leaders")
            await multi_cluster.start_broker(leader)
            stopped = None
        check(run)
    finally:
        if stopped is not None:
            await multi_cluster.start_broker(stopped)


async def zookeeper_server_of(cluster: LocalCluster, session: int | None) -> int | None:
    """The index of the ZooKeeper server a session is connected to, by the servers' own word
    (``cons``), or None when it is connected to none."""
    assert session is not None

    async def connections(address: str) -> bytes:
        host, _, port = address.rpartition(":")
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
        except OSError:
            return b""
        try:
            writer.write(b"cons")
            return await asyncio.wait_for(reader.read(), 5)
        finally:
            writer.close()

    for index, address in enumerate(cluster.zookeeper.split(",")):
        if f"sid=0x{session:x}".encode() in await connections(address):
            return index
    return None


async def test_zookeeper_server_of_a_member_dies(multi_cluster: LocalCluster, topic: str) -> None:
    """The member's session moves to another server: no rebalance, no duplicate."""
    stopped: int | None = None
    try:
        async with members_at_work(multi_cluster, topic) as run:
            sessions = [member.group._member.parts.zk.session_id for member in run.members]
            server = await zookeeper_server_of(multi_cluster, sessions[0])
            assert server is not None
            await multi_cluster.stop_zookeeper_node(server)
            stopped = server

            async def moved() -> bool:
                now = await zookeeper_server_of(multi_cluster, sessions[0])
                return now is not None and now != server

            await wait_until(moved, what="the session moved to another server")
            await run.progress(run.consumed, 200, "consumed after the move")
            await multi_cluster.start_zookeeper_node(server)
            stopped = None
            assert [member.group._member.parts.zk.session_id for member in run.members] == sessions
        check(run)
    finally:
        if stopped is not None:
            await multi_cluster.start_zookeeper_node(stopped)


async def test_zookeeper_quorum_lost_pauses_the_members(
    multi_cluster: LocalCluster, topic: str
) -> None:
    """With two of three servers down nobody is served: the members hand out nothing (and can
    store no offset) until the quorum is back, then go on where they were."""
    stopped: list[int] = []
    try:
        async with members_at_work(multi_cluster, topic) as run:
            sessions = [member.group._member.parts.zk.session_id for member in run.members]
            for server in (1, 2):
                await multi_cluster.stop_zookeeper_node(server)
                stopped.append(server)
            await wait_until(
                lambda: all(m.session is not SessionState.CONNECTED for m in run.members),
                what="both members lost their server",
            )
            paused_at = run.consumed()
            await run.progress(lambda: run.producer.sent, 300, "produced during the outage")
            assert run.consumed() == paused_at, "consumed while ZooKeeper had no quorum"
            while stopped:
                await multi_cluster.start_zookeeper_node(stopped[0])
                stopped.pop(0)
            await run.progress(run.consumed, 300, "consumed after the quorum came back")
            assert [member.group._member.parts.zk.session_id for member in run.members] == sessions
        check(run)
    finally:
        for server in stopped:
            await multi_cluster.start_zookeeper_node(server)
