"""Telemetry: one member's tracer and meters, and the spans its parts open.

Every span and instrument comes from the globally configured providers, looked up through the
API's proxies, so an SDK configured after the member was made is used as well. The spans (names
and attributes as the messaging conventions say; see `aio_cluster.otel.attributes`)::

    process <topic>   CONSUMER  an async for body (see `aio_cluster.otel.batches`): links to the
                                context each record's producer injected
    process <topic>   CONSUMER  a process() handler run, one per attempt: a child of the context
                                the record's producer injected (and linked to it), else of the
                                caller's; a retry's span opens with a "retry" event
    process <topic>   CONSUMER  a process_bulk() call, one per attempt: links to the context
                                each record's producer injected (``process`` alone when its
                                records come from several topics); no span per record
    send <topic>      PRODUCER  a record written to the dead-letter topic, after its last attempt
    rebalance <group> INTERNAL  a rebalance: what moved as attributes, a child span per step
                                (``targets``, ``revoke``, ``release``, ``claim``, ``assign``) and
                                per listener call (``on_partitions_revoked`` ...)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping
from contextvars import Token
from dataclasses import dataclass
from typing import TypeVar

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from ..kafka.records import Record
from ..kafka.topics import PartitionKey, TopicPartition
from .attributes import (
    BATCH_COUNT,
    BATCH_FIRST_OFFSET,
    BATCH_LAST_OFFSET,
    CONSUMER_GROUP,
    DESTINATION,
    ERROR_TYPE,
    KAFKA,
    MEMBER_ID,
    MESSAGE_KEY,
    OFFSET,
    OPERATION_NAME,
    OPERATION_TYPE,
    PROCESS_ATTEMPT,
    REBALANCE_CLAIMED,
    REBALANCE_KEPT,
    REBALANCE_LISTENER_PARTITIONS,
    REBALANCE_REVOKED,
    SYSTEM,
    error_type,
    partition_attributes,
    process_name,
)
from .batches import BodySpans, Item
from .headers import producer_context
from .meters import LagReading, Meters, PausedReading
from .seams import is_api_meter_provider

__all__ = ["Rebalance", "Telemetry"]

Attributes = Mapping[str, str | int]

_UNCONFIGURED = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
"""The API's own tracer providers: what `trace.get_tracer_provider()` returns until an SDK's
is set (or when tracing was turned off with the no-op one)."""

P = TypeVar("P")


def _key_text(key: object) -> str:
    """``messaging.kafka.message.key``: a string as it is, bytes decoded, anything a
    deserializer returned as its ``str()``."""
    if isinstance(key, bytes):
        return key.decode("utf-8", "replace")
    return key if isinstance(key, str) else str(key)


def _failed(span: Span, error: BaseException) -> str:
    """Mark ``span`` as failed by ``error``; returns its error.type."""
    kind = error_type(error)
    span.record_exception(error)
    span.set_attribute(ERROR_TYPE, kind)
    span.set_status(Status(StatusCode.ERROR, str(error) or kind))
    return kind


@dataclass(frozen=True)
class _Partition:
    """What the spans and metrics of one partition say of it, made once."""

    name: str
    span: Attributes
    metric: Attributes


class Rebalance:
    """One rebalance's span, as the rebalance fills it in."""

    def __init__(self, span: Span, telemetry: Telemetry) -> None:
        self._span = span
        self._telemetry = telemetry

    def moved(
        self,
        revoked: list[PartitionKey],
        claimed: list[PartitionKey],
        kept: list[PartitionKey],
    ) -> None:
        """What the rebalance released, claimed, and had to keep."""
        name = self._telemetry.partition_text
        self._span.set_attribute(REBALANCE_REVOKED, [name(key) for key in revoked])
        self._span.set_attribute(REBALANCE_CLAIMED, [name(key) for key in claimed])
        if kept:
            self._span.set_attribute(REBALANCE_KEPT, [name(key) for key in kept])


class Telemetry:
    """One member's spans and metrics (see the module)."""

    def __init__(
        self,
        group: str,
        member_id: str,
        split: Callable[[PartitionKey], TopicPartition],
        lag: LagReading,
        paused: PausedReading,
    ) -> None:
        """Args:
        group: the group's name.
        member_id: this member's id, on its spans.
        split: a partition key's topic and partition.
        lag: each claimed partition's lag now (see `Meters`).
        paused: each paused claimed partition now, and who holds it paused (see `Meters`).
        """
        self._tracer = trace.get_tracer("aio_cluster")
        self.meters = Meters(group, lag, paused)
        self._group = group
        self._member_id = member_id
        self._split = split
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._tracing = False
        """Whether a tracer provider (an SDK's) was configured at the last batch handed out:
        until one is, the API's proxy hands out spans that record nothing, so a handler run
        skips them, the headers' parsing and the context switch. A provider configured later
        is used from the next batch."""
        self.watching = False
        """Whether a tracer or a meter provider was configured at the last batch handed out:
        when neither is, a handler runs without `handle()` (a bulk handler's call without
        `handle_call()`), so that the extra without an SDK costs nothing per record."""

    # -- what is said of a partition, made once ------------------------------------------------

    def _partition(self, topic: str, partition: int) -> _Partition:
        found = self._partitions.get((topic, partition))
        if found is None:
            metric = partition_attributes(self._group, topic, partition)
            found = _Partition(process_name(topic), {**metric, MEMBER_ID: self._member_id}, metric)
            self._partitions[topic, partition] = found
        return found

    def metric_attributes(self, topic: str, partition: int) -> Attributes:
        """The attributes of one partition's metrics."""
        return self._partition(topic, partition).metric

    def partition_text(self, key: PartitionKey) -> str:
        """A partition key as ``topic/partition``."""
        topic, partition = self._split(key)
        return f"{topic}/{partition}"

    # -- records handed out ------------------------------------------------------------------

    def consumed(self, batch: list[Record]) -> None:
        """A batch was handed to a body or to the handlers; whether providers are configured
        is looked up again (see ``_tracing`` and `watching`)."""
        self._tracing = not isinstance(trace.get_tracer_provider(), _UNCONFIGURED)
        metering = not is_api_meter_provider(metrics.get_meter_provider())
        self.watching = self._tracing or metering
        first = batch[0]
        self.meters.consumed.add(len(batch), self._partition(first.topic, first.partition).metric)

    def body_spans(self, batches: AsyncGenerator[Item, None]) -> AsyncGenerator[Item, None]:
        """``batches`` (``(partition, batch, ...)`` items) with each async for body in a span of
        its own (see `aio_cluster.otel.batches`)."""
        return BodySpans(batches, self)

    def body(self, batch: list[Record]) -> Span:
        """Start the span of an async for body over ``batch``, linked to each record's producer
        context. Only a span that records is told more than a sampler asks: without an SDK no
        attribute is made and no header parsed."""
        first = batch[0]
        known = self._partition(first.topic, first.partition)
        span = self._tracer.start_span(known.name, kind=SpanKind.CONSUMER, attributes=known.span)
        if span.is_recording():
            span.set_attribute(BATCH_COUNT, len(batch))
            span.set_attribute(BATCH_FIRST_OFFSET, first.offset)
            span.set_attribute(BATCH_LAST_OFFSET, batch[-1].offset)
            for record in batch:
                context = producer_context(record)
                if context is not None:
                    span.add_link(trace.get_current_span(context).get_span_context())
        return span

    async def handle(
        self,
        handler: Callable[[Record], Awaitable[object]],
        record: Record,
        attempt: int = 1,
        retry_of: BaseException | None = None,
    ) -> None:
        """Run ``handler(record)`` in the span of this attempt, current while it runs.

        Args:
            handler: the user's handler.
            record: its record.
            attempt: 1 for the first run, one more for each retry.
            retry_of: the failure this run retries, recorded as the span's "retry" event.
        """
        known = self._partition(record.topic, record.partition)
        span, token = (
            self._start_run(record, known, attempt, retry_of) if self._tracing else (None, None)
        )
        await self._timed(handler(record), span, token, known.metric)

    async def handle_call(
        self,
        handler: Callable[[list[Record]], Awaitable[object]],
        records: list[Record],
        attempt: int = 1,
        retry_of: BaseException | None = None,
    ) -> None:
        """Run a bulk handler on ``records`` in the span of this attempt, current while it runs,
        linked to each record's producer context.

        Args:
            handler: the user's bulk handler.
            records: the call's records.
            attempt: 1 for the first run of these records, one more for each retry.
            retry_of: the failure this run retries (or split), recorded as a "retry" event.
        """
        topics = {record.topic for record in records}
        attributes: dict[str, str | int] = {
            SYSTEM: KAFKA,
            OPERATION_NAME: "process",
            OPERATION_TYPE: "process",
            CONSUMER_GROUP: self._group,
        }
        name = "process"
        if len(topics) == 1:
            topic = next(iter(topics))
            attributes[DESTINATION] = topic
            name = process_name(topic)
        span = token = None
        if self._tracing:
            span = self._tracer.start_span(
                name, kind=SpanKind.CONSUMER, attributes={**attributes, MEMBER_ID: self._member_id}
            )
            if span.is_recording():
                span.set_attribute(BATCH_COUNT, len(records))
                span.set_attribute(PROCESS_ATTEMPT, attempt)
                if retry_of is not None:
                    span.add_event(
                        "retry", {PROCESS_ATTEMPT: attempt, ERROR_TYPE: error_type(retry_of)}
                    )
                for record in records:
                    context = producer_context(record)
                    if context is not None:
                        span.add_link(trace.get_current_span(context).get_span_context())
                token = otel_context.attach(trace.set_span_in_context(span))
        await self._timed(handler(records), span, token, attributes)

    async def _timed(
        self,
        run: Awaitable[object],
        span: Span | None,
        token: Token[Context] | None,
        attributes: Attributes,
    ) -> None:
        """Await a handler's ``run`` and end its ``span`` (current through ``token``): its
        duration and error go to the meters, its error to the span."""
        started = time.perf_counter()
        error: str | None = None
        try:
            await run
        except BaseException as exc:
            error = error_type(exc) if span is None else _failed(span, exc)
            raise
        finally:
            if token is not None:
                otel_context.detach(token)
            if span is not None:
                span.end()
            self.meters.processed(time.perf_counter() - started, attributes, error)

    def _start_run(
        self, record: Record, known: _Partition, attempt: int, retry_of: BaseException | None
    ) -> tuple[Span, Token[Context] | None]:
        """Start a handler run's span, and make it current (the token to detach, or None when
        neither a recording span nor a producer's context is to be passed on)."""
        parent = producer_context(record)
        # What a sampler may ask is given at the start; the rest only to a span that records,
        # so that a run it drops allocates no attributes.
        span = self._tracer.start_span(
            known.name,
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=known.span,
            links=None
            if parent is None
            else [Link(trace.get_current_span(parent).get_span_context())],
        )
        recording = span.is_recording()
        if recording:
            span.set_attribute(OFFSET, record.offset)
            span.set_attribute(PROCESS_ATTEMPT, attempt)
            if record.key is not None:
                span.set_attribute(MESSAGE_KEY, _key_text(record.key))
            if retry_of is not None:
                span.add_event(
                    "retry", {PROCESS_ATTEMPT: attempt, ERROR_TYPE: error_type(retry_of)}
                )
        if not recording and parent is None:
            return span, None
        return span, otel_context.attach(trace.set_span_in_context(span))

    @contextlib.contextmanager
    def dead_letter(self, record: Record, topic: str, error: BaseException) -> Iterator[None]:
        """The span of writing ``record`` to the dead-letter ``topic`` after it failed for good
        with ``error``: current while it is written, so an instrumented producer's span is its
        child."""
        parent = producer_context(record)
        span = self._tracer.start_span(
            f"send {topic}",
            context=parent,
            kind=SpanKind.PRODUCER,
            attributes={
                SYSTEM: KAFKA,
                OPERATION_NAME: "send",
                OPERATION_TYPE: "send",
                DESTINATION: topic,
                CONSUMER_GROUP: self._group,
                MEMBER_ID: self._member_id,
            },
        )
        span.add_event(
            "dead_letter",
            {
                "aio_cluster.dead_letter.source": f"{record.topic}/{record.partition}",
                OFFSET: record.offset,
                ERROR_TYPE: error_type(error),
            },
        )
        with trace.use_span(span, end_on_exit=True):
            yield

    # -- rebalances --------------------------------------------------------------------------

    @contextlib.contextmanager
    def rebalance(self) -> Iterator[Rebalance]:
        """The span of one rebalance; one that ends without an error counts in the metrics."""
        started = time.perf_counter()
        with self._tracer.start_as_current_span(
            f"rebalance {self._group}",
            attributes={SYSTEM: KAFKA, CONSUMER_GROUP: self._group, MEMBER_ID: self._member_id},
        ) as span:
            yield Rebalance(span, self)
        self.meters.rebalanced(time.perf_counter() - started)

    def step(self, name: str) -> contextlib.AbstractContextManager[Span]:
        """The span of one step of a rebalance (a child of the current one)."""
        return self._tracer.start_as_current_span(name)

    def listener(
        self, method: str, partitions: list[PartitionKey]
    ) -> contextlib.AbstractContextManager[Span]:
        """The span of one call of the rebalance listener."""
        return self._tracer.start_as_current_span(
            method,
            attributes={
                MEMBER_ID: self._member_id,
                REBALANCE_LISTENER_PARTITIONS: [self.partition_text(p) for p in partitions],
            },
        )
