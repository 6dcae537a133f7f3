"""Members that follow their share, against the real servers: a join wakes only the members whose
share it changes, and none of them reads the registrations or the whole target; the members that
stay keep their claims; the leader's departure wakes its deputy, and the next member becomes
deputy by its share; a newcomer reads the roster, not every registration, unless the roster is
missing or no longer holds."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from aio_cluster import ConsumerGroup, Strategy
from aio_cluster.assign.shares import SHARES_PROTOCOL, Share, shares_of
from aio_cluster.assign.target import StickyTarget
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import NoNodeError, ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout, decode_share, decode_target
from aio_cluster.zookeeper.roster import Roster, decode_roster, encode_roster

from conftest import MakeTopic
from support import member, owners, wait_until

pytestmark = pytest.mark.asyncio

PARTITIONS = 8

_READS = ("get", "exists", "get_children", "get_children_version")
_WRITES = ("create", "set", "delete", "ensure_path")


class Requests:
    """The paths of the requests a member's ZooKeeper client sends, from its creation on (each
    method replaced by one that notes the path first, on this client only), but the heartbeat's
    pings (``exists("/")``, sent whenever the server answered nothing for a while): they read
    nothing of the group, and a loaded machine sends them in any window."""

    def __init__(self, zk: ZooKeeper) -> None:
        self.paths: list[str] = []
        for name in (*_READS, *_WRITES):
            setattr(zk, name, self._noting(getattr(zk, name), ping=name == "exists"))
        transaction = zk.transaction

        async def noted_transaction(ops: Any) -> Any:
            self.paths.extend(op.path for op in ops)
            return await transaction(ops)

        zk.transaction = noted_transaction  # type: ignore[method-assign]

    def _noting(
        self, method: Callable[..., Awaitable[Any]], *, ping: bool
    ) -> Callable[..., Awaitable[Any]]:
        async def noted(path: str, *args: Any, **kwargs: Any) -> Any:
            if not (ping and path == "/"):
                self.paths.append(path)
            return await method(path, *args, **kwargs)

        return noted

    def since(self, mark: int) -> list[str]:
        return self.paths[mark:]


async def published(zk: ZooKeeper, layout: GroupLayout) -> StickyTarget | None:
    try:
        return decode_target((await zk.get(layout.assignment))[0])
    except NoNodeError:
        return None


async def share_nodes(zk: ZooKeeper, layout: GroupLayout) -> dict[str, Share]:
    found = {}
    for name in await zk.get_children(layout.shares):
        found[name] = decode_share((await zk.get(layout.share(name)))[0])[1]
    return found


async def settled_on(zk: ZooKeeper, layout: GroupLayout, ids: list[str]) -> bool:
    """The target counts exactly ``ids`` (oldest first), the share nodes say what it does, and
    every claim node names the member the target gives the partition."""
    target = await published(zk, layout)
    if target is None or list(target.members) != ids:
        return False
    if await share_nodes(zk, layout) != shares_of(target):
        return False
    return await owners(zk, layout, range(PARTITIONS)) == target.owners


async def claim_zxids(zk: ZooKeeper, layout: GroupLayout) -> dict[int, int]:
    """partition -> its claim node's creation zxid: a claim made again gets a new one."""
    return {p: (await zk.get(layout.owner(p)))[1].czxid for p in range(PARTITIONS)}


@contextlib.asynccontextmanager
async def group_of(
    cluster: LocalCluster, group: str, topic: str, count: int
) -> AsyncIterator[list[tuple[ConsumerGroup, Requests]]]:
    """``count`` members joined one after another (oldest first), each with its requests
    noted."""
    async with contextlib.AsyncExitStack() as stack:
        members = []
        for _ in range(count):
            joining, requests = noted(cluster, group, topic)
            members.append((await stack.enter_async_context(joining), requests))
        yield members


def noted(cluster: LocalCluster, group: str, topic: str) -> tuple[ConsumerGroup, Requests]:
    """A member not started yet, and its ZooKeeper requests, noted from its start."""
    joining = member(cluster, group, topic)
    return joining, Requests(joining._member.parts.zk)


def moved(before: StickyTarget, after: StickyTarget, member_id: str) -> bool:
    return before.partitions_of(member_id) != after.partitions_of(member_id)


def private(paths: list[str], layout: GroupLayout, member_id: str) -> list[str]:
    """The paths of ``paths`` that are not the member's own share or a partition's claim, fence
    or offset: the registrations and the whole target."""
    own = (layout.share(member_id), layout.owners, layout.fences, layout.offsets)
    return [path for path in paths if not path.startswith(own)]


async def test_a_join_wakes_only_the_members_whose_share_changes(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(PARTITIONS)
    layout = GroupLayout(group_name, topic)
    async with group_of(cluster, group_name, topic, 4) as members:
        ids = [group.id for group, _requests in members]
        await wait_until(lambda: settled_on(zk, layout, ids), what="four settle")
        before = await published(zk, layout)
        assert before is not None
        claims = await claim_zxids(zk, layout)
        marks = [len(requests.paths) for _group, requests in members]
        async with member(cluster, group_name, topic) as newcomer:
            await wait_until(
                lambda: settled_on(zk, layout, [*ids, newcomer.id]), what="five settle"
            )
            after = await published(zk, layout)
            assert after is not None
            followers = list(zip(members, marks, strict=True))[2:]  # not the leader, nor deputy
            for (group, requests), mark in followers:
                sent = requests.since(mark)
                assert private(sent, layout, group.id) == [], (
                    f"follower {group.id} read the registrations or the whole target: {sent}"
                )
                if not moved(before, after, group.id):
                    assert sent == [], f"follower {group.id} kept its share but sent {sent}"
            assert any(not moved(before, after, g.id) for (g, _r), _m in followers), (
                "every follower moved: the test did not show a stayer"
            )
            # A follower knows the topic's partitions from its share, asking Kafka nothing.
            everyone = [group for group, _requests in members] + [newcomer]
            assert all(group.partitions == list(range(PARTITIONS)) for group in everyone)
            again = await claim_zxids(zk, layout)
            kept = [p for p in range(PARTITIONS) if after.owners[p] == before.owners[p]]
            assert {p: again[p] for p in kept} == {p: claims[p] for p in kept}, (
                "a partition that stayed was claimed again"
            )


async def test_the_leaders_departure_wakes_its_deputy_and_names_the_next(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(PARTITIONS)
    layout = GroupLayout(group_name, topic)
    async with group_of(cluster, group_name, topic, 4) as members:
        ids = [group.id for group, _requests in members]
        await wait_until(lambda: settled_on(zk, layout, ids), what="four settle")
        shares = await share_nodes(zk, layout)
        assert [m for m in ids if shares[m].deputy] == [ids[1]]
        (leader, _), (deputy, _), (third, third_requests), (_fourth, fourth_requests) = members
        marks = [len(third_requests.paths), len(fourth_requests.paths)]
        await leader.close()
        await wait_until(lambda: settled_on(zk, layout, ids[1:]), what="three settle")
        shares = await share_nodes(zk, layout)
        assert [m for m in ids[1:] if shares[m].deputy] == [third.id], "no new deputy"
        # Named by its share, the third member watches the registrations from then on.
        await wait_until(
            lambda: layout.ids in third_requests.since(marks[0]),
            what="the new deputy reads the registrations",
        )
        assert private(fourth_requests.since(marks[1]), layout, ids[3]) == [], (
            "the youngest read the registrations or the whole target"
        )
        assert deputy.claimed, "the new leader holds nothing"


async def test_a_share_deleted_by_hand_keeps_its_partitions_and_is_written_again(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(PARTITIONS)
    layout = GroupLayout(group_name, topic)
    async with group_of(cluster, group_name, topic, 4) as members:
        ids = [group.id for group, _requests in members]
        await wait_until(lambda: settled_on(zk, layout, ids), what="four settle")
        third = members[2][0]
        held = sorted(third.claimed)
        claims = await claim_zxids(zk, layout)
        rebalances = third._member.parts.membership.rebalances
        await zk.delete(layout.share(third.id))
        await wait_until(
            lambda: third._member.parts.membership.rebalances > rebalances,
            what="the third rebalances",
        )
        assert sorted(third.claimed) == held, "a member lost its partitions with its share"
        assert await claim_zxids(zk, layout) == claims
        # The next change that touches the missing share (here its member's leave) fails the
        # leader's transaction: it lists the shares and writes them all.
        await third.close()
        await wait_until(
            lambda: settled_on(zk, layout, [ids[0], ids[1], ids[3]]), what="three settle"
        )


def registrations_read(paths: list[str], layout: GroupLayout, member_id: str) -> list[str]:
    """The paths of ``paths`` that are other members' registrations."""
    return [p for p in paths if p.startswith(f"{layout.ids}/") and p != layout.member(member_id)]


async def test_a_newcomer_reads_the_roster_not_every_registration(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(PARTITIONS)
    layout = GroupLayout(group_name, topic)
    async with group_of(cluster, group_name, topic, 4) as members:
        ids = [group.id for group, _requests in members]
        await wait_until(lambda: settled_on(zk, layout, ids), what="four settle")
        roster = decode_roster((await zk.get(layout.roster))[0])
        assert [m for m, _ in sorted(roster.members.items(), key=lambda i: i[1][1])] == ids
        assert all(info.protocol == SHARES_PROTOCOL for info, _ in roster.members.values())
        joining, requests = noted(cluster, group_name, topic)
        async with joining as newcomer:
            await wait_until(
                lambda: settled_on(zk, layout, [*ids, newcomer.id]), what="five settle"
            )
            # The roster, written before it registered, lacked only its own registration; of
            # the others' it touched only its predecessor's (the watch).
            read = registrations_read(requests.paths, layout, newcomer.id)
            assert set(read) == {layout.member(ids[-1])}, read
            assert layout.roster in requests.paths


@pytest.mark.parametrize("roster", ["missing", "stale"])
async def test_a_newcomer_reads_every_registration_without_a_roster_that_holds(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str, roster: str
) -> None:
    topic = await make_topic(PARTITIONS)
    layout = GroupLayout(group_name, topic)
    async with group_of(cluster, group_name, topic, 3) as members:
        ids = [group.id for group, _requests in members]
        await wait_until(lambda: settled_on(zk, layout, ids), what="three settle")
        if roster == "missing":  # as an older leader leaves it
            await zk.delete(layout.roster)
        else:
            # A roster whose child version says a registration was made again since: it must
            # not be trusted, though here it would make the leader a range member (refused).
            written = decode_roster((await zk.get(layout.roster))[0])
            first, (info, czxid) = min(written.members.items(), key=lambda i: i[1][1])
            lying = {**written.members, first: (replace(info, strategy=Strategy.RANGE), czxid)}
            stale = Roster(written.ids_version - 2, written.names, lying)
            data = encode_roster(stale)
            assert data is not None
            await zk.set(layout.roster, data)
        joining, requests = noted(cluster, group_name, topic)
        async with joining as newcomer:
            await wait_until(
                lambda: settled_on(zk, layout, [*ids, newcomer.id]), what="four settle"
            )
            read = registrations_read(requests.paths, layout, newcomer.id)
            assert set(read) == {layout.member(m) for m in ids}, read
