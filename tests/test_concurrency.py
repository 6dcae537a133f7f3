"""The one way to wait and cancel (aio_cluster/concurrency.py), as pure logic: results come in
order, the first failure comes out as itself (no ExceptionGroup) after its siblings ended,
``settle`` keeps every outcome, ``settled`` waits for foreign futures without cancelling them, and
a bound that cuts the calls short stays the bound's: a child that finishes after its cancellation
(one that catches it, as aiokafka's ``AIOKafkaClient.close()`` does) no longer turns it into a
bare CancelledError, which ``asyncio.gather`` did (seen on Python 3.10 to 3.13, anyio 4.16); and a
call's cancellation nobody asked for is raised, never a result left unmade."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest

from aio_cluster.concurrency import background, detached, gather, outlasting, settle, settled

from support import stubborn, wait_until

pytestmark = pytest.mark.asyncio


async def test_results_come_in_the_order_of_the_calls() -> None:
    order: list[int] = []

    async def value(n: int) -> int:
        await anyio.sleep(0 if n else 0.01)
        order.append(n)
        return n

    assert await gather([functools.partial(value, n) for n in range(3)]) == [0, 1, 2]
    assert order[-1] == 0, "the first call finished last"
    assert await gather([]) == []


def slow(ended: list[str]) -> Callable[[], Awaitable[int]]:
    """A call that waits until cancelled, and says in ``ended`` that it ended."""

    async def call() -> int:
        try:
            await anyio.sleep_forever()
        finally:
            ended.append("slow")
        return 1  # pragma: no cover - never reached

    return call


async def test_the_first_failure_comes_out_as_itself_after_its_siblings_ended() -> None:
    ended: list[str] = []

    async def fails() -> int:
        raise KeyError("x")

    with pytest.raises(KeyError):
        await gather([slow(ended), fails])
    assert ended == ["slow"], "the sibling was cancelled and had ended"


async def test_settle_keeps_every_outcome_in_order() -> None:
    failure = ValueError("no")

    async def fails() -> int:
        raise failure

    async def one() -> int:
        await anyio.lowlevel.checkpoint()
        return 1

    assert await settle([one, fails, one]) == [1, failure, 1]


async def stray_cancellation() -> int:
    """A call ended by a ``CancelledError`` nobody asked for: a nested asyncio ``gather()``
    whose child was cancelled raises it in a task nobody cancelled."""
    child = asyncio.ensure_future(asyncio.sleep(60))
    child.cancel()
    await asyncio.gather(child)
    return 0  # pragma: no cover - never reached


async def test_gather_raises_a_stray_cancellation_instead_of_unmade_results() -> None:
    """A task group alone would drop it, cancel the sibling and return placeholders."""
    ended: list[str] = []

    with pytest.raises(asyncio.CancelledError):
        await gather([slow(ended), stray_cancellation])
    assert ended == ["slow"], "the sibling was cancelled and had ended"


async def test_settle_runs_every_call_to_its_end_then_raises_a_stray_cancellation() -> None:
    ended: list[int] = []
    go_on = anyio.Event()

    async def later() -> int:
        await go_on.wait()
        ended.append(2)
        return 2

    async def stray_then_go_on() -> int:
        go_on.set()
        return await stray_cancellation()

    with pytest.raises(asyncio.CancelledError):
        await settle([stray_then_go_on, later])
    assert ended == [2], "the sibling ran to its end, not cancelled by the stray one"


async def test_a_cancellation_asked_for_still_cancels_the_calls() -> None:
    cancelled: list[str] = []

    async def waits() -> int:
        try:
            await anyio.sleep_forever()
        except BaseException:
            cancelled.append("waits")
            raise
        return 1  # pragma: no cover - never reached

    for gathering in (gather, settle):
        with anyio.CancelScope() as scope:
            scope.cancel()
            await gathering([waits])
        assert scope.cancelled_caught
    assert cancelled == ["waits", "waits"]


Call = Callable[[], Awaitable[int]]


async def bounded_run(gathering: Callable[[Call, Call], Awaitable[object]]) -> bool:
    """Run ``gathering`` (a stubborn call beside a quick one) in a task of its own under a bound
    that cuts it short once the stubborn call waits and the quick one ended; whether the task
    ended cancelled, though only its own bound was. The stubborn call has its answer once the
    cut reached it.

    asyncio.gather ends at its first child cancelled without waiting for the others, so the
    leak shows only when the quick call ended before the cut. Timed instead (the bound after
    10 ms, the answer after 50), a starved loop ran the quick call's end and the bound in one
    turn: the quick call was cancelled, and asyncio.gather ended at once, uncut (CI,
    tests_compat-3.13 at a lower priority)."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[int] = loop.create_future()
    bound = anyio.CancelScope()
    ready: list[str] = []

    def now(what: str) -> None:
        ready.append(what)
        if len(ready) == 2:
            loop.call_soon(bound.cancel)

    def waits(cuts: int) -> None:
        if cuts == 0:
            now("the stubborn call waits")
        elif cuts == 1:
            answer.set_result(7)

    async def quick() -> int:
        await anyio.lowlevel.checkpoint()
        now("the quick call ended")
        return 0

    async def bounded() -> None:
        with bound:
            await gathering(functools.partial(stubborn, answer, waits), quick)
        assert bound.cancelled_caught

    task = asyncio.create_task(bounded())
    with anyio.fail_after(10):  # a cut that never reached the stubborn call leaves it waiting
        await settled([task, answer])
    assert answer.result() == 7, "the stubborn call had its answer"
    return task.cancelled()


async def test_a_child_finishing_after_the_bound_leaves_the_bound_its_own() -> None:
    """Cut short by a bound, the calls end inside it: the scope catches its cancellation, the
    caller is not cancelled."""

    async def gathering(call: Call, quick: Call) -> object:
        return await gather([call, quick])

    assert not await bounded_run(gathering)


async def test_asyncio_gather_leaked_the_cancellation_there() -> None:
    """The defect the helpers replace, shown on the same calls: the task holding the bound ends
    cancelled."""

    async def gathering(call: Call, quick: Call) -> object:
        return await asyncio.gather(call(), quick())

    assert await bounded_run(gathering)


async def test_settled_waits_for_futures_without_raising_or_cancelling_them() -> None:
    loop = asyncio.get_running_loop()
    failed: asyncio.Future[int] = loop.create_future()
    pending: asyncio.Future[int] = loop.create_future()
    failed.set_exception(OSError("gone"))
    with anyio.move_on_after(0.01):
        await settled([failed, pending])
    assert not pending.cancelled(), "a bound on the waiter leaves the future alone"
    loop.call_soon(pending.set_result, 1)
    await settled([failed, pending])
    assert pending.result() == 1
    assert isinstance(failed.exception(), OSError)


async def test_outlasting_waits_for_its_task_and_leaves_the_bound_its_own() -> None:
    """A caller cut short by its bound waits for the task to end; the bound then catches its
    own cancellation (the one the caller was given is raised again, not a bare one)."""
    ended = anyio.Event()

    async def work() -> int:
        await ended.wait()
        return 3

    bounds: list[anyio.CancelScope] = []

    async def bounded(task: asyncio.Task[int]) -> None:
        with anyio.move_on_after(0.01) as bound:
            bounds.append(bound)
            await outlasting(task)
        assert bound.cancelled_caught

    task = background(work(), name="work")
    caller = asyncio.create_task(bounded(task))
    await wait_until(lambda: bool(bounds) and bounds[0].cancel_called, what="the bound passed")
    assert not caller.done(), "the caller waits for the task"
    ended.set()
    await settled([caller])
    assert not caller.cancelled()
    assert caller.exception() is None
    assert task.result() == 3


async def test_detached_leaves_its_task_running_when_the_caller_is_cancelled() -> None:
    answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = background(stubborn(answer), name="request")
    with anyio.move_on_after(0.01):
        await detached(task)
    assert not task.done(), "the request goes on"
    answer.set_result(5)
    assert await detached(task) == 5
