"""Processes: a member's ways of running handlers, one call at a time.

``process()`` runs ``handler(record)`` through a `aio_cluster.member.processing.processor`;
``process_bulk()`` runs a bulk handler through the same engine (`run_bulk()`), telling it that
the records' runs have no spans of their own, the calls having theirs; ``process_transactional()``
runs ``handler(record, output)`` through it beside its commit timer, which commits each
partition's completed prefix in a Kafka transaction every ``commit_interval``.

One call runs at a time, and never beside a batch iteration (``async for``, ``transactions()``,
which hold `Processes.iterating()` while they run): both would take the same batches. The
member's closing asks the running call's handlers to finish (`shutdown()`), then makes sure the
call ended (`end()`) before the session does.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

import anyio

from ..config import Processing
from ..errors import AioClusterError, ConfigurationError, TransactionDeniedError
from ..kafka.dead_letters import DeadLetters
from .exactly_once import TransactionalHandler
from .processing.bulk import BulkHandler, run_bulk
from .processing.processor import Handler, Processor, check_handler

if TYPE_CHECKING:
    from ..otel.telemetry import Telemetry
    from .assembly import Parts
    from .delivery.delivery import Delivery

__all__ = ["Host", "Processes"]

log = logging.getLogger(__name__)


class Host(Protocol):
    """What the ways of processing ask of their member's life."""

    def check_open(self) -> None:
        """Raise GroupClosedError once the member began to close."""

    def is_closing(self) -> bool:
        """Whether the member closes (raising its failure, if it failed)."""

    def failure(self) -> AioClusterError | None:
        """What the member failed with, if it did."""

    def handling(self) -> AbstractContextManager[None]:
        """The span in which the handlers run: a ``close()`` from them stops them."""


class Processes:
    """The member's ``process()`` calls (see the module)."""

    def __init__(self, parts: Parts, host: Host) -> None:
        """Args:
        parts: the member's parts.
        host: the member's life.
        """
        self._parts = parts
        self._host = host
        self.id = parts.id
        self.telemetry: Telemetry | None = parts.telemetry
        self.delivery: Delivery = parts.delivery
        self.processor: Processor | None = None
        """The processor of the running (or the last) call."""
        self._iterating = 0
        """Batch iterations running now (see `iterating()`)."""

    @property
    def running(self) -> bool:
        """Whether a call runs now."""
        return self.processor is not None and self.processor.running

    @contextlib.contextmanager
    def iterating(self) -> Iterator[None]:
        """The span of one batch iteration, which `process()` may not run beside.

        Raises:
            ConfigurationError: `process()` runs.
        """
        if self.running:
            raise ConfigurationError("batches cannot be iterated while process() runs")
        self._iterating += 1
        try:
            yield
        finally:
            self._iterating -= 1

    async def process(
        self, handler: Handler, policy: Processing, *, record_spans: bool = True
    ) -> None:
        """Run ``handler`` for every record of the claimed partitions (see
        `aio_cluster.member.processing.processor`), until the member closes or the call is
        cancelled.

        Args:
            handler: ``async def handler(record)``.
            policy: how it runs.
            record_spans: whether each record's run has a span of its own.

        Raises:
            ConfigurationError: a bad handler, the consumed topic as dead-letter topic, or
                `process()` or a batch iteration runs already.
            GroupClosedError: the member is closed.
            AioClusterError: the member failed (in the background, or its fetching stalled),
                also when that ended the call through the closing it started.
        """
        parts = self._parts
        check_handler(handler)
        topic = policy.dead_letter_topic
        if topic is not None and parts.subscription.matches(topic):
            raise ConfigurationError(
                f"dead_letter_topic {topic!r} is the topic consumed: failed records would come back"
            )
        self._host.check_open()
        if self.running:
            raise ConfigurationError(f"process() runs already on member {parts.id}")
        if self._iterating:
            raise ConfigurationError(
                f"process() cannot run beside a running batch iteration on member {parts.id}"
            )
        dead_letters = None
        # With "stop", the dead-letter topic gets the records an operator skips.
        if policy.on_failure in ("dead_letter", "stop") and topic is not None:
            dead_letters = DeadLetters(
                parts.brokers, topic, client_id=parts.id, options=parts.settings.kafka
            )
        self.processor = processor = Processor(
            parts.delivery,
            handler,
            policy,
            is_closing=self._host.is_closing,
            member_id=parts.id,
            dead_letters=dead_letters,
            telemetry=parts.telemetry,
            record_spans=record_spans,
            on_stopped=parts.controls.poke,
        )
        with self._host.handling():
            await processor.run()
        failure = self._host.failure()
        if failure is not None:
            # The member failed while the handlers ran: its closing ended them (the processor
            # saw a close, not the failure), and the call must not end as if closed.
            raise failure

    async def process_bulk(
        self, handler: BulkHandler, size: int, linger: float, policy: Processing
    ) -> None:
        """Run ``handler`` on calls of up to ``size`` records (see
        `aio_cluster.member.processing.bulk`), until the member closes or the call is cancelled.

        Raises:
            ConfigurationError: a bad argument, or one `process()` refuses.
            Exception: a record's error alone, with ``on_failure="raise"``.
        """
        await run_bulk(self, handler, size, linger, policy)

    async def process_transactional(
        self, handler: TransactionalHandler, commit_interval: float, policy: Processing
    ) -> None:
        """Run ``handler(record, output)`` through `process()` while each partition's completed
        prefix commits in a Kafka transaction every ``commit_interval`` seconds.

        Raises:
            TransactionDeniedError: Kafka's ACLs refused a commit.
            ConfigurationError, GroupClosedError, AioClusterError: as `process()` raises them.
            Exception: the handler's error, with ``on_failure="raise"``.
        """
        transactions = self._parts.transactions
        assert transactions is not None  # the facade refuses a group that is not exactly_once
        claims = self._parts.states.claims
        failed: list[Exception] = []

        async def commit_every() -> None:
            while True:
                await anyio.sleep(commit_interval)
                try:
                    await transactions.commit(list(claims))
                except TransactionDeniedError as exc:
                    failed.append(exc)
                    tasks.cancel_scope.cancel()
                    return

        # The errors are raised past the task group, which would wrap them (process() is its
        # host): the documented error comes out as itself.
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(commit_every)
            try:
                await self.process(transactions.handler(handler), policy)
            except Exception as exc:
                failed.append(exc)
            finally:
                tasks.cancel_scope.cancel()
        if failed:
            raise failed[0]

    # -- the member's closing ----------------------------------------------------------------

    async def shutdown(self, timeout: float) -> None:
        """The handlers in flight finish within ``timeout`` seconds, then are cancelled; no
        record starts meanwhile (nothing when no call ran)."""
        if self.processor is not None:
            await self.processor.shutdown(timeout)

    async def end(self, bound: float) -> None:
        """However the closing went, the running call ends: its handlers are cancelled and
        waited for, at most ``bound`` seconds; a handler that ignores its cancellation is
        named (its claim ends with the session)."""
        processor = self.processor
        if processor is None or not processor.running:
            return
        processor.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(bound):
            await processor.ended()
        for partition, records in processor.handling().items():
            log.warning(
                "member %s: on closing, the handler of the record at offset %d of partition %d "
                "ignores its cancellation; its claim ends with the session",
                self._parts.id,
                records[0].offset,
                partition,
            )
