"""BodySpans: the batches of an ``async for`` loop, each body run inside a span of its own.

An async generator cannot do this by itself. Its code runs in the context of whoever awaits its
next item, so a span it made current before ``yield`` is current in the caller's context while
the body runs, as wanted; but a body that raises or ``break``s never resumes the generator in
that context: Python finalizes it later, in a task of its own, where the caller's context cannot
be restored, and the ended span would stay current in the caller for the rest of its task.

So the member's generator is wrapped in this iterator, which makes the span current when it
hands out a batch, and ends it and restores the caller's context at the first of: the next
``asend()`` (the loop asks for the next batch: the body completed), ``athrow()`` / ``aclose()``
(``contextlib.aclosing``), or the iterator's deletion, which CPython does at once when the loop
is left by ``break`` or an exception, still in the caller's context. The wrapped generator is
finalized as before (it leaves the batch uncommitted). The body's span tells which by
``aio_cluster.body.completed``; a body's exception is not visible here, so it carries no
``error.type`` (a span the body opens itself can).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Mapping
from contextvars import Token
from types import TracebackType
from typing import Any, Protocol, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from ..kafka.records import Record
from .attributes import BODY_COMPLETED
from .meters import Meters

__all__ = ["BodySpans", "BodyTelemetry"]

Item = TypeVar("Item", bound=tuple[Any, ...])
"""What the loop hands out: ``(partition, batch)``, or ``(partition, batch, output)`` for
``transactions()``; the batch is always second."""


class BodyTelemetry(Protocol):
    """What a `BodySpans` asks of a member's telemetry (`aio_cluster.otel.telemetry.Telemetry`,
    which makes the body spans, is one)."""

    @property
    def meters(self) -> Meters: ...

    def body(self, batch: list[Record]) -> Span: ...

    def metric_attributes(self, topic: str, partition: int) -> Mapping[str, str | int]: ...


class BodySpans(AsyncGenerator[Item, None]):
    """``(partition, batch, ...)`` items of a member's batch generator, each body in its span
    (see the module). An async generator itself (``asend``, ``athrow``, ``aclose``), as the
    batches it wraps are."""

    def __init__(self, batches: AsyncGenerator[Item, None], telemetry: BodyTelemetry) -> None:
        self._batches = batches
        self._telemetry = telemetry
        self._span: Span | None = None
        self._token: Token[Context] | None = None
        self._started = 0.0
        self._topic = ""
        self._partition = 0

    async def asend(self, value: None) -> Item:
        """End the body before (it completed), then hand out the next batch in a new span."""
        self._end(completed=True)
        item = await self._batches.asend(value)
        batch: list[Record] = item[1]
        self._begin(batch)
        return item

    async def athrow(
        self,
        typ: Any,
        val: Any = None,
        tb: TracebackType | None = None,
    ) -> Item:
        """End the body before (it did not complete), then throw into the batches."""
        self._end(completed=False)
        if val is None and tb is None:
            return await self._batches.athrow(typ)
        return await self._batches.athrow(typ, val, tb)

    async def aclose(self) -> None:
        """End the body before (it did not complete), then close the batches (their own
        ``aclose()``, which knows a generator that ended already)."""
        self._end(completed=False)
        await self._batches.aclose()

    def __del__(self) -> None:
        # The loop was left by break or an exception (see the module).
        self._end(completed=False)

    def _begin(self, batch: list[Record]) -> None:
        span = self._telemetry.body(batch)
        self._span = span
        # A span that does not record carries the caller's own context: nothing to make current.
        if span.is_recording():
            self._token = otel_context.attach(trace.set_span_in_context(span))
        first = batch[0]
        self._topic, self._partition = first.topic, first.partition
        self._started = time.perf_counter()

    def _end(self, *, completed: bool) -> None:
        span, token = self._span, self._token
        if span is None:
            return
        self._span = self._token = None
        if token is not None:
            # In another context than the caller's (a late collection) ours is not there.
            with contextlib.suppress(ValueError, RuntimeError):
                token.var.reset(token)
        span.set_attribute(BODY_COMPLETED, completed)
        span.end()
        self._telemetry.meters.processed(
            time.perf_counter() - self._started,
            self._telemetry.metric_attributes(self._topic, self._partition),
            None,
        )
