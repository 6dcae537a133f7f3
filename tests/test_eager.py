"""`aio_cluster.member.processing.eager.resumed`: a coroutine stepped once by hand, then awaited,
behaves as if it had been awaited from the start (pure asyncio, no servers)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from aio_cluster.member.processing.eager import resumed

pytestmark = pytest.mark.asyncio


async def first_step_then_rest(steps: Coroutine[Any, Any, object]) -> object:
    """Step ``steps`` once here, then await the rest through `resumed`."""
    try:
        waiting_on = steps.send(None)
    except StopIteration as end:
        return end.value
    return await resumed(steps, waiting_on)


async def test_the_rest_runs_on_and_its_value_comes_back() -> None:
    events: list[str] = []

    async def handler() -> int:
        events.append("before")
        await asyncio.sleep(0)
        events.append("between")
        await asyncio.sleep(0.001)
        events.append("after")
        return 7

    assert await first_step_then_rest(handler()) == 7
    assert events == ["before", "between", "after"]


async def test_a_failure_after_the_first_step_reaches_the_awaiter() -> None:
    async def handler() -> None:
        await asyncio.sleep(0)
        raise ValueError("late")

    with pytest.raises(ValueError, match="late"):
        await first_step_then_rest(handler())


async def test_a_cancellation_goes_on_to_the_coroutine_where_it_waits() -> None:
    seen: list[str] = []
    waiting = asyncio.Event()

    async def handler() -> None:
        try:
            waiting.set()
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled inside")
            raise

    task = asyncio.create_task(first_step_then_rest(handler()))
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled inside"]


async def test_a_coroutine_that_swallows_its_cancellation_goes_on_waiting() -> None:
    release = asyncio.Event()
    waiting = asyncio.Event()

    async def handler() -> str:
        try:
            waiting.set()
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            pass
        await release.wait()
        return "done"

    task = asyncio.create_task(first_step_then_rest(handler()))
    await waiting.wait()
    task.cancel()
    await asyncio.sleep(0.01)
    assert not task.done(), "it went on to its next wait"
    release.set()
    assert await task == "done"


async def test_closing_the_awaiter_closes_the_coroutine() -> None:
    closed: list[bool] = []

    async def handler() -> None:
        try:
            await asyncio.sleep(30)
        finally:
            closed.append(True)

    outer = first_step_then_rest(handler())
    outer.send(None)  # the handler now waits on its sleep
    outer.close()
    assert closed == [True]
