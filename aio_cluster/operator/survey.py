"""An operator's reads and writes in ZooKeeper (the command's and the dashboard's): a group's
members, claims and stored offsets, and a reset's offsets. Small calls, each one thing; what is
made of them is computed in `aio_cluster.operator.plans`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

import anyio
import anyio.abc

from ..assign.marks import Mark
from ..errors import ConfigurationError, CoordinationError
from ..zookeeper.client import BadVersionError, NodeExistsError, NoNodeError, ZooKeeper
from ..zookeeper.layout import (
    ROOT,
    GroupLayout,
    Registration,
    check_name,
    decode_mark,
    decode_offset,
    decode_registration,
    group_path,
    ids_path,
    marks_path,
    member_path,
    offsets_path,
    owners_path,
    partition_named,
    topic_name,
)
from ..zookeeper.values import Create, Op, SetData, Stat
from .plans import Stored, Unreadable

__all__ = [
    "RESET_FENCE_DATA",
    "ensure_fences",
    "group_topics",
    "list_groups",
    "read_marks",
    "read_members",
    "read_offset_nodes",
    "read_owners",
    "read_stored",
    "require_group",
    "write_offsets",
]

RESET_FENCE_DATA = b"aio-cluster reset-offsets"
"""What a reset writes into the fences it bumps (a claim writes its member id)."""


async def _children(zk: ZooKeeper, path: str) -> list[str]:
    try:
        return sorted(await zk.get_children(path))
    except NoNodeError:
        return []


async def list_groups(zk: ZooKeeper) -> list[str]:
    """The names of the groups under ``/consumers``, sorted."""
    return await _children(zk, ROOT)


async def require_group(zk: ZooKeeper, group: str) -> None:
    """Check that the group exists, so that a mistyped name is named rather than shown empty.

    Raises:
        ConfigurationError: the name is not valid, or there is no such group in ZooKeeper.
    """
    check_name("group", group)
    if await zk.exists(group_path(group)) is None:
        raise ConfigurationError(
            f"group {group!r} does not exist in ZooKeeper (no {group_path(group)})"
        )


async def read_members(zk: ZooKeeper, group: str) -> dict[str, Registration | None]:
    """The registered members by id; None for a registration that cannot be read."""
    members: dict[str, Registration | None] = {}
    for member in await _children(zk, ids_path(group)):
        try:
            data, _stat = await zk.get(member_path(group, member))
        except NoNodeError:
            continue  # it left meanwhile
        try:
            members[member] = decode_registration(data)
        except CoordinationError:
            members[member] = None
    return members


async def group_topics(
    zk: ZooKeeper, group: str, members: Iterable[Registration | None]
) -> list[str]:
    """The topics the group has offsets or claims of, or members subscribed to by name, sorted
    (a pattern member's topics are those it claimed). A node whose name cannot be a topic is
    no topic."""
    topics = set(await _children(zk, offsets_path(group)))
    topics.update(await _children(zk, owners_path(group)))
    for info in members:
        if info is not None:
            topics.update(info.topics)
    return sorted(topic for topic in topics if topic_name(topic))


_IN_FLIGHT = 256
"""Node reads of one listing sent at once: one after another, a group of 10,000 partitions took
a round trip per node (36 s for its owners and offsets); kazoo sends these on its one connection
without waiting for each answer."""


async def _read_nodes(zk: ZooKeeper, parent: str) -> dict[int, tuple[bytes, Stat]]:
    """partition -> the data and stat of each numbered child of ``parent`` (those gone meanwhile
    left out), read `_IN_FLIGHT` at a time."""
    names = [name for name in await _children(zk, parent) if partition_named(name) is not None]
    found: dict[int, tuple[bytes, Stat]] = {}

    failed: list[Exception] = []

    async def read(name: str, reads: anyio.abc.TaskGroup) -> None:
        try:
            with contextlib.suppress(NoNodeError):  # released or deleted meanwhile
                found[int(name)] = await zk.get(f"{parent}/{name}")
        except Exception as exc:  # the first failure ends the others, raised as itself
            failed.append(exc)
            reads.cancel_scope.cancel()

    for start in range(0, len(names), _IN_FLIGHT):
        async with anyio.create_task_group() as reads:
            for name in names[start : start + _IN_FLIGHT]:
                reads.start_soon(read, name, reads)
        if failed:
            raise failed[0]
    return dict(sorted(found.items()))


async def read_marks(zk: ZooKeeper, group: str) -> tuple[dict[str, Mark], list[str]]:
    """member -> the mark of each member that cannot read (see docs/operating.md), and a note
    for each mark node that holds something else."""
    marks: dict[str, Mark] = {}
    notes: list[str] = []
    parent = marks_path(group)
    for member in await _children(zk, parent):
        try:
            data, _stat = await zk.get(f"{parent}/{member}")
        except NoNodeError:
            continue  # cleared meanwhile: it reads again
        try:
            marks[member] = decode_mark(data)
        except CoordinationError:
            notes.append(f"mark node {parent}/{member} holds {data[:40]!r}, not a mark")
    return marks, notes


async def read_owners(zk: ZooKeeper, layout: GroupLayout) -> dict[int, str]:
    """partition -> the member id its claim node holds."""
    return {
        partition: data.decode(errors="replace")
        for partition, (data, _stat) in (await _read_nodes(zk, layout.owners)).items()
    }


async def read_stored(zk: ZooKeeper, layout: GroupLayout) -> dict[int, Stored]:
    """partition -> what its offset node holds (partitions without a node are left out)."""
    return {p: stored for p, (stored, _version) in (await read_offset_nodes(zk, layout)).items()}


async def read_offset_nodes(zk: ZooKeeper, layout: GroupLayout) -> dict[int, tuple[Stored, int]]:
    """partition -> what its offset node holds, and the node's version (partitions without a
    node are left out)."""
    stored: dict[int, tuple[Stored, int]] = {}
    for partition, (data, stat) in (await _read_nodes(zk, layout.offsets)).items():
        try:
            stored[partition] = (decode_offset(layout.offset(partition), data), stat.version)
        except CoordinationError:
            stored[partition] = (Unreadable(data), stat.version)
    return stored


async def ensure_fences(zk: ZooKeeper, layout: GroupLayout, partitions: Iterable[int]) -> None:
    """Create the claim fences of ``partitions`` that do not exist yet, so that a reset can bump
    them whatever claims happen meanwhile (see `aio_cluster.member.protocol.claiming`)."""
    await zk.ensure_path(layout.fences)
    for partition in partitions:
        await zk.ensure_path(layout.fence(partition))


async def write_offsets(
    zk: ZooKeeper,
    topics: Mapping[GroupLayout, tuple[Mapping[int, int], Mapping[int, int]]],
) -> bool:
    """Store the offsets of every topic in one transaction, all of them or none, that also bumps
    each partition's claim fence: a member that claimed any of them before can no longer store
    an offset of it (it claims again, from the new offset).

    Args:
        zk: the client.
        topics: the group and topic -> ``(offsets, versions)``: ``offsets`` maps each partition
            to the next offset to store (its fence must exist: `ensure_fences`); ``versions``
            maps it to the version of its offset node as the plan read it (partitions without a
            node are left out: their node is created).

    Returns:
        False when nothing was stored because an offset node changed since the plan read it (a
        member stored an offset meanwhile): the plan is out of date.
    """
    ops: list[Op] = []
    for layout, (offsets, versions) in topics.items():
        await zk.ensure_path(layout.offsets)
        for partition, offset in sorted(offsets.items()):
            data = str(offset).encode()
            path = layout.offset(partition)
            version = versions.get(partition)
            ops.append(Create(path, data) if version is None else SetData(path, data, version))
            ops.append(SetData(layout.fence(partition), RESET_FENCE_DATA))
    try:
        await zk.transaction(ops)
    except (BadVersionError, NodeExistsError, NoNodeError):
        return False
    return True
