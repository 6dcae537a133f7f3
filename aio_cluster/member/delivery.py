"""Delivery: the claimed partitions' buffers, the batches in flight, the round-robin pick, and
the commit rule (a batch whose body completed becomes its claim's pending offset).

Once every record a partition's fetches returned has been handed out and committed, its offset
moves on to the fetcher's position: past the transaction markers, aborted records and compaction
gaps that follow the last record, so a partition consumed to its end stores its log end, as a
Kafka consumer's committed position is. Never past a record not yet handed out.

A fetch error that retrying cannot mend (`FetchError`, `DeserializationError`) reaches the
iterating caller; a retriable one is logged and the fetch tried again.

This part only fetches and hands out; it never writes to ZooKeeper. Which partitions are claimed
is read from the claims mapping `aio_cluster.member.membership` keeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from ..errors import BrokerError
from ..kafka.fetcher import Fetcher, OffsetsOutOfRange
from .claims import UNPOSITIONED, Batch, Claim

__all__ = ["Delivery", "Watcher"]

log = logging.getLogger(__name__)


class Watcher(Protocol):
    """Told when running batches must end early: a processor that keeps many records of a batch
    in flight (`aio_cluster.member.processing`) stops taking them, or cancels them."""

    def draining(self, partitions: list[int]) -> None:
        """A handover waits for the running batches of ``partitions``."""

    def abandoned(self, partitions: list[int]) -> None:
        """The running batches of ``partitions`` were given up (see `Delivery.abandon()`)."""


class Delivery:
    """Hands out the batches of the claimed partitions, one in flight per partition."""

    def __init__(
        self,
        fetcher: Fetcher,
        claims: Mapping[int, Claim],
        *,
        member_id: str,
        loop_delay: float,
        max_wait_ms: int,
        trail: bool,
    ) -> None:
        """Args:
        fetcher: the member's Kafka fetcher.
        claims: the member's claims (read only here; their buffers and offsets are updated).
        member_id: named in log messages.
        loop_delay: seconds to pause after a fetch that returned nothing.
        max_wait_ms: how long a fetch may wait for records.
        trail: where no offset is stored, start at the latest offset instead of the earliest.
        """
        self._fetcher = fetcher
        self._claims = claims
        self._id = member_id
        self._loop_delay = loop_delay
        self._max_wait_ms = max_wait_ms
        self._trail = trail
        self._fetch_lock = asyncio.Lock()
        """Serialises fetches with changes of the fetcher's assignment and positions."""
        self._withheld: set[int] = set()
        """Partitions no batch is handed out of: being handed over, or claimed and not yet
        announced to the listener."""
        self._paused: set[int] = set()
        self._inflight: dict[int, tuple[Claim, int]] = {}
        """Partition -> the claim and first offset of the batch whose body runs."""
        self._voided: set[int] = set()
        """Partitions whose running batch must not be committed (a seek came meanwhile)."""
        self.batches = 0
        """Batches handed out."""
        self.records = 0
        """Records handed out."""
        self._seeks: dict[int, int] = {}
        self._positioned: dict[int, Claim] = {}
        """Partition -> the claim the fetcher's position was last set from (assign or seek): its
        position says something about that claim's records only, and a partition claimed anew
        (after its claim was lost or fenced off) starts at its new claim's offset, not where the
        fetcher was."""
        self._cursor = -1
        self.suspended = False
        """True while ZooKeeper is suspended or lost: no batch is handed out."""
        self._changed = asyncio.Event()
        """Set whenever batches, claims or the state change: wakes waiting iterators."""
        self._batch_done = asyncio.Event()
        self.watcher: Watcher | None = None
        """Told when running batches must end early, if set."""

    @property
    def withheld(self) -> frozenset[int]:
        """The partitions no batch is handed out of (see `withhold()`)."""
        return frozenset(self._withheld)

    def wake(self) -> None:
        """Wake every waiting iterator and handover."""
        self._changed.set()
        self._batch_done.set()

    async def next_batch(self, stopped: Callable[[], bool]) -> tuple[Claim, Batch] | None:
        """The next batch round-robin, fetching when none is buffered; waits while nothing is
        claimed (or ZooKeeper is suspended) without spinning.

        Args:
            stopped: True once the member closes (it may raise the member's failure).

        Returns:
            The claim and its batch, or None once ``stopped``.
        """
        while True:
            self._changed.clear()
            if stopped():
                return None
            timeout: float | None = None
            if not self.suspended:
                picked = self._pick()
                if picked is not None:
                    return picked
                fetchable = [
                    p
                    for p, claim in self._claims.items()
                    if self._available(p) and not claim.buffered
                ]
                if fetchable:
                    if await self._fetch(fetchable):
                        continue
                    timeout = self._loop_delay
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    def _pick(self) -> tuple[Claim, Batch] | None:
        ready = sorted(
            p for p, claim in self._claims.items() if claim.buffered and self._available(p)
        )
        if not ready:
            return None
        partition = next((p for p in ready if p > self._cursor), ready[0])
        self._cursor = partition
        claim = self._claims[partition]
        batch = claim.buffered.popleft()
        claim.next_offset = batch[-1].offset + 1
        self._inflight[partition] = (claim, batch[0].offset)
        self.batches += 1
        self.records += len(batch)
        return claim, batch

    def _available(self, partition: int) -> bool:
        return (
            partition not in self._inflight
            and partition not in self._withheld
            and partition not in self._paused
        )

    async def _fetch(self, partitions: list[int]) -> bool:
        """Fetch into the claims' buffers; True when anything arrived."""
        async with self._fetch_lock:
            self._apply_seeks()
            try:
                fetched = await self._fetcher.fetch(partitions, self._max_wait_ms)
            except OffsetsOutOfRange as exc:
                await self._reset_out_of_range(exc.partitions)
                return False
            except BrokerError as exc:
                log.warning("member %s: %s", self._id, exc)
                return False
        arrived = False
        for partition, records in fetched.items():
            claim = self._claims.get(partition)
            if claim is None:
                continue
            if partition in self._withheld or partition in self._seeks:
                self._drop(claim)
                continue
            claim.buffered.append(records)
            arrived = True
        for partition in partitions:
            claim = self._claims.get(partition)
            if claim is not None:
                self._step_over_gap(claim)
        return arrived

    def _step_over_gap(self, claim: Claim) -> None:
        """Move a claim whose fetched records were all handed out and finished on to the
        fetcher's position, past what follows them without being a record (transaction markers,
        aborted records, compaction gaps); store that when everything before was committed."""
        partition = claim.partition
        if (
            claim.buffered
            or partition in self._inflight
            or partition in self._seeks
            or partition in self._withheld
            or self._positioned.get(partition) is not claim
        ):
            return
        position = self._fetcher.position(partition)
        if position is None or position <= claim.next_offset:
            return
        committed = claim.pending if claim.pending is not None else claim.stored
        if committed is None:
            committed = claim.earliest  # nothing stored: the start needs no commit
        if committed == claim.next_offset:
            claim.pending = position
        claim.next_offset = position

    async def _reset_out_of_range(self, partitions: dict[int, int]) -> None:
        """Restart partitions whose position the broker does not hold.

        Before the earliest offset (retention deleted the records): at the earliest. Past the
        log end (the topic was made again, or an offset was set by hand): as where none is
        stored, at the earliest or with ``trail`` at the log end. The new start is stored at
        once, so that neither the next owner nor the lag goes on from an offset that is not.
        """
        bounds = await self._fetcher.bounds(list(partitions))
        for partition, (earliest, latest) in bounds.items():
            claim = self._claims.get(partition)
            if claim is None:
                continue
            offset = partitions[partition]
            start = latest if self._trail and offset > latest else earliest
            log.warning(
                "member %s: offset %d of partition %d is out of range %d..%d; going on from %d",
                self._id,
                offset,
                partition,
                earliest,
                latest,
                start,
            )
            claim.next_offset = start
            if partition not in self._inflight:
                claim.pending = start
            self._drop(claim)
        self._apply_seeks()

    def _drop(self, claim: Claim) -> None:
        """Forget a claim's buffered records; reading resumes at its next offset."""
        claim.buffered.clear()
        self._seeks[claim.partition] = claim.next_offset

    def _apply_seeks(self) -> None:
        # Only the fetcher's partitions can seek; a claim not yet handed to it starts at its
        # next offset when reassign() hands it over.
        for partition, offset in self._seeks.items():
            if partition in self._fetcher.assigned:
                self._fetcher.seek(partition, offset)
                claim = self._claims.get(partition)
                if claim is not None:
                    self._positioned[partition] = claim
        self._seeks.clear()

    def finish(self, claim: Claim, batch: Batch, *, completed: bool, commit: bool) -> None:
        """A batch's body ended: commit it when it completed, else deliver it again.

        A batch abandoned at a handover or overtaken by a seek is neither.
        """
        partition = claim.partition
        running = self._inflight.get(partition)
        if running is None or running[0] is not claim:
            return
        del self._inflight[partition]
        if partition in self._voided:
            self._voided.discard(partition)
        elif self._claims.get(partition) is claim:
            if not completed:
                claim.next_offset = batch[0].offset
                self._drop(claim)
            else:
                if commit:
                    claim.pending = batch[-1].offset + 1
                self._step_over_gap(claim)
        self._batch_done.set()
        self._changed.set()

    def progress(self, claim: Claim, offset: int) -> None:
        """The records of a running batch before ``offset`` completed: ``offset`` becomes the
        claim's pending offset (unless the batch was abandoned or overtaken by a seek)."""
        partition = claim.partition
        running = self._inflight.get(partition)
        if (
            running is not None
            and running[0] is claim
            and partition not in self._voided
            and self._claims.get(partition) is claim
        ):
            claim.pending = offset

    async def drain(self, partitions: list[int]) -> None:
        """Stop handing out batches of ``partitions`` and wait until their bodies ended.

        The partitions stay withheld until `hand_out()`.
        """
        for partition in partitions:
            self._withheld.add(partition)
            self._drop(self._claims[partition])
        if self.watcher is not None:
            self.watcher.draining(partitions)
        while self._inflight.keys() & set(partitions):
            self._batch_done.clear()
            await self._batch_done.wait()

    def abandon(self, partitions: list[int]) -> dict[int, int]:
        """Give up waiting for the bodies of ``partitions``: their batches will not be committed.

        Returns:
            Partition -> the first offset of its abandoned batch.
        """
        abandoned = {}
        for partition in partitions:
            running = self._inflight.pop(partition, None)
            if running is not None:
                abandoned[partition] = running[1]
                self._voided.discard(partition)
        self._batch_done.set()
        if abandoned and self.watcher is not None:
            self.watcher.abandoned(sorted(abandoned))
        return abandoned

    def withhold(self, partitions: list[int]) -> None:
        """Hand out no batch of ``partitions`` until `hand_out()`."""
        self._withheld.update(partitions)

    def hand_out(self, partitions: list[int]) -> None:
        """Hand out batches of ``partitions`` again (undoes `withhold()` and `drain()`)."""
        self._withheld.difference_update(partitions)
        self._changed.set()

    def forget_paused(self, gone: list[int]) -> None:
        """``gone`` are no longer claimed: their pause ended with their claim."""
        self._paused.difference_update(gone)

    @property
    def paused(self) -> list[int]:
        """The paused partitions, sorted."""
        return sorted(self._paused)

    def pause(self, partitions: list[int]) -> None:
        """Hand out no batch of ``partitions`` (claimed) until `resume()`."""
        self._paused.update(partitions)

    def resume(self, partitions: list[int]) -> None:
        """Hand out batches of ``partitions`` again, from where they stopped."""
        self._paused.difference_update(partitions)
        self._changed.set()

    def seek(self, partition: int, offset: int) -> None:
        """Start the next batch of the claimed ``partition`` at ``offset``.

        Buffered records and a completed offset not yet stored are dropped; a batch whose body
        runs now will not be committed.
        """
        claim = self._claims[partition]
        claim.next_offset = offset
        claim.pending = None
        if partition in self._inflight:
            self._voided.add(partition)
        self._drop(claim)
        self._changed.set()

    async def position(self) -> None:
        """Where no offset is stored, start at the earliest offset (the latest with ``trail``).

        A stored offset is taken as it is: one the broker does not hold is reset at the first
        fetch (see `_reset_out_of_range`).
        """
        fresh = [p for p, claim in self._claims.items() if claim.next_offset == UNPOSITIONED]
        if not fresh:
            return
        for partition, (earliest, latest) in (await self._fetcher.bounds(fresh)).items():
            claim = self._claims[partition]
            claim.earliest = earliest
            claim.next_offset = latest if self._trail else earliest
            if self._trail:
                # A trailing start is stored at once, so the next owner goes on from here.
                claim.pending = claim.next_offset

    async def reassign(self) -> bool:
        """Hand the claims to the fetcher when they differ from what it fetches.

        Returns:
            True when the fetcher's partitions changed.
        """
        if set(self._claims) == self._fetcher.assigned and all(
            self._positioned.get(p) is claim for p, claim in self._claims.items()
        ):
            return False
        async with self._fetch_lock:
            self._seeks.clear()
            positions: dict[int, int] = {}
            for partition, claim in self._claims.items():
                if self._positioned.get(partition) is claim and claim.buffered:
                    # Staying: keep what is buffered and fetch on after it, so a rebalance
                    # does not pause the partitions it leaves in place.
                    positions[partition] = claim.buffered[-1][-1].offset + 1
                else:
                    claim.buffered.clear()
                    positions[partition] = claim.next_offset
            self._fetcher.assign(positions)
            self._positioned = dict(self._claims)
        self._changed.set()
        return True

    def lose(self) -> None:
        """Every claim is gone (the session expired): forget what was withheld or sought."""
        self.suspended = True
        self._withheld.clear()
        self._paused.clear()
        self._seeks.clear()
        self._batch_done.set()

    async def stop(self) -> None:
        """Close the fetcher once no fetch runs."""
        async with self._fetch_lock:
            await self._fetcher.stop()
