"""Stored offsets: reading them, and writing the pending ones in a transaction fenced by the claims.

An offset is written only while this member's claim of the partition holds: the same transaction
checks the owner node's version and the partition's fence at the claim's epoch (see
`aio_cluster.member.protocol.claiming`), so a member whose claim is gone (its session expired, its
node was replaced, an offset reset bumped the fence) never overwrites what the next owner, or the
reset, stored. A claim such a write finds gone is marked ``fenced``: nothing is stored for it again,
its offsets are not mirrored, and ``on_fenced`` asks for the rebalance that drops it.

The records noted as finished past a claim's offset (`aio_cluster.member.delivery.finished`) are
stored in the same transaction, in a node of the project's own; a claim's first batch is handed out
only once the notes of the claim before it were read (`Offsets.read_notes()`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable

import anyio

from ...concurrency import gather
from ...errors import CoordinationError
from ...kafka.topics import PartitionKey
from ...zookeeper.client import BadVersionError, NodeExistsError, NoNodeError, ZooKeeper
from ...zookeeper.layout import decode_offset
from ...zookeeper.values import Check, Create, Delete, Op, SetData
from ..delivery import finished
from ..delivery.claims import Claim
from ..delivery.partitions import PartitionStates
from .keyed_layout import KeyedLayout

__all__ = ["Offsets"]

log = logging.getLogger(__name__)


class Offsets:
    """The offsets of one member's partitions in ZooKeeper, over every topic it reads: the driver
    that stores what the partition states hold pending."""

    def __init__(
        self,
        zk: ZooKeeper,
        layout: KeyedLayout,
        states: PartitionStates,
        *,
        on_fenced: Callable[[list[PartitionKey]], None] = lambda partitions: None,
    ) -> None:
        """Args:
        zk: the member's ZooKeeper client.
        layout: the group's paths.
        states: the member's partition states: asked what is due, told what was stored and
            which claims a write found gone.
        on_fenced: called with the partitions whose claims a write found gone (the states mark
            them ``fenced``): their offsets must not be mirrored, and a rebalance drops them.
        """
        self._zk = zk
        self._layout = layout
        self._states = states
        self._on_fenced = on_fenced
        self._store_lock = asyncio.Lock()
        """Serialises offset writes, so a later write never overtakes an earlier one."""
        self._notes: set[str] = set()
        """The note nodes known to exist (`aio_cluster.member.delivery.finished`)."""
        self._parents: set[str] = set()
        """The note parents known to exist."""

    async def read_notes(self, claims: list[Claim]) -> None:
        """Learn what the claims before ``claims`` noted as finished past the offsets they
        stored (see `aio_cluster.member.delivery.finished`): one read of each topic's notes, and one
        of each note of these partitions. A note that does not go with the claim's offset and
        epoch is ignored; so is any that cannot be read (its records are handled again)."""
        by_parent: dict[str, list[Claim]] = {}
        for claim in claims:
            if claim.stored is not None:
                by_parent.setdefault(self._layout.finished(claim.partition), []).append(claim)
        try:
            for parent, some in by_parent.items():
                try:
                    names = set(await self._zk.get_children(parent))
                except NoNodeError:
                    continue
                self._parents.add(parent)
                for claim in some:
                    path = self._layout.note(claim.partition)
                    if path.rpartition("/")[2] in names:
                        self._notes.add(path)
                        await self._read_note(claim, path)
        except CoordinationError as exc:
            log.warning("the notes of finished records could not be read (%s): ignored", exc)

    async def _read_note(self, claim: Claim, path: str) -> None:
        try:
            data, _stat = await self._zk.get(path)
        except NoNodeError:
            self._notes.discard(path)
            return
        found = finished.decode(data)
        if found is None:
            return
        epoch, offset, offsets = found
        if epoch == claim.epoch - 1 and offset == claim.stored:
            # Stored again under this claim's epoch with its next offset (not stored yet).
            finished.note(claim, offset, offsets)

    async def stored(self, partition: PartitionKey) -> int | None:
        """The offset stored for ``partition``, or None when none is.

        Raises:
            CoordinationError: ZooKeeper failed, or the node holds no offset.
        """
        path = self._layout.offset(partition)
        try:
            data, _stat = await self._zk.get(path)
        except NoNodeError:
            return None
        return decode_offset(path, data)

    async def store(self, partitions: Iterable[PartitionKey]) -> dict[PartitionKey, int]:
        """Store the pending offsets of the given owned partitions in one transaction, fenced
        by their claims: nothing is written for a partition that is no longer ours.

        Args:
            partitions: the partitions whose pending offsets to store; one not owned, or whose
                claim is ``fenced``, is skipped.

        Returns:
            Partition -> offset stored, of the partitions still owned (for the mirror).

        A claim the write finds gone is marked ``fenced`` (its offset is not stored; the caller
        can tell); the others are stored. The write is shielded from cancellation (and bounded by
        the request timeout), so that what this member believes is stored is what ZooKeeper
        stored.
        """
        async with self._store_lock:
            partitions = list(partitions)
            due = self._states.commits.unstored(partitions)
            due.extend(self._notes_due(partitions, due))
            if not due:
                return {}
            with anyio.CancelScope(shield=True):
                try:
                    written = await self._write(due)
                except (NodeExistsError, NoNodeError, BadVersionError):
                    # A claim is gone, or an offset node appeared or vanished behind our back
                    # (another tool): drop the claims that are gone, learn what is stored now,
                    # and write the others once more.
                    due = await self._still_ours(due)
                    for claim in due:
                        self._states.commits.learned(claim, await self.stored(claim.partition))
                        await self._learn_note(claim)
                    written = await self._write(due)
            return self._states.commits.stored(written)

    async def _still_ours(self, claims: list[Claim]) -> list[Claim]:
        """The claims that still hold: their owner node of this session at its version, their
        fence at their epoch. The others are marked ``fenced``, and are never written again."""
        held = await gather(functools.partial(self._holds, claim) for claim in claims)
        gone = [claim for claim, holds in zip(claims, held, strict=True) if not holds]
        if gone:
            partitions = self._states.commits.fenced_off(gone)
            log.warning(
                "partitions %s: the claims are gone (their owner node was replaced, or a "
                "newer claim or an offset reset moved their fence); their offsets are not stored",
                self._layout.labels(partitions),
            )
            self._on_fenced(partitions)
        return [claim for claim, holds in zip(claims, held, strict=True) if holds]

    async def _holds(self, claim: Claim) -> bool:
        try:
            _data, owner = await self._zk.get(self._layout.owner(claim.partition))
        except NoNodeError:
            return False
        fence = await self._zk.exists(self._layout.fence(claim.partition))
        return (
            owner.ephemeral_owner == self._zk.session_id
            and owner.version == claim.node_version
            and fence is not None
            and fence.version == claim.epoch
        )

    def _notes_due(self, partitions: list[PartitionKey], due: list[Claim]) -> list[Claim]:
        """Of ``partitions``, the owned claims not in ``due`` whose note is not stored yet:
        their offset is written again with it (see `_offset()`). None exactly once: a note is
        never stored there (see `_note_ops()`)."""
        claims = self._states.claims
        found: list[Claim] = []
        if self._states.commits.transactional or not finished.anything_noted():
            return found
        for partition in dict.fromkeys(partitions):
            claim = claims.get(partition)
            if claim is None or claim.fenced or claim in due:
                continue
            known = finished.noted(claim)
            if known is not None and not known.stored:
                found.append(claim)
        return found

    @staticmethod
    def _offset(claim: Claim) -> int | None:
        """The offset to write for ``claim``: its pending one; else (only its note is due) the
        one stored, or the note's prefix where that is further (a batch given up before its
        prefix moved, of a claim that stored nothing yet), so it never goes back."""
        if claim.pending is not None:
            return claim.pending
        known = finished.noted(claim)
        if known is None:
            return claim.stored
        return known.base if claim.stored is None else max(claim.stored, known.base)

    async def _learn_note(self, claim: Claim) -> None:
        """Whether the note node of ``claim``'s partition exists, when a write would touch it
        (a write found a node missing or there)."""
        if finished.noted(claim) is None and not self._notes:
            return
        path = self._layout.note(claim.partition)
        if finished.noted(claim) is None and path not in self._notes:
            return
        if await self._zk.exists(path) is None:
            self._notes.discard(path)
        else:
            self._notes.add(path)

    async def _write(self, claims: list[Claim]) -> dict[Claim, int]:
        written: dict[Claim, int] = {}
        for claim in claims:
            offset = self._offset(claim)
            if offset is not None:
                written[claim] = offset
        ops: list[Op] = []
        notes: dict[Claim, frozenset[int]] = {}
        for claim, offset in written.items():
            ops.append(Check(self._layout.owner(claim.partition), claim.node_version))
            ops.append(Check(self._layout.fence(claim.partition), claim.epoch))
            data = str(offset).encode()
            path = self._layout.offset(claim.partition)
            ops.append(SetData(path, data) if claim.stored is not None else Create(path, data))
            beyond = await self._note_ops(claim, offset, ops)
            if beyond is not None:
                notes[claim] = beyond
        await self._zk.transaction(ops)
        for claim, offset in written.items():
            if claim in notes:
                self._wrote_note(claim, offset, notes[claim])
            elif self._notes:  # deleted, if it was there
                self._notes.discard(self._layout.note(claim.partition))
        return written

    async def _note_ops(self, claim: Claim, offset: int, ops: list[Op]) -> frozenset[int] | None:
        """Add to ``ops`` the steps that store what finished past ``offset`` for ``claim``
        (or delete a note that no longer holds).

        Returns:
            The offsets noted, when a note is written.
        """
        # Exactly once, what finished beyond the prefix has its output kept in memory, not
        # committed: a next claim (with the mode or without) must handle it again.
        known = None if self._states.commits.transactional else finished.noted(claim)
        if known is None and not self._notes:
            return None  # the common case: nothing noted, nothing to delete
        path = self._layout.note(claim.partition)
        beyond = frozenset() if known is None else known.beyond(offset)
        data = finished.encode(claim.epoch, offset, beyond) if beyond else b""
        if not beyond or len(data) > finished.MAX_BYTES:
            if known is not None and not beyond:
                finished.forget(claim)
            if path in self._notes:
                ops.append(Delete(path))
            return None
        parent = self._layout.finished(claim.partition)
        if parent not in self._parents:
            await self._zk.ensure_path(parent)
            self._parents.add(parent)
        ops.append(SetData(path, data) if path in self._notes else Create(path, data))
        return beyond

    def _wrote_note(self, claim: Claim, offset: int, beyond: frozenset[int]) -> None:
        """ZooKeeper holds the note of ``claim``: stored, unless it grew meanwhile."""
        self._notes.add(self._layout.note(claim.partition))
        known = finished.noted(claim)
        if known is not None and known.beyond(offset) == beyond:
            finished.note(claim, known.base, known.offsets, stored=True)
