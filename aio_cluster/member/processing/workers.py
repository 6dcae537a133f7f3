"""Workers: the tasks of `process()` that run handlers, up to ``concurrency`` at once.

``concurrency`` workers take records in offset order: first those out and ready (handed on by a
key, or retried), then the running batches' next records, in the order the batches came (which
records may start, and in which order, is `aio_cluster.member.processing.windows`'). A handler's
first step runs at once, as asyncio's eager tasks run a coroutine: one that returns without waiting
let no other task run, so its worker goes on with the batch's next records in place, checking before
each only that the batch still takes records and ZooKeeper was heard from (about what the plain
loop costs); one that waits takes a slot, is seen by the other tasks (its key busy, cancellable,
counted) and wakes an idle worker for the next record.

What a record's end means (the next record of its key, the prefix, a retry, a policy) and what
its batch is for the member are the subclasses': `aio_cluster.member.processing.outcomes` and
`aio_cluster.member.processing.processor`. This module is the hot path: the calls it saves show in
what a record costs.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import anyio

from ...config import Processing
from ...errors import ConfigurationError, HandlerCancelledError
from ...kafka.records import Record
from ..delivery.delivery import Delivery
from .eager import resumed
from .windows import Entry, Window

if TYPE_CHECKING:
    from ...otel.telemetry import Telemetry

__all__ = ["SLICE", "Handler", "Workers", "cancelled_unasked", "check_handler"]


Handler = Callable[[Record], Awaitable[object]]
"""``async def handler(record)``: what `process()` runs for every record."""


def cancelled_unasked(exc: BaseException) -> HandlerCancelledError | None:
    """``exc`` as the failure it is, when it is a ``CancelledError`` a handler raised while
    nothing cancelled its task (no cancel scope around it cancelled, no ``Task.cancel()``
    pending): a library's cancellation leaking out of the handler, say. None for anything
    else, and for a cancellation that was asked for (it goes on up).

    Taken for the cancellation of the worker, it would end the worker quietly and leave its
    record unfinished, or count a bulk call's records as finished.
    """
    if not isinstance(exc, asyncio.CancelledError):
        return None
    if anyio.current_effective_deadline() == -math.inf:
        return None
    cancelling = getattr(asyncio.current_task(), "cancelling", None)  # Python 3.11+
    if cancelling is not None and cancelling():
        return None
    error = HandlerCancelledError("the handler raised CancelledError, though nothing cancelled it")
    error.__cause__ = exc
    return error


@dataclass(slots=True)
class _Started:
    """A record whose handler `Workers._sweep()` started, and which did not finish at once."""

    at: float
    """When it started (``time.monotonic()``)."""
    steps: Coroutine[Any, Any, object]
    """The run in place (`Workers._in_place()`), suspended in its handler: awaiting the rest
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


class Workers(ABC):
    """The workers that run a handler for the records of the running batches (see the
    module)."""

    def __init__(
        self,
        delivery: Delivery,
        handler: Handler,
        policy: Processing,
        *,
        telemetry: Telemetry | None,
    ) -> None:
        """Args:
        delivery: the member's delivery (asked whether ZooKeeper was heard from).
        handler: ``async def handler(record)``.
        policy: concurrency and ordering.
        telemetry: runs each handler in a span, if given.
        """
        self._delivery = delivery
        self._handler = handler
        self._policy = policy
        self._telemetry = telemetry
        self._ready: deque[Entry] = deque()
        """Records out (see `aio_cluster.member.processing.windows`) that may start, taken before
        the windows' next records."""
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
        self._steps = cast(Callable[[Record], Coroutine[Any, Any, object]], handler)
        """The handler, whose calls are coroutines (`check_handler()`): stepped by hand."""
        self._halted = False
        """True while ZooKeeper is out of reach: no record starts."""
        self._going = asyncio.Event()
        self._going.set()
        self._held_back: list[Entry] = []
        """Records that would have started while halted, in order."""

    # -- what a record's end means: the subclasses' ------------------------------------------

    @abstractmethod
    def _finished(self, entry: Entry) -> int:
        """``entry`` finished: the prefix may grow.

        Returns:
            The index of the record its key hands on to, now out, when that may start
            (-1: none).
        """

    @abstractmethod
    def _failed(self, entry: Entry, error: Exception) -> None:
        """``entry``'s handler raised ``error``."""

    @abstractmethod
    def _drop(self, entry: Entry) -> None:
        """``entry`` ends unfinished."""

    @abstractmethod
    def _left(self, window: Window) -> None:
        """A record of an abandoned batch ended."""

    @abstractmethod
    def _grew(self, window: Window, grown: int) -> None:
        """``window``'s prefix passed ``grown`` more records."""

    @abstractmethod
    def _offer(self, window: Window) -> None:
        """``window`` may have taken all its records while some wait."""

    # -- taking records ----------------------------------------------------------------------

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
        busy until it finished (see `aio_cluster.member.processing.windows`)."""
        if not entry.out:
            entry.out = True
            entry.key = entry.window.put_out(entry.index)

    # -- running them ------------------------------------------------------------------------

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
                except BaseException as exc:
                    failure = exc if isinstance(exc, Exception) else cancelled_unasked(exc)
                    if failure is None:
                        self._interrupted(entry)
                        raise
                    self._failed(entry, failure)
                    return
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
            except BaseException as exc:
                failure = cancelled_unasked(exc)
                if failure is None:
                    self._interrupted(entry)
                    raise
                self._failed(entry, failure)
                return False
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
        except BaseException as exc:
            failure = cancelled_unasked(exc)
            if failure is None:
                raise
            index = window.in_place
            started = _Started(seat.at, steps, None, failure)
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

    # -- handler slots -----------------------------------------------------------------------

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
