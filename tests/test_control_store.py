"""The operator controls' store against the real ZooKeeper: pauses, resumes and skips are
written with their history, conditionally, so that a refused or losing write changes nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import pytest

from aio_cluster import ConfigurationError, ControlConflictError, SkipRefusedError
from aio_cluster.control.model import Stopped
from aio_cluster.control.store import HISTORY_KEPT, ControlStore
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import ZooKeeper
from aio_cluster.zookeeper.layout import GroupLayout, history_path
from aio_cluster.zookeeper.values import Op, Stat

pytestmark = pytest.mark.asyncio


class Racing(ZooKeeper):
    """A client whose next transaction lets another operator's write land first, just before
    it: the interleaving of two operators racing, made certain."""

    first: Callable[[], Awaitable[object]] | None = None

    async def transaction(self, ops: Sequence[Op]) -> list[Stat | None]:
        first, self.first = self.first, None
        if first is not None:
            await first()
        return await super().transaction(ops)


async def own(zk: ZooKeeper, group: str, topic: str, partition: int, offset: int) -> None:
    """Make the partition owned, with ``offset`` stored, as a member would."""
    layout = GroupLayout(group, topic)
    await zk.create(layout.owner(partition), b"m-1", ephemeral=True, makepath=True)
    await zk.create(layout.offset(partition), str(offset).encode(), makepath=True)


async def test_pause_and_resume_are_read_back_with_their_history(
    zk: ZooKeeper, group_name: str
) -> None:
    store = ControlStore(zk, group_name)
    paused = await store.pause([("t", 2), ("t", 2), ("u", 0)], "ann@host")
    assert [(p.topic, p.partition, p.by) for p in paused] == [
        ("t", 2, "ann@host"),
        ("u", 0, "ann@host"),
    ]
    assert await store.pause([("t", 2)], "bob@host") == [], "paused already: left as it was"
    controls = await store.read()
    assert set(controls.paused) == {("t", 2), ("u", 0)}
    assert controls.paused[("t", 2)].by == "ann@host"
    assert await zk.exists(GroupLayout(group_name, "t").paused_node(2)) is not None

    resumed = await store.resume([("t", 2), ("t", 5)], "bob@host")
    assert [(p.topic, p.partition, p.by) for p in resumed] == [("t", 2, "ann@host")]
    assert set((await store.read()).paused) == {("u", 0)}
    history = await store.history()
    assert [(e.action, e.topic, e.partition, e.by) for e in history] == [
        ("resume", "t", 2, "bob@host"),
        ("pause", "u", 0, "ann@host"),
        ("pause", "t", 2, "ann@host"),
    ]
    assert "paused by ann@host" in history[0].detail
    assert [e.action for e in await store.history(limit=1)] == ["resume"]


async def test_a_group_without_controls_reads_empty(zk: ZooKeeper, group_name: str) -> None:
    store = ControlStore(zk, group_name)
    controls = await store.read()
    assert (controls.paused, controls.skips, controls.stopped) == ({}, {}, {})
    assert await store.history() == []


async def test_a_pause_racing_another_changes_nothing(
    cluster: LocalCluster, zk: ZooKeeper, group_name: str
) -> None:
    racing = Racing(cluster.zookeeper, session_timeout=10.0)
    await racing.start()
    try:
        other = ControlStore(zk, group_name)
        racing.first = lambda: other.pause([("t", 1)], "bob@host")
        with pytest.raises(ControlConflictError, match="changed nothing"):
            await ControlStore(racing, group_name).pause([("t", 0), ("t", 1)], "ann@host")
        controls = await other.read()
        assert set(controls.paused) == {("t", 1)}, "t/0 was not paused by the loser"
        assert controls.paused[("t", 1)].by == "bob@host"
        assert [e.by for e in await other.history()] == ["bob@host"]

        racing.first = lambda: other.resume([("t", 1)], "bob@host")
        with pytest.raises(ControlConflictError):
            await ControlStore(racing, group_name).resume([("t", 1)], "ann@host")
        assert [e.by for e in await other.history()] == ["bob@host", "bob@host"]
    finally:
        await racing.close()


async def test_bad_input_is_refused_before_anything_is_written(
    zk: ZooKeeper, group_name: str
) -> None:
    store = ControlStore(zk, group_name)
    with pytest.raises(ConfigurationError, match="topic name 'no such/topic'"):
        await store.pause([("t", 0), ("no such/topic", 0)], "ann")
    with pytest.raises(ConfigurationError, match="partition -1 of t"):
        await store.resume([("t", -1)], "ann")
    with pytest.raises(ConfigurationError, match="offset -5"):
        await store.request_skip("t", 0, -5, "ann")
    with pytest.raises(ConfigurationError, match="group name"):
        ControlStore(zk, "a/b")
    assert await store.read() == await ControlStore(zk, group_name).read()
    assert (await store.read()).paused == {}
    assert await store.history() == []


async def test_a_skip_is_refused_where_it_cannot_apply(zk: ZooKeeper, group_name: str) -> None:
    store = ControlStore(zk, group_name)
    with pytest.raises(SkipRefusedError, match="no member owns t/0"):
        await store.request_skip("t", 0, 10, "ann")
    await own(zk, group_name, "t", 0, 40)
    with pytest.raises(SkipRefusedError, match="not stopped"):
        await store.request_skip("t", 0, None, "ann")
    with pytest.raises(SkipRefusedError, match="stored offset 40"):
        await store.request_skip("t", 0, 40, "ann")
    with pytest.raises(SkipRefusedError, match="stored offset 40"):
        await store.request_skip("t", 0, 3, "ann")
    assert (await store.read()).skips == {}
    assert await store.history() == []


async def test_a_skip_past_the_stopped_record_is_pending_once(
    zk: ZooKeeper, group_name: str
) -> None:
    store = ControlStore(zk, group_name)
    await own(zk, group_name, "t", 0, 40)
    await store.publish_stopped(Stopped("t", 0, "m-1", 41, "ValueError('poison')", 1.0))
    with pytest.raises(SkipRefusedError, match="stopped on \\(41\\)"):
        await store.request_skip("t", 0, 41, "ann")
    skip = await store.request_skip("t", 0, None, "ann@host")
    assert (skip.stopped_on, skip.target) == (41, 42)
    controls = await store.read()
    assert controls.skips == {("t", 0): skip}
    assert controls.stopped[("t", 0)].error == "ValueError('poison')"
    with pytest.raises(ControlConflictError, match="to offset 42 by ann@host"):
        await store.request_skip("t", 0, 100, "bob@host")
    assert (await store.read()).skips == {("t", 0): skip}
    [event] = await store.history()
    assert (event.action, event.detail) == ("skip-requested", "past the record at offset 41, to 42")

    await store.clear_stopped("t", 0)
    assert (await store.read()).stopped == {}


async def test_a_skip_racing_the_owner_going_changes_nothing(
    cluster: LocalCluster, zk: ZooKeeper, group_name: str
) -> None:
    await own(zk, group_name, "t", 0, 40)
    racing = Racing(cluster.zookeeper, session_timeout=10.0)
    await racing.start()
    try:
        racing.first = lambda: zk.delete(GroupLayout(group_name, "t").owner(0))
        with pytest.raises(ControlConflictError):
            await ControlStore(racing, group_name).request_skip("t", 0, 50, "ann")
        assert (await ControlStore(zk, group_name).read()).skips == {}
    finally:
        await racing.close()


async def test_the_history_keeps_the_newest_entries(zk: ZooKeeper, group_name: str) -> None:
    store = ControlStore(zk, group_name)
    await store.pause([("t", p) for p in range(HISTORY_KEPT + 5)], "ann")
    assert len(await zk.get_children(history_path(group_name))) == HISTORY_KEPT
    history = await store.history(limit=HISTORY_KEPT + 10)
    assert len(history) == HISTORY_KEPT
    assert history[0].partition == HISTORY_KEPT + 4, "newest first"
    assert history[-1].partition == 5, "the five oldest were trimmed"
