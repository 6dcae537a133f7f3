"""Processing: a handler run for every record of the claimed partitions, many records at once, in
key order, with retries and a policy for records that fail for good.

`Processor` takes batches from `aio_cluster.member.delivery` like the ``async for`` loop does,
one running batch per partition, but keeps a batch running while up to ``concurrency`` of its
records (over all partitions) are in a handler. Which records may start, in which order, and how
far the completed prefix got is the pure bookkeeping of `aio_cluster.member.windows`; this module
runs the handlers, waits, and tells the delivery. The offset stored is the first record not yet
finished (the completed prefix), never past it.

``concurrency`` workers take records in offset order. A handler's first step runs at once, as
asyncio's eager tasks run a coroutine: one that returns without waiting let no other task run,
so its worker goes on with the batch's next records in place, checking before each only that
the batch still takes records and ZooKeeper was heard from (about what the plain loop costs); one
that waits takes a slot, is seen by the other tasks (its key busy, cancellable, counted) and
wakes an idle worker for the next record. The delivery is told how far a prefix got once a turn
of the event loop, and at once before it gives a batch up.

A batch ends when all its records finished (it is committed, as a completed loop body), when its
partition is handed over (the handover waits for the handlers in flight, and only the gaps before
the furthest record start; past ``rebalance_timeout`` they are cancelled and awaited, and the
first unfinished record is delivered again), or when the processor stops. A batch that ends
unfinished notes the records that finished past its prefix, which are stored beside its offset
and passed over when its records come again, here or on the next owner
(`aio_cluster.member.finished`): a stop that cuts handlers short repeats no finished record.

A failing record is retried (`aio_cluster.member.failures`; a record waiting for its retry holds
back only its own key and no handler slot), then, by policy, written to a dead-letter topic and
passed, or its partition is paused (``"stop"``), or the error leaves `Processor.run()`
(``"raise"``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import anyio
from anyio.abc import TaskGroup

from ..config import Processing
from ..errors import AioClusterError, ConfigurationError
from ..kafka.dead_letters import DeadLetters
from ..kafka.records import Record
from ..kafka.topics import PartitionKey
from .claims import Batch, Claim
from .delivery import Delivery
from .eager import resumed
from .failures import Retries
from .finished import forget, note, noted
from .windows import Entry, Window

if TYPE_CHECKING:
    from ..otel.telemetry import Telemetry

__all__ = ["Handler", "Processor", "check_handler"]

log = logging.getLogger(__name__)

Handler = Callable[[Record], Awaitable[object]]
"""``async def handler(record)``: what `Processor` runs for every record."""


@dataclass(slots=True)
class _Started:
    """A record whose handler `Processor._sweep()` started, and which did not finish at once."""

    at: float
    """When it started (``time.monotonic()``)."""
    steps: Coroutine[Any, Any, object]
    """The run in place (`Processor._in_place()`), suspended in its handler: awaiting the rest
    of it (`resumed()`) awaits the rest of the handler."""
    waiting_on: Any
    """What its step yielded (it waits on this)."""
    failure: Exception | None
    """What its handler raised, if it failed."""


SLICE = 0.01
"""Seconds a worker runs records in place before it lets the other tasks run (a handler that
waits lets them run anyway): an event loop that serves HTTP beside `process()` answers within
about this, whatever the batch."""


def check_handler(handler: object) -> None:
    """Raise ConfigurationError unless ``handler`` is an async callable.

    Raises:
        ConfigurationError: ``handler`` is not an ``async def`` function (or an object whose
            ``__call__`` is one).
    """
    if inspect.iscoroutinefunction(handler):
        return
    if callable(handler) and inspect.iscoroutinefunction(type(handler).__call__):
        return
    raise ConfigurationError(
        f"handler must be an async callable (async def handler(record)), not {handler!r}"
    )


@dataclass(eq=False)
class _Seat:
    """One worker: its cancel scope and the record it runs (or the window it runs in place)."""

    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    entry: Entry | None = None
    sweeping: Window | None = None
    at: float = 0.0
    """When the record it runs in place started (``time.monotonic()``)."""
    waited: bool = False
    """True once the handler it runs in place waited: the run ends after it."""


class Processor:
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
    ) -> None:
        """Args:
        delivery: the member's delivery; its batches are taken from here.
        handler: ``async def handler(record)``.
        policy: concurrency, ordering, retries and the failure policy.
        is_closing: True once the member closes (it may raise the member's failure).
        member_id: named in log messages.
        dead_letters: the dead-letter producer (with ``on_failure="dead_letter"``).
        telemetry: runs each handler attempt and dead letter in a span, if given.
        """
        self._delivery = delivery
        self._handler = handler
        self._policy = policy
        self._is_closing = is_closing
        self._id = member_id
        self._dead_letters = dead_letters
        self._telemetry = telemetry
        self._windows: dict[PartitionKey, Window] = {}
        self._ready: deque[Entry] = deque()
        """Records out (see `aio_cluster.member.windows`) that may start, taken before the
        windows' next records."""
        self._open: list[Window] = []
        """The windows whose records are taken in turn, in the order they came."""
        self._parked: deque[asyncio.Future[None]] = deque()
        """Idle workers, each waiting to look for a record again."""
        self._seats: list[_Seat] = []
        self._own: set[asyncio.Task[Any]] = set()
        """The tasks that run handlers (workers, retries)."""
        self._busy = 0
        """Handlers running now (at most ``concurrency``; a record waiting for a retry is not)."""
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        self._retries = Retries(
            handler,
            policy,
            self,
            member_id=member_id,
            dead_letters=dead_letters,
            telemetry=telemetry,
        )
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
        self._steps = cast(Callable[[Record], Coroutine[Any, Any, object]], handler)
        """The handler, whose calls are coroutines (`check_handler()`): stepped by hand."""
        self._room = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._scope = anyio.CancelScope()
        self._tasks: TaskGroup | None = None
        self._failure: BaseException | None = None
        self._ended = asyncio.Event()
        self._halted = False
        """True while ZooKeeper is out of reach: no record starts."""
        self._going = asyncio.Event()
        self._going.set()
        self._held_back: list[Entry] = []
        """Records that would have started while halted, in order."""
        self._leaving: set[Window] = set()
        """Abandoned batches whose cancelled handlers have not ended yet."""
        self._deferred: dict[PartitionKey, Window] = {}
        """Partition -> a batch taken while an abandoned one of it still runs: its records
        start once that ended, never beside it."""
        self._calm = asyncio.Event()
        self.running = False
        """True from `run()` until it returned."""
        self.failed_at: dict[PartitionKey, int] = {}
        """Partitions paused by ``on_failure="stop"`` -> the offset of the failed record."""
        self.failures: dict[PartitionKey, tuple[Record, Exception]] = {}
        """Partitions paused by ``on_failure="stop"`` -> the failed record and its last error
        (published for operators, and dead-lettered when an operator skips it)."""
        self.on_stopped: Callable[[], None] | None = None
        """Told when ``on_failure="stop"`` paused a partition, if set."""

    # -- what statistics() reads -------------------------------------------------------------

    @property
    def retried(self) -> int:
        """Handler runs that were retries."""
        return self._retries.retried

    @property
    def dead_lettered(self) -> int:
        """Records written to the dead-letter topic."""
        return self._retries.dead_lettered

    @property
    def dead_letters(self) -> DeadLetters | None:
        """The dead-letter producer, running while `run()` runs, if a dead-letter topic is
        set."""
        return self._dead_letters

    @property
    def attempts(self) -> int:
        """How often a record's handler runs before it failed for good."""
        return self._policy.attempts

    @property
    def in_flight(self) -> int:
        """Records started and not finished (cancelled ones not yet ended included)."""
        return sum(len(window.in_handlers()) for window in self._all_windows())

    def oldest_in_flight(self) -> float | None:
        """Seconds since the oldest record in flight started, or None when none is."""
        starts = [entry.started for w in self._all_windows() for entry in w.running]
        return time.monotonic() - min(starts) if starts else None

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
        `aio_cluster.member.finished`); a batch that starts before the note's prefix (read
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
        again (see `aio_cluster.member.finished`)."""
        batch, claim = window.batch, window.claim
        base = batch[window.prefix].offset
        offsets = {batch[index].offset for index in window.finished_beyond()}
        earlier = noted(claim)
        if earlier is not None:
            offsets.update(earlier.beyond(base))
            if earlier.base == base and earlier.offsets == offsets:
                return  # as noted (and maybe stored) already
        note(claim, base, frozenset(offsets))

    def _next(self) -> Entry | None:
        """The next record to run: one out and ready first, else the next record taken from
        the windows in the order they came (None: none may start now)."""
        if self._ready:
            return self._ready.popleft()
        windows = self._open
        at = 0
        while at < len(windows):
            window = windows[at]
            if window.exhausted():
                del windows[at]
                self._offer(window)
                continue
            index = window.take()
            if index >= 0:
                return Entry(window, index)
            at += 1
        return None

    def _dispatch(self, entry: Entry) -> None:
        """``entry``, out, may start: queue it for the next idle worker."""
        self._ready.append(entry)
        self._wake_one()

    def _requeue(self, entry: Entry) -> None:
        """``entry`` was taken but did not run (its worker was cancelled): first in line again."""
        self._ready.appendleft(entry)
        self._wake_one()

    def _wake_one(self) -> None:
        """There may be a record to run: an idle worker looks (it runs once this task waits)."""
        self._wake(1)

    def _wake(self, records: int) -> None:
        """There may be ``records`` records to run: as many idle workers look, all in the event
        loop's next turn (a worker woken by another would start a turn later)."""
        while self._parked and records > 0:
            waiter = self._parked.popleft()
            if not waiter.done():
                waiter.set_result(None)
                records -= 1

    async def _park(self) -> None:
        """Wait until there may be a record to run."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._parked.append(waiter)
        try:
            await waiter
        finally:
            waiter.cancel()

    async def _work(self) -> None:
        """One worker: runs one record at a time; a record of an abandoned batch is cancelled
        through the worker's scope, and the worker goes on."""
        seat = _Seat()
        self._seats.append(seat)
        task = asyncio.current_task()
        if task is not None:
            self._own.add(task)
        while True:
            with seat.scope:
                while True:
                    entry = self._next()
                    if entry is None:
                        await self._park()
                    else:
                        await self._run(entry, seat)
            seat.entry = None
            seat.scope = anyio.CancelScope()

    def _may_start(self, entry: Entry) -> bool:
        """Whether ``entry`` may start now: its batch still takes it, and ZooKeeper answers (else
        it is held back, and starts once it answers: see `go_on()`)."""
        if not entry.window.may_start(entry.index):
            return False
        if self._halted or not self._delivery.may_start():
            self._put_out(entry)
            self._held_back.append(entry)
            return False
        return True

    @staticmethod
    def _put_out(entry: Entry) -> None:
        """``entry`` leaves its worker's hands (it waits, is held back or retried): its key is
        busy until it finished (see `aio_cluster.member.windows`)."""
        if not entry.out:
            entry.out = True
            entry.key = entry.window.put_out(entry.index)

    async def _run(self, entry: Entry, seat: _Seat) -> None:
        """Run ``entry``'s record; then the record its key hands on to, or the window's next
        records in place (`_sweep()`), while one may start: a worker keeps to its window as
        long as it can.

        A handler's first step runs at once, as asyncio's eager tasks run a coroutine until it
        first waits; only a handler that waits takes a slot, is out and is seen by other tasks
        (`_before_waiting()`). Once one waited, the next ones are awaited as they are, in turn
        (`_await_in_turn()`). One that fails is retried (`_failed()`)."""
        window = entry.window
        started: _Started | None = None
        # Whether the last record's handler waited: the next one likely does too, so it is
        # awaited as it is, without stepping it by hand (`resumed()` costs a little a step).
        waited = False
        try:
            while True:
                if started is None:
                    if not self._may_start(entry):
                        return
                    if waited and not self._full_way():
                        if not await self._await_in_turn(entry, seat):
                            return
                        continue  # the next record goes the full way
                try:
                    if started is not None:
                        # _sweep() ran its first step.
                        entry.started = started.at
                        if started.failure is not None:
                            self._failed(entry, started.failure)
                            return
                        steps, waiting_on = started.steps, started.waiting_on
                        waited = True
                    elif self._full_way():
                        if not await self._call_in_slot(entry, seat):
                            return
                        steps = None
                        waited = True
                    else:
                        entry.started = time.monotonic()
                        steps = self._steps(window.batch[entry.index])
                        try:
                            waiting_on = steps.send(None)
                        except StopIteration:
                            steps = None
                        waited = steps is not None
                    if steps is not None:
                        self._busy += 1
                        self._before_waiting(entry, seat)
                        try:
                            await resumed(steps, waiting_on)
                        finally:
                            self.give_slot()
                except Exception as exc:
                    self._failed(entry, exc)
                    return
                except BaseException:
                    self._interrupted(entry)
                    raise
                following = self._finished(entry)
                started = None
                # The entry finished: nothing holds it any more, so it serves the next record.
                if following >= 0:
                    entry.index = following  # out, as the key's record it follows
                    continue
                if waited:
                    # Its handler waited: the next one likely does too, so no run in place.
                    index = window.take()
                else:
                    index, started = await self._run_in_place(window, seat)
                if index < 0:
                    self._offer(window)
                    return
                entry.index, entry.out, entry.key = index, False, None
        finally:
            seat.entry = None

    async def _await_in_turn(self, entry: Entry, seat: _Seat) -> bool:
        """Run ``entry``'s record (it may start, in a free slot), then the next ones of its
        window, one after another, awaiting each handler as it is: the path of every record of
        a workload whose handlers wait. Each does what `_run()` does for it, with the rest of
        `_before_waiting()` (after `_put_out()`), `_finished()`, `_may_start()` and
        `_full_way()` written out here (the last two asked in full only when a check fails):
        the calls saved show in what a record costs (calling `_before_waiting()` alone cost
        2 to 5 % of asyncio's floor at the benchmark's workload).

        Returns:
            True when ``entry`` holds the next record, which goes the full way (see
            `_full_way()`); False when this worker has none now (or its handler failed).
        """
        window = entry.window
        batch, running, handler = window.batch, window.running, self._handler
        delivery, limit, telemetry = self._delivery, self._policy.concurrency, self._telemetry
        while True:
            self._busy += 1
            self._put_out(entry)
            running.add(entry)
            seat.entry = entry
            if self._parked and (self._ready or self._open):
                self._wake_one()
            if window.cursor >= len(batch):
                self._offer(window)  # its last record waits: the records after it may come
            entry.started = time.monotonic()
            try:
                try:
                    await handler(batch[entry.index])
                finally:
                    self.give_slot()
            except Exception as exc:
                self._failed(entry, exc)
                return False
            except BaseException:
                self._interrupted(entry)
                raise
            running.discard(entry)
            if window.gone:
                self._left(window)
                return False
            following, grown = window.finished(entry.index, out=True, key=entry.key)
            if grown or not window.taking:
                self._grew(window, grown)
            if following >= 0:
                entry.index = following  # out, as the key's record it follows
            else:
                index = window.take()
                if index < 0:
                    self._offer(window)
                    return False
                entry.index, entry.out, entry.key = index, False, None
            if self._halted or not window.may_start(entry.index) or not delivery.may_start():
                return self._may_start(entry)  # False: it is held back, or not to start
            if (
                self._busy >= limit
                or self._slot_waiters
                or (telemetry is not None and telemetry.watching)
            ):
                return True

    def _interrupted(self, entry: Entry) -> None:
        """``entry``'s worker was cancelled in its handler: its batch was abandoned (nothing to
        do), or another batch's record was meant and this one runs again later (the processor
        may be ending too)."""
        window = entry.window
        if window.may_start(entry.index):
            window.running.discard(entry)
            self._requeue(entry)
        else:
            self._drop(entry)

    def _full_way(self) -> bool:
        """Whether the next record must go the full way (`_call_in_slot()`) rather than start
        at once: no slot is free, retries wait for one, or handlers are traced."""
        return bool(
            self._busy >= self._policy.concurrency
            or self._slot_waiters
            or (self._telemetry is not None and self._telemetry.watching)
        )

    async def _call_in_slot(self, entry: Entry, seat: _Seat) -> bool:
        """Take a slot (waiting for one if need be), then run the handler for ``entry``.

        Returns:
            False when, by the time it had its slot, it might no longer start.
        """
        self._before_waiting(entry, seat, running=False)
        await self._take_slot()
        if not self._may_start(entry):
            # Stopped, given up or silenced while it waited for a slot.
            self.give_slot()
            return False
        await self._call(entry)
        return True

    async def _run_in_place(self, window: Window, seat: _Seat) -> tuple[int, _Started | None]:
        """Run the window's next records in place (`_sweep()`), letting the other tasks run
        every `SLICE` seconds: the records not run yet stay this worker's meanwhile, so no
        other worker takes one of their keys.

        Returns:
            As `_sweep()`.
        """
        run = window.begin_run()
        while True:
            index, started, rest = self._sweep(window, seat, run)
            if not rest:
                return index, started
            try:
                await asyncio.sleep(0)
            except BaseException:
                window.give_back(rest.start)
                raise
            run = rest

    def _sweep(self, window: Window, seat: _Seat, run: range) -> tuple[int, _Started | None, range]:
        """Run the records of ``run`` (taken: `Window.begin_run()`) in place, one after
        another, while each handler finishes without waiting (`_in_place()`, stepped here
        once): all that `_run()` does for a record, less what only other tasks would see,
        since none runs meanwhile (``seat`` says which window it sweeps, for an abandon from
        inside a handler). A record that may not start so (a slot is wanted, tracing is on,
        the window stops or ZooKeeper was not heard from) or whose handler waits or fails ends
        the run; the records after it are given back. After `SLICE` seconds it stops before a
        record, keeping the rest.

        Returns:
            The index of the record it stopped at (-1: none), and what of it started, for
            `_run()` to go on with (None: not started); and the records left once its slice
            is over (else empty).
        """
        if not run:
            return -1, None, run
        # The first record goes the full way when a slot is wanted or handlers are traced.
        steps = self._in_place(
            window, seat, range(run.start, run.start) if self._full_way() else run
        )
        seat.sweeping, seat.waited = window, False
        started: _Started | None = None
        paused = False
        try:
            waiting_on = steps.send(None)
        except StopIteration as end:
            index, paused = end.value
        except Exception as exc:
            index = window.in_place
            started = _Started(seat.at, steps, None, exc)
        else:
            # A handler waits: `_run()` awaits the rest of it, and the run ends after it.
            index = window.in_place
            seat.waited = True
            started = _Started(seat.at, steps, waiting_on, None)
        seat.sweeping = None
        if paused:
            window.pause_run(index)
            self._grew(window, window.take_grown())
            return -1, None, range(index, run.stop)
        window.end_run(index)
        if window.gone:  # abandoned from inside a handler
            if started is None:
                self._left(window)
                return -1, None, range(0)
            return index, started, range(0)  # it waits: cancelled there, see abandoned()
        self._grew(window, window.take_grown())
        return (-1, None, range(0)) if index == run.stop else (index, started, range(0))

    async def _in_place(self, window: Window, seat: _Seat, run: range) -> tuple[int, bool]:
        """The records of ``run``, each handler awaited as it is, one after another, while the
        window takes records and ZooKeeper was heard from, for `SLICE` seconds at most.
        `_sweep()` steps it once: a handler that finishes without waiting returns here
        without a step of its own (no ``StopIteration`` a record); one that waits suspends it
        all, and once that handler finished (``seat.waited``) it ends.

        Returns:
            The index of the first record it did not run, and whether it stopped there because
            its slice was over.
        """
        batch, handler = window.batch, self._handler
        fresh = self._delivery.fresh  # while suspended, _halted is set (see halt())
        until = time.monotonic() + SLICE
        for index in run:
            if not window.taking or self._halted or not fresh():
                return index, False
            at = time.monotonic()
            if at >= until and index > run.start:
                return index, True
            window.in_place = index
            seat.at = at
            await handler(batch[index])
            if seat.waited:
                return index + 1, False
        return run.stop, False

    def _before_waiting(self, entry: Entry, seat: _Seat, *, running: bool = True) -> None:
        """``entry``'s worker waits (for its handler; for a slot, or on to `_call()`, when not
        ``running``): other tasks run from here, so it is out (and running), cancelled through
        ``seat`` if its batch is abandoned, and an idle worker may take the next record."""
        self._put_out(entry)
        window = entry.window
        if running:
            window.running.add(entry)
        seat.entry = entry
        if self._parked and (self._ready or self._open):
            self._wake_one()
        if window.cursor >= len(window.batch):
            self._offer(window)  # its last record waits: the records after it may come

    async def _call(self, entry: Entry) -> None:
        """Run the handler for ``entry`` in its slot, which it gives back."""
        entry.window.running.add(entry)
        entry.started = time.monotonic()
        record = entry.record
        telemetry = self._telemetry
        try:
            if telemetry is None or not telemetry.watching:
                await self._handler(record)
            else:
                await telemetry.handle(self._handler, record)
        finally:
            self.give_slot()

    def _failed(self, entry: Entry, error: Exception) -> None:
        """``entry``'s handler raised ``error``: it is retried (its key stays busy), unless its
        batch stopped taking it (it runs again later)."""
        window = entry.window
        if window.may_start(entry.index):
            self._put_out(entry)
            window.running.add(entry)
            assert self._tasks is not None
            self._tasks.start_soon(self._recover, entry, error)
            self._offer(window)  # it waits for its retry: the records after it may come
        else:
            # Its partition is handed over or stopped: the record runs again later.
            self._drop(entry)

    async def _take_slot(self) -> None:
        """Wait for a handler slot (a plain count: cheaper than a semaphore on the hot path)."""
        if self._busy < self._policy.concurrency and not self._slot_waiters:
            self._busy += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._slot_waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give_slot()
            waiter.cancel()
            raise

    def give_slot(self) -> None:
        """A handler ended: its slot goes to the first waiter, if any."""
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._busy -= 1

    def _drop(self, entry: Entry) -> None:
        """``entry`` ends unfinished: its batch is delivered again from its first unfinished
        record once nothing of it runs."""
        window = entry.window
        window.running.discard(entry)
        if window.gone:
            self._left(window)
        elif window.drained():
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

    async def _recover(self, entry: Entry, error: Exception) -> None:
        """Retry a failed record, then apply the failure policy."""
        scope = anyio.CancelScope()
        entry.cancel = scope.cancel
        task = asyncio.current_task()
        if task is not None:
            self._own.add(task)
        try:
            await self._settle_failure(entry, scope, error)
        finally:
            self._own.discard(task)

    async def _settle_failure(
        self, entry: Entry, scope: anyio.CancelScope, error: Exception
    ) -> None:
        with scope:
            try:
                if self._policy.attempts > 1:
                    if await self._retries.retry(entry, error):
                        self._complete(entry)
                    else:
                        self._drop(entry)
                    return
            except Exception as exc:
                error = exc
            await self._give_up(entry, error)
        if scope.cancelled_caught:
            self._drop(entry)

    async def slot_for(self, entry: Entry) -> bool:
        """Take a handler slot for a retry of ``entry`` once it may run: never while ZooKeeper is
        silent, checked again after each wait (`aio_cluster.member.failures.Slots`).

        Returns:
            False (and no slot) when its batch stopped taking it (stopped, handed over, given
            up): the next owner tries again.
        """
        while True:
            if not entry.window.may_start(entry.index):
                return False
            if not self._going.is_set():
                await self._going.wait()
                continue
            await self._take_slot()
            if self._going.is_set() and entry.window.may_start(entry.index):
                return True
            self.give_slot()

    async def _give_up(self, entry: Entry, error: Exception) -> None:
        record = entry.record
        window = entry.window
        policy = self._policy
        if policy.on_failure == "dead_letter":
            await self._retries.dead_letter(entry, error)
            self._complete(entry)
            return
        window.running.discard(entry)
        if window.gone:
            self._left(window)
        if policy.on_failure == "raise":
            log.error(
                "member %s: the record at offset %d of partition %d failed %d times: %r",
                self._id,
                record.offset,
                record.partition,
                policy.attempts,
                error,
            )
            self._fail(error)
            return
        log.error(
            "member %s: the record at offset %d of partition %d failed %d times (%r); "
            "partition %d is paused: resume() it to try again, or seek() past the record first",
            self._id,
            record.offset,
            record.partition,
            policy.attempts,
            error,
            record.partition,
        )
        self.failed_at[window.partition] = record.offset
        self.failures[window.partition] = (record, error)
        if self.on_stopped is not None:
            self.on_stopped()
        if not window.gone:
            self._delivery.pause([window.partition])
            self._stop_taking(window, fill_gaps=False)

    # -- finishing ---------------------------------------------------------------------------

    def _complete(self, entry: Entry) -> None:
        """``entry`` finished outside a worker's run (a retry, a dead letter): the record its key
        hands on to is queued, and an idle worker looks for the next."""
        following = self._finished(entry)
        if following >= 0:
            self._dispatch(Entry(entry.window, following, out=True, key=entry.key))
        else:
            self._wake_one()

    def _finished(self, entry: Entry) -> int:
        """``entry`` finished: the prefix may grow.

        Returns:
            The index of the record its key hands on to, now out, when that may start
            (-1: none).
        """
        window = entry.window
        if entry.out:
            window.running.discard(entry)  # only a record out may be running
        if window.gone:
            self._left(window)
            return -1
        following, grown = window.finished(entry.index, out=entry.out, key=entry.key)
        self._grew(window, grown)
        return following

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

    def report(self) -> None:
        """Tell the delivery how far the running batches' prefixes got. Done once a turn of the
        event loop, not once a record: a handover reads them after the batches ended (see
        `_settle()`), and `Delivery.abandon()` asks here first (from inside a handler run in
        place, too: the window's prefix catches up with the run)."""
        self._telling = False
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
