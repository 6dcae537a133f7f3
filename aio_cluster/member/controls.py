"""MemberControls: one member obeying the operator's controls of its group (`aio_cluster.control`).

It watches the group's pauses and pending skips of the topics it reads (child watches) and reads
them again only when a watch fires, when a new session starts (a session's watches go with it;
kazoo sets them again itself when it reconnects within the session), and when it meets a topic:
an idle member costs ZooKeeper nothing but its session's pings. No batch of a partition is handed
out before the controls of its topic were read once (`PartitionStates.controlled`), so a pause
is obeyed from a member's first batch; a look that fails lets them go (a member must not wait
for good on controls it cannot read: an ACL a stranger set) and is tried again after `RETRY`
seconds. It:

- holds the paused partitions (`Delivery.hold`): none of their batches is handed out, in
  ``async for`` and in ``process()``, whoever owns them; the claim, the stored offset and the
  fetch position stay. A partition that moves here, or a member that restarts, finds the pause
  in ZooKeeper and holds it too;
- publishes the partitions ``on_failure="stop"`` stopped (an ephemeral node naming the record's
  offset and error) and removes them once resumed or released;
- applies a skip of a partition it owns at a batch boundary: the stopped-on record goes to the
  dead-letter topic, if one is set, with the header `SKIPPED_BY`; the partition moves to the
  skip's offset, stored through the claim's fenced write (a member whose claim is gone stores
  nothing, and the skip stays for the next owner); then the skip node goes, a ``skipped`` event
  is added to the history, and a partition ``on_failure="stop"`` stopped is resumed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import anyio

from ..control.model import Skip, Stopped, decode_skip, format_at
from ..control.store import ControlStore, describe_skip
from ..errors import (
    AccessDeniedError,
    AioClusterError,
    BadVersionError,
    CoordinationError,
    NoNodeError,
)
from ..kafka.topics import PartitionKey
from ..zookeeper.client import ZooKeeper
from ..zookeeper.layout import GroupLayout, partition_named
from ..zookeeper.values import Delete, SessionState
from .delivery.delivery import Delivery
from .delivery.partitions import PartitionStates
from .processing.processor import Processor
from .protocol.handover import Handover
from .protocol.keyed_layout import KeyedLayout

__all__ = ["RECHECK", "RETRY", "SKIPPED_BY", "MemberControls"]

log = logging.getLogger(__name__)

RETRY = 5.0
"""Seconds before a look at the controls that failed is tried again (a new session sooner)."""

RECHECK = 1.0
"""Seconds between two checks of what the last look left to do, without reading the controls
again: a pending skip waiting for its partition's batch boundary or its owner (its node is read
once the partition is at one), a published stop waiting to be cleared (its partition resumed or
released)."""

_UNREADABLE = (CoordinationError, AccessDeniedError)
"""What a read or write of the controls may fail with: ZooKeeper's failures, and a node whose
ACL (a stranger's) does not let the member read or write it."""

SKIPPED_BY = "aio-cluster-skipped-by"
"""The header of a record an operator skipped, in the dead-letter topic: ``"<by> at <at>"``."""


class MemberControls:
    """The operator's controls, as one member follows them (see the module)."""

    def __init__(
        self,
        zk: ZooKeeper,
        layout: KeyedLayout,
        states: PartitionStates,
        delivery: Delivery,
        handover: Handover,
        *,
        member_id: str,
        topics: Callable[[], list[str]],
        processor: Callable[[], Processor | None],
    ) -> None:
        """Args:
        zk: the member's ZooKeeper client.
        layout: the group's paths, by partition key.
        states: the member's partition states.
        delivery: the member's delivery (holds the paused partitions).
        handover: stores a skip's offset through the claim's fenced write.
        member_id: named in the stopped nodes and the logs.
        topics: the topics the member reads now.
        processor: the running `process()`'s processor, if any.
        """
        self._zk = zk
        self._layout = layout
        self._states = states
        self._delivery = delivery
        self._handover = handover
        self._id = member_id
        self._topics = topics
        self._processor = processor
        self._store = ControlStore(zk, layout.group)
        self._changed = asyncio.Event()
        self._wanted = True
        """Whether the controls must be read again (a watch fired, a session began, a topic
        was met, or the last look failed); else a wake only follows what was read."""
        self._failed = False
        """Whether the last look failed."""
        self._looked: frozenset[str] = frozenset()
        """The topics whose controls were read (or tried): their partitions may hand out."""
        self._looking: frozenset[str] = frozenset()
        """The topics whose controls the look running now reads."""
        self._skips: list[tuple[str, int]] = []
        """The pending skips the last look found, of the topics read."""
        states.controlled = self._controlled
        self._published: dict[PartitionKey, int] = {}
        """Partitions published stopped by this session -> the record's offset."""
        self._unreadable: dict[str, str] = {}
        """Skip nodes that could not be read -> what was wrong, logged once each."""
        self._strays: set[str] = set()
        """Control nodes named as no partition, as the last look found them (logged once)."""
        self._lost = False
        """Whether the session was lost and no new one began since."""
        self._failure: str | None = None
        """What the last step failed with, as logged (None: it did not fail)."""
        self.applied = 0
        """Skips applied."""

    def poke(self) -> None:
        """Something changed (a watch fired, a partition stopped): look again."""
        self._wanted = True
        self._changed.set()

    def _controlled(self, key: PartitionKey) -> bool:
        """Whether ``key``'s topic had its controls read; a topic met since the last look is
        looked at now."""
        try:
            topic = self._layout.keys.topic(key)
        except KeyError:
            return False
        if topic in self._looked:
            return True
        if topic not in self._looking:
            self.poke()
        return False

    async def run(self) -> None:
        """Follow the controls until cancelled (see the module); a look that fails is logged and
        tried again after `RETRY` seconds, or at the next session's start."""
        forget = self._zk.on_state_change(self._on_session)
        try:
            while True:
                self._changed.clear()
                await self._step()
                if self._wanted and self._failed:
                    wait: float | None = RETRY
                elif self._skips or self._published:
                    wait = RECHECK
                else:
                    wait = None  # idle: only a watch, a session or a topic wakes it
                with anyio.move_on_after(wait):
                    await self._changed.wait()
        finally:
            forget()

    async def _step(self) -> None:
        """Read the controls if they must be, then follow them; a failure is logged (once while
        it stays the same)."""
        try:
            if self._wanted:
                self._wanted = False
                topics = self._topics()
                try:
                    await self.look()
                except _UNREADABLE:
                    # The look is tried again; meanwhile the member does not wait on controls it
                    # cannot read (an ACL a stranger set must not stop it for good).
                    self._wanted = self._failed = True
                    self._looked = self._looked.union(topics)
                    self._delivery.wake()
                    raise
                self._failed = False
            else:
                await self._follow()
        except _UNREADABLE as exc:
            if str(exc) != self._failure:
                log.warning("member %s: reading the group's controls failed: %s", self._id, exc)
            self._failure = str(exc)
        else:
            self._failure = None

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            self._published.clear()  # the stopped nodes went with the session
            self._lost = True
            # Pauses written meanwhile are obeyed from the new session's first batch.
            self._looked = frozenset()
        elif state is SessionState.CONNECTED and self._lost:
            self._lost = False
            self.poke()  # a new session: the watches went with the old one

    async def look(self) -> None:
        """Read the controls once (setting the watches again) and follow them."""
        topics = self._looking = frozenset(self._topics())
        held: set[PartitionKey] = set()
        skips: list[tuple[str, int]] = []
        strays: set[str] = set()
        try:
            for topic in sorted(topics):
                layout = GroupLayout(self._layout.group, topic)
                for partition in await self._watched(layout.paused, strays):
                    held.add(self._layout.keys.key(topic, partition))
                skips += [
                    (topic, partition) for partition in await self._watched(layout.skips, strays)
                ]
        finally:
            self._looking = frozenset()
        for path in sorted(strays - self._strays):
            log.warning(
                "member %s: control node %s left out: no partition is named so", self._id, path
            )
        self._strays = strays
        self._skips = skips
        self._looked = topics
        self._delivery.hold(held)
        await self._follow()

    async def _follow(self) -> None:
        """Follow what the last look read: publish the stops, apply the pending skips this
        member can apply now."""
        await self._publish_stops()
        for topic, partition in list(self._skips):
            await self._skip(topic, partition)

    async def _watched(self, parent: str, strays: set[str]) -> list[int]:
        """The partitions under ``parent``, watched for a change (its creation, while it is
        missing); a child named as no partition (`partition_named`) is left out, its path
        added to ``strays``."""
        try:
            names = await self._zk.get_children(parent, watch=self.poke)
        except NoNodeError:
            if await self._zk.exists(parent, watch=self.poke) is not None:
                self.poke()  # made meanwhile: look again
            return []
        partitions = []
        for name in names:
            partition = partition_named(name)
            if partition is None:
                strays.add(f"{parent}/{name}")
            else:
                partitions.append(partition)
        return partitions

    def _stops(self) -> dict[PartitionKey, tuple[int, str]]:
        """The owned partitions ``on_failure="stop"`` keeps paused -> the record's offset and
        its error."""
        processor = self._processor()
        if processor is None:
            return {}
        claims, paused = self._states.claims, set(self._states.paused)
        return {
            key: (record.offset, repr(error)[:1000])
            for key, (record, error) in processor.failures.items()
            if key in claims and key in paused
        }

    async def _publish_stops(self) -> None:
        stops = self._stops()
        for key in [key for key in self._published if key not in stops]:
            topic, partition = self._layout.keys.split(key)
            await self._store.clear_stopped(topic, partition)
            del self._published[key]
        for key, (offset, error) in stops.items():
            if self._published.get(key) == offset:
                continue
            topic, partition = self._layout.keys.split(key)
            await self._store.publish_stopped(
                Stopped(topic, partition, self._id, offset, error, time.time())
            )
            self._published[key] = offset

    async def _skip(self, topic: str, partition: int) -> None:
        """Apply the pending skip of ``topic``/``partition`` if this member owns it and no batch
        of it runs (else a later check does)."""
        key = self._layout.keys.key(topic, partition)
        if not self._at_boundary(key):
            return
        path = GroupLayout(self._layout.group, topic).skip_node(partition)
        try:
            # Watched: a skip node written again (or deleted) is looked at again.
            data, stat = await self._zk.get(path, watch=self.poke)
        except NoNodeError:
            self._unreadable.pop(path, None)
            self._skips.remove((topic, partition))
            return
        try:
            skip = decode_skip(topic, partition, data)
        except CoordinationError as exc:
            if self._unreadable.get(path) != str(exc):
                log.error("member %s: skip %s left as it is: %s", self._id, path, exc)
                self._unreadable[path] = str(exc)
            self._skips.remove((topic, partition))  # until its node changes
            return
        self._unreadable.pop(path, None)
        if not await self._move(key, skip):
            return
        detail = describe_skip(skip) + f", requested by {skip.by} at {format_at(skip.at)}"
        await self._store.ensure_history()
        try:
            await self._zk.transaction(
                [
                    Delete(path, stat.version),
                    self._store.event(time.time(), self._id, "skipped", topic, partition, detail),
                ]
            )
        except (NoNodeError, BadVersionError):
            log.warning("member %s: skip %s changed while it was applied", self._id, path)
            return
        await self._store.trim()
        self._skips.remove((topic, partition))
        self.applied += 1
        log.warning(
            "member %s: skipped %s %s", self._id, self._layout.label(key), describe_skip(skip)
        )
        processor = self._processor()
        if processor is not None and key in processor.failures:
            del processor.failures[key]
            processor.failed_at.pop(key, None)
            self._states.resume([key])
        self._delivery.wake()
        await self._publish_stops()

    def _at_boundary(self, key: PartitionKey) -> bool:
        """Whether this member holds ``key``'s claim (not fenced) and no batch of it runs."""
        claim = self._states.claims.get(key)
        return claim is not None and not claim.fenced and not self._states.running([key])

    async def _move(self, key: PartitionKey, skip: Skip) -> bool:
        """Move ``key`` to the skip's offset and store it through the claim's fenced write,
        after dead-lettering the record it passes (a partition stored at or past the offset
        already stays where it is).

        Returns:
            True once stored (or past already); False when a later look must try again (the
            send failed, a batch started, the claim went).
        """
        target = skip.target
        claim = self._states.claims.get(key)
        if target is None or claim is None:
            return False
        if claim.stored is not None and target <= claim.stored:
            return True
        if not await self._dead_letter(key, skip, target) or not self._at_boundary(key):
            return False
        self._states.sought(key, target)
        self._states.to_store(key, target)
        await self._handover.store([key])
        if key in self._states.fenced or self._states.claims.get(key) is not claim:
            log.warning(
                "member %s: %s's claim is gone: its next owner applies the skip",
                self._id,
                self._layout.label(key),
            )
            return False
        return True

    async def _dead_letter(self, key: PartitionKey, skip: Skip, target: int) -> bool:
        """Send the record ``on_failure="stop"`` stopped on to the dead-letter topic, if one is
        set and the skip passes it.

        Returns:
            False when the send failed: the skip waits for a later look.
        """
        processor = self._processor()
        failed = None if processor is None else processor.failures.get(key)
        dead_letters = None if processor is None else processor.dead_letters
        if processor is None or failed is None or dead_letters is None:
            return True
        record, error = failed
        if record.offset >= target:
            return True
        try:
            await dead_letters.send(
                record,
                error,
                processor.attempts,
                extra=[(SKIPPED_BY, f"{skip.by} at {format_at(skip.at)}".encode())],
            )
        except AioClusterError as exc:
            log.warning(
                "member %s: the skipped record of %s was not dead-lettered (%s): tried again",
                self._id,
                self._layout.label(key),
                exc,
            )
            return False
        return True
