"""The one way to wait and cancel: concurrent calls run in anyio task groups, never under
``asyncio.gather``, ``asyncio.wait`` or ``asyncio.shield`` (ruff's banned-API rule refuses those
in the package; ``pyproject.toml`` lists the few exceptions and why).

Why: an anyio scope that cancels an ``asyncio.gather`` cancels its children natively, through any
anyio shield inside them, and when a child finishes anyway (as aiokafka's sends do on Python <
3.12 when their answer arrives in the same loop pass) the gather raises a ``CancelledError``
without anyio's mark, which the scope lets through: the caller's task ends cancelled though
nobody cancelled it, its cleanup cut short. A task group's children are cancelled by anyio, which
honours their shields, and the scope catches its own cancellation.

anyio's task groups raise an ``ExceptionGroup`` around their children's failures. The callers here
expect the failure itself (a ``BrokerError``, a ``CoordinationError``, aiokafka's ``KafkaError``),
so `gather()` unwraps it, deliberately and only here: the first failure is raised as itself, and
the siblings are cancelled and waited for first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import anyio

__all__ = ["gather", "settle", "settled"]

T = TypeVar("T")

_UNSET: Any = object()


async def gather(calls: Iterable[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run ``calls`` concurrently in a task group; their results, in the order of ``calls``.

    Raises:
        Exception: the first failure of a call, as itself (never an ``ExceptionGroup``): the
            other calls are cancelled, and have ended, when it is raised. A cancellation of
            the caller cancels them all and ends with the caller's own cancellation.
    """
    calls = list(calls)
    results: list[T] = [_UNSET] * len(calls)
    failures: list[Exception] = []
    async with anyio.create_task_group() as group:

        async def run(index: int, call: Callable[[], Awaitable[T]]) -> None:
            try:
                results[index] = await call()
            except Exception as exc:
                failures.append(exc)
                group.cancel_scope.cancel()

        for index, call in enumerate(calls):
            group.start_soon(run, index, call)
    if failures:
        raise failures[0]
    return results


async def settle(calls: Iterable[Callable[[], Awaitable[T]]]) -> list[T | Exception]:
    """Run ``calls`` concurrently in a task group, each to its end whatever the others do; each
    one's result or failure (an ``Exception``), in the order of ``calls``: what
    ``asyncio.gather(..., return_exceptions=True)`` returned, for callers that sort the outcomes
    themselves. A cancellation of the caller cancels them all and is raised."""
    calls = list(calls)
    outcomes: list[T | Exception] = [_UNSET] * len(calls)

    async def run(index: int, call: Callable[[], Awaitable[T]]) -> None:
        try:
            outcomes[index] = await call()
        except Exception as exc:
            outcomes[index] = exc

    async with anyio.create_task_group() as group:
        for index, call in enumerate(calls):
            group.start_soon(run, index, call)
    return outcomes


async def settled(futures: Iterable[asyncio.Future[Any]]) -> None:
    """Wait until each of ``futures`` is done, whatever its outcome, without raising it and
    without cancelling any when the caller is cancelled: the adapter for the futures aiokafka
    hands us (or ours that outlive a cancelled caller on purpose), which asyncio.wait()
    awaited before. Bound it with an anyio scope. ``futures`` is read once, at the call (a
    future's callbacks may change the collection it came from)."""
    for future in list(futures):
        if future.done():
            continue
        done = anyio.Event()

        def wake(_future: asyncio.Future[Any], done: anyio.Event = done) -> None:
            done.set()

        future.add_done_callback(wake)
        try:
            await done.wait()
        finally:
            future.remove_done_callback(wake)
