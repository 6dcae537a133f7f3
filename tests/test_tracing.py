"""OpenTelemetry (the ``otel`` extra) against the real servers: the spans of async for bodies and
of process() handlers, named and attributed as the messaging conventions say, children of (or
linked to) the span of an instrumented aiokafka producer; the user's spans inside them; retries;
rebalances; and the metrics, read from the SDK's in-memory exporter and reader."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncGenerator, Iterator, Sequence
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.instrumentation.aiokafka import AIOKafkaInstrumentor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from aio_cluster import ConsumerGroup, Record, TopicPartition
from aio_cluster.local import LocalCluster
from aio_cluster.otel import attributes as semconv
from aio_cluster.otel.batches import BodySpans
from aio_cluster.otel.loading import DISABLING_VARIABLE, disabled
from aio_cluster.otel.telemetry import Telemetry
from aio_cluster.zookeeper.client import ZooKeeper

from conftest import MakeTopic
from support import closable, member, producer_of, settled, wait_until

Telemetries = tuple[InMemorySpanExporter, InMemoryMetricReader]


@pytest.fixture(scope="module")
def otel() -> Iterator[Telemetries]:
    """The SDK as the global providers (set once per process: OpenTelemetry refuses a second),
    and aiokafka's producer instrumented; shut down after the module."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    instrumentor = AIOKafkaInstrumentor()
    instrumentor.instrument()
    try:
        yield exporter, reader
    finally:
        instrumentor.uninstrument()
        tracer_provider.shutdown()
        meter_provider.shutdown()


def _spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def _produce_traced(cluster: LocalCluster, topic: str, keys: Sequence[str]) -> None:
    """Send one record per key to partition 0 through the instrumented producer, inside a span
    of the test's own: each send span injects its context into the record's headers."""
    tracer = trace.get_tracer("test")
    async with producer_of(cluster) as producer:
        with tracer.start_as_current_span("checkout"):
            for key in keys:
                await (await producer.send(topic, key=key.encode(), value=b"v", partition=0))


def _send_spans(exporter: InMemorySpanExporter, topic: str) -> list[ReadableSpan]:
    return [
        span
        for span in exporter.get_finished_spans()
        if span.kind is SpanKind.PRODUCER and topic in span.name
    ]


def _span_id(span: ReadableSpan) -> int:
    context = span.context
    assert context is not None
    span_id: int = context.span_id
    return span_id


# -- without servers ---------------------------------------------------------------------------


def test_the_variable_turns_it_off() -> None:
    assert disabled("aio_cluster")
    assert disabled("redis, aio_cluster ,kafka")
    assert not disabled("aio_cluster_other")
    assert not disabled(None)


@pytest.mark.asyncio
async def test_a_member_without_telemetry_when_turned_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(DISABLING_VARIABLE, "aio_cluster")
    group = ConsumerGroup("g", "127.0.0.1:9", "127.0.0.1:2181", "t")
    assert group._member.parts.telemetry is None
    await group.close()


def test_error_type_is_the_qualified_class_name() -> None:
    assert semconv.error_type(ValueError("x")) == "ValueError"
    assert semconv.error_type(asyncio.CancelledError()) == "asyncio.exceptions.CancelledError"


class _Record:
    """Enough of a record for a span."""

    def __init__(self, offset: int) -> None:
        self.topic, self.partition, self.offset = "t", 0, offset
        self.timestamp, self.key, self.value = 0, None, b""
        self.headers: Sequence[tuple[str, bytes]] = ()


async def _pairs(count: int) -> AsyncGenerator[tuple[int, list[Record]], None]:
    for offset in range(count):
        yield 0, [_Record(offset)]


@pytest.mark.asyncio
async def test_the_body_span_is_current_only_while_the_body_runs(otel: Telemetries) -> None:
    """Completed, broken and raising bodies: each in its span while it runs, and the caller's
    context as it was once the loop is left, whichever way."""
    exporter, _reader = otel
    exporter.clear()
    telemetry = Telemetry("g", "m", lambda key: TopicPartition("t", key), lambda: [], lambda: [])
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("outer") as outer:
        seen = []
        async for _partition, batch in BodySpans(_pairs(5), telemetry):
            current = trace.get_current_span()
            assert current is not outer
            seen.append(current)
            if batch[0].offset == 1:
                break
        assert trace.get_current_span() is outer
        with contextlib.suppress(KeyError):
            async for _partition, _batch in BodySpans(_pairs(5), telemetry):
                raise KeyError("x")
        assert trace.get_current_span() is outer
        batches = BodySpans(_pairs(5), telemetry)
        async with contextlib.aclosing(batches):
            await batches.__anext__()
        assert trace.get_current_span() is outer
    bodies = _spans(exporter, "process t")
    assert [_attributes(s)[semconv.BODY_COMPLETED] for s in bodies] == [True, False, False, False]
    assert all(
        span.parent is not None and span.parent.span_id == _span_id(_spans(exporter, "outer")[0])
        for span in bodies
    )


@pytest.mark.asyncio
async def test_closing_after_a_cancelled_next_batch(otel: Telemetries) -> None:
    """A next batch cancelled while it waited ends the wrapped generator; closing the batches
    afterwards is quiet, as closing the generator itself is."""

    async def waiting() -> AsyncGenerator[tuple[int, list[Record]], None]:
        yield 0, [_Record(0)]
        await asyncio.Event().wait()
        yield 0, [_Record(1)]

    telemetry = Telemetry("g", "m", lambda key: TopicPartition("t", key), lambda: [], lambda: [])
    batches = BodySpans(waiting(), telemetry)
    await batches.__anext__()
    waiter = asyncio.ensure_future(batches.__anext__())
    await asyncio.sleep(0)
    waiter.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiter
    await batches.aclose()


# -- against the servers ---------------------------------------------------------------------


@pytest.mark.asyncio
async def test_async_for_bodies_are_spans_linked_to_the_producer(
    otel: Telemetries, cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    exporter, _reader = otel
    topic = await make_topic(partitions=1)
    await _produce_traced(cluster, topic, ["k0", "k1"])
    tracer = trace.get_tracer("test")
    bodies = 0
    async with (
        member(cluster, group_name, topic) as group,
        contextlib.aclosing(closable(group.batches())) as batches,
    ):
        async for _partition, batch in batches:
            bodies += 1
            with tracer.start_as_current_span("user work"):
                pass
            if bodies == 1:
                # One more batch, so that the first body completes.
                async with producer_of(cluster) as producer:
                    await (await producer.send(topic, value=b"later", partition=0))
                continue
            if batch[-1].value == b"later":
                break
    sent = _send_spans(exporter, topic)
    assert len(sent) == 3
    spans = _spans(exporter, f"process {topic}")
    assert len(spans) == bodies >= 2
    first = spans[0]
    assert first.kind is SpanKind.CONSUMER
    attributes = _attributes(first)
    assert attributes[semconv.SYSTEM] == "kafka"
    assert attributes[semconv.DESTINATION] == topic
    assert attributes[semconv.PARTITION] == "0"
    assert attributes[semconv.CONSUMER_GROUP] == group_name
    assert attributes[semconv.MEMBER_ID] == group.id
    assert attributes[semconv.BATCH_COUNT] >= 2
    assert attributes[semconv.BODY_COMPLETED] is True
    assert _attributes(spans[-1])[semconv.BODY_COMPLETED] is False
    # A batch links to each record's producer span.
    linked = {link.context.span_id for link in first.links}
    assert {_span_id(span) for span in sent[:2]} <= linked
    # The user's span is a child of the body's.
    users = _spans(exporter, "user work")[-bodies:]
    assert [u.parent.span_id if u.parent else None for u in users] == [
        _span_id(span) for span in spans
    ]


@pytest.mark.asyncio
async def test_handler_runs_are_children_of_the_producer_span(
    otel: Telemetries, cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    exporter, _reader = otel
    topic = await make_topic(partitions=1)
    await _produce_traced(cluster, topic, ["k0", "k1"])
    tracer = trace.get_tracer("test")
    failed: set[bytes] = set()
    done: set[bytes] = set()

    async def handler(record: Record) -> None:
        assert record.key is not None
        with tracer.start_as_current_span(f"user {record.key.decode()}"):
            if record.key == b"k1" and record.key not in failed:
                failed.add(record.key)
                raise ValueError("the first attempt fails")
        done.add(record.key)

    async with member(cluster, group_name, topic) as group:
        running = asyncio.create_task(group.process(handler, attempts=3, retry_initial=0.01))
        await wait_until(lambda: done == {b"k0", b"k1"}, timeout=60, what="both records handled")
        await group.close()
        await running
    spans = sorted(
        _spans(exporter, f"process {topic}"),
        key=lambda s: (_attributes(s)[semconv.OFFSET], _attributes(s)[semconv.PROCESS_ATTEMPT]),
    )
    assert [
        (_attributes(s)[semconv.MESSAGE_KEY], _attributes(s)[semconv.PROCESS_ATTEMPT])
        for s in spans
    ] == [("k0", 1), ("k1", 1), ("k1", 2)]
    producers = _send_spans(exporter, topic)
    assert len(producers) == 2
    for span, producer in zip(spans, [producers[0], producers[1], producers[1]], strict=True):
        assert span.kind is SpanKind.CONSUMER
        assert span.parent is not None
        assert span.parent.span_id == _span_id(producer)
        assert [link.context.span_id for link in span.links] == [_span_id(producer)]
        assert _attributes(span)[semconv.CONSUMER_GROUP] == group_name
    _ok, failing, retry = spans
    assert _attributes(failing)[semconv.ERROR_TYPE] == "ValueError"
    assert failing.status.status_code is StatusCode.ERROR
    assert semconv.ERROR_TYPE not in _attributes(retry)
    assert [event.name for event in retry.events] == ["retry"]
    assert dict(retry.events[0].attributes or {})[semconv.ERROR_TYPE] == "ValueError"
    # The user's spans are children of the attempt they ran in.
    users = _spans(exporter, "user k1")
    assert sorted(u.parent.span_id for u in users if u.parent) == sorted(
        [_span_id(failing), _span_id(retry)]
    )


@pytest.mark.asyncio
async def test_a_bulk_call_is_one_span_per_attempt_linked_to_each_producer(
    otel: Telemetries, cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    exporter, _reader = otel
    topic = await make_topic(partitions=1)
    await _produce_traced(cluster, topic, ["k0", "k1", "k2"])
    tracer = trace.get_tracer("test")
    calls: list[list[int]] = []

    async def handler(records: list[Record]) -> None:
        calls.append([record.offset for record in records])
        with tracer.start_as_current_span("user bulk"):
            if len(calls) == 1:
                raise ValueError("the first attempt fails")

    async with member(cluster, group_name, topic) as group:
        running = asyncio.create_task(
            group.process_bulk(
                handler, size=3, linger=5.0, concurrency=3, attempts=2, retry_initial=0.01
            )
        )
        await wait_until(lambda: len(calls) == 2, timeout=60, what="the call and its retry")

        async def stored() -> bool:
            return await group.offset(0) == 3

        await wait_until(stored, what="the three records stored")
        await group.close()
        await running
    assert calls == [[0, 1, 2], [0, 1, 2]]
    spans = _spans(exporter, f"process {topic}")
    assert len(spans) == 2, "one span per attempt of the call, none per record"
    producers = {_span_id(span) for span in _send_spans(exporter, topic)}
    assert len(producers) == 3
    for number, span in enumerate(spans, start=1):
        attributes = _attributes(span)
        assert span.kind is SpanKind.CONSUMER
        assert attributes[semconv.BATCH_COUNT] == 3
        assert attributes[semconv.PROCESS_ATTEMPT] == number
        assert attributes[semconv.DESTINATION] == topic
        assert semconv.OFFSET not in attributes
        assert {link.context.span_id for link in span.links} == producers
    assert spans[0].status.status_code is StatusCode.ERROR
    assert [event.name for event in spans[1].events] == ["retry"]
    users = _spans(exporter, "user bulk")
    assert [u.parent.span_id if u.parent else None for u in users] == [
        _span_id(span) for span in spans
    ]


@pytest.mark.asyncio
async def test_a_join_is_a_rebalance_span_of_what_moved(
    otel: Telemetries,
    cluster: LocalCluster,
    zk: ZooKeeper,
    make_topic: MakeTopic,
    group_name: str,
) -> None:
    exporter, _reader = otel
    topic = await make_topic(partitions=2)
    async with (
        member(cluster, group_name, topic) as first,
        member(cluster, group_name, topic) as second,
    ):
        await wait_until(lambda: settled(zk, [first, second]), timeout=60, what="the group settled")
        await wait_until(lambda: len(first.claimed) == 1, timeout=60, what="one partition moved")
        moved = second.claimed
    name = f"rebalance {group_name}"
    spans = _spans(exporter, name)
    by_member = {
        member_id: [s for s in spans if _attributes(s)[semconv.MEMBER_ID] == member_id]
        for member_id in (first.id, second.id)
    }
    revoked = [s for s in by_member[first.id] if _attributes(s).get(semconv.REBALANCE_REVOKED)]
    assert [_attributes(s)[semconv.REBALANCE_REVOKED] for s in revoked][:1] == [
        tuple(f"{topic}/{p}" for p in moved)
    ]
    claimed = [s for s in by_member[second.id] if _attributes(s).get(semconv.REBALANCE_CLAIMED)]
    assert [_attributes(s)[semconv.REBALANCE_CLAIMED] for s in claimed][:1] == [
        tuple(f"{topic}/{p}" for p in moved)
    ]
    # The revoking rebalance's steps are its children.
    steps = {
        s.name
        for s in exporter.get_finished_spans()
        if s.parent is not None and s.parent.span_id == _span_id(revoked[0])
    }
    assert {"targets", "revoke", "release", "claim", "assign"} <= steps


def _points(data: MetricsData | None, name: str, group: str) -> list[Any]:
    found = []
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found += [
                        point
                        for point in metric.data.data_points
                        if (point.attributes or {}).get(semconv.CONSUMER_GROUP) == group
                    ]
    return found


@pytest.mark.asyncio
async def test_the_metrics_count_what_was_consumed(
    otel: Telemetries,
    cluster: LocalCluster,
    make_topic: MakeTopic,
    produce: Any,
    group_name: str,
) -> None:
    _exporter, reader = otel
    topic = await make_topic(partitions=2)
    counts = await produce(topic, 20)
    async with member(cluster, group_name, topic, commit_interval=0.2) as group:
        taken = 0
        async for _partition, batch in group:
            taken += len(batch)
            if taken == 20:
                # The next batch asked for commits this one; the lag reaches 0 once stored.
                await group.commit(_partition, batch[-1].offset + 1)
                break

        def lags() -> dict[str, int]:
            return {
                p.attributes[semconv.PARTITION]: p.value
                for p in _points(reader.get_metrics_data(), "aio_cluster.partition.lag", group_name)
            }

        await wait_until(lambda: len(lags()) == 2, timeout=30, what="a lag for each partition")
    data = reader.get_metrics_data()
    consumed = _points(data, "messaging.client.consumed.messages", group_name)
    assert sum(point.value for point in consumed) == 20
    assert {p.attributes[semconv.DESTINATION] for p in consumed} == {topic}
    durations = _points(data, "messaging.process.duration", group_name)
    assert sum(point.count for point in durations) >= 1
    assert list(durations[0].explicit_bounds) == list(semconv.DURATION_BUCKETS)
    rebalances = _points(data, "aio_cluster.rebalances", group_name)
    assert sum(point.value for point in rebalances) >= 1
    assert sum(counts.values()) == 20


@pytest.mark.asyncio
async def test_consuming_works_without_opentelemetry(
    cluster: LocalCluster, group_name: str
) -> None:
    """With no module of OpenTelemetry importable (a plain install), a member joins, consumes and
    leaves as ever, and has no telemetry."""
    script = f"""
import asyncio, sys

sys.modules["opentelemetry"] = None  # as if not installed: importing it fails
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aio_cluster import ConsumerGroup

async def main():
    admin = AIOKafkaAdminClient(bootstrap_servers={cluster.bootstrap!r})
    await admin.start()
    await admin.create_topics([NewTopic({group_name!r}, 1, 1)])
    await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers={cluster.bootstrap!r})
    await producer.start()
    for i in range(5):
        await producer.send_and_wait({group_name!r}, b"%d" % i)
    await producer.stop()
    async with ConsumerGroup({group_name!r}, {cluster.bootstrap!r}, {cluster.zookeeper!r},
                             {group_name!r}, loop_delay=0.1) as group:
        assert group._member.parts.telemetry is None
        taken = 0
        async for partition, batch in group:
            taken += len(batch)
            if taken == 5:
                break
    assert [name for name in sys.modules if name.startswith("opentelemetry")] == ["opentelemetry"]
    print("consumed", taken)

asyncio.run(main())
"""
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    assert out.decode().strip() == "consumed 5"


@pytest.mark.asyncio
async def test_a_transactions_body_runs_in_its_span(
    otel: Telemetries, cluster: LocalCluster, make_topic: MakeTopic, group_name: str
) -> None:
    exporter, _reader = otel
    topic, sink = await make_topic(partitions=1), await make_topic(partitions=1)
    await _produce_traced(cluster, topic, ["k0", "k1"])
    inside: list[int] = []
    async with member(cluster, group_name, topic, exactly_once=True) as group:
        async for _partition, batch, output in group.transactions():
            inside.append(trace.get_current_span().get_span_context().span_id)
            await output.send(sink, b"v", key=batch[0].key)
            break  # one body is enough: its span ends with the loop
    bodies = _spans(exporter, f"process {topic}")
    assert [_span_id(span) for span in bodies] == inside
    assert _attributes(bodies[0])[semconv.CONSUMER_GROUP] == group_name
