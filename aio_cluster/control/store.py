"""A group's controls in ZooKeeper: what operators paused and asked to skip, which partitions
stopped, and the history of it all (`ControlStore`).

Every write is one ZooKeeper transaction with its history entries, and conditional: a pause
creates nodes that must not exist, a resume deletes the versions it read, a skip needs the
owner (and the stop) it read. So of two operators racing, the loser changes nothing and gets
[ControlConflictError][aio_cluster.ControlConflictError]. The history keeps the last
`HISTORY_KEPT` entries; each writer trims it after its write.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import anyio
from anyio.abc import TaskGroup

from ..errors import (
    AccessDeniedError,
    BadVersionError,
    ConfigurationError,
    ControlConflictError,
    CoordinationError,
    NodeExistsError,
    NoNodeError,
    SkipRefusedError,
)
from ..zookeeper.client import ZooKeeper
from ..zookeeper.layout import (
    GroupLayout,
    check_name,
    decode_offset,
    history_path,
    partition_named,
    paused_path,
    skips_path,
    stopped_path,
    stuck_path,
    topic_name,
)
from ..zookeeper.values import Check, Create, Delete, Op, Stat
from .model import (
    Action,
    ControlEvent,
    Controls,
    Key,
    Pause,
    Skip,
    Stopped,
    Stuck,
    decode_event,
    decode_pause,
    decode_skip,
    decode_stopped,
    decode_stuck,
    encode_event,
    encode_pause,
    encode_skip,
    encode_stopped,
    encode_stuck,
    format_at,
)

__all__ = ["HISTORY_KEPT", "UNREADABLE_BY", "ControlStore"]

log = logging.getLogger(__name__)

HISTORY_KEPT = 100
"""How many history entries a group keeps: the newest."""

T = TypeVar("T")


async def _together(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """The results of ``calls``, run at once (kazoo sends them on its one connection without
    waiting for each answer), in their order. The first failure cancels the others and is
    raised as itself, not in an exception group."""
    results: dict[int, T] = {}
    failed: list[Exception] = []

    async def run(index: int, call: Callable[[], Awaitable[T]], group: TaskGroup) -> None:
        try:
            results[index] = await call()
        except Exception as exc:
            failed.append(exc)
            group.cancel_scope.cancel()

    async with anyio.create_task_group() as group:
        for index, call in enumerate(calls):
            group.start_soon(run, index, call, group)
    if failed:
        raise failed[0]
    return [results[index] for index in range(len(calls))]


def _checked(partitions: Sequence[tuple[str, int]]) -> list[Key]:
    """The partitions, each once, in order; names and numbers checked."""
    keys: list[Key] = []
    for topic, partition in partitions:
        _check_partition(topic, partition)
        if (topic, partition) not in keys:
            keys.append((topic, partition))
    return keys


def _check_partition(topic: str, partition: int) -> None:
    check_name("topic", topic)
    if not _is_number(partition):
        raise ConfigurationError(f"partition {partition!r} of {topic} is not a partition number")


def _is_number(value: object) -> bool:
    """Whether ``value`` is a partition number or an offset: an int of at least 0."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class ControlStore:
    """Reads and writes of one group's controls (see `aio_cluster.zookeeper.layout` for the
    nodes). The command, the dashboard and the members share it.

    Bad input (a topic name that is not one, a negative partition or offset) raises
    [ConfigurationError][aio_cluster.ConfigurationError] before anything is written. That a
    group, topic or partition exists is for the caller to check: it knows Kafka's metadata.
    """

    def __init__(self, zookeeper: ZooKeeper, group: str) -> None:
        check_name("group", group)
        self._zk = zookeeper
        self.group = group
        self._warned: dict[str, str] = {}
        """The unreadable nodes the last read warned of -> what was wrong."""

    def _layout(self, topic: str) -> GroupLayout:
        return GroupLayout(self.group, topic)

    async def read(self) -> Controls:
        """The group's pauses, pending skips and stopped partitions, as they are now.

        A node that cannot be decoded is left out and named in `Controls.unreadable`, with a
        warning logged once per node and content (this store warns again only when it changes),
        so that a stranger's write blinds no reader to the other partitions' controls.

        Raises:
            CoordinationError: ZooKeeper could not be read.
        """
        unreadable: dict[str, str] = {}
        paused = await self._read_all(paused_path(self.group), decode_pause, unreadable)
        skips = await self._read_all(skips_path(self.group), decode_skip, unreadable)
        stopped = await self._read_all(stopped_path(self.group), decode_stopped, unreadable)
        for path, why in unreadable.items():
            if self._warned.get(path) != why:
                log.warning("control node %s left out: %s", path, why)
        self._warned = dict(unreadable)
        return Controls(paused=paused, skips=skips, stopped=stopped, unreadable=unreadable)

    async def _read_all(
        self,
        parent: str,
        decode: Callable[[str, int, bytes], T],
        unreadable: dict[str, str],
    ) -> dict[Key, T]:
        """The decoded nodes under ``parent`` by partition; the undecodable ones, and those
        whose ACL lets this session read nothing, go to ``unreadable``."""
        found: dict[Key, T] = {}
        async for topic, partitions in self._topics(parent, unreadable):
            paths = [f"{parent}/{topic}/{partition}" for partition in partitions]
            datas = await _together(
                [functools.partial(self._readable, path, unreadable) for path in paths]
            )
            for partition, path, got in zip(partitions, paths, datas, strict=True):
                if got is None:
                    continue  # deleted meanwhile, or not readable
                try:
                    found[(topic, partition)] = decode(topic, partition, got[0])
                except CoordinationError as exc:
                    unreadable[path] = str(exc)
        return found

    async def _topics(
        self, parent: str, unreadable: dict[str, str]
    ) -> AsyncIterator[tuple[str, list[int]]]:
        """Each topic under ``parent``, in order, with its partitions' numbers, sorted, listed
        when it comes (after the caller has dealt with the one before): the children that
        name no topic or partition go to ``unreadable``, as do the lists the ACL refuses."""
        for topic in sorted(await self._listed(parent, unreadable)):
            if not topic_name(topic):
                unreadable[f"{parent}/{topic}"] = f"{topic!r} is not a topic name"
                continue
            partitions: list[int] = []
            for name in sorted(await self._listed(f"{parent}/{topic}", unreadable)):
                partition = partition_named(name)
                if partition is None:
                    unreadable[f"{parent}/{topic}/{name}"] = f"{name!r} is not a partition number"
                else:
                    partitions.append(partition)
            yield topic, sorted(partitions)

    async def _listed(self, path: str, unreadable: dict[str, str]) -> list[str]:
        """The children of ``path``; none where it is missing or its ACL refuses the list
        (then named in ``unreadable``)."""
        try:
            return await self._children(path)
        except AccessDeniedError as exc:
            unreadable[path] = str(exc)
            return []

    async def _readable(self, path: str, unreadable: dict[str, str]) -> tuple[bytes, Stat] | None:
        """The node at ``path``; None where it is gone or its ACL refuses the read (then named
        in ``unreadable``)."""
        try:
            return await self._get(path)
        except AccessDeniedError as exc:
            unreadable[path] = str(exc)
            return None

    async def _children(self, path: str) -> list[str]:
        try:
            return await self._zk.get_children(path)
        except NoNodeError:
            return []

    async def _get(self, path: str) -> tuple[bytes, Stat] | None:
        try:
            return await self._zk.get(path)
        except NoNodeError:
            return None

    async def pause(self, partitions: Sequence[tuple[str, int]], by: str) -> list[Pause]:
        """Pause ``partitions`` for every member of the group until resumed.

        Returns:
            The pauses written: partitions paused already are left as they are.

        Raises:
            ConfigurationError: a topic or partition is not valid; nothing was written.
            ControlConflictError: another operator paused one of them meanwhile; nothing was
                written.
        """
        keys = _checked(partitions)
        now = time.time()
        stats = await _together(
            [functools.partial(self._zk.exists, self._layout(t).paused_node(p)) for t, p in keys]
        )
        pauses = [
            Pause(topic, p, by, now)
            for (topic, p), stat in zip(keys, stats, strict=True)
            if stat is None
        ]
        if not pauses:
            return []
        await self._parents([self._layout(pause.topic).paused for pause in pauses])
        ops: list[Op] = [
            Create(self._layout(pause.topic).paused_node(pause.partition), encode_pause(pause))
            for pause in pauses
        ]
        ops += [self.event(now, by, "pause", pause.topic, pause.partition) for pause in pauses]
        await self._write(ops, "pause")
        return pauses

    async def resume(self, partitions: Sequence[tuple[str, int]], by: str) -> list[Pause]:
        """Lift the operator's pause of ``partitions``.

        Returns:
            The pauses lifted, as they were: partitions not paused are left as they are. A
            pause node that cannot be read is lifted too, returned as by `UNREADABLE_BY`.

        Raises:
            ConfigurationError: a topic or partition is not valid; nothing was written.
            ControlConflictError: another operator resumed or paused one of them again
                meanwhile; nothing was written.
        """
        keys = _checked(partitions)
        now = time.time()
        nodes = await _together(
            [functools.partial(self._get, self._layout(t).paused_node(p)) for t, p in keys]
        )
        lifted: list[tuple[Pause, str, int]] = [
            (*_lifted(topic, p, got[0], now), got[1].version)
            for (topic, p), got in zip(keys, nodes, strict=True)
            if got is not None
        ]
        if not lifted:
            return []
        await self._parents([history_path(self.group)])
        ops: list[Op] = [
            Delete(self._layout(pause.topic).paused_node(pause.partition), version)
            for pause, _detail, version in lifted
        ]
        ops += [
            self.event(now, by, "resume", pause.topic, pause.partition, detail)
            for pause, detail, _version in lifted
        ]
        await self._write(ops, "resume")
        return [pause for pause, _detail, _version in lifted]

    async def request_skip(
        self, topic: str, partition: int, to_offset: int | None, by: str
    ) -> Skip:
        """Ask the owner of ``topic``/``partition`` to move past records: to ``to_offset``, or
        (None) just past the record ``on_failure="stop"`` stopped it on. The owner applies it at
        its next batch boundary, fenced by its claim (see `Skip`).

        Raises:
            ConfigurationError: the topic, partition or offset is not valid.
            SkipRefusedError: no member owns the partition; ``to_offset`` is at or before the
                stored offset (backwards), or at or before the record it is stopped on; no
                ``to_offset`` and the partition is not stopped.
            ControlConflictError: a skip is pending for the partition already, or its owner or
                stop changed while this one was written; nothing was written.
        """
        _check_partition(topic, partition)
        if to_offset is not None and not _is_number(to_offset):
            raise ConfigurationError(f"offset {to_offset!r} to skip to is not an offset")
        layout = self._layout(topic)
        where = f"{topic}/{partition}"
        owner, pending, stop, stored = await _together(
            [
                functools.partial(self._get, path)
                for path in (
                    layout.owner(partition),
                    layout.skip_node(partition),
                    layout.stopped_node(partition),
                    layout.offset(partition),
                )
            ]
        )
        if pending is not None:
            old = decode_skip(topic, partition, pending[0])
            raise ControlConflictError(
                f"a skip of {where} to offset {old.target} by {old.by} at {format_at(old.at)}"
                " is pending already; nothing changed"
            )
        if owner is None:
            raise SkipRefusedError(
                f"no member owns {where}: a skip is applied by the partition's owner"
            )
        stopped = None if stop is None else decode_stopped(topic, partition, stop[0])
        if to_offset is None and stopped is None:
            raise SkipRefusedError(
                f"{where} is not stopped on a record: name the offset to skip to"
            )
        if to_offset is not None:
            committed = (
                None if stored is None else decode_offset(layout.offset(partition), stored[0])
            )
            if committed is not None and to_offset <= committed:
                raise SkipRefusedError(
                    f"offset {to_offset} is not past {where}'s stored offset {committed}:"
                    " a skip only moves forward"
                )
            if stopped is not None and to_offset <= stopped.offset:
                raise SkipRefusedError(
                    f"offset {to_offset} is not past the record {where} is stopped on"
                    f" ({stopped.offset})"
                )
        now = time.time()
        skip = Skip(
            topic, partition, to_offset, None if stopped is None else stopped.offset, by, now
        )
        await self._parents([layout.skips])
        ops: list[Op] = [Check(layout.owner(partition), owner[1].version)]
        if stop is not None:
            ops.append(Check(layout.stopped_node(partition), stop[1].version))
        ops += [
            Create(layout.skip_node(partition), encode_skip(skip)),
            self.event(now, by, "skip-requested", topic, partition, describe_skip(skip)),
        ]
        await self._write(ops, "skip")
        return skip

    async def history(self, limit: int = 50) -> list[ControlEvent]:
        """The group's last ``limit`` control events, newest first (an entry that is not one
        is logged and left out)."""
        names = sorted(await self._children(history_path(self.group)))[-limit:] if limit > 0 else []
        paths = [f"{history_path(self.group)}/{name}" for name in reversed(names)]
        datas = await _together([functools.partial(self._get, path) for path in paths])
        events: list[ControlEvent] = []
        for path, got in zip(paths, datas, strict=True):
            if got is None:
                continue  # trimmed meanwhile
            try:
                events.append(decode_event(path, got[0]))
            except CoordinationError as exc:
                log.warning("control history of %s: %s", self.group, exc)
        return events

    def event(
        self, at: float, by: str, action: Action, topic: str, partition: int, detail: str = ""
    ) -> Create:
        """The transaction step that appends an event to the history (its parent must exist:
        see `ensure_history`)."""
        entry = ControlEvent(at, by, action, topic, partition, detail)
        return Create(f"{history_path(self.group)}/entry-", encode_event(entry), sequence=True)

    async def ensure_history(self) -> None:
        """Create the history's parent node if it is missing."""
        await self._parents([])

    async def trim(self) -> None:
        """Delete the history entries older than the last `HISTORY_KEPT`."""
        names = sorted(await self._children(history_path(self.group)))
        for name in names[:-HISTORY_KEPT]:
            with contextlib.suppress(NoNodeError):  # another writer trimmed it
                await self._zk.delete(f"{history_path(self.group)}/{name}")

    async def publish_stopped(self, stopped: Stopped) -> None:
        """Publish that ``on_failure="stop"`` stopped a partition: an ephemeral node of this
        session, replaced if the partition was published stopped before."""
        layout = self._layout(stopped.topic)
        path = layout.stopped_node(stopped.partition)
        await self._zk.ensure_path(layout.stopped)
        with contextlib.suppress(NoNodeError):
            await self._zk.delete(path)
        await self._zk.create(path, encode_stopped(stopped), ephemeral=True)

    async def clear_stopped(self, topic: str, partition: int) -> None:
        """Remove a partition's stop, if it was published."""
        with contextlib.suppress(NoNodeError):
            await self._zk.delete(self._layout(topic).stopped_node(partition))

    async def publish_stuck(self, stuck: Stuck) -> None:
        """Publish that a partition's handler or batch body runs past ``stuck_after`` in
        ``stuck.member``: an ephemeral node of this session, the member's own, replaced if it
        published the partition stuck before."""
        layout = self._layout(stuck.topic)
        path = layout.stuck_node(stuck.partition, stuck.member)
        await self._zk.ensure_path(layout.stuck_partition(stuck.partition))
        with contextlib.suppress(NoNodeError):
            await self._zk.delete(path)
        await self._zk.create(path, encode_stuck(stuck), ephemeral=True)

    async def clear_stuck(self, topic: str, partition: int, member: str) -> None:
        """Remove ``member``'s stuck mark of a partition, if it published one (another
        member's mark of the partition stays)."""
        with contextlib.suppress(NoNodeError):
            await self._zk.delete(self._layout(topic).stuck_node(partition, member))

    async def read_stuck(self) -> tuple[dict[Key, Stuck], dict[str, str]]:
        """The group's stuck partitions, as they are now: each one's oldest mark (several
        members may mark one: an old owner's handler that outlived a handover, and the new
        owner's), and the stuck nodes that could not be read (their path -> what was wrong).

        Raises:
            CoordinationError: ZooKeeper could not be read.
        """
        unreadable: dict[str, str] = {}
        parent = stuck_path(self.group)
        marks: list[tuple[str, int, str]] = []
        async for topic, partitions in self._topics(parent, unreadable):
            paths = [f"{parent}/{topic}/{partition}" for partition in partitions]
            members = await _together(
                [functools.partial(self._listed, path, unreadable) for path in paths]
            )
            for partition, path, names in zip(partitions, paths, members, strict=True):
                marks += [(topic, partition, f"{path}/{name}") for name in sorted(names)]
        datas = await _together(
            [functools.partial(self._readable, path, unreadable) for _t, _p, path in marks]
        )
        found: dict[Key, Stuck] = {}
        for (topic, partition, path), got in zip(marks, datas, strict=True):
            if got is None:
                continue  # deleted meanwhile, or not readable
            try:
                stuck = decode_stuck(topic, partition, got[0])
            except CoordinationError as exc:
                unreadable[path] = str(exc)
                continue
            if stuck.member != path.rsplit("/", 1)[1]:
                unreadable[path] = f"the mark of member {stuck.member!r} under another's name"
                continue
            known = found.get((topic, partition))
            if known is None or stuck.since < known.since:
                found[(topic, partition)] = stuck
        return found, unreadable

    async def _parents(self, paths: Sequence[str]) -> None:
        for path in {history_path(self.group), *paths}:
            await self._zk.ensure_path(path)

    async def _write(self, ops: Sequence[Op], what: str) -> None:
        try:
            await self._zk.transaction(ops)
        except (NodeExistsError, NoNodeError, BadVersionError) as exc:
            raise ControlConflictError(
                f"another write to group {self.group!r}'s controls came first ({exc});"
                f" the {what} changed nothing: look again"
            ) from exc
        await self.trim()


UNREADABLE_BY = "(unreadable node)"
"""Who a lifted pause was by, where its node could not be read."""


def _lifted(topic: str, partition: int, data: bytes, now: float) -> tuple[Pause, str]:
    """A pause being lifted and the history's detail of it. A node that is not a pause is lifted
    too (members hold a partition while its pause node exists, whatever it holds): as a pause
    by `UNREADABLE_BY` at ``now``, the detail saying what was wrong."""
    try:
        pause = decode_pause(topic, partition, data)
    except CoordinationError as exc:
        return Pause(topic, partition, UNREADABLE_BY, now), f"its node was unreadable: {exc}"
    return pause, f"paused by {pause.by} at {format_at(pause.at)}"


def describe_skip(skip: Skip) -> str:
    """What a skip does, for the history and the logs."""
    if skip.to_offset is None:
        return f"past the record at offset {skip.stopped_on}, to {skip.target}"
    return f"to offset {skip.to_offset}"
