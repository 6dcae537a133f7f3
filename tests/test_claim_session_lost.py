"""A claim whose session is lost while its create waits to be sent, against the real servers:
kazoo sends a request queued across an expiry on the next session, so the owner node is made,
ephemeral of the member's new session, by a claim the member no longer records (or one whose
create timed out on the client). The node must be given back, or the partition stays blocked for
the new session's life once the assignment gives it to another member."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from aio_cluster import ConsumerGroup, CoordinationError, CoordinationTimeout
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout
from aio_cluster.zookeeper.values import Create, Op, SessionState, Stat

from conftest import MakeTopic
from support import member, settled, wait_until

pytestmark = pytest.mark.asyncio


class Held:
    """Wraps a client's ``transaction``: the transactions that create an owner node of
    ``partitions`` wait for ``gate`` before they go to the server (the first ``limit`` of them),
    as a request kazoo queues while it reconnects does."""

    def __init__(
        self, zk: ZooKeeper, layout: GroupLayout, partitions: Sequence[int], limit: int
    ) -> None:
        self._transaction: Callable[[Sequence[Op]], Awaitable[list[Stat | None]]]
        self._transaction = zk.transaction
        self._owners = {layout.owner(p) for p in partitions}
        self._limit = limit
        self.reached = asyncio.Event()
        self.gate = asyncio.Event()
        self.sent = asyncio.Event()
        """Set once a held transaction was answered (or failed)."""

    async def __call__(self, ops: Sequence[Op]) -> list[Stat | None]:
        creates = {op.path for op in ops if isinstance(op, Create)}
        if self._limit <= 0 or not creates & self._owners:
            return await self._transaction(ops)
        self._limit -= 1
        self.reached.set()
        await self.gate.wait()
        try:
            return await self._transaction(ops)
        finally:
            self.sent.set()


class QueuedAcrossExpiry:
    """Wraps a client's ``transaction``: the first one that creates the owner node of
    ``partition`` times out on the client but stays queued, as kazoo keeps a request made while
    it reconnects; every other transaction of that session times out too (the server is out of
    reach); the first one of the next session sends the queued one first, as kazoo does."""

    def __init__(self, zk: ZooKeeper, layout: GroupLayout, partition: int) -> None:
        self._zk = zk
        self._transaction: Callable[[Sequence[Op]], Awaitable[list[Stat | None]]]
        self._transaction = zk.transaction
        self._owner = layout.owner(partition)
        self._queued: Sequence[Op] | None = None
        self.session: int | None = None
        """The session whose create was queued."""
        self.sent = asyncio.Event()
        self.failure: CoordinationError | None = None
        """What the queued create met on the next session, if it failed."""

    async def __call__(self, ops: Sequence[Op]) -> list[Stat | None]:
        if self.session is None:
            if any(isinstance(op, Create) and op.path == self._owner for op in ops):
                self._queued, self.session = ops, self._zk.session_id
                raise CoordinationTimeout("injected: the create waits in kazoo's queue")
            return await self._transaction(ops)
        if self._zk.session_id in (None, self.session) or self._zk.state is not (
            SessionState.CONNECTED
        ):
            # Still the old session, or between the two (kazoo fails a request of an expired
            # session it has not replaced yet): out of reach until the next one is connected.
            raise CoordinationTimeout("injected: ZooKeeper out of reach")
        if self._queued is not None:
            queued, self._queued = self._queued, None
            try:
                await self._transaction(queued)
            except CoordinationError as exc:
                self.failure = exc
            self.sent.set()
        return await self._transaction(ops)


def has_new_session(group: ConsumerGroup, old: int) -> bool:
    zk = group._member.parts.zk
    return zk.state is SessionState.CONNECTED and zk.session_id not in (None, old)


async def registered(zk: ZooKeeper, layout: GroupLayout, member_id: str) -> bool:
    return await zk.exists(layout.member(member_id)) is not None


async def test_an_owner_node_made_on_the_next_session_is_given_back(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ "b" claims partition 0; its create waits while its session expires and is sent on the
    next one, where it makes the node. The range strategy then gives partition 0 to "a", which
    joined meanwhile: "a" gets it (before, the node stayed with "b"'s new session, which never
    deleted it, and "a" waited for it for ever)."""
    topic = await make_topic(2)
    layout = GroupLayout(group_name, topic)
    options: dict[str, Any] = {"strategy": "range", "claim_timeout": 2.0}
    second = member(cluster, group_name, topic, member_name="b", **options)
    first = member(cluster, group_name, topic, member_name="a", **options)
    held = Held(second._member.parts.zk, layout, [0], limit=1)
    monkeypatch.setattr(second._member.parts.zk, "transaction", held)
    # "a" claims nothing until "b"'s create was sent: its claims wait too.
    waiting = Held(first._member.parts.zk, layout, [0, 1], limit=1_000)
    monkeypatch.setattr(first._member.parts.zk, "transaction", waiting)
    joins: list[asyncio.Task[None]] = []
    try:
        joins.append(asyncio.create_task(second.register()))
        await wait_until(held.reached.is_set, what="b's claim of partition 0 is held")
        old = second._member.parts.zk.session_id
        password = second._member.parts.zk.session_password
        assert old is not None
        assert password is not None
        await cluster.expire_session(old, password)
        await wait_until(lambda: has_new_session(second, old), what="b has a new session")
        assert second._member.parts.membership._rebalancer._epoch >= 1, "b heard of the loss"

        joins.append(asyncio.create_task(first.register()))
        # Registered, "a" is given partition 0 by the range strategy, and "b" partition 1.
        await wait_until(lambda: registered(zk, layout, "a"), what="a registered")
        held.gate.set()
        await wait_until(held.sent.is_set, what="b's create was sent on its new session")
        waiting.gate.set()

        await wait_until(lambda: first.claimed == [0], what="a owns partition 0")
        await wait_until(lambda: settled(zk, [first, second]), what="the group settled")
        assert second.claimed == [1]
    finally:
        held.gate.set()
        waiting.gate.set()
        await asyncio.gather(*joins, return_exceptions=True)
        await asyncio.gather(first.close(), second.close())


async def test_an_owner_node_made_by_a_create_that_timed_out_is_reconciled_on_the_next_session(
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    group_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ "b"'s create of partition 0 times out on the client and is sent on its next session,
    where it makes the node; meanwhile "a" joined, and the range strategy gives it partition 0.
    "b"'s reconciliation deletes the node and "a" gets partition 0 (before, the doubt was kept
    for the session of the time-out only, dropped on the next one, and "a" waited for ever)."""
    topic = await make_topic(2)
    layout = GroupLayout(group_name, topic)
    options: dict[str, Any] = {"strategy": "range", "claim_timeout": 2.0}
    second = member(cluster, group_name, topic, member_name="b", **options)
    first = member(cluster, group_name, topic, member_name="a", **options)
    # The fence made beforehand, as an earlier claim of the partition would have: the queued
    # transaction is then the claim's one (it bumps the fence).
    await zk.ensure_path(layout.fence(0))
    queued = QueuedAcrossExpiry(second._member.parts.zk, layout, 0)
    monkeypatch.setattr(second._member.parts.zk, "transaction", queued)
    waiting = Held(first._member.parts.zk, layout, [0, 1], limit=1_000)
    monkeypatch.setattr(first._member.parts.zk, "transaction", waiting)
    joins: list[asyncio.Task[None]] = []
    try:
        joins.append(asyncio.create_task(second.register()))
        await wait_until(lambda: queued.session is not None, what="b's create of 0 timed out")
        joins.append(asyncio.create_task(first.register()))
        # Registered, "a" is given partition 0 by the range strategy, and "b" partition 1.
        await wait_until(lambda: registered(zk, layout, "a"), what="a registered")
        old, password = queued.session, second._member.parts.zk.session_password
        assert old is not None
        assert password is not None
        await cluster.expire_session(old, password)
        await wait_until(queued.sent.is_set, what="the queued create sent on b's next session")
        assert queued.failure is None, "the queued create made the node"
        await wait_until(lambda: second.claimed == [1], what="b owns partition 1")
        waiting.gate.set()
        await wait_until(lambda: first.claimed == [0], what="a owns partition 0")
        await wait_until(lambda: settled(zk, [first, second]), what="the group settled")
    finally:
        waiting.gate.set()
        await asyncio.gather(*joins, return_exceptions=True)
        await asyncio.gather(first.close(), second.close())
