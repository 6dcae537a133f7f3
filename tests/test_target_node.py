"""The published target's node as one member reads it, against the real ZooKeeper: a target read
or written here is not decoded again while its node is as it was, and a node written since, or
deleted and made again (its version back at 0), is read afresh."""

from __future__ import annotations

import uuid

import pytest

from aio_cluster.assign.target import StickyTarget, next_target
from aio_cluster.member.protocol import target_node
from aio_cluster.member.protocol.target_node import TargetNode
from aio_cluster.zookeeper import layout
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout, encode_target

pytestmark = pytest.mark.asyncio

MEMBERS = ["m0", "m1"]
PARTITIONS = range(6)


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the target nodes the module decodes, in order."""
    seen: list[int] = []
    decode = layout.decode_target_node

    def noted(data: bytes) -> tuple[StickyTarget, bool]:
        seen.append(len(data))
        return decode(data)

    monkeypatch.setattr(target_node, "decode_target_node", noted)
    return seen


def target(version: int, members: list[str]) -> StickyTarget:
    made = next_target(None, PARTITIONS, members, {})
    assert made is not None
    return StickyTarget(version, made.members, made.owners)


def all_to_m0(version: int) -> StickyTarget:
    return StickyTarget(version, tuple(MEMBERS), dict.fromkeys(PARTITIONS, "m0"))


def woken() -> None:
    """The members' ``on_change``: these tests follow no change by watch."""


async def test_the_leader_reads_back_its_own_write_without_decoding_it(
    zk: ZooKeeper, decodes: list[int]
) -> None:
    leader = TargetNode(zk, GroupLayout(f"g-{uuid.uuid4().hex[:8]}", "topic"), "m0")
    first = await leader.follow(MEMBERS, PARTITIONS, woken)
    assert first is not None
    assert first.members == tuple(MEMBERS)
    assert decodes == []  # none published before: nothing to decode
    # Made by a Create, its node's czxid is not known: the first read decodes it ...
    assert await leader.follow(MEMBERS, PARTITIONS, woken) == first
    assert len(decodes) == 1
    # ... and no read after it, while nothing changed.
    assert await leader.follow(MEMBERS, PARTITIONS, woken) == first
    assert len(decodes) == 1
    # A write of its own (a member more): read back without decoding.
    second = await leader.follow([*MEMBERS, "m2"], PARTITIONS, woken)
    assert second is not None
    assert second.version == first.version + 1
    assert await leader.follow([*MEMBERS, "m2"], PARTITIONS, woken) == second
    assert len(decodes) == 1
    leader.close()


async def test_a_node_written_or_made_again_since_is_read_afresh(
    zk: ZooKeeper, decodes: list[int]
) -> None:
    paths = GroupLayout(f"g-{uuid.uuid4().hex[:8]}", "topic")
    await zk.ensure_path(paths.assignment.rsplit("/", 1)[0])
    await zk.create(paths.assignment, encode_target(target(0, MEMBERS)))
    follower = TargetNode(zk, paths, "m1")
    assert await follower.follow(MEMBERS, PARTITIONS, woken) == target(0, MEMBERS)
    assert await follower.follow(MEMBERS, PARTITIONS, woken) == target(0, MEMBERS)
    assert len(decodes) == 1

    # Written by another member: decoded.
    await zk.set(paths.assignment, encode_target(target(1, MEMBERS)))
    assert await follower.follow(MEMBERS, PARTITIONS, woken) == target(1, MEMBERS)
    assert len(decodes) == 2

    # Deleted and made again, and written once: at version 1 again, but another node, with
    # another target.
    await zk.delete(paths.assignment)
    await zk.create(paths.assignment, encode_target(all_to_m0(0)))
    await zk.set(paths.assignment, encode_target(all_to_m0(1)))
    assert await follower.follow(MEMBERS, PARTITIONS, woken) == all_to_m0(1)
    assert len(decodes) == 3
    follower.close()
