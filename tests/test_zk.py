"""The ZooKeeper adapter against the real local server."""

from __future__ import annotations

import asyncio
import socket
import uuid

import pytest

from aio_cluster import ConfigurationError, CoordinationTimeout
from aio_cluster.local import LocalCluster
from aio_cluster.zookeeper.client import BadVersionError, NodeExistsError, NoNodeError, ZooKeeper
from aio_cluster.zookeeper.values import Check, Create, SessionState, SetData

from support import wait_until

pytestmark = pytest.mark.asyncio


def fresh_path() -> str:
    return f"/aio-cluster-test/{uuid.uuid4().hex}"


async def test_ephemeral_node_goes_when_its_client_closes(
    cluster: LocalCluster, zk: ZooKeeper
) -> None:
    path = fresh_path()
    owner = ZooKeeper(cluster.zookeeper, session_timeout=10.0)
    await owner.start()
    await owner.create(path, b"mine", ephemeral=True, makepath=True)
    assert (await zk.get(path))[0] == b"mine"
    assert (await zk.get(path))[1].ephemeral_owner == owner.session_id
    await owner.close()
    assert await zk.exists(path) is None


async def test_forced_expiry_removes_ephemerals_and_is_reported(
    cluster: LocalCluster, zk: ZooKeeper
) -> None:
    path = fresh_path()
    victim = ZooKeeper(cluster.zookeeper, session_timeout=4.0)
    states: list[SessionState] = []
    await victim.start()
    victim.on_state_change(states.append)
    try:
        await victim.create(path, b"", ephemeral=True, makepath=True)
        old = victim.session_id
        assert old is not None
        assert victim.session_password is not None
        await cluster.expire_session(old, victim.session_password)
        assert await zk.exists(path) is None, "the server dropped the expired session's nodes"
        await wait_until(lambda: SessionState.LOST in states, what="LOST reported")
        await wait_until(
            lambda: victim.state is SessionState.CONNECTED and victim.session_id != old,
            what="a new session",
        )
        assert await victim.exists(path) is None, "nothing is replayed on the new session"
    finally:
        await victim.close()


async def test_a_read_after_a_sync_sees_what_another_session_wrote(
    cluster: LocalCluster, zk: ZooKeeper
) -> None:
    path = fresh_path()
    writer = ZooKeeper(cluster.zookeeper)
    await writer.start()
    try:
        await writer.create(path, b"1", makepath=True)
        await writer.set(path, b"2")
    finally:
        await writer.close()
    await zk.sync(path)
    assert (await zk.get(path))[0] == b"2"


async def test_errors_are_translated(zk: ZooKeeper) -> None:
    path = fresh_path()
    await zk.create(path, b"1", makepath=True)
    with pytest.raises(NodeExistsError, match=path):
        await zk.create(path, b"2")
    with pytest.raises(BadVersionError):
        await zk.set(path, b"3", version=7)
    with pytest.raises(NoNodeError):
        await zk.get(path + "/missing")
    with pytest.raises(NoNodeError):
        await zk.transaction([Check(path + "/missing", 0), SetData(path, b"x")])
    assert (await zk.get(path))[0] == b"1", "a failed transaction applied nothing"
    await zk.transaction([Check(path, 0), SetData(path, b"4"), Create(path + "/child", b"")])
    assert (await zk.get(path))[0] == b"4"
    assert await zk.get_children(path) == ["child"]


async def test_watches_fire_on_the_loop(zk: ZooKeeper) -> None:
    path = fresh_path()
    await zk.ensure_path(path)
    fired: list[str] = []
    assert await zk.get_children(path, watch=lambda: fired.append("children")) == []
    await zk.create(path + "/a", b"")
    await wait_until(lambda: fired == ["children"], what="the child watch")


async def test_a_watched_node_tells_of_its_change_and_its_deletion(zk: ZooKeeper) -> None:
    path = fresh_path()
    with pytest.raises(NoNodeError):
        await zk.watched(path)
    await zk.create(path, b"1", makepath=True)
    callbacks = len(zk._state_callbacks)

    with await zk.watched(path) as node:
        assert (node.data, node.stat.version) == (b"1", 0)
        await zk.set(path, b"2")
        await asyncio.wait_for(node.changed(), 10)
    with await zk.watched(path) as node:
        assert node.data == b"2"
        waiting = asyncio.ensure_future(node.changed())
        await asyncio.sleep(0.2)
        assert not waiting.done(), "nothing changed yet"
        await zk.delete(path)
        await asyncio.wait_for(waiting, 10)
    assert len(zk._state_callbacks) == callbacks, "leaving forgets the state callback"
    assert not zk._watch_wrappers, "and the watch"


async def test_unreachable_server_times_out_clearly() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = ZooKeeper(f"127.0.0.1:{port}", request_timeout=1.0)
    with pytest.raises(CoordinationTimeout, match=str(port)):
        await client.start()


async def test_bad_configuration() -> None:
    with pytest.raises(ConfigurationError, match="not host:port"):
        ZooKeeper("127.0.0.1")
    with pytest.raises(ConfigurationError, match="positive"):
        ZooKeeper("127.0.0.1:2181", session_timeout=0)


async def test_a_cancelled_call_ends_cancelled_even_as_its_answer_arrives(zk: ZooKeeper) -> None:
    """The caller's cancellation is never swallowed: a call cancelled at any moment, the moment
    its answer arrives included, raises CancelledError. (``asyncio.wait_for`` before Python 3.12
    returned the answer instead when both came in one loop pass, and the cancelled task went on:
    a test's sampler of ``group.offset()`` ran on for ever after its cancel.)"""
    path = fresh_path()
    await zk.create(path, b"x", makepath=True)
    went_on = []
    cancelled = 0
    # The answer comes 20 to 300 loop passes after the call here: cancel after each of these,
    # a few times, and some cancels land in the two passes between the answer and the caller.
    for passes in [n for n in range(20, 300) for _ in range(4)]:
        call = asyncio.create_task(zk.get(path))
        for _ in range(passes):
            await asyncio.sleep(0)
        if call.done():
            continue
        call.cancel()
        try:
            await call
        except asyncio.CancelledError:
            cancelled += 1
        else:
            went_on.append(passes)
    assert cancelled > 0
    assert went_on == [], f"{len(went_on)} cancelled calls returned their answer instead"
