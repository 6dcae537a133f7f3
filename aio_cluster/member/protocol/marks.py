"""Liveness by progress: this member's mark in ZooKeeper, and the marks of the group.

A member's claims live as long as its ZooKeeper session; a member that keeps the session but
cannot read Kafka (cut off from the brokers, refused) would keep its partitions for ever. So
`Marker` looks at the fetcher's progress (`aio_cluster.kafka.progress`) and writes one mark,
an ephemeral node of its session, only when what it cannot read changes; it deletes the mark
once it reads again. While it has partitions marked that it no longer owns (the group gave them
to others), it probes their leaders every half ``fetch_timeout`` with a Fetch of each, at the
offset it had reached, the request consuming sends and authorized as it is (a ListOffsets
request needs only Describe: a principal refused Read would be answered, take its partitions
back and be refused again, over and over). Once a leader lets the read in (within
``fetch_timeout``), the member clears the partition, and the next target gives it its share
back; a leader that refuses the read keeps the mark, its error the refusal's. Nothing of this
costs a request at rest: the looks at the fetcher are local.

`MarkReader` is how the members that compute an assignment (the sticky leader and its deputy,
every member of range and round-robin) learn of marks: a watch on the marks' parent and on each
mark, read again only once a watch fired (or the session is new), so a rebalance that no mark
changed reads nothing more. What the assignment does with them: `aio_cluster.assign.marks`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Protocol

import anyio

from ...assign.marks import Mark
from ...errors import AioClusterError, CoordinationError, UnreadableError
from ...kafka.progress import NoProgress
from ...kafka.read_probe import ReadAnswer
from ...kafka.topics import PartitionKey, TopicKeys
from ...zookeeper.client import NodeExistsError, NoNodeError, ZooKeeper
from ...zookeeper.layout import decode_mark, encode_mark
from .listener import RebalanceListener

__all__ = ["MarkReader", "Marker", "ProgressSource"]

log = logging.getLogger(__name__)


class ProgressSource(Protocol):
    """What `Marker` asks the fetcher (the member's `aio_cluster.kafka.fetcher.Fetcher`)."""

    def unreadable(self) -> dict[PartitionKey, NoProgress]:
        """The partitions asked for without progress for longer than ``fetch_timeout``."""
        ...

    def position(self, partition: PartitionKey) -> int | None:
        """The next offset the member reads of an assigned ``partition`` (None: not assigned)."""
        ...

    async def readable(self, offsets: Mapping[PartitionKey, int]) -> dict[PartitionKey, ReadAnswer]:
        """Whether the partitions' leaders let the member read them, asked with a Fetch at
        each partition's offset; a partition without an answer on the read is left out."""
        ...


def mark_of(
    marked: Mapping[PartitionKey, NoProgress], keys: TopicKeys, *, reads: bool, settle: float
) -> Mark | None:
    """The mark that says ``marked`` (None: nothing is), by topic, written now and settled
    ``settle`` seconds later."""
    if not marked:
        return None
    partitions: dict[str, dict[int, int | None]] = {}
    for key, why in marked.items():
        topic, partition = keys.split(key)
        partitions.setdefault(topic, {})[partition] = why.broker
    latest = max(marked.values(), key=lambda why: why.since)
    return Mark(
        partitions,
        since=int(min(why.since for why in marked.values()) * 1000),
        error=latest.error,
        reads=reads,
        at=int(time.time() * 1000),
        settle=int(settle * 1000),
    )


class Marker:
    """This member's mark: written on a change of what it cannot read (see the module)."""

    def __init__(
        self,
        zk: ZooKeeper,
        path: str,
        fetcher: ProgressSource,
        owned: Callable[[], Collection[PartitionKey]],
        keys: TopicKeys,
        *,
        member_id: str,
        fetch_timeout: float,
        label: Callable[[PartitionKey], str] = str,
        listener: RebalanceListener[PartitionKey] | None = None,
    ) -> None:
        """Args:
        zk: the member's ZooKeeper client.
        path: this member's mark node.
        fetcher: the member's fetcher: its progress, and its look-ups for the probes.
        owned: the partitions the member claims now.
        keys: the member's topic numbers.
        member_id: named in log messages.
        fetch_timeout: the member's ``fetch_timeout``.
        label: names a partition in log messages.
        listener: told of the partitions newly marked (`on_partitions_unreadable`), if given.
        """
        self._zk = zk
        self._path = path
        self._fetcher = fetcher
        self._owned = owned
        self._keys = keys
        self._id = member_id
        self._timeout = fetch_timeout
        self._label = label
        self._listener = listener
        self.marked: dict[PartitionKey, NoProgress] = {}
        """The partitions this member says it cannot read now, and why."""
        self._written: tuple[Mark | None, int | None] = (None, None)
        """The mark in ZooKeeper (None: none) and the session that wrote it."""
        self._probed = 0.0
        self._offsets: dict[PartitionKey, int] = {}
        """A marked partition -> the offset the member had reached when it marked it: where
        its probes fetch."""

    async def run(self) -> None:
        """Look at the fetcher's progress, probe and write the mark, until cancelled."""
        tick = min(self._timeout / 4, 1.0)
        while True:
            await anyio.sleep(tick)
            await self.step()

    async def step(self) -> None:
        """One look: what the member cannot read now, the probes due, the mark written."""
        owned = set(self._owned())
        found = self._fetcher.unreadable()
        marked = {k: why for k, why in self.marked.items() if k not in owned}
        marked.update((k, why) for k, why in found.items() if k in owned)
        gone = [k for k in marked if k not in owned]
        now = time.monotonic()
        if gone and now - self._probed >= self._timeout / 2:
            self._probed = now
            refused = []
            for key, answer in (await self._probe(gone)).items():
                if answer.refused is None:
                    del marked[key]
                else:
                    refused.append(self._label(key))
                    marked[key] = dataclasses.replace(
                        marked[key], broker=answer.broker, error=answer.refused
                    )
            if refused:
                log.debug(
                    "member %s: its probe was refused the read of %s: they stay marked",
                    self._id,
                    ", ".join(refused),
                )
        new = sorted(marked.keys() - self.marked.keys())
        for key in new:
            self._offsets[key] = self._fetcher.position(key) or 0
        self._offsets = {key: at for key, at in self._offsets.items() if key in marked}
        if marked.keys() != self.marked.keys():
            self._tell(marked)
        self.marked = marked
        # Written after half the timeout without progress (the fetcher's bound), settled after
        # the other half: the partitions move at fetch_timeout, and the other members of a
        # Kafka down for all mark theirs within a look (a second) of this one, well before it
        # settles (see `aio_cluster.assign.marks`).
        mark = mark_of(
            marked, self._keys, reads=bool(owned - found.keys()), settle=self._timeout / 2
        )
        written, session = self._written
        # Written already where the same; no mark lives on past its session, so none needs
        # deleting in a new one.
        if not _same(mark, written) or (mark is not None and session != self._zk.session_id):
            try:
                await self._write(mark)
            except CoordinationError as exc:
                log.warning("member %s: its mark not written: %s", self._id, exc)
        if new and self._listener is not None:
            await self._hear(self._listener, new, marked)

    async def _hear(
        self,
        listener: RebalanceListener[PartitionKey],
        new: list[PartitionKey],
        marked: Mapping[PartitionKey, NoProgress],
    ) -> None:
        """Tell the listener of the partitions newly marked, one call per leader, bounded by
        ``fetch_timeout``; a hook that raises is logged."""
        by_broker: dict[int | None, list[PartitionKey]] = {}
        for key in new:
            by_broker.setdefault(marked[key].broker, []).append(key)
        for broker, keys in by_broker.items():
            latest = max((marked[key] for key in keys), key=lambda why: why.since)
            error = UnreadableError(
                self._id, broker, latest.error, min(marked[key].since for key in keys)
            )
            with anyio.move_on_after(self._timeout) as bound:
                try:
                    await listener.on_partitions_unreadable(keys, error)
                except Exception as exc:
                    log.warning("member %s: on_partitions_unreadable raised %r", self._id, exc)
            if bound.cancelled_caught:
                log.warning(
                    "member %s: on_partitions_unreadable took over %gs", self._id, self._timeout
                )

    async def _probe(self, partitions: list[PartitionKey]) -> dict[PartitionKey, ReadAnswer]:
        """The leaders' answers to a Fetch of each partition at its offset (none within
        ``fetch_timeout``: none); a partition without an answer on the read is left out. The
        bound is the timeout, not less: after a long cut the
        client connects and reads the metadata again first, and a probe cut shorter each time
        would never see the end of it."""
        with anyio.move_on_after(self._timeout):
            try:
                offsets = {key: self._offsets.get(key, 0) for key in partitions}
                return await self._fetcher.readable(offsets)
            except AioClusterError as exc:
                log.debug("member %s: its probe failed: %s", self._id, exc)
                return {}
        log.debug("member %s: its probe had no answer within %gs", self._id, self._timeout)
        return {}

    def _tell(self, marked: Mapping[PartitionKey, NoProgress]) -> None:
        """Log a change of state once (not once per retry); the mark written after it is what
        the group acts on."""
        new = sorted(marked.keys() - self.marked.keys())
        healed = sorted(self.marked.keys() - marked.keys())
        for key in new:
            why = marked[key]
            log.warning(
                "member %s cannot read %s since %s (broker %s, %s): it gives it to a member "
                "that can",
                self._id,
                self._label(key),
                time.strftime("%H:%M:%S", time.gmtime(why.since)),
                "unknown" if why.broker is None else why.broker,
                why.error,
            )
        if healed:
            log.info(
                "member %s reads %s again", self._id, ", ".join(self._label(k) for k in healed)
            )

    async def _write(self, mark: Mark | None) -> None:
        """Make the node say ``mark`` (delete it for None)."""
        session = self._zk.session_id
        if mark is None:
            with contextlib.suppress(NoNodeError):
                await self._zk.delete(self._path)
        else:
            data = encode_mark(mark)
            try:
                await self._zk.create(self._path, data, ephemeral=True, makepath=True)
            except NodeExistsError:
                await self._zk.set(self._path, data)
        self._written = (mark, session)


def _same(a: Mark | None, b: Mark | None) -> bool:
    """Whether two marks say the same partitions and whether the member reads (a newer error
    or moment alone is not worth a write)."""
    if a is None or b is None:
        return a is b
    return a.partitions == b.partitions and a.reads == b.reads


class MarkReader:
    """The group's marks, read again only once a watch fired (see the module)."""

    def __init__(self, zk: ZooKeeper, path: str, *, member_id: str) -> None:
        """Args:
        zk: the member's ZooKeeper client.
        path: the marks' parent.
        member_id: named in log messages.
        """
        self._zk = zk
        self._path = path
        self._id = member_id
        self._marks: dict[str, Mark] = {}
        self._session: int | None = None
        """The session of the last read (None: to read again)."""
        self._fires = 0
        """How many watches fired: one that fires during a read makes it stale at once."""
        self._request: Callable[[], None] = lambda: None
        self._refused: set[tuple[str, bytes]] = set()
        """The mark nodes found not to hold a mark, as (member, data): each is logged once."""

    def _fired(self) -> None:
        self._session = None
        self._fires += 1
        self._request()

    async def read(self, request: Callable[[], None]) -> dict[str, Mark]:
        """member -> its mark; ``request`` is asked for a rebalance when any changes.

        Raises:
            CoordinationError: ZooKeeper failed.
        """
        self._request = request
        session = self._zk.session_id
        if self._session is not None and self._session == session:
            return self._marks
        marks: dict[str, Mark] = {}
        fires = self._fires
        try:
            children = await self._zk.get_children(self._path, watch=self._fired)
        except NoNodeError:
            children = []
            if await self._zk.exists(self._path, watch=self._fired) is not None:
                return await self.read(request)  # made meanwhile
        for member in children:
            try:
                data, _stat = await self._zk.get(f"{self._path}/{member}", watch=self._fired)
            except NoNodeError:
                continue  # cleared meanwhile: the children's watch fired
            try:
                marks[member] = decode_mark(data)
            except CoordinationError as exc:
                if (member, data) not in self._refused:
                    self._refused.add((member, data))
                    log.warning("member %s: ignoring the mark of %s: %s", self._id, member, exc)
        self._marks = marks
        self._session = session if self._fires == fires else None
        return marks
