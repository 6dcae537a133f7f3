"""Delivery: the driver between the partitions' state and the Kafka fetcher. It fetches what the
state says is fetchable, hands out the batch it picks, and wakes the iterators and handovers that
wait on it.

Which batch goes next, what a finished batch commits, where a partition reads from: all of that is
decided by `aio_cluster.member.delivery.partitions.PartitionStates`; this part only does the waiting
and the I/O. It never writes to ZooKeeper.

Once every record a partition's fetches returned has been handed out and committed, its offset
moves on to the fetcher's position: past the transaction markers, aborted records and compaction
gaps that follow the last record, so a partition consumed to its end stores its log end, as a
Kafka consumer's committed position is. Never past a record not yet handed out.

With a budget (``max_buffered_bytes``) the fetcher holds at most one response per broker (see
`aio_cluster.kafka.fetcher`), and delivery takes every record of it at each fetch, of every
partition that may hand out, whether its batches run or wait: so the next response is on its
way while the batches taken are handed out. It keeps the fetcher from fetching while what it
holds (`PartitionStates.buffered_bytes`) plus one response per broker would pass the budget
(`FetcherLike.fits`), and lets it fetch again once batches handed out made room; a partition
with `FetchBudget.ahead_bytes` waiting is not fetched on until they are handed out.

A fetch error that retrying cannot mend (`FetchError`, `DeserializationError`) reaches the
iterating caller; a retriable one is logged and the fetch tried again. A fetcher that cannot
fetch any more (`FetchStalledError`) is told to the ``stalled`` hook the delivery is made with:
the member fails with it, which the iterating caller gets, and leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol, cast

import anyio

from ...errors import BrokerError, FetchStalledError, NotOwnedError, OffsetsOutOfRange
from ...kafka.budget import FetchBudget
from ...kafka.topics import PartitionKey
from .claims import Batch, Claim
from .partitions import Grows, PartitionStates

__all__ = ["BatchWatcher", "Delivery", "FetcherLike"]

log = logging.getLogger(__name__)


class FetcherLike(Protocol):
    """What delivery needs of the Kafka fetcher (`aio_cluster.kafka.fetcher.Fetcher`)."""

    @property
    def assigned(self) -> frozenset[PartitionKey]: ...

    def assign(self, positions: Mapping[PartitionKey, int]) -> None: ...

    def seek(self, partition: PartitionKey, offset: int) -> None: ...

    def position(self, partition: PartitionKey) -> int | None: ...

    @property
    def budget(self) -> FetchBudget: ...

    def hold(self, partitions: Collection[PartitionKey]) -> None: ...

    async def bounds(
        self, partitions: Collection[PartitionKey]
    ) -> dict[PartitionKey, tuple[int, int]]: ...

    async def fetch(
        self, partitions: Collection[PartitionKey], timeout_ms: int
    ) -> dict[PartitionKey, list[Any]]: ...

    async def stop(self) -> None: ...


class BatchWatcher(Protocol):
    """Told when running batches must end early: a processor that keeps many records of a batch
    in flight (`aio_cluster.member.processing.processor`) stops taking them, or cancels them."""

    def report(self, partitions: Collection[PartitionKey] = ()) -> None:
        """Tell `progress()` how far the running batches got, now (it may wait for a turn of
        the event loop otherwise); those of ``partitions`` as far as they got, though they may
        not have moved since the last turn (a run of handlers in place books its records only
        when asked)."""

    def draining(self, partitions: list[PartitionKey]) -> None:
        """A handover waits for the running batches of ``partitions``."""

    def abandoned(self, partitions: list[PartitionKey]) -> None:
        """The running batches of ``partitions`` were given up (see `Delivery.abandon()`)."""

    def halt(self) -> None:
        """ZooKeeper is out of reach: start no record until `go_on()`."""

    def go_on(self) -> None:
        """ZooKeeper answers again."""

    def lingering(self, partitions: Collection[PartitionKey]) -> dict[PartitionKey, list[Any]]:
        """Of ``partitions``, those whose given-up work still runs, with its records."""

    async def quiet(
        self, partitions: Collection[PartitionKey], bound: float
    ) -> dict[PartitionKey, list[Any]]:
        """Wait (at most ``bound`` seconds) until the given-up work of ``partitions`` ended;
        returns what still runs, as `lingering()`."""


FETCH_HOLD_MS = 100
"""The longest one fetch waits for records while it holds the fetch lock: a rebalance's
`Delivery.reassign` waits for that lock, so a fetch must not wait out the broker's whole
``max_wait`` (half a second by default). The broker's long poll goes on in aiokafka meanwhile,
and the next fetch takes its answer."""


async def _let_the_fetcher_send() -> None:
    """Give aiokafka's background fetch the few turns of the loop it takes to send its next
    request (it is woken once records were taken), so that the response is on its way while
    the batches just taken are handed out: handing a batch out waits on nothing, so without
    this the request would go out only once every batch was handed out and the next fetch
    waits."""
    for _ in range(3):
        await asyncio.sleep(0)


class Delivery:
    """Hands out the batches of the claimed partitions, one in flight per partition."""

    def __init__(
        self,
        fetcher: FetcherLike,
        states: PartitionStates,
        *,
        member_id: str,
        loop_delay: float,
        max_wait_ms: int,
        trail: bool,
        label: Callable[[PartitionKey], str] = lambda partition: f"partition {partition}",
        handed_out: Callable[[Batch], None] | None = None,
        stalled: Callable[[FetchStalledError], None] | None = None,
    ) -> None:
        """Args:
        fetcher: the member's Kafka fetcher.
        states: the member's partition states.
        member_id: named in log messages.
        loop_delay: seconds to pause after a fetch that failed.
        max_wait_ms: how long a fetch may wait for records (at most `FETCH_HOLD_MS`).
        trail: where no offset is stored, start at the latest offset instead of the earliest.
        label: names a partition key in log messages (its topic too, of many topics).
        handed_out: told of each batch handed out, if given (the member's OpenTelemetry
            counter).
        stalled: told when the fetcher cannot fetch any more (the member fails and leaves), if
            given; else the fetch raises it.
        """
        self._fetcher = fetcher
        self._states = states
        self._id = member_id
        self._loop_delay = loop_delay
        self._max_wait_ms = min(max_wait_ms, FETCH_HOLD_MS)
        self._trail = trail
        self._label = label
        self._fetch_lock = asyncio.Lock()
        """Serialises fetches with changes of the fetcher's assignment and positions."""
        self._changed = asyncio.Event()
        """Set whenever batches, claims or the state change: wakes waiting iterators."""
        self._batch_done = asyncio.Event()
        self.watcher: BatchWatcher | None = None
        """Told when running batches must end early, if set."""
        self._handed_out = handed_out
        self._stalled = stalled
        self.grows: Grows | None = None
        """Whether a partition's running batch takes its next batch into it now, if set (a
        processor whose batch waits on a few records: see `PartitionStates.pick`)."""
        self.fresh: Callable[[], bool] = lambda: True
        """Whether ZooKeeper was heard from recently enough that work may start (see
        `aio_cluster.member.protocol.liveness`); when not, it suspends this delivery itself."""

    def wake(self) -> None:
        """Wake every waiting iterator and handover."""
        self._changed.set()
        self._batch_done.set()

    def poke(self) -> None:
        """Wake the waiting iterators: a running batch may take its partition's next batch now
        (see `grows`)."""
        self._changed.set()

    async def next_batch(self, is_closing: Callable[[], bool]) -> tuple[Claim, Batch] | None:
        """The next batch round-robin, fetching when none is buffered; waits while nothing is
        claimed (or ZooKeeper is suspended) without spinning.

        Args:
            is_closing: True once the member closes (it may raise the member's failure).

        Returns:
            The claim and its batch, or None once ``is_closing()``.
        """
        while True:
            self._changed.clear()
            if is_closing():
                return None
            timeout: float | None = None
            records = self._states.records
            picked = self._states.pick(self.grows) if self.may_start() else None
            if picked is not None:
                if self._handed_out is not None:
                    # A running batch that grew hands out only the records it took in.
                    batch, added = picked[1], self._states.records - records
                    self._handed_out(batch if added == len(batch) else batch[-added:])
                return picked
            fetchable = self._states.fetchable(ahead=self._ahead(), grows=self.grows)
            if fetchable:
                fetched = await self._fetch(fetchable)
                if fetched:
                    # Records came, or the fetch waited for none (up to FETCH_HOLD_MS, while
                    # the broker's long poll goes on): that is the wait, so fetch again at once.
                    continue
                # The fetch failed, or the budget is spent until batches handed out end (which
                # wakes this wait).
                timeout = self._loop_delay
            with anyio.move_on_after(timeout):
                await self._changed.wait()

    def _ahead(self) -> int | None:
        """With a budget, how many bytes of a partition may wait before it is fetched no
        further (see `PartitionStates.fetchable`); None without one."""
        return self._fetcher.budget.ahead_bytes if self._fetcher.budget.budgeted else None

    async def _fetch(self, partitions: list[PartitionKey]) -> bool:
        """Fetch into the claims' buffers; False when the fetch failed (the caller pauses
        ``loop_delay`` before the next try) or the budget is spent."""
        async with self._fetch_lock:
            self._apply_seeks()
            if self._fetcher.budget.budgeted:
                # Seeks applied (a seek drops what is buffered): take what may be taken now.
                takers = self._hold_by_budget()
                if takers is None:
                    return False
                partitions = takers
            try:
                fetched = await self._fetcher.fetch(partitions, self._max_wait_ms)
            except OffsetsOutOfRange as exc:
                # errors.py is below kafka/ and types them int: the fetcher raises with keys
                await self._reset_out_of_range(cast("Mapping[PartitionKey, int]", exc.partitions))
                return True
            except BrokerError as exc:
                log.warning("member %s: %s", self._id, exc)
                return False
            except FetchStalledError as exc:
                if self._stalled is None:
                    raise
                log.error("member %s gives its partitions up: %s", self._id, exc)
                self._stalled(exc)
                return False
        for partition, records in fetched.items():
            lost = self._states.fetched(partition, records)
            if lost is not None:
                log.warning(
                    "member %s: a fetch of %s skipped offsets %d to %d, which the broker holds "
                    "(the fetcher lost them); they were read again",
                    self._id,
                    self._label(partition),
                    lost[0],
                    lost[1] - 1,
                )
        if self._fetcher.budget.budgeted:
            # Nothing suspended since aiokafka gave these records (its reads of valid positions
            # return at once), so it sent no request since: none goes out that would pass the
            # budget, nor for a partition that has enough waiting.
            self._hold_by_budget()
        for partition in partitions:
            self._states.stepped_over(partition, self._fetcher.position(partition))
        if fetched:
            await _let_the_fetcher_send()
        return True

    def _hold_by_budget(self) -> list[PartitionKey] | None:
        """With a budget: have the fetcher fetch only the partitions that may be taken now
        (`PartitionStates.fetchable` with `FetchBudget.ahead_bytes`), or none while what is
        held plus one response per broker would pass the budget.

        Returns:
            Those partitions, or None when the budget is spent.
        """
        if not self._fetcher.budget.fits(self._states.buffered_bytes):
            self._fetcher.hold(self._fetcher.assigned)
            return None
        takers = self._states.fetchable(ahead=self._fetcher.budget.ahead_bytes)
        self._fetcher.hold(self._fetcher.assigned.difference(takers))
        return takers

    async def _reset_out_of_range(self, partitions: Mapping[PartitionKey, int]) -> None:
        """Restart partitions whose position the broker does not hold, where
        `PartitionStates.out_of_range` says (the earliest offset, or with ``trail`` the log end
        for a position past it), and store that start."""
        bounds = await self._fetcher.bounds(list(partitions))
        for partition, (earliest, latest) in bounds.items():
            offset = partitions[partition]
            start = self._states.out_of_range(
                partition, offset, earliest, latest, trail=self._trail
            )
            if start is not None:
                log.warning(
                    "member %s: offset %d of %s is out of range %d..%d; going on from %d",
                    self._id,
                    offset,
                    self._label(partition),
                    earliest,
                    latest,
                    start,
                )
        self._apply_seeks()

    def _apply_seeks(self) -> None:
        for partition, offset in self._states.seeks().items():
            if partition in self._fetcher.assigned:
                self._fetcher.seek(partition, offset)

    def finish(self, claim: Claim, batch: Batch, *, completed: bool, commit: bool) -> bool:
        """A batch's body ended: commit it when it completed, else deliver it again (see
        `PartitionStates.finished`).

        Returns:
            False when the batch was no longer in flight (abandoned, or its claim ended).
        """
        position = self._fetcher.position(claim.partition)
        if self._states.finished(
            claim, batch, completed=completed, commit=commit, position=position
        ):
            self.wake()
            return True
        return False

    def progress(self, claim: Claim, batch: Batch, offset: int) -> None:
        """The records of a running batch before ``offset`` completed (see
        `PartitionStates.progressed`)."""
        self._states.progressed(claim, batch, offset)

    async def drain(self, partitions: list[PartitionKey]) -> None:
        """Stop handing out batches of ``partitions`` and wait until their bodies ended.

        The partitions stay withheld until `hand_out()`.
        """
        self._states.drain(partitions)
        if self.watcher is not None:
            self.watcher.draining(partitions)
        while self._states.running(partitions):
            self._batch_done.clear()
            await self._batch_done.wait()

    def abandon(self, partitions: list[PartitionKey]) -> dict[PartitionKey, int]:
        """Give up waiting for the bodies of ``partitions``: their batches will not be committed.

        Returns:
            Partition -> the first offset of its abandoned batch.
        """
        if self.watcher is not None:
            # Read again from the first unfinished record: as it is now.
            self.watcher.report(partitions)
        abandoned = self._states.abandoned(partitions)
        # A partition kept reads its batch again: wake the iterators as well as the handovers.
        self.wake()
        if abandoned and self.watcher is not None:
            self.watcher.abandoned(sorted(abandoned))
        return abandoned

    async def quiet(
        self, partitions: Collection[PartitionKey], bound: float
    ) -> dict[PartitionKey, list[Any]]:
        """Wait (at most ``bound`` seconds) until the cancelled handlers of ``partitions``
        ended.

        Returns:
            Partition -> the records still in a handler, for those whose handlers run on.
        """
        if self.watcher is None:
            return {}
        return await self.watcher.quiet(partitions, bound)

    def lingering(self, partitions: Collection[PartitionKey]) -> dict[PartitionKey, list[Any]]:
        """Of ``partitions``, those whose cancelled handlers still run, with their records."""
        return {} if self.watcher is None else self.watcher.lingering(partitions)

    def may_start(self) -> bool:
        """Whether a batch or a record may start now (see `fresh`)."""
        return not self._states.suspended and self.fresh()

    @property
    def in_flight(self) -> list[PartitionKey]:
        """The partitions whose batch is in flight, sorted."""
        return self._states.in_flight

    @property
    def suspended(self) -> bool:
        """True while nothing starts: ZooKeeper is out of reach, or the session was lost."""
        return self._states.suspended

    def suspend(self) -> None:
        """ZooKeeper is out of reach: hand out no batch, and start no record of one handed out
        already, until `resume()`."""
        self._states.suspended = True
        if self.watcher is not None:
            self.watcher.halt()

    def resume(self) -> None:
        """ZooKeeper answers again (on the same session, or a new one whose claims are made
        afresh): batches and records start again."""
        self._states.suspended = False
        if self.watcher is not None:
            self.watcher.go_on()
        self.wake()

    async def let_go(self, bound: float) -> dict[PartitionKey, list[Any]]:
        """The session may expire any moment: give up every running batch (read again later
        from its first unfinished record), cancel its handlers and wait for them, at most
        ``bound`` seconds.

        Returns:
            As `quiet()`: what still runs after the bound.
        """
        self.suspend()
        running = self.in_flight
        self.abandon(running)
        return await self.quiet({*running, *self._states.claims}, bound)

    def pause(self, partitions: list[PartitionKey]) -> None:
        """Hand out no batch of ``partitions`` until they are resumed; one no longer owned has
        nothing left to pause."""
        with contextlib.suppress(NotOwnedError):
            self._states.pause(partitions)

    def hold(self, partitions: Collection[PartitionKey]) -> None:
        """An operator paused ``partitions`` (all of them; see `PartitionStates.hold`): none of
        their batches is handed out, and a batch of theirs that runs in `process()` starts no
        more records (it is read again from its first unfinished record once let go)."""
        new = self._states.hold(partitions)
        if new and self.watcher is not None:
            self.watcher.draining([p for p in new if self._states.running([p])])
        self.wake()

    def hand_out(self, partitions: list[PartitionKey]) -> None:
        """Hand out batches of ``partitions`` again (undoes withholding and `drain()`)."""
        self._states.hand_out(partitions)
        self._changed.set()

    async def position(self) -> None:
        """Where no offset is stored, start at the earliest offset (the latest with ``trail``).

        A stored offset is taken as it is: one the broker does not hold is reset at the first
        fetch (see `_reset_out_of_range`).
        """
        fresh = self._states.commits.unpositioned()
        if not fresh:
            return
        for partition, (earliest, latest) in (await self._fetcher.bounds(fresh)).items():
            # A trailing start is stored at once, so the next owner goes on from here.
            self._states.commits.positioned(
                partition, latest if self._trail else earliest, earliest=earliest, store=self._trail
            )

    async def reassign(self) -> bool:
        """Give the fetcher the claims' positions when it does not have them.

        Returns:
            True when the fetcher's partitions changed.
        """
        async with self._fetch_lock:
            before = self._fetcher.assigned
            positions = self._states.assignment()
            if positions is None:
                return False
            self._fetcher.assign(positions)
        self._changed.set()
        return before != self._fetcher.assigned

    async def stop(self) -> None:
        """Close the fetcher once no fetch runs."""
        async with self._fetch_lock:
            await self._fetcher.stop()
