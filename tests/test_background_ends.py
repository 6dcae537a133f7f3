"""Nothing ends silently: a background loop of a member that returns, or that a cancellation
nobody asked for ends, fails the member with `BackgroundEndedError` naming the loop, which
``async for`` and ``process()`` raise, and the member gives its partitions up, on every Python
(also where a task has no ``cancelling()``, Python 3.10, forced here on any); against the real
local ZooKeeper and Kafka."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import anyio
import pytest

from aio_cluster import BackgroundEndedError, ConsumerGroup, Record
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout

from conftest import MakeTopic
from support import fresh, member, owners, wait_until

pytestmark = pytest.mark.asyncio


async def returns(ended: asyncio.Event) -> None:
    await ended.wait()


async def raises_cancelled(ended: asyncio.Event) -> None:
    await ended.wait()
    raise asyncio.CancelledError


async def gather_of_a_cancelled_child(ended: asyncio.Event) -> None:
    """What a library's ``gather()`` does when one of its children is cancelled: the
    ``CancelledError`` reaches the caller, whose task nobody cancelled."""
    await ended.wait()
    child = asyncio.ensure_future(asyncio.sleep(60))
    child.cancel()
    await asyncio.gather(child)


Ending = Callable[[asyncio.Event], Awaitable[None]]


def break_loop(group: ConsumerGroup, loop: str, ending: Ending, ended: asyncio.Event) -> None:
    """Make the member's ``loop`` (``"liveness"`` or ``"controls"``) end by ``ending`` once
    ``ended`` is set."""
    part = getattr(group._member.parts, loop)

    async def run() -> None:
        await ending(ended)

    part.run = run


class Python310Task:
    """A task as Python 3.10 shows it: without ``cancelling()``, a cancellation asked for
    cannot be told from one nobody asked for by asking the task."""

    def __init__(self, task: asyncio.Task[object]) -> None:
        self._task = task

    def __getattr__(self, name: str) -> object:
        if name in ("cancelling", "uncancel"):
            raise AttributeError(name)
        return getattr(self._task, name)


@pytest.fixture(params=["python", "python3.10"])
def tasks_shown(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tasks as the running Python shows them, or as Python 3.10 does (to the package: anyio
    holds its own ``current_task``)."""
    if request.param == "python3.10":
        current_task = asyncio.current_task

        def shown(loop: asyncio.AbstractEventLoop | None = None) -> object:
            task = current_task(loop)
            return None if task is None else Python310Task(task)

        monkeypatch.setattr(asyncio, "current_task", shown)


async def given_up(zk: ZooKeeper, layout: GroupLayout) -> bool:
    return not await owners(zk, layout, [0, 1])


@pytest.mark.parametrize(
    ("loop", "ending"),
    [
        ("controls", returns),
        ("liveness", raises_cancelled),
        ("controls", gather_of_a_cancelled_child),
    ],
)
@pytest.mark.usefixtures("tasks_shown")
async def test_a_loop_that_ends_unasked_fails_the_iteration_with_a_typed_error(
    cluster: LocalCluster, make_topic: MakeTopic, zk: ZooKeeper, loop: str, ending: Ending
) -> None:
    topic = await make_topic(partitions=2)
    name = fresh("ended")
    group = member(cluster, name, topic)
    ended = asyncio.Event()
    break_loop(group, loop, ending, ended)
    async with group:
        assert len(group.claimed) == 2
        ended.set()
        with pytest.raises(BackgroundEndedError) as raised, anyio.fail_after(30):
            async for _partition, _batch in group:
                pass
        assert raised.value.loop == loop
        assert loop in str(raised.value)
        await wait_until(
            lambda: given_up(zk, GroupLayout(name, topic)), what="the partitions given up"
        )


async def test_a_loop_that_ends_unasked_fails_process(
    cluster: LocalCluster, make_topic: MakeTopic, zk: ZooKeeper
) -> None:
    topic = await make_topic(partitions=2)
    name = fresh("ended")
    group = member(cluster, name, topic)
    ended = asyncio.Event()
    break_loop(group, "liveness", gather_of_a_cancelled_child, ended)

    async def handler(record: Record) -> None:
        pass

    async with group:
        ended.set()
        with pytest.raises(BackgroundEndedError) as raised:
            await asyncio.wait_for(group.process(handler), 60)
        assert raised.value.loop == "liveness"
        assert isinstance(raised.value.__cause__, asyncio.CancelledError)
        await wait_until(
            lambda: given_up(zk, GroupLayout(name, topic)), what="the partitions given up"
        )


@pytest.mark.usefixtures("tasks_shown")
async def test_the_closing_ends_the_loops_without_an_error(
    cluster: LocalCluster, make_topic: MakeTopic
) -> None:
    topic = await make_topic(partitions=2)
    group = member(cluster, fresh("closed"), topic)
    async with group:
        assert len(group.claimed) == 2
    with contextlib.suppress(StopAsyncIteration):
        assert await anext(aiter(group), None) is None
    assert group._member._failure is None


@pytest.mark.usefixtures("tasks_shown")
async def test_a_cancel_of_the_members_task_ends_the_loops_without_an_error(
    cluster: LocalCluster, make_topic: MakeTopic
) -> None:
    """A native cancellation of the member's task reaches the loops through anyio's scopes: it
    counts as asked for, and no loop is taken for ended unasked."""
    topic = await make_topic(partitions=2)
    group = member(cluster, fresh("cancelled"), topic)
    async with group:
        assert len(group.claimed) == 2
        life = group._member._life
        assert life is not None
        life.cancel()
        await wait_until(life.done, what="the member's task ended")
        assert group._member._failure is None
