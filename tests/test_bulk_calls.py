"""BulkCalls without servers: how records gather into calls (size, linger), how a failed call is
retried and then split so that only a record failing alone keeps an error, and what a cancelled
record's run does to its call. The engine's part is tried against the servers in test_bulk."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import anyio
import pytest
from aiokafka.structs import ConsumerRecord

from aio_cluster import ConfigurationError, Processing, Record
from aio_cluster.member.processing.bulk import BulkCalls, check_bulk

from support import wait_until


def record(offset: int, value: bytes = b"ok") -> Record:
    made: Record = ConsumerRecord(
        topic="t",
        partition=0,
        offset=offset,
        timestamp=0,
        timestamp_type=0,
        key=None,
        value=value,
        checksum=None,
        serialized_key_size=-1,
        serialized_value_size=len(value),
        headers=(),
    )
    return made


class Calls:
    """A bulk handler that notes each call's offsets, failing those holding a poison record."""

    def __init__(self, *, gate: asyncio.Event | None = None) -> None:
        self.seen: list[list[int]] = []
        self.gate = gate

    async def __call__(self, records: list[Record]) -> None:
        self.seen.append([r.offset for r in records])
        if self.gate is not None:
            await self.gate.wait()
        if any(r.value == b"poison" for r in records):
            raise ValueError("poison")


async def outcomes(calls: BulkCalls, records: list[Record]) -> list[BaseException | None]:
    """Each record's run, side by side, as the engine would start them."""
    results = await asyncio.gather(*(calls.handle(r) for r in records), return_exceptions=True)
    return list(results)


def bulk(
    handler: Callable[[list[Record]], Awaitable[object]],
    tasks: anyio.abc.TaskGroup,
    *,
    size: int,
    linger: float = 10.0,
    attempts: int = 1,
) -> BulkCalls:
    policy = Processing(attempts=attempts, retry_initial=0.001, retry_jitter=0.0)
    return BulkCalls(handler, policy, tasks, size=size, linger=linger)


@pytest.mark.asyncio
async def test_a_call_is_flushed_at_its_size_and_the_rest_after_its_linger() -> None:
    handler = Calls()
    async with anyio.create_task_group() as tasks:
        calls = bulk(handler, tasks, size=4, linger=0.05)
        results = await outcomes(calls, [record(i) for i in range(10)])
    assert results == [None] * 10
    assert handler.seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


@pytest.mark.asyncio
async def test_a_failed_call_is_retried_whole_then_split_down_to_the_poison() -> None:
    handler = Calls()
    records = [record(i, b"poison" if i == 5 else b"ok") for i in range(8)]
    async with anyio.create_task_group() as tasks:
        calls = bulk(handler, tasks, size=8, attempts=3)
        results = await outcomes(calls, records)
    failed = [i for i, result in enumerate(results) if result is not None]
    assert failed == [5], "only the poison record carries an error back"
    assert isinstance(results[5], ValueError)
    whole = [seen for seen in handler.seen if len(seen) == 8]
    assert len(whole) == 3, "the whole call ran its attempts"
    assert handler.seen[3:] == [[0, 1, 2, 3], [4, 5, 6, 7], [4, 5], [4], [5], [6, 7]]


@pytest.mark.asyncio
async def test_every_record_failing_alone_keeps_its_own_error() -> None:
    async def handler(records: list[Record]) -> None:
        raise KeyError(records[0].offset) if len(records) == 1 else ValueError("many")

    async with anyio.create_task_group() as tasks:
        calls = bulk(handler, tasks, size=3)
        results = await outcomes(calls, [record(i) for i in range(3)])
    assert [type(r) for r in results] == [KeyError] * 3
    assert [r.args for r in results if r is not None] == [(0,), (1,), (2,)]


@pytest.mark.asyncio
async def test_a_cancelled_record_leaves_its_call_and_a_call_all_left_is_cancelled() -> None:
    gate = asyncio.Event()
    handler = Calls(gate=gate)
    # The task group ends only once the call's task ended: cancelled, since its gate never opens.
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            calls = bulk(handler, tasks, size=3, linger=10.0)
            first = asyncio.create_task(calls.handle(record(0)))
            second = asyncio.create_task(calls.handle(record(1)))
            await asyncio.sleep(0)
            first.cancel()  # left before its call started: never handed to the handler
            with pytest.raises(asyncio.CancelledError):
                await first
            rest = [asyncio.create_task(calls.handle(record(i))) for i in (2, 3)]
            await wait_until(lambda: handler.seen == [[1, 2, 3]], what="the call without record 0")
            for task in (second, *rest):
                task.cancel()
            # All its records left: the call itself is cancelled, although its gate never opens.
            results = await asyncio.gather(second, *rest, return_exceptions=True)
            assert all(isinstance(r, asyncio.CancelledError) for r in results)


@pytest.mark.parametrize(
    ("handler_ok", "size", "linger", "concurrency", "named"),
    [
        (False, 10, 0.1, 100, "handler"),
        (True, 0, 0.1, 100, "size"),
        (True, True, 0.1, 100, "size"),
        (True, 10, -1.0, 100, "linger"),
        (True, 10, float("nan"), 100, "linger"),
        (True, 10, "1", 100, "linger"),
        (True, 500, 0.1, 100, "concurrency (100) must be at least size (500)"),
    ],
)
def test_bad_arguments_are_named(
    handler_ok: bool, size: object, linger: object, concurrency: int, named: str
) -> None:
    async def good(records: list[Record]) -> None:
        pass

    def bad(records: list[Record]) -> None:
        pass

    with pytest.raises(ConfigurationError, match=named.replace("(", r"\(").replace(")", r"\)")):
        check_bulk(good if handler_ok else bad, size, linger, Processing(concurrency=concurrency))
