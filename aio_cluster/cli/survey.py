"""The reads and writes of the ``aio-cluster`` command in ZooKeeper: a group's members, claims
and stored offsets, and a reset's offsets. Small calls, each one thing; what the command makes of
them is computed in `aio_cluster.cli.plans`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..errors import ConfigurationError, CoordinationError
from ..zookeeper.client import (
    BadVersionError,
    Create,
    NodeExistsError,
    NoNodeError,
    Op,
    SetData,
    ZooKeeper,
)
from ..zookeeper.layout import (
    ROOT,
    GroupLayout,
    Registration,
    check_name,
    decode_offset,
    decode_registration,
    group_path,
    ids_path,
    member_path,
    offsets_path,
    owners_path,
)
from .plans import Stored, Unreadable, topic_name

__all__ = [
    "RESET_FENCE_DATA",
    "ensure_fences",
    "group_topics",
    "list_groups",
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


async def read_owners(zk: ZooKeeper, layout: GroupLayout) -> dict[int, str]:
    """partition -> the member id its claim node holds."""
    owners = {}
    for name in await _children(zk, layout.owners):
        if not name.isdigit():
            continue
        try:
            data, _stat = await zk.get(f"{layout.owners}/{name}")
        except NoNodeError:
            continue  # released meanwhile
        owners[int(name)] = data.decode(errors="replace")
    return owners


async def read_stored(zk: ZooKeeper, layout: GroupLayout) -> dict[int, Stored]:
    """partition -> what its offset node holds (partitions without a node are left out)."""
    return {p: stored for p, (stored, _version) in (await read_offset_nodes(zk, layout)).items()}


async def read_offset_nodes(zk: ZooKeeper, layout: GroupLayout) -> dict[int, tuple[Stored, int]]:
    """partition -> what its offset node holds, and the node's version (partitions without a
    node are left out)."""
    stored: dict[int, tuple[Stored, int]] = {}
    for name in await _children(zk, layout.offsets):
        if not name.isdigit():
            continue
        path = f"{layout.offsets}/{name}"
        try:
            data, stat = await zk.get(path)
        except NoNodeError:
            continue
        try:
            stored[int(name)] = (decode_offset(path, data), stat.version)
        except CoordinationError:
            stored[int(name)] = (Unreadable(data), stat.version)
    return stored


async def ensure_fences(zk: ZooKeeper, layout: GroupLayout, partitions: Iterable[int]) -> None:
    """Create the claim fences of ``partitions`` that do not exist yet, so that a reset can bump
    them whatever claims happen meanwhile (see `aio_cluster.member.claiming`)."""
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
