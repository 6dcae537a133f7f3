"""Processing: a handler run for every record of the claimed partitions, many records at once, in
key order, with retries and a policy for records that fail for good.

`Processor` takes batches from `aio_cluster.member.delivery.delivery` like the ``async for`` loop
does, one running batch per partition, but keeps a batch running while up to ``concurrency`` of its
records (over all partitions) are in a handler: the workers of
`aio_cluster.member.processing.workers` run them, and `aio_cluster.member.processing.outcomes` says
what each end means. Which records may start, in which order, and how far the completed prefix got
is the pure bookkeeping of `aio_cluster.member.processing.windows`; this module takes the batches,
tells the delivery how far a prefix got (once a turn of the event loop, and at once before it gives
a batch up) and settles them. The offset stored is the first record not yet finished (the completed
prefix), never past it.

A batch whose records were all taken while some wait (for a retry, in a slow handler, or behind
their keys) takes its partition's next batch into it (`Processor._grows()`), so a waiting record
holds back its own key only, while the running batches keep fewer than ``max_records`` records.

A batch ends when all its records finished (it is committed, as a completed loop body), when its
partition is handed over (the handover waits for the handlers in flight, and only the gaps before
the furthest record start; past ``rebalance_timeout`` they are cancelled and awaited, and the
first unfinished record is delivered again), or when the processor stops. A batch that ends
unfinished notes the records that finished past its prefix, which are stored beside its offset
and passed over when its records come again, here or on the next owner
(`aio_cluster.member.delivery.finished`): a stop that cuts handlers short repeats no finished
record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

import anyio

from ...config import Processing
from ...errors import AioClusterError
from ...kafka.dead_letters import DeadLetters
from ...kafka.records import Record
from ...kafka.topics import PartitionKey
from ..delivery.claims import Batch, Claim
from ..delivery.delivery import Delivery
from ..delivery.finished import forget, note, noted
from .bounds import bounded
from .outcomes import Outcomes
from .windows import Window
from .workers import Handler, check_handler

if TYPE_CHECKING:
    from ...otel.telemetry import Telemetry

__all__ = ["Handler", "Processor", "check_handler"]


def _record_named(record: Record) -> str:
    return f"the record at offset {record.offset} of partition {record.partition}"


class Processor(Outcomes):
    """Runs a handler for every record handed out by a member's delivery (see the module)."""

    def __init__(
        self,
        delivery: Delivery,
        handler: Handler,
        policy: Processing,
        *,
        is_closing: Callable[[], bool],
        member_id: str,
        dead_letters: DeadLetters | None = None,
        telemetry: Telemetry | None = None,
        record_spans: bool = True,
        on_stopped: Callable[[], None] | None = None,
    ) -> None:
        """Args:
        delivery: the member's delivery; its batches are taken from here.
        handler: ``async def handler(record)``.
        policy: concurrency, ordering, retries and the failure policy.
        is_closing: True once the member closes (it may raise the member's failure).
        member_id: named in log messages.
        dead_letters: the dead-letter producer (with ``on_failure="dead_letter"``).
        telemetry: runs each handler attempt and dead letter in a span, if given.
        record_spans: whether a record's run has a span of its own (False under
            ``process_bulk()``, whose calls have theirs).
        on_stopped: told when ``on_failure="stop"`` paused a partition, if given.
        """
        if policy.attempt_timeout is not None:
            handler = bounded(
                handler, policy.attempt_timeout, member_id=member_id, named=_record_named
            )
        super().__init__(
            delivery,
            handler,
            policy,
            member_id=member_id,
            dead_letters=dead_letters,
            telemetry=telemetry,
            record_spans=record_spans,
            on_stopped=on_stopped,
        )
        self._is_closing = is_closing
        self._windows: dict[PartitionKey, Window] = {}
        self._held = 0
        """Records of the running batches not yet finished (started or not), as far as their
        windows told (`Window.take_grown()`)."""
        self._kept = 0
        """Records of the running batches, finished or not: what they keep in memory. A batch
        grows (`_grows()`) only while this is under ``max_records``."""
        self._untold: set[Window] = set()
        """Windows whose prefix grew since the delivery was told (`report()`)."""
        self._telling = False
        """True while a `report()` is due at the end of this turn of the event loop."""
        self._room = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._scope = anyio.CancelScope()
        self._failure: BaseException | None = None
        self._ended = asyncio.Event()
        self._leaving: set[Window] = set()
        """Abandoned batches whose cancelled handlers have not ended yet."""
        self._deferred: dict[PartitionKey, Window] = {}
        """Partition -> a batch taken while an abandoned one of it still runs: its records
        start once that ended, never beside it."""
        self._calm = asyncio.Event()
        self.running = False
        """True from `run()` until it returned."""

    # -- what statistics() reads -------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Records started and not finished (cancelled ones not yet ended included)."""
        return sum(len(window.in_handlers()) for window in self._all_windows())

    def oldest_in_flight(self) -> float | None:
        """Seconds since the oldest record in flight started, or None when none is."""
        starts = [entry.started for w in self._all_windows() for entry in w.running]
        return time.monotonic() - min(starts) if starts else None

    def running_since(self) -> list[tuple[PartitionKey, int, float]]:
        """Each record in flight: its partition, its offset and when its current attempt (or
        the wait after a failure) started (``time.monotonic()``): what the member's stuck watch
        looks at."""
        return [
            (window.partition, entry.record.offset, entry.started)
            for window in self._all_windows()
            for entry in window.running
        ]

    def attempt_started(self, records: Collection[Record]) -> None:
        """An attempt of a bulk call of ``records`` started, or failed (its back-off starts):
        their records' time in flight is counted from now (``stuck_after`` is an attempt's)."""
        wanted = {(record.topic, record.partition, record.offset) for record in records}
        now = time.monotonic()
        for window in self._all_windows():
            for entry in window.running:
                record = entry.record
                if (record.topic, record.partition, record.offset) in wanted:
                    entry.started = now

    def _all_windows(self) -> list[Window]:
        return [*self._windows.values(), *self._leaving]

    def handling(self) -> dict[PartitionKey, list[Record]]:
        """Partition -> the records in a handler now (cancelled ones not yet ended included)."""
        found: dict[PartitionKey, list[Record]] = {}
        for window in self._all_windows():
            records = window.in_handlers()
            if records:
                found.setdefault(window.partition, []).extend(records)
        return found

    def lingering(self, partitions: Collection[PartitionKey]) -> dict[PartitionKey, list[Record]]:
        """Of ``partitions``, those whose abandoned handlers still run, each with the records
        they run."""
        found: dict[PartitionKey, list[Record]] = {}
        for window in self._leaving:
            if window.partition in partitions:
                found.setdefault(window.partition, []).extend(window.in_handlers())
        return found

    async def quiet(
        self, partitions: Collection[PartitionKey], bound: float
    ) -> dict[PartitionKey, list[Record]]:
        """Wait (at most ``bound`` seconds) until the cancelled handlers of ``partitions``
        ended.

        Returns:
            Those still running, as `lingering()`.
        """
        with anyio.move_on_after(bound):
            while self.lingering(partitions):
                self._calm.clear()
                await self._calm.wait()
        return self.lingering(partitions)

    # -- running -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Process records until the member closes, `shutdown()`, or a failure.

        Raises:
            Exception: the handler's error, with ``on_failure="raise"``.
            AioClusterError: the member failed, or the dead-letter topic is not usable.
        """
        self.running = True
        self._delivery.watcher = self
        self._delivery.grows = self._grows
        if self._delivery.suspended:
            self.halt()
        try:
            with self._scope:
                if self._dead_letters is not None:
                    await self._dead_letters.start()
                async with anyio.create_task_group() as tasks:
                    self._tasks = tasks
                    for _ in range(self._policy.concurrency):
                        tasks.start_soon(self._work)
                    tasks.start_soon(self._take)
        finally:
            if self._delivery.watcher is self:
                self._delivery.watcher = None
                self._delivery.grows = None
            for window in list(self._windows.values()):
                self._settle(window)
            # The task group ended: no handler runs any more.
            self._leaving.clear()
            self._deferred.clear()
            self._held_back.clear()
            self._calm.set()
            self._ready.clear()
            self._open.clear()
            if self._dead_letters is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(5.0):
                    await self._dead_letters.stop()
            self.running = False
            self._ended.set()
        if self._failure is not None:
            raise self._failure

    def handles(self, task: asyncio.Task[Any] | None) -> bool:
        """Whether ``task`` runs one of this processor's handlers."""
        return task in self._own

    async def shutdown(self, bound: float) -> None:
        """Stop taking records, wait for the handlers in flight (at most ``bound`` seconds;
        then they are cancelled and their records delivered again), and end `run()`.

        Args:
            bound: the most seconds to wait for the handlers in flight."""
        for window in list(self._windows.values()):
            self._stop_taking(window)
        if asyncio.current_task() in self._own:
            # Called from a handler (close() inside one): waiting for it would never end.
            self._scope.cancel()
            return
        try:
            with anyio.move_on_after(bound):
                await self._idle.wait()
        finally:
            # However the wait ends (its bound, or the caller cancelled: close()'s deadline),
            # run() ends with it; else its workers would wait for records for ever.
            self._scope.cancel()
        await self.ended()

    def cancel(self) -> None:
        """End `run()` now: its handlers are cancelled (their records delivered again)."""
        self._scope.cancel()

    async def ended(self) -> None:
        """Wait until `run()` returned (at once when it is not running)."""
        if self.running:
            await self._ended.wait()

    def halt(self) -> None:
        """ZooKeeper is out of reach: start no record (a retry waits too) until `go_on()`;
        the handlers in flight run on."""
        self._halted = True
        self._going.clear()

    def go_on(self) -> None:
        """ZooKeeper answers again: the records held back start, in order."""
        self._halted = False
        self._going.set()
        held, self._held_back = self._held_back, []
        for entry in held:
            self._dispatch(entry)

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        self._scope.cancel()

    # -- taking batches ----------------------------------------------------------------------

    async def _take(self) -> None:
        """Take batches from the delivery while fewer than ``max_records`` are held."""
        try:
            while True:
                while self._held >= self._policy.max_records:
                    self._room.clear()
                    await self._room.wait()
                picked = await self._delivery.next_batch(self._is_closing)
                if picked is None:
                    # The member closes: close() ends the processor once its handlers are done.
                    for window in list(self._windows.values()):
                        self._stop_taking(window)
                    return
                self._admit(*picked)
        except AioClusterError as exc:
            self._fail(exc)

    def _admit(self, claim: Claim, batch: Batch) -> None:
        window = self._windows.get(claim.partition)
        if window is not None and window.batch is batch:
            self._grown(window)
            return
        window = Window(claim, batch, self._policy.ordering)
        self._windows[claim.partition] = window
        self.failed_at.pop(claim.partition, None)
        self._held += len(batch)
        self._kept += len(batch)
        self._idle.clear()
        if self._pass_finished(window):
            return  # every record finished before: committed
        if self.lingering((claim.partition,)):
            self._deferred[claim.partition] = window
            return
        self._open.append(window)
        self._wake(len(batch))

    def _grows(self, partition: PartitionKey) -> bool:
        """Whether the running batch of ``partition`` takes its partition's next batch into
        it now (`Delivery.grows`): all its records were taken and some wait (for a retry, a
        slow handler, or behind their keys), so the other keys of the records that follow
        run meanwhile; while what the running batches keep stays under ``max_records``."""
        window = self._windows.get(partition)
        return (
            window is not None
            and self._kept < self._policy.max_records
            and partition not in self._deferred
            and window.may_grow()
        )

    def _grown(self, window: Window) -> None:
        """``window``'s batch took its partition's next records (see `_grows()`): they are
        taken after the others (those noted as finished passed over)."""
        added = window.grow()
        self._held += added
        self._kept += added
        found = noted(window.claim)
        if found is not None:
            batch, offsets = window.batch, found.offsets
            window.pass_over(
                [i for i in range(len(batch) - added, len(batch)) if batch[i].offset in offsets]
            )
            self._grew(window, window.take_grown())
            if window.gone:
                return
        if window not in self._open:
            self._open.append(window)
        self._wake(added)

    def _offer(self, window: Window) -> None:
        """``window`` may have taken all its records while some wait: the delivery looks
        whether its batch grows (see `_grows()`)."""
        if window.may_grow():
            self._delivery.poke()

    def _pass_finished(self, window: Window) -> bool:
        """Pass over the records of ``window`` noted as finished (by an earlier ``process()``
        stopped without a graceful handover, here or on another member: see
        `aio_cluster.member.delivery.finished`); a batch that starts before the note's prefix (read
        again after a seek back) forgets it.

        Returns:
            True when every record finished before (the batch is settled).
        """
        claim, batch = window.claim, window.batch
        found = noted(claim)
        if found is None:
            return False
        if batch[0].offset < found.base:
            forget(claim)
            return False
        offsets = found.offsets
        window.pass_over([i for i, record in enumerate(batch) if record.offset in offsets])
        self._grew(window, window.take_grown())
        return window.gone

    def _note_finished(self, window: Window) -> None:
        """``window`` ends unfinished: note the records that finished past its prefix (with
        those noted before, past it), to be stored beside its offset, so that none is handled
        again (see `aio_cluster.member.delivery.finished`)."""
        batch, claim = window.batch, window.claim
        base = batch[window.prefix].offset
        offsets = {batch[index].offset for index in window.finished_beyond()}
        earlier = noted(claim)
        if earlier is not None:
            offsets.update(earlier.beyond(base))
            if earlier.base == base and earlier.offsets == offsets:
                return  # as noted (and maybe stored) already
        note(claim, base, frozenset(offsets))

    # -- the prefix, and a batch's end --------------------------------------------------------

    def _grew(self, window: Window, grown: int) -> None:
        """``window``'s prefix passed ``grown`` more records: they are no longer held, the
        delivery is told how far the prefix got (what a commit stores) once this turn of the
        event loop ends, and a window that has all its records finished, or that stopped
        taking and has none left to run, is settled."""
        if grown:
            self._held -= grown
            if self._held < self._policy.max_records <= self._held + grown:
                self._room.set()
            if window.prefix == len(window.batch):
                self._settle(window)
                return
            self._untold.add(window)
            if not self._telling:
                self._telling = True
                asyncio.get_running_loop().call_soon(self.report)
        if not window.taking and window.drained():
            self._settle(window)

    def _left(self, window: Window) -> None:
        """A record of an abandoned batch ended: once none runs, its partition is quiet, and a
        batch of it taken meanwhile may start."""
        if window.running or window.in_place >= 0 or window not in self._leaving:
            return
        self._leaving.discard(window)
        self._calm.set()
        if not self.lingering((window.partition,)):
            deferred = self._deferred.pop(window.partition, None)
            if deferred is not None:
                self._open.append(deferred)
                self._wake(len(deferred.batch))

    def _stop_taking(self, window: Window, *, fill_gaps: bool = True) -> None:
        """Start no record of ``window`` beyond its horizon (see `Window.stop_taking()`)."""
        window.stop_taking(fill_gaps=fill_gaps)
        if window.drained():
            self._settle(window)

    def _settle(self, window: Window) -> None:
        """End a running batch: committed when all its records finished, else delivered again
        from its first unfinished record."""
        if window.gone:
            return
        grown, unfinished = window.take_grown(), window.unfinished
        if unfinished:
            self._note_finished(window)
        if unfinished and (grown or window in self._untold):
            # Delivered again from the first unfinished record: the delivery must know it.
            offset = window.batch[window.prefix].offset
            self._delivery.progress(window.claim, window.batch, offset)
        window.give_up()
        self._untold.discard(window)
        if self._windows.get(window.partition) is window:
            del self._windows[window.partition]
        self._held -= grown + unfinished
        self._kept -= len(window.batch)
        if not unfinished:
            self._delivery.finish(window.claim, window.batch, completed=True, commit=True)
        else:
            # Read again from the first unfinished record, where its progress got.
            self._delivery.finish(window.claim, window.batch, completed=False, commit=False)
        self._room.set()
        if not self._windows:
            self._idle.set()

    # -- the delivery's watcher --------------------------------------------------------------

    def report(self, partitions: Collection[PartitionKey] = ()) -> None:
        """Tell the delivery how far the running batches' prefixes got. Done once a turn of the
        event loop, not once a record: a handover reads them after the batches ended (see
        `_settle()`), and `Delivery.abandon()` asks here first for its ``partitions``, each told
        as far as its prefix got now, though it may not have grown since the last turn: a run
        in place books its records only when asked (from inside one of its handlers too: the
        window's prefix catches up with the run)."""
        self._telling = False
        for partition in partitions:
            window = self._windows.get(partition)
            if window is not None:
                self._untold.add(window)
        for window in self._untold:
            if not window.gone and window.unfinished:
                offset = window.batch[window.prefix].offset
                self._delivery.progress(window.claim, window.batch, offset)
        self._untold.clear()

    def draining(self, partitions: list[PartitionKey]) -> None:
        """A handover waits for these partitions: start none of their records any more."""
        for partition in partitions:
            window = self._windows.get(partition)
            if window is not None:
                self._stop_taking(window)

    def abandoned(self, partitions: list[PartitionKey]) -> None:
        """The handover stopped waiting (or ZooKeeper may have dropped the session): cancel the
        handlers of these partitions; `quiet()` waits until they ended."""
        for partition in partitions:
            window = self._windows.pop(partition, None)
            if window is None:
                continue
            if window.unfinished:
                self._note_finished(window)
            window.give_up()
            self._held -= window.take_grown() + window.unfinished
            self._kept -= len(window.batch)
            if not window.running and window.in_place < 0:
                continue
            self._leaving.add(window)
            for seat in self._seats:
                if seat.sweeping is window or (
                    seat.entry is not None and seat.entry.window is window
                ):
                    seat.scope.cancel()
            for entry in window.running:
                if entry.cancel is not None:
                    entry.cancel()
        self._room.set()
        if not self._windows:
            self._idle.set()
