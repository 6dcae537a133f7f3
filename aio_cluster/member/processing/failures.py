"""Failures: what `process()` does with a record whose handler raised, before its policy applies.

`Retries` runs the handler again (tenacity: exponential back-off with jitter) up to the policy's
``attempts``, each attempt in a handler slot the processor hands out (`Slots`), and writes a
record that failed for good to the dead-letter topic, sending until the broker has it. What the
outcome means for the record's batch (the next record of its key, the prefix, a paused
partition, the error leaving `process()`) is the processor's
(`aio_cluster.member.processing.processor`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Protocol

import anyio
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    stop_never,
    wait_exponential,
    wait_random,
)
from tenacity.wait import wait_base

from ...config import Processing
from ...errors import BrokerError
from ...kafka.dead_letters import DeadLetters
from .windows import Entry

if TYPE_CHECKING:
    from ...otel.telemetry import Telemetry
    from .workers import Handler

__all__ = ["Retries", "Slots"]

log = logging.getLogger(__name__)


class _Interrupted(Exception):
    """A record waiting for its retry belongs to a batch that stopped taking records: the next
    owner tries it again."""


class Slots(Protocol):
    """The processor's handler slots, as a retry takes them."""

    async def slot_for(self, entry: Entry) -> bool:
        """Take a slot for ``entry`` once it may run; False (and no slot) if it never will."""

    def give_slot(self) -> None:
        """Give a slot back."""


def waits(policy: Processing) -> wait_base:
    """The waits between attempts: exponential up to ``retry_max``, plus the jitter."""
    return wait_exponential(multiplier=policy.retry_initial, max=policy.retry_max) + wait_random(
        0, policy.retry_jitter
    )


class Retries:
    """Retries of failed records and their dead letters (see the module)."""

    def __init__(
        self,
        handler: Handler,
        policy: Processing,
        slots: Slots,
        *,
        member_id: str,
        dead_letters: DeadLetters | None,
        telemetry: Telemetry | None,
    ) -> None:
        self._handler = handler
        self._policy = policy
        self._slots = slots
        self._id = member_id
        self._dead_letters = dead_letters
        self._telemetry = telemetry
        self._waits = waits(policy)
        self.retried = 0
        """Handler runs that were retries."""
        self.dead_lettered = 0
        """Records written to the dead-letter topic."""

    async def retry(self, entry: Entry, error: Exception) -> bool:
        """Run the handler again up to ``attempts`` in all; the failure that led here counts as
        the first.

        Returns:
            True once an attempt finished; False when the record's batch stopped taking it
            (the next owner tries it again).

        Raises:
            Exception: the last failure.
        """
        replay: Exception | None = error
        last: Exception = error
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._policy.attempts),
            wait=self._waits,
            retry=retry_if_exception(lambda exc: not isinstance(exc, _Interrupted)),
            reraise=True,
            before_sleep=lambda state: self._log_retry(entry, state),
            sleep=anyio.sleep,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    if replay is not None:
                        failure, replay = replay, None
                        raise failure
                    try:
                        await self._attempt(entry, attempt.retry_state.attempt_number, last)
                    except Exception as exc:
                        last = exc
                        raise
        except _Interrupted:
            return False
        return True

    async def _attempt(self, entry: Entry, number: int, last: Exception) -> None:
        """Run the handler for ``entry`` once more (attempt ``number``, after ``last`` failed),
        in a slot.

        Raises:
            _Interrupted: its batch stopped taking it.
        """
        if not await self._slots.slot_for(entry):
            raise _Interrupted
        entry.started = time.monotonic()  # each attempt is timed apart (stuck_after)
        self.retried += 1
        telemetry = self._telemetry
        try:
            if telemetry is None or not telemetry.watching:
                await self._handler(entry.record)
            else:
                await telemetry.handle(self._handler, entry.record, number, last)
        finally:
            self._slots.give_slot()

    async def dead_letter(self, entry: Entry, error: Exception) -> None:
        """Write ``entry``'s record to the dead-letter topic, sending until the broker has it
        (the offset must not pass an unsent record)."""
        dead_letters = self._dead_letters
        assert dead_letters is not None
        record = entry.record
        if self._telemetry is None:
            await self._send(dead_letters, entry, error)
        else:
            with self._telemetry.dead_letter(record, dead_letters.topic, error):
                await self._send(dead_letters, entry, error)
        self.dead_lettered += 1
        log.warning(
            "member %s: the record at offset %d of partition %d failed %d times (%r); "
            "written to dead-letter topic %r",
            self._id,
            record.offset,
            record.partition,
            self._policy.attempts,
            error,
            dead_letters.topic,
        )

    async def _send(self, dead_letters: DeadLetters, entry: Entry, error: Exception) -> None:
        sending = AsyncRetrying(
            stop=stop_never,
            wait=self._waits,
            retry=retry_if_exception_type(BrokerError),
            reraise=True,
            before_sleep=self._log_sending,
            sleep=anyio.sleep,
        )
        await sending(dead_letters.send, entry.record, error, self._policy.attempts)

    def _log_sending(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning("member %s: %s; trying again", self._id, error)

    def _log_retry(self, entry: Entry, state: RetryCallState) -> None:
        record = entry.record
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning(
            "member %s: handler failed for the record at offset %d of partition %d "
            "(attempt %d of %d): %r; retrying in %.3fs",
            self._id,
            record.offset,
            record.partition,
            state.attempt_number,
            self._policy.attempts,
            error,
            wait,
        )
