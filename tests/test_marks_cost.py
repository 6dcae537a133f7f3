"""What the marks cost a group that reads (against the real servers): nothing at rest, and
nothing for a change of members. Only the members that compute a target read the marks, once
per session and again only when a watch fired; a member writes its mark only when what it
cannot read changes, so a group that reads never writes one."""

from __future__ import annotations

import asyncio

import pytest
from test_shares_group import Requests

from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import marks_path

from conftest import MakeTopic
from support import member, settled, wait_until

pytestmark = pytest.mark.asyncio


async def test_marks_cost_nothing_at_rest_nor_for_a_change_of_members(
    cluster: LocalCluster, zk: ZooKeeper, make_topic: MakeTopic, group_name: str
) -> None:
    topic = await make_topic(6)
    marks = marks_path(group_name)
    members = [member(cluster, group_name, topic, fetch_timeout=2.0) for _ in range(3)]
    noted = [Requests(group._member.parts.zk) for group in members]
    async with members[0], members[1], members[2]:
        await wait_until(lambda: settled(zk, members), what="three settle")
        # The leader (and its deputy) read the marks once, at their first target.
        first = [sum(path.startswith(marks) for path in n.paths) for n in noted]
        assert first[2] == 0, "a member that follows its share read the marks"
        assert first[0] <= 2, first
        at_rest = [len(n.paths) for n in noted]
        await asyncio.sleep(3 * 2.0)  # past fetch_timeout: an idle partition is readable
        # Only the heartbeat's pings (an exists() of the root) go out.
        asked = [n.since(b) for n, b in zip(noted, at_rest, strict=True)]
        assert [[p for p in paths if p != "/"] for paths in asked] == [[]] * 3
        newcomer = member(cluster, group_name, topic, fetch_timeout=2.0)
        newcomer_noted = Requests(newcomer._member.parts.zk)
        async with newcomer:
            await wait_until(lambda: settled(zk, [*members, newcomer]), what="four settle")
        await wait_until(lambda: settled(zk, members), what="three settle again")
        for n, before in zip(noted, at_rest, strict=True):
            assert not [p for p in n.since(before) if p.startswith(marks)], (
                "a change of members read or wrote the marks again"
            )
        assert not [p for p in newcomer_noted.paths if p.startswith(marks)]
        assert await zk.exists(marks) is None, "a group that reads wrote a mark"
