"""The one way to wait and cancel: concurrent calls run in anyio task groups, never under
asyncio's ``gather``, ``wait`` or ``shield`` (ruff's banned-API rule refuses those in the
package; ``pyproject.toml`` lists the few exceptions and why).

Why: an anyio scope that cancels asyncio's ``gather`` cancels its children natively, through any
anyio shield inside them, and when a child finishes anyway (one that catches its cancellation,
as aiokafka's ``AIOKafkaClient.close()`` does) the gather raises a ``CancelledError``
without anyio's mark, which the scope lets through: the caller's task ends cancelled though
nobody cancelled it, its cleanup cut short. A task group's children are cancelled by anyio, which
honours their shields, and the scope catches its own cancellation.

anyio's task groups raise an ``ExceptionGroup`` around their children's failures. The callers here
expect the failure itself (a ``BrokerError``, a ``CoordinationError``, aiokafka's ``KafkaError``),
so `gather()` unwraps it, deliberately and only here: the first failure is raised as itself, and
the siblings are cancelled and waited for first.

asyncio's own task calls stay in this module only, for what no task group can hold: a task that
outlives the call starting it (`background()`: a member between ``register()`` and ``close()``),
work that must end even when its caller is cancelled natively, which no anyio shield stops
(`outlasting()`: Ctrl-C under ``asyncio.run``; `detached()`: aiokafka cancelling its own fetch
task), and the futures aiokafka hands us (`settled()`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

import anyio

__all__ = ["background", "detached", "gather", "outlasting", "settle", "settled"]

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
    asyncio's ``gather(..., return_exceptions=True)`` returned, for callers that sort the outcomes
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
    hands us (or ours that outlive a cancelled caller on purpose), which asyncio's wait()
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


def background(work: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
    """Start ``work`` in a task of the running loop that outlives the call starting it, for an
    object's life that no task group spans (a member's from ``register()`` to ``close()``, a
    proxy's from ``start()`` to ``stop()``). Its owner awaits it (with `outlasting()`) or cancels
    it."""
    return asyncio.create_task(work, name=name)


async def outlasting(task: asyncio.Future[T]) -> T:
    """Wait for ``task``; a cancellation of the caller waits for it too, then goes on: the
    cancellation the caller was given is raised again (the one an anyio scope marked as its own,
    rather than a new bare one), and ``task`` itself is never cancelled by it. A plain anyio
    shield would not do: a native cancellation (``asyncio.run`` at Ctrl-C, aiokafka's) goes
    through it.

    Raises:
        CancelledError: the caller was cancelled meanwhile (once ``task`` ended), or ``task``
            was.
        Exception: what ``task`` raised.
    """
    cancellation: asyncio.CancelledError | None = None
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError as exc:
            if task.done():
                raise
            cancellation = cancellation or exc
    if cancellation is not None:
        raise cancellation
    return result


async def detached(task: asyncio.Future[T]) -> T:
    """Await ``task``, which a cancellation of the caller leaves running (the caller's ends at
    once): for a request whose answer matters to more than the caller that aiokafka may cancel
    natively (a fetch session's)."""
    return await asyncio.shield(task)
