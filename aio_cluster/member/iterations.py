"""Iterations: a member's batches handed to a loop body, ``async for`` and ``transactions()``.

Each batch is taken from the delivery when the loop asks for it, and finished when the body
completed (the loop asks for the next) or left it (raised, broke): a completed batch's offset
is stored with the next store, exactly once it commits with the body's output in one Kafka
transaction before the next batch is taken. The stuck watch times each body. With telemetry
each body runs in a span of its own. An iteration holds `Processes.iterating()` while it runs,
so that no ``process()`` runs beside it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING, TypeVar

from ..kafka.topics import PartitionKey
from .delivery.claims import Batch
from .exactly_once import Output, Transactions

if TYPE_CHECKING:
    from .assembly import Parts
    from .processes import Processes

__all__ = ["Iterations"]

P = TypeVar("P")
"""How the facade names a partition for its user."""


class Iterations:
    """The member's batch iterations (see the module)."""

    def __init__(
        self, parts: Parts, processes: Processes, *, is_closing: Callable[[], bool]
    ) -> None:
        """Args:
        parts: the member's parts.
        processes: the member's ``process()`` calls, which no iteration runs beside.
        is_closing: whether the member closes (raising its failure, if it failed).
        """
        self._parts = parts
        self._processes = processes
        self._is_closing = is_closing

    def batches(
        self, name: Callable[[PartitionKey], P], *, commit: bool
    ) -> AsyncIterator[tuple[P, Batch]]:
        """``(partition, batch)`` pairs, partitions named by ``name``, until the member closes;
        with ``commit``, a completed batch's offset is stored."""
        batches = self._batches(name, commit)
        telemetry = self._parts.telemetry
        return batches if telemetry is None else telemetry.body_spans(batches)

    def transactions(
        self, name: Callable[[PartitionKey], P]
    ) -> AsyncIterator[tuple[P, Batch, Output]]:
        """Exactly once: ``(partition, batch, output)`` until the member closes; a completed
        body's output and its batch's offset commit in one transaction."""
        transactions = self._parts.transactions
        assert transactions is not None  # the facade refuses a group that is not exactly_once
        batches = self._transactions(name, transactions)
        telemetry = self._parts.telemetry
        return batches if telemetry is None else telemetry.body_spans(batches)

    async def _batches(
        self, name: Callable[[PartitionKey], P], commit: bool
    ) -> AsyncGenerator[tuple[P, Batch], None]:
        """The batches as `batches()` hands them out, without spans."""
        delivery, stuck = self._parts.delivery, self._parts.stuck
        with self._processes.iterating():
            while (picked := await delivery.next_batch(self._is_closing)) is not None:
                claim, batch = picked
                completed = False
                body = stuck.body_started(claim.partition, batch[0].offset)
                try:
                    yield name(claim.partition), batch
                    completed = True
                finally:
                    stuck.body_ended(body)
                    delivery.finish(claim, batch, completed=completed, commit=commit)

    async def _transactions(
        self, name: Callable[[PartitionKey], P], transactions: Transactions
    ) -> AsyncGenerator[tuple[P, Batch, Output], None]:
        """The batches as `transactions()` hands them out, without spans."""
        delivery, stuck = self._parts.delivery, self._parts.stuck
        with self._processes.iterating():
            while (picked := await delivery.next_batch(self._is_closing)) is not None:
                claim, batch = picked
                output = transactions.output(claim)
                completed = False
                body = stuck.body_started(claim.partition, batch[0].offset)
                try:
                    yield name(claim.partition), batch, output
                    completed = True
                finally:
                    stuck.body_ended(body)
                    sends = output.close()
                    # Kept only when the batch still counts (no seek or handover overtook it).
                    finished = delivery.finish(claim, batch, completed=completed, commit=True)
                    if finished and completed:
                        transactions.keep(claim, batch[0].offset, sends)
                if completed:
                    await transactions.commit([claim.partition], raising=True)
