"""Bulk handlers: ``async def handler(records)`` run on lists of records, through the engine of
``process()`` (`aio_cluster.member.processing.processor`), with its guarantees record by record.

`BulkCalls.handle` is the per-record handler the engine runs. Each record's run joins the open
call and waits for the call's outcome for its record; the open call is flushed once it holds
``size`` records or ``linger`` seconds passed since its first record, and runs in a task of its
own. A record finishes (for the engine: its run returns) when its call returned, so the stored
offset is still each partition's completed prefix, and a handover, a stop or the ZooKeeper
silence rules treat a record waiting in a call as a record in a handler.

Records come from every partition of the member. Under ``ordering="key"`` the engine starts a
key's next record once its previous one finished, so a key is in at most one call at a time
(one record of it per call), in offset order across calls; ``"partition"`` likewise puts one
record of a partition in a call.

Every record in a call, gathering or running, holds one of the engine's ``concurrency`` slots:
``concurrency`` must be at least ``size``, and about ``concurrency // size`` calls run at once.

With ``attempt_timeout`` each call of the handler is cut at the bound
(`aio_cluster.member.processing.bounds`): a failed attempt of the call like any other.

Failures: a call that raises runs again as a whole, up to the policy's ``attempts`` with its
back-off (retries wait while ZooKeeper is silent). Once it failed for good it is split in halves,
each run once, recursively, so that only a record that fails alone carries its error back to its
run: the engine, told to make one attempt, applies the policy (``stop``, ``dead_letter``,
``raise``) to it alone, and the other records finish. A record whose run is cancelled (its
partition handed over, the call of ``process()`` cancelled) leaves its call, unrun if the call
had not started. A running call that a record left is cancelled, so that no record stays in the
user's handler once its partition is handed over; the records still waiting in it run again in
a call of their own (those a call of the handler returned with have finished).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

import anyio
from anyio.abc import TaskGroup
from tenacity import AsyncRetrying, stop_after_attempt

from ...config import Processing
from ...errors import ConfigurationError, HandlerCancelledError
from ...kafka.records import Record
from ..delivery.delivery import Delivery
from .bounds import bounded
from .failures import waits
from .workers import Handler, cancelled_unasked

if TYPE_CHECKING:
    from ...otel.telemetry import Telemetry
    from .processor import Processor

__all__ = ["BulkCalls", "BulkHandler", "ProcessingMember", "check_bulk", "run_bulk"]

log = logging.getLogger(__name__)

BulkHandler = Callable[[list[Record]], Awaitable[object]]
"""``async def handler(records)``: what `BulkCalls` runs on each call's records."""

RETRY_POLL = 0.05
"""Seconds between looks at ZooKeeper's silence while a retry waits for it to end."""


def check_bulk(handler: object, size: object, linger: object, policy: Processing) -> None:
    """Raise ConfigurationError unless the arguments of ``process_bulk()`` make sense.

    Raises:
        ConfigurationError: ``handler`` is not an async callable, ``size`` not a positive
            integer, ``linger`` not a finite number of seconds >= 0, or ``concurrency`` below
            ``size`` (a call could never fill).
    """
    asynchronous = inspect.iscoroutinefunction(handler) or (
        callable(handler) and inspect.iscoroutinefunction(type(handler).__call__)
    )
    if not asynchronous:
        raise ConfigurationError(
            f"handler must be an async callable (async def handler(records)), not {handler!r}"
        )
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ConfigurationError(f"size must be a positive integer, not {size!r}")
    if (
        not isinstance(linger, (int, float))
        or isinstance(linger, bool)
        or not math.isfinite(linger)
        or linger < 0
    ):
        raise ConfigurationError(f"linger must be a finite number of seconds >= 0, not {linger!r}")
    if policy.concurrency < size:
        raise ConfigurationError(
            f"concurrency ({policy.concurrency}) must be at least size ({size}): every record "
            "in a call holds a handler slot"
        )


@dataclass(eq=False, slots=True)
class _Seat:
    """One record's place in a call."""

    record: Record
    error: Exception | None = None
    """What the record failed with alone, once its call ended (None: it finished)."""
    ran: bool = False
    """True once a call of the handler returned with it: it finished."""
    left: bool = False
    """True once its run left the call (cancelled): it is not run again."""


@dataclass(eq=False)
class _Call:
    """Records gathered for one call of the bulk handler, and its outcome."""

    seats: list[_Seat] = field(default_factory=list)
    full: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when it takes no more records (its size reached)."""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when every seat has its outcome."""
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    waiting: int = 0
    """Records whose runs wait for it."""
    started: bool = False
    """True once it took its last record: a started call that a record left is cancelled (an
    open one goes on gathering)."""


class BulkCalls:
    """A bulk handler as the engine's per-record handler (see the module)."""

    def __init__(
        self,
        handler: BulkHandler,
        policy: Processing,
        tasks: TaskGroup,
        *,
        size: int,
        linger: float,
        may_start: Callable[[], bool] = lambda: True,
        attempting: Callable[[list[Record]], None] | None = None,
        telemetry: Telemetry | None = None,
        member_id: str = "",
    ) -> None:
        """Args:
        handler: ``async def handler(records)``.
        policy: its attempts and back-off (the failure policy is the engine's).
        tasks: the task group the calls run in.
        size: the most records of a call.
        linger: the most seconds a call waits for more records after its first.
        may_start: whether ZooKeeper was heard from (a retry waits until it was).
        attempting: told the records of each attempt of a call as it starts, and as it fails
            (the stuck watch times an attempt, or a back-off, apart).
        telemetry: runs each attempt of a call in a span, if given.
        member_id: named in log messages.
        """
        self._handler = handler
        self._policy = policy
        self._tasks = tasks
        self._size = size
        self._linger = linger
        self._may_start = may_start
        self._attempting = attempting
        self._telemetry = telemetry
        self._id = member_id
        self._waits = waits(policy)
        self._open: _Call | None = None
        self.calls = 0
        """Handler calls made, retries and splits included."""

    async def handle(self, record: Record) -> None:
        """The engine's handler: ``record`` joins the open call; returns once the call finished
        it.

        Raises:
            Exception: what the record failed with alone (see the module).
        """
        call = self._open
        if call is None:
            call = self._open = _Call()
            self._tasks.start_soon(self._run, call)
        seat = _Seat(record)
        call.seats.append(seat)
        call.waiting += 1
        if len(call.seats) >= self._size:
            self._open = None
            call.full.set()
        try:
            await call.done.wait()
        except BaseException:
            call.waiting -= 1
            if not call.started:
                call.seats.remove(seat)  # its place is free for another record
            else:
                # Its record must not stay in the handler (its partition may be handed over):
                # the call ends, and the records still waiting run again without it.
                seat.left = True
                call.scope.cancel()
            raise
        if seat.error is not None:
            raise seat.error

    async def _run(self, call: _Call) -> None:
        """Wait until ``call`` is full or its linger passed, then run it (see the module)."""
        settled = False
        try:
            with anyio.move_on_after(self._linger):
                await call.full.wait()
            if self._open is call:
                self._open = None
            call.started = True
            while not settled:
                seats = [
                    seat
                    for seat in call.seats
                    if not (seat.left or seat.ran or seat.error is not None)
                ]
                if not seats:
                    break
                call.scope = anyio.CancelScope()
                with call.scope:  # cancelled when a record leaves: run the others again
                    await self._settle(seats)
                    settled = True
        finally:
            if not settled:
                # Cut short (process_bulk() ends): the records not run are not finished.
                for seat in call.seats:
                    if not seat.ran and seat.error is None:
                        seat.error = HandlerCancelledError(
                            "the bulk call ended before it finished this record"
                        )
            call.done.set()

    async def _settle(self, seats: list[_Seat]) -> None:
        """Run the records of ``seats`` as one call, retried; split once it failed for good."""
        error = await self._with_retries(seats)
        if error is not None:
            await self._split(seats, error)

    async def _split(self, seats: list[_Seat], error: Exception) -> None:
        """``seats`` failed together with ``error``: a lone record keeps it; else each half runs
        once, and a half that fails is split again."""
        if len(seats) == 1:
            seats[0].error = error
            return
        middle = len(seats) // 2
        for half in (seats[:middle], seats[middle:]):
            await self._going()
            try:
                await self._call(half, attempt=1, retry_of=error)
            except Exception as exc:
                await self._split(half, exc)

    async def _with_retries(self, seats: list[_Seat]) -> Exception | None:
        """Run the call up to ``attempts`` times, with the policy's back-off between.

        Returns:
            None once an attempt returned, else the last failure.
        """
        last: Exception | None = None
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._policy.attempts),
            wait=self._waits,
            reraise=True,
            sleep=anyio.sleep,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    number = attempt.retry_state.attempt_number
                    if number > 1:
                        await self._going()
                        self._log_retry(seats, number, last)
                    try:
                        await self._call(seats, attempt=number, retry_of=last)
                    except Exception as exc:
                        last = exc
                        raise
        except Exception as exc:
            return exc
        return None

    async def _call(self, seats: list[_Seat], *, attempt: int, retry_of: Exception | None) -> None:
        """One call of the handler on the records of ``seats``."""
        self.calls += 1
        records = [seat.record for seat in seats]
        telemetry = self._telemetry
        if self._attempting is not None:
            self._attempting(records)
        try:
            if telemetry is None or not telemetry.watching:
                await self._handler(records)
            else:
                await telemetry.handle_call(self._handler, records, attempt, retry_of)
        except BaseException as exc:
            failure = cancelled_unasked(exc)
            if failure is None:
                raise
            if self._attempting is not None:
                self._attempting(records)  # its back-off (or split) is timed from here
            raise failure from exc  # a failed attempt: never its records finished
        for seat in seats:
            seat.ran = True

    async def _going(self) -> None:
        """Wait until ZooKeeper was heard from: no retry starts while it is silent. Looked at
        again every `RETRY_POLL`: the answer is the clock's (silence past a bound), not an event;
        a silence that lasts gives the records up, which cancels the call."""
        while not self._may_start():  # noqa: ASYNC110
            await anyio.sleep(RETRY_POLL)

    def _log_retry(self, seats: list[_Seat], number: int, last: Exception | None) -> None:
        log.warning(
            "member %s: bulk handler failed for a call of %d records (attempt %d of %d): %r; "
            "retrying",
            self._id,
            len(seats),
            number - 1,
            self._policy.attempts,
            last,
        )


def _call_named(records: list[Record]) -> str:
    partitions = sorted({record.partition for record in records})
    return f"a call on {len(records)} records of partitions {partitions}"


class ProcessingMember(Protocol):
    """What `run_bulk()` asks of a member's processing (`aio_cluster.member.processes.Processes`
    is one): the member's id, its telemetry, its delivery's gate and its ``process()``."""

    @property
    def id(self) -> str: ...

    @property
    def telemetry(self) -> Telemetry | None: ...

    @property
    def delivery(self) -> Delivery: ...

    @property
    def processor(self) -> Processor | None: ...

    async def process(
        self, handler: Handler, policy: Processing, *, record_spans: bool = True
    ) -> None: ...


async def run_bulk(
    member: ProcessingMember, handler: BulkHandler, size: int, linger: float, policy: Processing
) -> None:
    """Run ``handler`` on calls of the member's records through its ``process()`` until the
    member closes or the call is cancelled (see the module).

    Raises:
        ConfigurationError: a bad argument (see `check_bulk()`), or one ``process()`` refuses.
        Exception: a record's error alone, with ``on_failure="raise"``.
    """
    check_bulk(handler, size, linger, policy)
    telemetry = member.telemetry

    def attempting(records: list[Record]) -> None:
        processor = member.processor
        if processor is not None:
            processor.attempt_started(records)

    failure: Exception | None = None
    timeout = policy.attempt_timeout
    async with anyio.create_task_group() as tasks:
        calls = BulkCalls(
            handler
            if timeout is None
            else bounded(handler, timeout, member_id=member.id, named=_call_named),
            policy,
            tasks,
            size=size,
            linger=linger,
            may_start=member.delivery.may_start,
            attempting=attempting,
            telemetry=telemetry,
            member_id=member.id,
        )
        try:
            # The bound is the calls': a record's run also waits for its call to fill. The
            # calls have spans of their own; the records' waiting runs get none.
            await member.process(
                calls.handle,
                replace(policy, attempts=1, attempt_timeout=None),
                record_spans=False,
            )
        except Exception as exc:
            failure = exc  # raised as it is, not in the task group's exception group
        finally:
            tasks.cancel_scope.cancel()
    if failure is not None:
        raise failure
