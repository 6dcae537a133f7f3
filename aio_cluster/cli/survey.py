"""The reads and writes of the ``aio-cluster`` command in ZooKeeper: a group's members, claims
and stored offsets, and a reset's offsets. Small calls, each one thing; what the command makes of
them is computed in `aio_cluster.cli.plans`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..errors import ConfigurationError, CoordinationError
from ..zookeeper.client import Create, NoNodeError, SetData, ZooKeeper
from ..zookeeper.layout import GroupLayout, MemberInfo, decode_member, decode_offset
from .plans import Stored, Unreadable

__all__ = [
    "group_topics",
    "list_groups",
    "read_members",
    "read_owners",
    "read_stored",
    "require_group",
    "write_offsets",
]

_ROOT = "/consumers"


async def _children(zk: ZooKeeper, path: str) -> list[str]:
    try:
        return sorted(await zk.get_children(path))
    except NoNodeError:
        return []


async def list_groups(zk: ZooKeeper) -> list[str]:
    """The names of the groups under ``/consumers``, sorted."""
    return await _children(zk, _ROOT)


async def require_group(zk: ZooKeeper, group: str) -> None:
    """Check that the group exists, so that a mistyped name is named rather than shown empty.

    Raises:
        ConfigurationError: the name is not valid, or there is no such group in ZooKeeper.
    """
    GroupLayout(group, "-")  # the group name's own check, with its message
    if await zk.exists(f"{_ROOT}/{group}") is None:
        raise ConfigurationError(
            f"group {group!r} does not exist in ZooKeeper (no {_ROOT}/{group})"
        )


async def read_members(zk: ZooKeeper, group: str) -> dict[str, MemberInfo | None]:
    """The registered members by id; None for a registration that cannot be read."""
    ids = f"{_ROOT}/{group}/ids"
    members: dict[str, MemberInfo | None] = {}
    for member in await _children(zk, ids):
        try:
            data, _stat = await zk.get(f"{ids}/{member}")
        except NoNodeError:
            continue  # it left meanwhile
        try:
            members[member] = decode_member(data)
        except CoordinationError:
            members[member] = None
    return members


async def group_topics(
    zk: ZooKeeper, group: str, members: Iterable[MemberInfo | None]
) -> list[str]:
    """The topics the group has offsets or claims of, or members subscribed to, sorted."""
    topics = set(await _children(zk, f"{_ROOT}/{group}/offsets"))
    topics.update(await _children(zk, f"{_ROOT}/{group}/owners"))
    for info in members:
        if info is not None:
            topics.update(info.topics)
    return sorted(topics)


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
    stored: dict[int, Stored] = {}
    for name in await _children(zk, layout.offsets):
        if not name.isdigit():
            continue
        path = f"{layout.offsets}/{name}"
        try:
            data, _stat = await zk.get(path)
        except NoNodeError:
            continue
        try:
            stored[int(name)] = decode_offset(path, data)
        except CoordinationError:
            stored[int(name)] = Unreadable(data)
    return stored


async def write_offsets(
    zk: ZooKeeper, layout: GroupLayout, offsets: Mapping[int, int], existing: Iterable[int]
) -> None:
    """Store ``offsets`` in one transaction: all of them or none.

    Args:
        zk: the client.
        layout: the group and topic.
        offsets: partition -> the next offset to store.
        existing: the partitions that have an offset node already (overwritten; the others are
            created).
    """
    await zk.ensure_path(layout.offsets)
    present = set(existing)
    ops: list[Create | SetData] = []
    for partition, offset in sorted(offsets.items()):
        data = str(offset).encode()
        path = layout.offset(partition)
        ops.append(SetData(path, data) if partition in present else Create(path, data))
    await zk.transaction(ops)
