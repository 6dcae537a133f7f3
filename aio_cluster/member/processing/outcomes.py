"""Outcomes: what the end of a record's handler means in `process()`, the retries and the
failure policies.

A finished record hands its key on to the key's next record (out at once) and may grow its
batch's completed prefix. A failing record is retried (`aio_cluster.member.processing.failures`; a
record waiting for its retry holds back only its own key and no handler slot), then, by policy,
written to a dead-letter topic and passed, or its partition is paused (``"stop"``), or the error
leaves `Processor.run()` (``"raise"``). What a batch is for the member (the prefix told, a batch
settled, a stop) is `aio_cluster.member.processing.processor`'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from ...config import Processing
from ...kafka.dead_letters import DeadLetters
from ...kafka.records import Record
from ...kafka.topics import PartitionKey
from ..delivery.delivery import Delivery
from .failures import Retries
from .windows import Entry, Window
from .workers import Handler, Workers

if TYPE_CHECKING:
    from ...otel.telemetry import Telemetry

__all__ = ["Outcomes"]

log = logging.getLogger(__name__)


class Outcomes(Workers):
    """The ends of handlers: finished, retried, given up by policy (see the module)."""

    def __init__(
        self,
        delivery: Delivery,
        handler: Handler,
        policy: Processing,
        *,
        member_id: str,
        dead_letters: DeadLetters | None,
        telemetry: Telemetry | None,
        record_spans: bool,
        on_stopped: Callable[[], None] | None,
    ) -> None:
        """Args:
        delivery: the member's delivery (told of a partition ``"stop"`` pauses).
        handler: ``async def handler(record)``.
        policy: concurrency, ordering, retries and the failure policy.
        member_id: named in log messages.
        dead_letters: the dead-letter producer (with ``on_failure="dead_letter"``).
        telemetry: runs each handler attempt and dead letter in a span, if given.
        record_spans: whether a record's run has a span of its own (False under
            ``process_bulk()``, whose calls have theirs); its dead letter has one either way.
        on_stopped: told when ``on_failure="stop"`` paused a partition, if given.
        """
        super().__init__(delivery, handler, policy, telemetry=telemetry if record_spans else None)
        self._id = member_id
        self._dead_letters = dead_letters
        self._retries = Retries(
            handler,
            policy,
            self,
            member_id=member_id,
            dead_letters=dead_letters,
            telemetry=telemetry,
        )
        self._tasks: TaskGroup | None = None
        """The task group the workers and retries run in, while `Processor.run()` runs."""
        self.failed_at: dict[PartitionKey, int] = {}
        """Partitions paused by ``on_failure="stop"`` -> the offset of the failed record."""
        self.failures: dict[PartitionKey, tuple[Record, Exception]] = {}
        """Partitions paused by ``on_failure="stop"`` -> the failed record and its last error
        (published for operators, and dead-lettered when an operator skips it)."""
        self._on_stopped = on_stopped

    # -- what a batch's end means: the processor's --------------------------------------------

    @abstractmethod
    def _settle(self, window: Window) -> None:
        """End a running batch."""

    @abstractmethod
    def _fail(self, error: BaseException) -> None:
        """End `Processor.run()` with ``error``."""

    @abstractmethod
    def _stop_taking(self, window: Window, *, fill_gaps: bool = True) -> None:
        """Start no record of ``window`` beyond its horizon."""

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

    # -- finishing ---------------------------------------------------------------------------

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

    def _complete(self, entry: Entry) -> None:
        """``entry`` finished outside a worker's run (a retry, a dead letter): the record its key
        hands on to is queued, and an idle worker looks for the next."""
        following = self._finished(entry)
        if following >= 0:
            self._dispatch(Entry(entry.window, following, out=True, key=entry.key))
        else:
            self._wake_one()

    def _drop(self, entry: Entry) -> None:
        """``entry`` ends unfinished: its batch is delivered again from its first unfinished
        record once nothing of it runs."""
        window = entry.window
        window.running.discard(entry)
        if window.gone:
            self._left(window)
        elif window.drained():
            self._settle(window)

    # -- failing -----------------------------------------------------------------------------

    def _failed(self, entry: Entry, error: Exception) -> None:
        """``entry``'s handler raised ``error``: it is retried (its key stays busy), unless its
        batch stopped taking it (it runs again later)."""
        window = entry.window
        if window.may_start(entry.index):
            # What follows a failure (the back-off, the next attempt, the dead letter) is timed
            # for the stuck watch from here: a failed attempt is over.
            entry.started = time.monotonic()
            self._put_out(entry)
            window.running.add(entry)
            assert self._tasks is not None
            self._tasks.start_soon(self._recover, entry, error)
            self._offer(window)  # it waits for its retry: the records after it may come
        else:
            # Its partition is handed over or stopped: the record runs again later.
            self._drop(entry)

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
        silent, checked again after each wait (`aio_cluster.member.processing.failures.Slots`).

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
            entry.started = time.monotonic()  # the dead letter's sending, timed from here
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
        if self._on_stopped is not None:
            self._on_stopped()
        if not window.gone:
            self._delivery.pause([window.partition])
            self._stop_taking(window, fill_gaps=False)
